// Device weights: upload from the memory-mapped checkpoint (expert stacking, W_UK transposed),
// or random weights made on the GPU at the same layout for `peregrine bench --synthetic`.
#include "model/cuda/device_weights.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <map>

#include "ops/cuda/common/cuda_check.h"
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

}  // namespace

size_t matrix_bytes(const Matrix& m) {
  if (m.format == WeightFormat::kNvfp4)  // packed E2M1 pairs + one e4m3 scale per 16 values
    return size_t(m.rows * m.cols) / 2 + size_t(m.rows * (m.cols / ops::kNvfp4GroupSize));
  size_t b = size_t(m.rows * m.cols) * matrix_elem_bytes(m);
  if (m.format == WeightFormat::kFp8Block) b += size_t(scale_rows(m) * m.scale_cols()) * 4;
  return b;
}

namespace {

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
    if (h.format == WeightFormat::kNvfp4)
      return unsupported("cuda: NVFP4 weights have no CUDA kernels yet; run this checkpoint with --device cpu");
    if (auto it = seen_.find(h.data); it != seen_.end()) return it->second;
    Matrix d = h;
    PG_ASSIGN_OR_RETURN(void* data, raw(h.data, size_t(h.rows * h.cols) * matrix_elem_bytes(h)));
    d.data = data;
    if (h.format == WeightFormat::kFp8Block) {
      PG_ASSIGN_OR_RETURN(void* s, raw(h.scale_inv, size_t(scale_rows(h) * h.scale_cols()) * 4));
      d.scale_inv = static_cast<const float*>(s);
    }
    seen_[h.data] = d;
    return d;
  }
  // [top ; bottom] as one matrix (same format and blocks; FP8 needs top.rows % block_rows == 0
  // so bottom's rows start on a scale row), and the two halves as views into it. Returns false
  // (nothing uploaded) when they cannot be joined.
  Result<bool> concat(const Matrix& top, const Matrix& bottom, Matrix& joined, Matrix& top_view, Matrix& bottom_view) {
    if (!top.data || !bottom.data || top.format != bottom.format || top.cols != bottom.cols) return false;
    if (top.format == WeightFormat::kNvfp4) return false;  // matrix() reports it
    const bool fp8 = top.format == WeightFormat::kFp8Block;
    if (fp8 && (top.block_rows != bottom.block_rows || top.block_cols != bottom.block_cols || top.rows % top.block_rows))
      return false;
    const size_t esz = matrix_elem_bytes(top);
    joined = top;
    joined.rows = top.rows + bottom.rows;
    PG_ASSIGN_OR_RETURN(void* d, w_.arena.alloc(size_t(joined.rows * joined.cols) * esz));
    PG_CUDA_TRY(cudaMemcpy(d, top.data, size_t(top.rows * top.cols) * esz, cudaMemcpyHostToDevice));
    PG_CUDA_TRY(cudaMemcpy(static_cast<uint8_t*>(d) + size_t(top.rows * top.cols) * esz, bottom.data,
                           size_t(bottom.rows * bottom.cols) * esz, cudaMemcpyHostToDevice));
    joined.data = d;
    top_view = top, bottom_view = bottom;
    top_view.data = d;
    bottom_view.data = static_cast<const uint8_t*>(d) + size_t(top.rows * top.cols) * esz;
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
  if (ref.format == WeightFormat::kNvfp4)
    return unsupported("cuda: NVFP4 weights have no CUDA kernels yet; run this checkpoint with --device cpu");
  const WeightFormat f = ref.format;
  const size_t esz = matrix_elem_bytes(ref);
  const bool fp8 = f == WeightFormat::kFp8Block;
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
  PG_ASSIGN_OR_RETURN(void* gu, w.arena.alloc(size_t(n * 2 * inter * H) * esz));
  PG_ASSIGN_OR_RETURN(void* dn, w.arena.alloc(size_t(n * H * inter) * esz));
  d.gate_up.data = gu, d.down.data = dn;
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
      PG_CUDA_TRY(cudaMemcpy(static_cast<uint8_t*>(gu) + size_t(dst_row * H) * esz,
                             static_cast<const uint8_t*>(src.data) + size_t(r0 * H) * esz, size_t(inter * H) * esz,
                             cudaMemcpyHostToDevice));
      if (fp8)
        PG_CUDA_TRY(cudaMemcpy(gu_s + (dst_row / br) * gu_scols, src.scale_inv + (r0 / br) * src.scale_cols(),
                               size_t((inter / br) * gu_scols) * 4, cudaMemcpyHostToDevice));
    }
    // down [H, src_cols] -> columns [r0, r0 + inter) into rows [e*H, (e+1)*H).
    const Matrix& src = m.down;
    PG_CUDA_TRY(cudaMemcpy2D(static_cast<uint8_t*>(dn) + size_t(e * H * inter) * esz, size_t(inter) * esz,
                             static_cast<const uint8_t*>(src.data) + size_t(r0) * esz, size_t(src.cols) * esz,
                             size_t(inter) * esz, size_t(H), cudaMemcpyHostToDevice));
    if (fp8)
      PG_CUDA_TRY(cudaMemcpy2D(dn_s + (e * H / br) * dn_scols, size_t(dn_scols) * 4, src.scale_inv + r0 / bc,
                               size_t(src.scale_cols()) * 4, size_t(dn_scols) * 4, size_t(H / br),
                               cudaMemcpyHostToDevice));
  }
  return d;
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
  // W_UK [nh, nope, R] -> [nh, R, nope]; bf16 when kv_b_proj is bf16 (exact), else f32.
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
  const double head_b = a.head_format == ops::HeadWeight::kF32 ? 4.0 : 2.0;
  a.bytes = double(matrix_bytes(a.q_a) + matrix_bytes(a.q_b) + matrix_bytes(a.q) + matrix_bytes(a.kv_a) +
                   matrix_bytes(a.o)) +
            head_b * double(nh * (R * nope + V * R));

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
  // 2^-9 * 2^(3u) a mean of ~0.0037, hence 3.1/sqrt(cols)).
  Result<Matrix> matrix(int64_t rows, int64_t cols, bool fp8, float gain = 1.0f) {
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

Result<DevLayer> synth_layer(const ModelConfig& c, int64_t l, bool fp8, Synth& s) {
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
  PG_ASSIGN_OR_RETURN(a.q_kv_a, s.matrix(q_rows + R + P, H, fp8));
  Matrix& q_dev = a.has_q_lora ? a.q_a : a.q;
  q_dev = a.q_kv_a, q_dev.rows = q_rows;
  a.kv_a = a.q_kv_a, a.kv_a.rows = R + P;
  a.kv_a.data = static_cast<const uint8_t*>(a.q_kv_a.data) + size_t(q_rows * H) * (fp8 ? 1 : 2);
  if (fp8) a.kv_a.scale_inv = a.q_kv_a.scale_inv + (q_rows / a.q_kv_a.block_rows) * a.q_kv_a.scale_cols();
  if (a.has_q_lora) {
    PG_ASSIGN_OR_RETURN(a.q_b, s.matrix(nh * qk, *c.q_lora_rank, fp8));
    PG_ASSIGN_OR_RETURN(a.q_a_norm, s.constant(*c.q_lora_rank, 1.0f));
  }
  PG_ASSIGN_OR_RETURN(a.kv_a_norm, s.constant(R, 1.0f));
  PG_ASSIGN_OR_RETURN(a.o, s.matrix(H, nh * V, fp8));
  a.head_format = ops::HeadWeight::kBF16;
  PG_ASSIGN_OR_RETURN(a.w_uk_t, s.bf16(nh * R * nope, nope));
  PG_ASSIGN_OR_RETURN(a.w_uv, s.bf16(nh * V * R, R));
  a.bytes = double(matrix_bytes(a.q_a) + matrix_bytes(a.q_b) + matrix_bytes(a.q) + matrix_bytes(a.kv_a) +
                   matrix_bytes(a.o)) +
            2.0 * double(nh * (R * nope + V * R));
  d.is_moe = c.n_routed_experts > 0 && l >= c.first_k_dense_replace && l % std::max<int64_t>(c.moe_layer_freq, 1) == 0;
  DevMlp& m = d.mlp;
  if (d.is_moe) {
    PG_ASSIGN_OR_RETURN(d.router, s.matrix(c.n_routed_experts, H, false));
    if (c.topk_method == "noaux_tc") {
      PG_ASSIGN_OR_RETURN(d.router_bias, s.constant(c.n_routed_experts, 0.0f));
    }
    m.inter = c.moe_intermediate_size, m.n_experts = c.n_routed_experts, m.n_shared = c.n_shared_experts;
  } else {
    m.inter = c.intermediate_size, m.n_experts = 0, m.n_shared = 1;
  }
  const int64_t n = m.n_experts + m.n_shared;
  PG_ASSIGN_OR_RETURN(m.gate_up, s.matrix(n * 2 * m.inter, H, fp8));
  PG_ASSIGN_OR_RETURN(m.down, s.matrix(n * H, m.inter, fp8));
  return d;
}

}  // namespace

