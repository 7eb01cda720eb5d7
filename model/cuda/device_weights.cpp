// Device weights: upload from the memory-mapped checkpoint (expert stacking, W_UK transposed),
// or random weights made on the GPU at the same layout for `peregrine bench --synthetic`.
// NVFP4 (ModelOpt) matrices keep the checkpoint's device layout (packed codes [rows, cols/2],
// e4m3 block scales [rows, cols/16]); a matrix joined or stacked from several ModelOpt tensors
// (the [q_a ; kv_a] join, every expert's gate, up and down) gets a per-row-group scale_2 array.
#include "model/cuda/device_weights.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <string_view>
#include <tuple>

#include "ops/cuda/common/cuda_check.h"
#include "formats/nvfp4.h"
#include "ops/cuda/common/fp8_quantize.h"
#include "ops/cuda/common/nvfp4_quantize.h"
#include "ops/cuda/common/nvfp4_layout_launch.h"
#include "ops/cuda/common/probe.h"

namespace pg {

namespace cu = ops::cuda;
using ops::Matrix;
using ops::WeightFormat;

size_t matrix_elem_bytes(const Matrix& m) {
  switch (m.format) {
    case WeightFormat::kF32: return 4;
    case WeightFormat::kBF16: return 2;
    case WeightFormat::kFp8Block: return 1;
    case WeightFormat::kNvfp4: return 1;  // two values per byte: matrix_bytes counts them right
  }
  return 4;
}

namespace {

int64_t scale_rows(const Matrix& m) { return (m.rows + m.block_rows - 1) / m.block_rows; }

// The FP8 copy of head h (bf16 or f32, K % 64 == 0) in w's arena.
Result<Matrix> fp8_head(DeviceWeights& w, const Matrix& h) {
  const int64_t blocks = ((h.rows + 127) / 128) * ((h.cols + 127) / 128);
  PG_ASSIGN_OR_RETURN(void* codes, w.arena.alloc(size_t(h.rows * h.cols)));
  PG_ASSIGN_OR_RETURN(void* scales, w.arena.alloc(size_t(blocks) * 4));
  PG_CUDA_TRY(cu::fp8_quantize_blocks(h.data, h.format == WeightFormat::kBF16, h.rows, h.cols,
                                      static_cast<uint8_t*>(codes), static_cast<float*>(scales), nullptr));
  return Matrix{WeightFormat::kFp8Block, h.rows, h.cols, codes, static_cast<const float*>(scales), 128, 128};
}

// The NVFP4 copy of head h (bf16 or f32, K % 64 == 0) in w's arena, its codes in the device layout.
Result<Matrix> nvfp4_head(DeviceWeights& w, const Matrix& h) {
  const bool bf16 = h.format == WeightFormat::kBF16;
  float amax = 0.0f;
  PG_CUDA_TRY(cu::nvfp4_amax(h.data, bf16, h.rows * h.cols, &amax, nullptr));
  if (!std::isfinite(amax)) return invalid_argument("cuda: the MTP head has a non-finite weight (amax {})", amax);
  const float scale_2 = nvfp4_auto_scale_2(amax);
  PG_ASSIGN_OR_RETURN(void* codes, w.arena.alloc(size_t(h.rows * h.cols / 2)));
  PG_ASSIGN_OR_RETURN(void* scales, w.arena.alloc(size_t(h.rows * h.cols / ops::kNvfp4GroupSize)));
  PG_CUDA_TRY(cu::nvfp4_quantize(h.data, bf16, h.rows, h.cols, scale_2, static_cast<uint8_t*>(codes),
                                 static_cast<uint8_t*>(scales), nullptr));
  PG_CUDA_TRY(cu::nvfp4_to_device_layout(codes, size_t(h.rows * h.cols / 2), nullptr));
  Matrix q{WeightFormat::kNvfp4, h.rows, h.cols, codes};
  q.scale_fp8 = static_cast<const uint8_t*>(scales);
  q.scale_2 = scale_2;
  return q;
}

}  // namespace

Status quantize_draft_heads(DeviceWeights& w, DraftHead head) {
  if (head == DraftHead::kModel) return ok_status();
  std::map<const void*, Matrix> done;  // one copy per distinct head (the MTP layers share the model's)
  for (DevMtp& d : w.mtp) {
    const Matrix& h = d.head;
    if (auto it = done.find(h.data); it != done.end()) {
      d.head = it->second;
      continue;
    }
    if ((h.format != WeightFormat::kBF16 && h.format != WeightFormat::kF32) || h.cols % 64 != 0) continue;
    Matrix q;
    if (head == DraftHead::kFp8) {
      PG_ASSIGN_OR_RETURN(q, fp8_head(w, h));
    } else {
      PG_ASSIGN_OR_RETURN(q, nvfp4_head(w, h));
    }
    done.emplace(h.data, q);
    d.head = q;
  }
  return ok_status();
}

size_t matrix_bytes(const Matrix& m) {
  if (m.format == WeightFormat::kNvfp4)  // packed E2M1 pairs + one e4m3 scale per 16 values (+ scale_2 groups)
    return size_t(m.rows * m.cols) / 2 + size_t(m.rows * (m.cols / ops::kNvfp4GroupSize)) +
           (m.scale_2_rows ? size_t(m.rows / m.scale_2_group_rows) * 4 : 0);
  size_t b = size_t(m.rows * m.cols) * matrix_elem_bytes(m);
  if (m.format == WeightFormat::kFp8Block) b += size_t(scale_rows(m) * m.scale_cols()) * 4;
  return b;
}

namespace {

// Bytes of `rows` rows of m's data (NVFP4: two codes per byte).
size_t data_bytes(const Matrix& m, int64_t rows) {
  return m.format == WeightFormat::kNvfp4 ? size_t(rows * m.cols) / 2 : size_t(rows * m.cols) * matrix_elem_bytes(m);
}
size_t nvfp4_scale_bytes(const Matrix& m, int64_t rows) { return size_t(rows * (m.cols / ops::kNvfp4GroupSize)); }

// Copies host tensors to the device, once per distinct host tensor (tied embeddings, shared copies).
class Uploader {
 public:
  explicit Uploader(DeviceWeights& w) : w_(w) {}

  Result<void*> raw(const void* host, size_t bytes) {
    PG_ASSIGN_OR_RETURN(void* d, w_.arena.alloc(bytes));
    if (bytes) PG_CUDA_TRY(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
  }
  Result<const float*> f32(const std::vector<float>& v) {
    PG_ASSIGN_OR_RETURN(void* d, raw(v.data(), v.size() * 4));
    return static_cast<const float*>(d);
  }
  Result<Matrix> matrix(const Matrix& h) {
    if (!h.data) return Matrix{};
    if (auto it = seen_.find(h.data); it != seen_.end()) return it->second;
    Matrix d = h;
    PG_ASSIGN_OR_RETURN(void* data, raw(h.data, data_bytes(h, h.rows)));
    d.data = data;
    if (h.format == WeightFormat::kFp8Block) {
      PG_ASSIGN_OR_RETURN(void* s, raw(h.scale_inv, size_t(scale_rows(h) * h.scale_cols()) * 4));
      d.scale_inv = static_cast<const float*>(s);
    }
    if (h.format == WeightFormat::kNvfp4) {  // scale_2 stays a host value (per tensor)
      if (h.scale_2_rows) return internal_error("cuda: a host NVFP4 matrix with per-row-group scale_2");
      PG_CUDA_TRY(ops::cuda::nvfp4_to_device_layout(data, data_bytes(h, h.rows), nullptr));
      PG_ASSIGN_OR_RETURN(void* s, raw(h.scale_fp8, nvfp4_scale_bytes(h, h.rows)));
      d.scale_fp8 = static_cast<const uint8_t*>(s);
    }
    seen_[h.data] = d;
    return d;
  }
  // [top ; bottom] as one matrix (same format and blocks; FP8 needs top.rows % block_rows == 0
  // so bottom's rows start on a scale row), and the two halves as views into it. Returns false
  // (nothing uploaded) when they cannot be joined.
  Result<bool> concat(const Matrix& top, const Matrix& bottom, Matrix& joined, Matrix& top_view, Matrix& bottom_view) {
    if (!top.data || !bottom.data || top.format != bottom.format || top.cols != bottom.cols) return false;
    const bool fp8 = top.format == WeightFormat::kFp8Block, fp4 = top.format == WeightFormat::kNvfp4;
    if (fp8 && (top.block_rows != bottom.block_rows || top.block_cols != bottom.block_cols || top.rows % top.block_rows))
      return false;
    if (fp4 && (top.scale_2_rows || bottom.scale_2_rows)) return false;
    joined = top;
    joined.rows = top.rows + bottom.rows;
    const size_t top_b = data_bytes(top, top.rows), bottom_b = data_bytes(bottom, bottom.rows);
    PG_ASSIGN_OR_RETURN(void* d, w_.arena.alloc(top_b + bottom_b));
    PG_CUDA_TRY(cudaMemcpy(d, top.data, top_b, cudaMemcpyHostToDevice));
    PG_CUDA_TRY(cudaMemcpy(static_cast<uint8_t*>(d) + top_b, bottom.data, bottom_b, cudaMemcpyHostToDevice));
    joined.data = d;
    top_view = top, bottom_view = bottom;
    top_view.data = d;
    bottom_view.data = static_cast<const uint8_t*>(d) + top_b;
    if (fp4) {
      PG_CUDA_TRY(ops::cuda::nvfp4_to_device_layout(d, top_b + bottom_b, nullptr));
      const size_t st = nvfp4_scale_bytes(top, top.rows), sb = nvfp4_scale_bytes(bottom, bottom.rows);
      PG_ASSIGN_OR_RETURN(void* sd, w_.arena.alloc(st + sb));
      PG_CUDA_TRY(cudaMemcpy(sd, top.scale_fp8, st, cudaMemcpyHostToDevice));
      PG_CUDA_TRY(cudaMemcpy(static_cast<uint8_t*>(sd) + st, bottom.scale_fp8, sb, cudaMemcpyHostToDevice));
      joined.scale_fp8 = top_view.scale_fp8 = static_cast<const uint8_t*>(sd);
      bottom_view.scale_fp8 = static_cast<const uint8_t*>(sd) + st;
      if (top.scale_2 != bottom.scale_2) {  // two ModelOpt tensors: a scale_2 per group of gcd(rows) rows
        const int64_t g = std::gcd(top.rows, bottom.rows);
        std::vector<float> s2(size_t(joined.rows / g));
        for (size_t i = 0; i < s2.size(); ++i) s2[i] = int64_t(i) * g < top.rows ? top.scale_2 : bottom.scale_2;
        PG_ASSIGN_OR_RETURN(const float* ds2, f32(s2));
        joined.scale_2_rows = ds2, joined.scale_2_group_rows = g;
      }
    }
    if (fp8) {
      const int64_t st = scale_rows(top), sb = scale_rows(bottom), sc = top.scale_cols();
      PG_ASSIGN_OR_RETURN(void* sd, w_.arena.alloc(size_t((st + sb) * sc) * 4));
      PG_CUDA_TRY(cudaMemcpy(sd, top.scale_inv, size_t(st * sc) * 4, cudaMemcpyHostToDevice));
      PG_CUDA_TRY(cudaMemcpy(static_cast<float*>(sd) + st * sc, bottom.scale_inv, size_t(sb * sc) * 4,
                             cudaMemcpyHostToDevice));
      joined.scale_inv = top_view.scale_inv = static_cast<const float*>(sd);
      bottom_view.scale_inv = static_cast<const float*>(sd) + st * sc;
    }
    return true;
  }

  // A matrix of host f32 values (the router when it is stored in FP8).
  Result<Matrix> f32_matrix(const std::vector<float>& v, int64_t rows, int64_t cols) {
    PG_ASSIGN_OR_RETURN(const float* d, f32(v));
    return Matrix{WeightFormat::kF32, rows, cols, d};
  }

 private:
  DeviceWeights& w_;
  std::map<const void*, Matrix> seen_;
};

// One slice of an MLP placed into a stack: rows [r0, r0 + inter) of its gate and up, columns
// [r0, r0 + inter) of its down.
struct MlpSlice {
  const MlpWeights* mlp = nullptr;
  int64_t r0 = 0;
};

Status check_stackable(const Matrix& m, int64_t inter, int64_t H, const char* what) {
  if (m.format == WeightFormat::kNvfp4 && inter % ops::kNvfp4GroupSize != 0)  // shared slices cut down's columns
    return invalid_argument("cuda: {} in NVFP4 needs the intermediate size ({}) to be a multiple of {}", what, inter,
                            ops::kNvfp4GroupSize);
  if (m.format != WeightFormat::kFp8Block) return ok_status();
  if (inter % m.block_rows != 0 || H % m.block_rows != 0 || inter % m.block_cols != 0)
    return invalid_argument(
        "cuda: {} has FP8 blocks of {}x{}; stacking experts needs the intermediate size ({}) and the hidden size "
        "({}) to be multiples of the block size",
        what, m.block_rows, m.block_cols, inter, H);
  return ok_status();
}

Result<DevMlp> stack_mlp(DeviceWeights& w, const std::vector<MlpSlice>& slices, int64_t n_experts, int64_t inter,
                         int64_t H) {
  const Matrix& ref = slices.front().mlp->gate;
  const WeightFormat f = ref.format;
  const bool fp8 = f == WeightFormat::kFp8Block, fp4 = f == WeightFormat::kNvfp4;
  // Bytes of `n` elements (NVFP4: n even, two codes per byte).
  auto eb = [&](int64_t n) { return fp4 ? size_t(n) / 2 : size_t(n) * matrix_elem_bytes(ref); };
  PG_TRY(check_stackable(ref, inter, H, "an MLP"));
  for (const MlpSlice& s : slices)
    for (const Matrix* m : {&s.mlp->gate, &s.mlp->up, &s.mlp->down})
      if (m->format != f || (fp8 && (m->block_rows != ref.block_rows || m->block_cols != ref.block_cols)))
        return invalid_argument("cuda: the experts of a layer must share one weight format to be stacked");
  const int64_t n = int64_t(slices.size());
  DevMlp d;
  d.inter = inter, d.n_experts = n_experts, d.n_shared = n - n_experts;
  d.gate_up = Matrix{f, n * 2 * inter, H};
  d.down = Matrix{f, n * H, inter};
  d.gate_up.block_rows = d.down.block_rows = ref.block_rows;
  d.gate_up.block_cols = d.down.block_cols = ref.block_cols;
  PG_ASSIGN_OR_RETURN(void* gu, w.arena.alloc(eb(n * 2 * inter * H)));
  PG_ASSIGN_OR_RETURN(void* dn, w.arena.alloc(eb(n * H * inter)));
  d.gate_up.data = gu, d.down.data = dn;
  // NVFP4: e4m3 block scales [rows, cols/16] and a scale_2 per (expert, gate | up | down) tensor.
  uint8_t* gu_s8 = nullptr;
  uint8_t* dn_s8 = nullptr;
  std::vector<float> gu_s2, dn_s2;
  const int64_t g16 = ops::kNvfp4GroupSize;
  if (fp4) {
    PG_ASSIGN_OR_RETURN(void* a, w.arena.alloc(size_t(n * 2 * inter * (H / g16))));
    PG_ASSIGN_OR_RETURN(void* b, w.arena.alloc(size_t(n * H * (inter / g16))));
    gu_s8 = static_cast<uint8_t*>(a), dn_s8 = static_cast<uint8_t*>(b);
    d.gate_up.scale_fp8 = gu_s8, d.down.scale_fp8 = dn_s8;
  }
  float* gu_s = nullptr;
  float* dn_s = nullptr;
  const int64_t br = ref.block_rows, bc = ref.block_cols;
  const int64_t gu_scols = d.gate_up.scale_cols(), dn_scols = d.down.scale_cols();
  if (fp8) {
    PG_ASSIGN_OR_RETURN(void* a, w.arena.alloc(size_t(scale_rows(d.gate_up) * gu_scols) * 4));
    PG_ASSIGN_OR_RETURN(void* b, w.arena.alloc(size_t(scale_rows(d.down) * dn_scols) * 4));
    gu_s = static_cast<float*>(a), dn_s = static_cast<float*>(b);
    d.gate_up.scale_inv = gu_s, d.down.scale_inv = dn_s;
  }
  for (int64_t e = 0; e < n; ++e) {
    const MlpWeights& m = *slices[size_t(e)].mlp;
    const int64_t r0 = slices[size_t(e)].r0;
    for (int part = 0; part < 2; ++part) {  // gate rows, then up rows
      const Matrix& src = part == 0 ? m.gate : m.up;
      const int64_t dst_row = e * 2 * inter + part * inter;
      PG_CUDA_TRY(cudaMemcpy(static_cast<uint8_t*>(gu) + eb(dst_row * H),
                             static_cast<const uint8_t*>(src.data) + eb(r0 * H), eb(inter * H),
                             cudaMemcpyHostToDevice));
      if (fp4) {
        PG_CUDA_TRY(cudaMemcpy(gu_s8 + dst_row * (H / g16), src.scale_fp8 + r0 * (H / g16), size_t(inter * (H / g16)),
                               cudaMemcpyHostToDevice));
        gu_s2.push_back(src.scale_2);
      }
      if (fp8)
        PG_CUDA_TRY(cudaMemcpy(gu_s + (dst_row / br) * gu_scols, src.scale_inv + (r0 / br) * src.scale_cols(),
                               size_t((inter / br) * gu_scols) * 4, cudaMemcpyHostToDevice));
    }
    // down [H, src_cols] -> columns [r0, r0 + inter) into rows [e*H, (e+1)*H).
    const Matrix& src = m.down;
    PG_CUDA_TRY(cudaMemcpy2D(static_cast<uint8_t*>(dn) + eb(e * H * inter), eb(inter),
                             static_cast<const uint8_t*>(src.data) + eb(r0), eb(src.cols), eb(inter), size_t(H),
                             cudaMemcpyHostToDevice));
    if (fp4) {  // r0 % 16 == 0 (check_stackable): whole scale columns
      PG_CUDA_TRY(cudaMemcpy2D(dn_s8 + e * H * (inter / g16), size_t(inter / g16), src.scale_fp8 + r0 / g16,
                               size_t(src.cols / g16), size_t(inter / g16), size_t(H), cudaMemcpyHostToDevice));
      dn_s2.push_back(src.scale_2);
    }
    if (fp8)
      PG_CUDA_TRY(cudaMemcpy2D(dn_s + (e * H / br) * dn_scols, size_t(dn_scols) * 4, src.scale_inv + r0 / bc,
                               size_t(src.scale_cols()) * 4, size_t(dn_scols) * 4, size_t(H / br),
                               cudaMemcpyHostToDevice));
  }
  if (fp4) {
    PG_CUDA_TRY(ops::cuda::nvfp4_to_device_layout(gu, eb(n * 2 * inter * H), nullptr));
    PG_CUDA_TRY(ops::cuda::nvfp4_to_device_layout(dn, eb(n * H * inter), nullptr));
    for (auto [stack, s2, group] : {std::tuple{&d.gate_up, &gu_s2, inter}, std::tuple{&d.down, &dn_s2, H}}) {
      PG_ASSIGN_OR_RETURN(void* p, w.arena.alloc(s2->size() * 4));
      PG_CUDA_TRY(cudaMemcpy(p, s2->data(), s2->size() * 4, cudaMemcpyHostToDevice));
      stack->scale_2_rows = static_cast<const float*>(p), stack->scale_2_group_rows = group;
    }
  }
  return d;
}

// W_UK / W_UV of an FP8 kv_b_proj as HeadWeight::kFp8 (1 byte a weight), of an NVFP4 one as bf16
// with its scale_2 on the outputs (2 bytes), instead of f32 (4): the default since their GPU tests
// and goldens passed on the H200 (2026-12-02). PEREGRINE_COMPACT_HEADS=0 keeps the f32 heads (an
// A/B, and the path of a kv_b_proj whose blocks do not fit the compact layouts).
bool compact_heads_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("PEREGRINE_COMPACT_HEADS");
    return !(v && std::string_view(v) == "0");
  }();
  return on;
}

// W_UK^T / W_UV of an FP8 kv_b_proj as HeadWeight::kFp8 (ops::split_fp8_heads). Returns the bytes a
// decode step reads of them.
Result<double> upload_fp8_heads(Uploader& up, const Matrix& kvb, int64_t nh, int64_t nope, int64_t V,
                                DevAttention& a) {
  const ops::Fp8Heads f = ops::split_fp8_heads(kvb, nh, nope, V);
  a.head_format = ops::HeadWeight::kFp8, a.uk_group = f.uk_group, a.uv_group = f.uv_group;
  PG_ASSIGN_OR_RETURN(a.w_uk_t, up.raw(f.uk_t.data(), f.uk_t.size()));
  PG_ASSIGN_OR_RETURN(a.w_uv, up.raw(f.uv.data(), f.uv.size()));
  PG_ASSIGN_OR_RETURN(a.w_uk_scale, up.f32(f.uk_scale));
  PG_ASSIGN_OR_RETURN(a.w_uv_scale, up.f32(f.uv_scale));
  return double(f.uk_t.size() + f.uv.size()) + 4.0 * double(f.uk_scale.size() + f.uv_scale.size());
}

// W_UK^T / W_UV of an NVFP4 kv_b_proj as bf16 code x block scale, scale_2 on the outputs
// (ops::split_nvfp4_heads). Returns the bytes a decode step reads of them.
Result<double> upload_nvfp4_heads(Uploader& up, const Matrix& kvb, int64_t nh, int64_t nope, int64_t V,
                                  DevAttention& a) {
  const ops::Bf16Heads f = ops::split_nvfp4_heads(kvb, nh, nope, V);
  a.head_format = ops::HeadWeight::kBF16, a.head_y_scale = f.y_scale;
  PG_ASSIGN_OR_RETURN(a.w_uk_t, up.raw(f.uk_t.data(), f.uk_t.size() * 2));
  PG_ASSIGN_OR_RETURN(a.w_uv, up.raw(f.uv.data(), f.uv.size() * 2));
  return 2.0 * double(f.uk_t.size() + f.uv.size());
}

Result<DevLayer> upload_layer(const ModelConfig& c, const LayerWeights& L, Uploader& up, DeviceWeights& w) {
  DevLayer d;
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, R = c.kv_lora_rank;
  const int64_t nope = c.qk_nope_head_dim, V = c.v_head_dim;
  PG_ASSIGN_OR_RETURN(d.input_norm, up.f32(L.input_layernorm));
  PG_ASSIGN_OR_RETURN(d.post_norm, up.f32(L.post_attention_layernorm));
  const AttentionWeights& A = L.attn;
  DevAttention& a = d.attn;
  a.has_q_lora = A.has_q_lora;
  // q_a (or q) and kv_a read the same input: one matrix, one GEMV, when they can be joined.
  const Matrix& q_first = A.has_q_lora ? A.q_a_proj : A.q_proj;
  Matrix& q_dev = A.has_q_lora ? a.q_a : a.q;
  PG_ASSIGN_OR_RETURN(bool joined, up.concat(q_first, A.kv_a_proj_with_mqa, a.q_kv_a, q_dev, a.kv_a));
  if (!joined) {
    PG_ASSIGN_OR_RETURN(q_dev, up.matrix(q_first));
    PG_ASSIGN_OR_RETURN(a.kv_a, up.matrix(A.kv_a_proj_with_mqa));
  }
  if (A.has_q_lora) {
    PG_ASSIGN_OR_RETURN(a.q_b, up.matrix(A.q_b_proj));
    PG_ASSIGN_OR_RETURN(a.q_a_norm, up.f32(A.q_a_layernorm));
  }
  PG_ASSIGN_OR_RETURN(a.kv_a_norm, up.f32(A.kv_a_layernorm));
  PG_ASSIGN_OR_RETURN(a.o, up.matrix(A.o_proj));
  // W_UK [nh, nope, R] -> [nh, R, nope]. kv_b_proj in bf16: W_UK / W_UV in bf16 (exact); in FP8 or
  // NVFP4: its dequantized values, kept exact in f32 (an NVFP4 value, e2m1 * e4m3 * scale_2,
  // generally has no exact bf16) where the compact layouts do not fit (or PEREGRINE_COMPACT_HEADS=0);
  // else an FP8 one's e4m3 codes and block scales (upload_fp8_heads: the same values at a quarter
  // of f32's bytes), an NVFP4 one's code x block scale in bf16 with scale_2 on the outputs
  // (upload_nvfp4_heads: half).
  double head_bytes = 0;
  if (compact_heads_enabled() && ops::fp8_heads_fit(A.kv_b_proj, nope, V)) {
    PG_ASSIGN_OR_RETURN(head_bytes, upload_fp8_heads(up, A.kv_b_proj, nh, nope, V, a));
  } else if (compact_heads_enabled() && ops::nvfp4_heads_fit(A.kv_b_proj, nope, V)) {
    PG_ASSIGN_OR_RETURN(head_bytes, upload_nvfp4_heads(up, A.kv_b_proj, nh, nope, V, a));
  } else {
    std::vector<float> uk_t(A.w_uk.size());
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t d_ = 0; d_ < nope; ++d_)
        for (int64_t r = 0; r < R; ++r) uk_t[size_t((h * R + r) * nope + d_)] = A.w_uk[size_t((h * nope + d_) * R + r)];
    a.head_format = A.kv_b_proj.format == WeightFormat::kBF16 ? ops::HeadWeight::kBF16 : ops::HeadWeight::kF32;
    auto put_head = [&](const std::vector<float>& v) -> Result<const void*> {
      if (a.head_format == ops::HeadWeight::kF32) {
        PG_ASSIGN_OR_RETURN(const float* p, up.f32(v));
        return static_cast<const void*>(p);
      }
      std::vector<uint16_t> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) {  // values came from bf16: the top half is exact
        uint32_t u;
        std::memcpy(&u, &v[i], 4);
        b[i] = uint16_t(u >> 16);
      }
      PG_ASSIGN_OR_RETURN(void* p, up.raw(b.data(), b.size() * 2));
      return static_cast<const void*>(p);
    };
    PG_ASSIGN_OR_RETURN(a.w_uk_t, put_head(uk_t));
    PG_ASSIGN_OR_RETURN(a.w_uv, put_head(A.w_uv));
    head_bytes = (a.head_format == ops::HeadWeight::kF32 ? 4.0 : 2.0) * double(nh * (R * nope + V * R));
  }
  a.bytes = double(matrix_bytes(a.q_a) + matrix_bytes(a.q_b) + matrix_bytes(a.q) + matrix_bytes(a.kv_a) +
                   matrix_bytes(a.o)) +
            head_bytes;

  d.is_moe = L.is_moe;
  if (L.is_moe) {
    const MoeWeights& M = L.moe;
    if (M.router.format == WeightFormat::kFp8Block) {
      PG_ASSIGN_OR_RETURN(d.router, up.f32_matrix(M.router_f32, M.router.rows, M.router.cols));
    } else {
      PG_ASSIGN_OR_RETURN(d.router, up.matrix(M.router));
    }
    if (!M.e_score_correction_bias.empty()) {
      PG_ASSIGN_OR_RETURN(d.router_bias, up.f32(M.e_score_correction_bias));
    }
    std::vector<MlpSlice> slices;
    for (const MlpWeights& e : M.experts) slices.push_back({&e, 0});
    const int64_t inter = c.moe_intermediate_size;
    if (M.has_shared)
      for (int64_t s = 0; s < c.n_shared_experts; ++s) slices.push_back({&M.shared, s * inter});
    PG_ASSIGN_OR_RETURN(d.mlp, stack_mlp(w, slices, int64_t(M.experts.size()), inter, H));
  } else {
    PG_ASSIGN_OR_RETURN(d.mlp, stack_mlp(w, {{&L.mlp, 0}}, 0, c.intermediate_size, H));
  }
  return d;
}

}  // namespace