Result<DeviceWeights> synthetic_weights(const ModelConfig& c, bool fp8, uint64_t seed, const LoadProgress& progress) {
  DeviceWeights w;
  Synth s(w, seed);
  const int64_t H = c.hidden_size;
  PG_ASSIGN_OR_RETURN(w.embed, s.matrix(c.vocab_size, H, false, std::sqrt(float(H))));  // rows of RMS ~1
  PG_ASSIGN_OR_RETURN(w.lm_head, s.matrix(c.vocab_size, H, false));
  PG_ASSIGN_OR_RETURN(w.norm, s.constant(H, 1.0f));
  const int64_t n_total = c.num_hidden_layers + c.num_nextn_predict_layers;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    PG_ASSIGN_OR_RETURN(DevLayer d, synth_layer(c, l, fp8, s));
    w.layers.push_back(std::move(d));
    if (progress) progress("layer " + std::to_string(l), double(l + 1) / double(n_total));
  }
  for (int64_t i = 0; i < c.num_nextn_predict_layers; ++i) {
    DevMtp d;
    d.embed = w.embed;
    d.head = w.lm_head;
    PG_ASSIGN_OR_RETURN(d.eh_proj, s.matrix(H, 2 * H, fp8));
    PG_ASSIGN_OR_RETURN(d.enorm, s.constant(H, 1.0f));
    PG_ASSIGN_OR_RETURN(d.hnorm, s.constant(H, 1.0f));
    PG_ASSIGN_OR_RETURN(d.head_norm, s.constant(H, 1.0f));
    PG_ASSIGN_OR_RETURN(d.block, synth_layer(c, c.first_k_dense_replace, fp8, s));  // an MoE block
    w.mtp.push_back(std::move(d));
    if (progress) progress("MTP layer", double(c.num_hidden_layers + i + 1) / double(n_total));
  }
  PG_CUDA_TRY(cudaDeviceSynchronize());
  return w;
}

}  // namespace pg