Result<DeviceWeights> upload_weights(const ModelConfig& c, const ModelWeights& host, bool exact,
                                     const LoadProgress& progress) {
  (void)exact;
  if (host.embed_tokens.format == WeightFormat::kNvfp4)
    return unsupported("cuda: NVFP4 embed_tokens have no CUDA embedding kernel; keep the embeddings bf16");
  DeviceWeights w;
  Uploader up(w);
  const size_t n_steps = host.layers.size() + host.mtp.size() + 1;
  size_t step = 0;
  auto tick = [&](const std::string& what) {
    if (progress) progress(what, double(++step) / double(n_steps));
  };
  PG_ASSIGN_OR_RETURN(w.embed, up.matrix(host.embed_tokens));
  PG_ASSIGN_OR_RETURN(w.lm_head, up.matrix(host.lm_head));
  PG_ASSIGN_OR_RETURN(w.norm, up.f32(host.norm));
  tick("embeddings");
  for (size_t l = 0; l < host.layers.size(); ++l) {
    PG_ASSIGN_OR_RETURN(DevLayer d, upload_layer(c, host.layers[l], up, w));
    w.layers.push_back(std::move(d));
    tick("layer " + std::to_string(l));
  }
  for (const MtpWeights& m : host.mtp) {
    DevMtp d;
    PG_ASSIGN_OR_RETURN(d.embed, up.matrix(m.embed_tokens));
    PG_ASSIGN_OR_RETURN(d.eh_proj, up.matrix(m.eh_proj));
    PG_ASSIGN_OR_RETURN(d.head, up.matrix(m.shared_head_head));
    PG_ASSIGN_OR_RETURN(d.enorm, up.f32(m.enorm));
    PG_ASSIGN_OR_RETURN(d.hnorm, up.f32(m.hnorm));
    PG_ASSIGN_OR_RETURN(d.head_norm, up.f32(m.shared_head_norm));
    PG_ASSIGN_OR_RETURN(d.block, upload_layer(c, m.block, up, w));
    w.mtp.push_back(std::move(d));
    tick("MTP layer");
  }
  return w;
}

// ------------------------------------------------------------------------------------------------
// Synthetic weights

namespace {

class Synth {
 public:
  Synth(DeviceWeights& w, uint64_t seed) : w_(w), seed_(seed) {}

  // Uniform bf16 with variance 1/cols (a = sqrt(3/cols)), or FP8 codes with 128x128 scales
  // scaled to about the same RMS (random finite e4m3 codes have an RMS of ~87 and the scales
  // 2^-9 * 2^(3u) a mean of ~0.0037, hence 3.1/sqrt(cols)), or NVFP4: random e2m1 codes (RMS
  // sqrt(68.5 / 8) = 2.93) times e4m3 block scales of exponent -1..1 (RMS ~1.84) times scale_2 =
  // gain * 0.186 / sqrt(cols) (1 / (2.93 * 1.84) = 0.186).
  Result<Matrix> matrix(int64_t rows, int64_t cols, WeightFormat f, float gain = 1.0f) {
    if (f == WeightFormat::kNvfp4) {
      Matrix m{f, rows, cols};
      PG_ASSIGN_OR_RETURN(void* d, w_.arena.alloc(size_t(rows * cols) / 2));
      PG_CUDA_TRY(cu::launch_fill(d, size_t(rows * cols) / 2, cu::FillKind::kBytes, next(), nullptr));
      const size_t n_s = size_t(rows * (cols / ops::kNvfp4GroupSize));
      PG_ASSIGN_OR_RETURN(void* s, w_.arena.alloc(n_s));
      PG_CUDA_TRY(cu::launch_fill(s, n_s, cu::FillKind::kE4m3Scale, next(), nullptr));
      m.data = d, m.scale_fp8 = static_cast<const uint8_t*>(s);
      m.scale_2 = gain * 0.186f / std::sqrt(float(cols));
      return m;
    }
    const bool fp8 = f == WeightFormat::kFp8Block;
    Matrix m{fp8 ? WeightFormat::kFp8Block : WeightFormat::kBF16, rows, cols};
    PG_ASSIGN_OR_RETURN(void* d, w_.arena.alloc(size_t(rows * cols) * (fp8 ? 1 : 2)));
    m.data = d;
    if (fp8) {
      PG_CUDA_TRY(cu::launch_fill(d, size_t(rows * cols), cu::FillKind::kFp8Finite, next(), nullptr));
      const size_t n_s = size_t(scale_rows(m) * m.scale_cols());
      PG_ASSIGN_OR_RETURN(void* s, w_.arena.alloc(n_s * 4));
      PG_CUDA_TRY(cu::launch_fill(s, n_s, cu::FillKind::kScalePos, next(), nullptr,
                                  gain * 3.1f / std::sqrt(float(cols))));
      m.scale_inv = static_cast<const float*>(s);
    } else {
      PG_CUDA_TRY(cu::launch_fill(d, size_t(rows * cols), cu::FillKind::kBf16Pm1, next(), nullptr,
                                  gain * std::sqrt(3.0f / float(cols))));
    }
    return m;
  }
  Result<const void*> bf16(int64_t n, int64_t fan_in) {
    PG_ASSIGN_OR_RETURN(void* d, w_.arena.alloc(size_t(n) * 2));
    PG_CUDA_TRY(cu::launch_fill(d, size_t(n), cu::FillKind::kBf16Pm1, next(), nullptr, std::sqrt(3.0f / float(fan_in))));
    return static_cast<const void*>(d);
  }
  // n random finite e4m3 codes, and n positive scales for rows of fan_in such codes (as matrix()'s FP8).
  Result<const void*> fp8_codes(int64_t n) {
    PG_ASSIGN_OR_RETURN(void* d, w_.arena.alloc(size_t(n)));
    PG_CUDA_TRY(cu::launch_fill(d, size_t(n), cu::FillKind::kFp8Finite, next(), nullptr));
    return static_cast<const void*>(d);
  }
  Result<const float*> scales(int64_t n, int64_t fan_in) {
    PG_ASSIGN_OR_RETURN(void* d, w_.arena.alloc(size_t(n) * 4));
    PG_CUDA_TRY(cu::launch_fill(d, size_t(n), cu::FillKind::kScalePos, next(), nullptr, 3.1f / std::sqrt(float(fan_in))));
    return static_cast<const float*>(d);
  }
  Result<const float*> constant(int64_t n, float v) {
    std::vector<float> h(size_t(n), v);
    PG_ASSIGN_OR_RETURN(void* d, w_.arena.alloc(h.size() * 4));
    PG_CUDA_TRY(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    return static_cast<const float*>(d);
  }

 private:
  uint64_t next() { return seed_ * 1000003ull + counter_++; }
  DeviceWeights& w_;
  uint64_t seed_;
  uint64_t counter_ = 0;
};

Result<DevLayer> synth_layer(const ModelConfig& c, int64_t l, WeightFormat f, Synth& s) {
  const bool fp8 = f == WeightFormat::kFp8Block, fp4 = f == WeightFormat::kNvfp4;
  DevLayer d;
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, R = c.kv_lora_rank, P = c.qk_rope_head_dim;
  const int64_t nope = c.qk_nope_head_dim, V = c.v_head_dim, qk = nope + P;
  PG_ASSIGN_OR_RETURN(d.input_norm, s.constant(H, 1.0f));
  PG_ASSIGN_OR_RETURN(d.post_norm, s.constant(H, 1.0f));
  DevAttention& a = d.attn;
  a.has_q_lora = c.q_lora_rank.has_value();
  // [q_a | kv_a] (or [q | kv_a]) as one matrix with views, as upload_weights joins them (the
  // q rows are multiples of 128 at every synthetic shape).
  const int64_t q_rows = a.has_q_lora ? *c.q_lora_rank : nh * qk;
  PG_ASSIGN_OR_RETURN(a.q_kv_a, s.matrix(q_rows + R + P, H, f));
  Matrix& q_dev = a.has_q_lora ? a.q_a : a.q;
  q_dev = a.q_kv_a, q_dev.rows = q_rows;
  a.kv_a = a.q_kv_a, a.kv_a.rows = R + P;
  a.kv_a.data = static_cast<const uint8_t*>(a.q_kv_a.data) + (fp4 ? size_t(q_rows * H) / 2 : size_t(q_rows * H) * (fp8 ? 1 : 2));
  if (fp8) a.kv_a.scale_inv = a.q_kv_a.scale_inv + (q_rows / a.q_kv_a.block_rows) * a.q_kv_a.scale_cols();
  if (fp4) a.kv_a.scale_fp8 = a.q_kv_a.scale_fp8 + q_rows * (H / ops::kNvfp4GroupSize);
  if (a.has_q_lora) {
    PG_ASSIGN_OR_RETURN(a.q_b, s.matrix(nh * qk, *c.q_lora_rank, f));
    PG_ASSIGN_OR_RETURN(a.q_a_norm, s.constant(*c.q_lora_rank, 1.0f));
  }
  PG_ASSIGN_OR_RETURN(a.kv_a_norm, s.constant(R, 1.0f));
  PG_ASSIGN_OR_RETURN(a.o, s.matrix(H, nh * V, f));
  // W_UK / W_UV as upload_layer gives a real checkpoint's: an FP8 model's as HeadWeight::kFp8
  // (DeepSeek's 128 x 128 blocks: one scale per row and 128 columns), an NVFP4 one's in bf16 with an
  // output scale, a bf16 one's in bf16; with PEREGRINE_COMPACT_HEADS=0, bf16 for every dtype (a
  // real FP8 / NVFP4 checkpoint then loads them in f32).
  double head_bytes = 2.0 * double(nh * (R * nope + V * R));
  if (compact_heads_enabled() && fp8) {
    a.head_format = ops::HeadWeight::kFp8, a.uk_group = a.uv_group = 128;
    PG_ASSIGN_OR_RETURN(a.w_uk_t, s.fp8_codes(nh * R * nope));
    PG_ASSIGN_OR_RETURN(a.w_uv, s.fp8_codes(nh * V * R));
    PG_ASSIGN_OR_RETURN(a.w_uk_scale, s.scales(nh * R * ((nope + 127) / 128), nope));
    PG_ASSIGN_OR_RETURN(a.w_uv_scale, s.scales(nh * V * ((R + 127) / 128), R));
    head_bytes = double(nh * (R * nope + V * R)) + 4.0 * double(nh * (R * ((nope + 127) / 128) + V * ((R + 127) / 128)));
  } else {
    a.head_format = ops::HeadWeight::kBF16;
    if (compact_heads_enabled() && fp4) a.head_y_scale = 0.75f;  // an NVFP4 kv_b_proj's scale_2 on the outputs
    PG_ASSIGN_OR_RETURN(a.w_uk_t, s.bf16(nh * R * nope, nope));
    PG_ASSIGN_OR_RETURN(a.w_uv, s.bf16(nh * V * R, R));
  }
  a.bytes = double(matrix_bytes(a.q_a) + matrix_bytes(a.q_b) + matrix_bytes(a.q) + matrix_bytes(a.kv_a) +
                   matrix_bytes(a.o)) +
            head_bytes;
  d.is_moe = c.n_routed_experts > 0 && l >= c.first_k_dense_replace && l % std::max<int64_t>(c.moe_layer_freq, 1) == 0;
  DevMlp& m = d.mlp;
  if (d.is_moe) {
    PG_ASSIGN_OR_RETURN(d.router, s.matrix(c.n_routed_experts, H, WeightFormat::kBF16));
    if (c.topk_method == "noaux_tc") {
      PG_ASSIGN_OR_RETURN(d.router_bias, s.constant(c.n_routed_experts, 0.0f));
    }
    m.inter = c.moe_intermediate_size, m.n_experts = c.n_routed_experts, m.n_shared = c.n_shared_experts;
  } else {
    m.inter = c.intermediate_size, m.n_experts = 0, m.n_shared = 1;
  }
  const int64_t n = m.n_experts + m.n_shared;
  PG_ASSIGN_OR_RETURN(m.gate_up, s.matrix(n * 2 * m.inter, H, f));
  PG_ASSIGN_OR_RETURN(m.down, s.matrix(n * H, m.inter, f));
  if (fp4) {  // one scale_2 per expert tensor, as upload_weights stacks a checkpoint's (same value here)
    PG_ASSIGN_OR_RETURN(m.gate_up.scale_2_rows, s.constant(n * 2, m.gate_up.scale_2));
    PG_ASSIGN_OR_RETURN(m.down.scale_2_rows, s.constant(n, m.down.scale_2));
    m.gate_up.scale_2_group_rows = m.inter, m.down.scale_2_group_rows = H;
  }
  return d;
}

}  // namespace

Result<DeviceWeights> synthetic_weights(const ModelConfig& c, WeightFormat f, uint64_t seed,
                                        const LoadProgress& progress) {
  if (f != WeightFormat::kBF16 && f != WeightFormat::kFp8Block && f != WeightFormat::kNvfp4)
    return invalid_argument("synthetic weights: bf16, FP8 or NVFP4 projections");
  DeviceWeights w;
  Synth s(w, seed);
  const int64_t H = c.hidden_size;
  PG_ASSIGN_OR_RETURN(w.embed, s.matrix(c.vocab_size, H, WeightFormat::kBF16, std::sqrt(float(H))));  // rows of RMS ~1
  PG_ASSIGN_OR_RETURN(w.lm_head, s.matrix(c.vocab_size, H, WeightFormat::kBF16));
  PG_ASSIGN_OR_RETURN(w.norm, s.constant(H, 1.0f));
  const int64_t n_total = c.num_hidden_layers + c.num_nextn_predict_layers;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    PG_ASSIGN_OR_RETURN(DevLayer d, synth_layer(c, l, f, s));
    w.layers.push_back(std::move(d));
    if (progress) progress("layer " + std::to_string(l), double(l + 1) / double(n_total));
  }
  for (int64_t i = 0; i < c.num_nextn_predict_layers; ++i) {
    DevMtp d;
    d.embed = w.embed;
    d.head = w.lm_head;
    PG_ASSIGN_OR_RETURN(d.eh_proj, s.matrix(H, 2 * H, f));
    PG_ASSIGN_OR_RETURN(d.enorm, s.constant(H, 1.0f));
    PG_ASSIGN_OR_RETURN(d.hnorm, s.constant(H, 1.0f));
    PG_ASSIGN_OR_RETURN(d.head_norm, s.constant(H, 1.0f));
    PG_ASSIGN_OR_RETURN(d.block, synth_layer(c, c.first_k_dense_replace, f, s));  // an MoE block
    w.mtp.push_back(std::move(d));
    if (progress) progress("MTP layer", double(c.num_hidden_layers + i + 1) / double(n_total));
  }
  PG_CUDA_TRY(cudaDeviceSynchronize());
  return w;
}

}  // namespace pg
