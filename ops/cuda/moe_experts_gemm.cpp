// ops::cuda::moe_experts_gemm: validates, lays out the workspace, runs the plan kernels, reads the
// per-expert counts back (the one synchronization), and enqueues the gather, the per-expert
// cuBLASLt GEMMs (gemm_bf16), SiLU * mul and the combine. Host C++ (no nvcc): the kernels are
// behind prefill_gemm_params.h and gemm/convert.h.
#include "ops/cuda/common/weight_format.h"
#include "ops/cuda/moe_experts_gemm.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/gemm/convert.h"
#include "ops/cuda/prefill_gemm_params.h"

namespace pg::ops::cuda {
namespace {

constexpr size_t kAlignBytes = 256;
size_t align_up(size_t b) { return (b + kAlignBytes - 1) / kAlignBytes * kAlignBytes; }
int64_t round_rows(int64_t n) { return (n + kMoeGemmRowPad - 1) / kMoeGemmRowPad * kMoeGemmRowPad; }
bool aligned(const void* p, uintptr_t bytes) { return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0; }

// Pair rows of a chunk of m tokens: shared segments, then routed segments with their padding.
int64_t max_routed_rows(int64_t m, int64_t top_k, int64_t n_experts) {
  return m * top_k + std::min(n_experts, m * top_k) * (kMoeGemmRowPad - 1);
}

// The workspace's parts (byte offsets) and the staging matrices' leading dims (elements).
struct Layout {
  int64_t rows = 0;           // pair rows at most
  int64_t routed_rows = 0;    // routed pair rows at most
  int64_t ld_bf16 = 0;        // bf16 staging row capacity: max(ld(hidden), ld(inter))
  int64_t ld_f32 = 0;         // f32 staging row capacity: max(ld(2 inter), ld(hidden))
  int64_t w_elems = 0;        // one of the two weight scratch buffers (bf16): staging of the next
                              //  expert's weights overlaps the GEMM that reads the current one
  int64_t n_tiles = 0;        // plan tiles of kMoeGemmPlanTile pairs
  size_t bf16 = 0, f32 = 0, w = 0, tile_hist = 0, count = 0, seg_begin = 0, total_rows = 0, row_token = 0,
         pair_row = 0, total = 0;
};

Layout layout_of(const MoeGemmDims& d) {
  Layout l;
  const int64_t m_pad = round_rows(d.max_m), n_pairs = d.max_m * d.top_k;
  l.routed_rows = max_routed_rows(d.max_m, d.top_k, d.n_experts);
  l.rows = d.n_shared * m_pad + l.routed_rows;
  l.ld_bf16 = std::max(prefill_ld(d.hidden), prefill_ld(d.inter));
  l.ld_f32 = std::max(prefill_ld(2 * d.inter), prefill_ld(d.hidden));
  l.w_elems = d.stage_weights ? std::max(2 * d.inter * prefill_ld(d.hidden), d.hidden * prefill_ld(d.inter)) : 0;
  l.n_tiles = (n_pairs + kMoeGemmPlanTile - 1) / kMoeGemmPlanTile;
  size_t o = 0;
  l.bf16 = o, o += align_up(size_t(l.rows * l.ld_bf16) * 2);
  l.f32 = o, o += align_up(size_t(l.rows * l.ld_f32) * 4);
  l.w = o, o += 2 * align_up(size_t(l.w_elems) * 2);
  l.tile_hist = o, o += align_up(size_t(l.n_tiles * d.n_experts) * 4);
  l.count = o, o += align_up(size_t(d.n_experts) * 4);
  l.seg_begin = o, o += align_up(size_t(d.n_experts) * 4);
  l.total_rows = o, o += align_up(4);
  l.row_token = o, o += align_up(size_t(l.routed_rows) * 4);
  l.pair_row = o, o += align_up(size_t(n_pairs) * 4);
  l.total = o;
  return l;
}

// One GEMM operand group: an expert's contiguous rows of the stacked weight as bf16 with whole
// 16-byte chunks per row, taken as it is or staged into the weight scratch.
struct WeightSlice {
  const uint16_t* data = nullptr;
  int64_t stride = 0;
};

// bf16 rows of whole 16-byte chunks from a 16-byte aligned base: every expert's slice starts
// 16-byte aligned too (row0 * cols * 2 bytes, cols % 8 == 0), so cuBLASLt reads it in place.
bool direct(const Matrix& w) { return w.format == WeightFormat::kBF16 && w.cols % kPrefillLdAlign == 0 && aligned(w.data, 16); }

Result<WeightSlice> weight_slice(const Matrix& w, int64_t row0, int64_t rows, uint16_t* scratch, cudaStream_t stream) {
  const int64_t k = w.cols;
  if (direct(w)) return WeightSlice{static_cast<const uint16_t*>(w.data) + row0 * k, k};
  if (!scratch) return internal_error("moe_experts_gemm: weights to stage and no weight scratch");
  ToBf16Params wp;
  wp.dst = scratch;
  wp.rows = rows, wp.cols = k, wp.src_stride = k, wp.dst_stride = prefill_ld(k);
  switch (w.format) {
    case WeightFormat::kF32: {
      const float* p = static_cast<const float*>(w.data) + row0 * k;
      wp.src = p, wp.src_type = ToBf16Src::kF32, wp.vec = aligned(p, 16) && k % 4 == 0;
      break;
    }
    case WeightFormat::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(w.data) + row0 * k;
      wp.src = p, wp.src_type = ToBf16Src::kBF16, wp.vec = aligned(p, 16) && k % 8 == 0;
      break;
    }
    case WeightFormat::kFp8Block: {
      // row0 is a multiple of block_rows (validate), so the slice's scales start at a scale row.
      const uint8_t* p = static_cast<const uint8_t*>(w.data) + row0 * k;
      wp.src = p, wp.src_type = ToBf16Src::kFp8Block;
      wp.scale_inv = w.scale_inv + (row0 / w.block_rows) * w.scale_cols();
      wp.block_rows = w.block_rows, wp.block_cols = w.block_cols, wp.scale_cols = w.scale_cols();
      wp.vec = aligned(p, 8) && k % 8 == 0 && w.block_cols % kToBf16Chunk == 0;
      break;
    }
    case WeightFormat::kNvfp4: {
      // The slice's scale_2 groups start at row0 (an expert boundary: one group per expert).
      if (w.scale_2_rows && row0 % w.scale_2_group_rows)
        return internal_error("moe_experts_gemm: slice at row {} splits an NVFP4 scale_2 group of {} rows", row0,
                              w.scale_2_group_rows);
      const uint8_t* p = static_cast<const uint8_t*>(w.data) + row0 * (k / 2);
      wp.src = p, wp.src_type = ToBf16Src::kNvfp4;
      wp.scale_fp8 = w.scale_fp8 + row0 * (k / 16), wp.scale_2 = w.scale_2;
      if (w.scale_2_rows)
        wp.scale_2_rows = w.scale_2_rows + row0 / w.scale_2_group_rows, wp.scale_2_group_rows = w.scale_2_group_rows;
      wp.vec = aligned(p, 4) && k % 8 == 0;
      break;
    }
  }
  PG_CUDA_TRY(launch_to_bf16(wp, stream));
  return WeightSlice{scratch, wp.dst_stride};
}

// An expert's block of pair rows.
struct Segment {
  int64_t expert = 0, row0 = 0, rows = 0;
};

// One chunk of <= dims.max_m tokens (a's pointers already offset to the chunk).
Status run_chunk(GemmContext& ctx, const MoeExpertsArgs& a, const MoeGemmWorkspace& ws, const Layout& l,
                 cudaStream_t stream) {
  const int64_t m = a.m, H = a.hidden, I = a.inter, E = a.n_experts, K = a.top_k, S = a.n_shared;
  const int64_t m_pad = round_rows(m), routed_base = S * m_pad, n_pairs = m * K;
  const int64_t ld_x = prefill_ld(H), ld_h = prefill_ld(I), ld_gu = prefill_ld(2 * I), ld_z = prefill_ld(H);
  uint8_t* base = static_cast<uint8_t*>(ws.data);
  uint16_t* stage_bf16 = reinterpret_cast<uint16_t*>(base + l.bf16);
  float* stage_f32 = reinterpret_cast<float*>(base + l.f32);
  uint16_t* w_scratch = l.w_elems ? reinterpret_cast<uint16_t*>(base + l.w) : nullptr;
  const size_t w_buf_elems = align_up(size_t(l.w_elems) * 2) / 2;  // second buffer's offset (elements)
  int32_t* count = reinterpret_cast<int32_t*>(base + l.count);
  int32_t* total_rows = reinterpret_cast<int32_t*>(base + l.total_rows);
  int32_t* row_token = reinterpret_cast<int32_t*>(base + l.row_token);
  int32_t* pair_row = reinterpret_cast<int32_t*>(base + l.pair_row);
  const bool routed = n_pairs > 0;

  // 1. Plan: pairs grouped by expert on the device.
  if (routed) {
    PG_CUDA_TRY(cudaMemsetAsync(row_token, 0xff, size_t(max_routed_rows(m, K, E)) * 4, stream));  // -1: padding
    MoeGemmPlanParams pp;
    pp.expert_idx = a.expert_idx;
    pp.tile_hist = reinterpret_cast<int32_t*>(base + l.tile_hist);
    pp.count = count;
    pp.seg_begin = reinterpret_cast<int32_t*>(base + l.seg_begin);
    pp.total_rows = total_rows;
    pp.row_token = row_token;
    pp.pair_row = pair_row;
    pp.n_pairs = int(n_pairs), pp.top_k = int(K), pp.n_experts = int(E), pp.routed_base = int(routed_base);
    pp.max_routed_rows = max_routed_rows(m, K, E);
    PG_CUDA_TRY(launch_moe_gemm_plan(pp, stream));
  }
  // 2. x rows -> bf16 pair rows (enqueued before the read-back so that it overlaps the wait).
  MoeGemmGatherParams gp;
  gp.x = a.x, gp.row_token = row_token, gp.total_rows = routed ? total_rows : nullptr;
  gp.xg = stage_bf16, gp.ld = ld_x;
  gp.max_rows = routed ? routed_base + max_routed_rows(m, K, E) : routed_base;
  gp.m = int(m), gp.m_pad = int(m_pad), gp.hidden = int(H), gp.routed_base = int(routed_base);
  gp.vec = aligned(a.x, 16) && H % 8 == 0;
  PG_CUDA_TRY(launch_moe_gemm_gather(gp, stream));

  // 3. The counts on the host (the one synchronization), and the segments derived from them
  //    exactly as the place kernel derived them.
  std::vector<Segment> segs;
  for (int64_t s = 0; s < S; ++s) segs.push_back({E + s, s * m_pad, m_pad});
  int64_t total = routed_base;
  if (routed) {
    std::vector<int32_t> host_count(size_t(E), 0);
    PG_CUDA_TRY(cudaMemcpyAsync(host_count.data(), count, size_t(E) * 4, cudaMemcpyDeviceToHost, stream));
    PG_CUDA_TRY(cudaStreamSynchronize(stream));
    for (int64_t e = 0; e < E; ++e) {
      const int64_t c = host_count[size_t(e)];
      if (c < 0 || c > n_pairs) return internal_error("moe_experts_gemm: expert {} counted {} of {} pairs", e, c, n_pairs);
      if (c == 0) continue;
      segs.push_back({e, total, round_rows(c)});
      total += round_rows(c);
    }
  }
  if (total > l.rows) return internal_error("moe_experts_gemm: {} pair rows exceed the workspace's {}", total, l.rows);

  // Weights to stage (f32, FP8, NVFP4, odd bf16) are dequantized on the context's staging stream
  // into buffer b = n_staged % 2, while the GEMM of the previous segment reads the other buffer:
  // staging of b waits for the GEMM that last read b (consumed[b]) and for this stream's work up
  // to the call (begin: the scratch may alias what earlier prefill ops used); a GEMM waits for its
  // buffer's staging (staged[b]). Every staging is waited for by this stream before the call ends.
  const GemmContext::StagingStream& st = ctx.staging();
  int64_t n_staged = 0;
  if (w_scratch) {
    PG_CUDA_TRY(cudaEventRecord(st.begin, stream));
    PG_CUDA_TRY(cudaStreamWaitEvent(st.stream, st.begin, 0));
  }
  // The weight slice of one segment's GEMM; *buf = the scratch buffer it was staged into, or -1.
  auto slice = [&](const Matrix& w, int64_t row0, int64_t rows, int* buf) -> Result<WeightSlice> {
    *buf = -1;
    if (direct(w)) return weight_slice(w, row0, rows, nullptr, stream);
    const int b = int(n_staged++ % 2);
    PG_CUDA_TRY(cudaStreamWaitEvent(st.stream, st.consumed[b], 0));
    PG_ASSIGN_OR_RETURN(const WeightSlice ws, weight_slice(w, row0, rows, w_scratch ? w_scratch + b * w_buf_elems : nullptr,
                                                           st.stream));
    PG_CUDA_TRY(cudaEventRecord(st.staged[b], st.stream));
    PG_CUDA_TRY(cudaStreamWaitEvent(stream, st.staged[b], 0));
    *buf = b;
    return ws;
  };
  auto consumed = [&](int buf) -> Status {
    if (buf >= 0) PG_CUDA_TRY(cudaEventRecord(st.consumed[buf], stream));
    return ok_status();
  };

  // 4. gate_up per segment: [rows, 2I] f32 = x_seg · gate_up_eᵀ.
  for (const Segment& sg : segs) {
    int buf = -1;
    PG_ASSIGN_OR_RETURN(const WeightSlice w, slice(*a.gate_up, sg.expert * 2 * I, 2 * I, &buf));
    GemmBf16Args g;
    g.x = stage_bf16 + sg.row0 * ld_x, g.x_stride = ld_x;
    g.w = w.data, g.w_stride = w.stride;
    g.y = stage_f32 + sg.row0 * ld_gu, g.y_stride = ld_gu;
    g.m = sg.rows, g.n = 2 * I, g.k = H;
    PG_TRY(gemm_bf16(ctx, g, stream));
    PG_TRY(consumed(buf));
  }
  // 5. h = silu(gate) * up -> bf16 (over the gathered x, which no GEMM reads any more).
  MoeGemmSiluParams sp;
  sp.gu = stage_f32, sp.h = stage_bf16, sp.rows = total, sp.ld_gu = ld_gu, sp.ld_h = ld_h, sp.inter = int(I);
  PG_CUDA_TRY(launch_moe_gemm_silu(sp, stream));
  // 6. down per segment: [rows, H] f32 = h_seg · down_eᵀ (over gate_up's outputs, consumed by 5).
  for (const Segment& sg : segs) {
    int buf = -1;
    PG_ASSIGN_OR_RETURN(const WeightSlice w, slice(*a.down, sg.expert * H, H, &buf));
    GemmBf16Args g;
    g.x = stage_bf16 + sg.row0 * ld_h, g.x_stride = ld_h;
    g.w = w.data, g.w_stride = w.stride;
    g.y = stage_f32 + sg.row0 * ld_z, g.y_stride = ld_z;
    g.m = sg.rows, g.n = H, g.k = I;
    PG_TRY(gemm_bf16(ctx, g, stream));
    PG_TRY(consumed(buf));
  }
  // 7. y (+)= the weighted sum in the contract's order.
  MoeGemmCombineParams cp;
  cp.z = stage_f32, cp.ld_z = ld_z;
  cp.expert_idx = a.expert_idx, cp.expert_weight = a.expert_weight, cp.pair_row = pair_row;
  cp.y = a.y, cp.y_stride = a.y_stride ? a.y_stride : H;
  cp.m = int(m), cp.m_pad = int(m_pad), cp.hidden = int(H), cp.top_k = int(K), cp.n_experts = int(E);
  cp.n_shared = int(S), cp.accumulate = a.accumulate;
  PG_CUDA_TRY(launch_moe_gemm_combine(cp, stream));
  return ok_status();
}

}  // namespace

MoeGemmDims moe_gemm_dims(const MoeExpertsArgs& a, int64_t max_m) {
  MoeGemmDims d;
  d.max_m = max_m, d.top_k = a.top_k, d.n_shared = a.n_shared, d.n_experts = a.n_experts;
  d.hidden = a.hidden, d.inter = a.inter;
  d.stage_weights = !a.gate_up || !a.down || !direct(*a.gate_up) || !direct(*a.down);
  return d;
}

size_t moe_experts_gemm_workspace_bytes(const MoeGemmDims& d) { return layout_of(d).total; }

Status moe_experts_gemm(GemmContext& ctx, const MoeExpertsArgs& a, const MoeGemmWorkspace& ws, cudaStream_t stream) {
  PG_TRY(validate(a));
  if (a.m == 0) return ok_status();
  if (a.n_experts > kMoeGemmMaxExperts || a.top_k > kMoeGemmMaxTopK || a.n_shared > kMoeGemmMaxShared)
    return unsupported("moe_experts_gemm: {} experts, top_k {}, {} shared: the path takes {}, {}, {}", a.n_experts,
                       a.top_k, a.n_shared, kMoeGemmMaxExperts, kMoeGemmMaxTopK, kMoeGemmMaxShared);
  if (a.hidden > INT32_MAX || a.inter > INT32_MAX)
    return unsupported("moe_experts_gemm: hidden {} / inter {} exceed the kernels' 32-bit indices", a.hidden, a.inter);
  if (!ws.data || !aligned(ws.data, kAlignBytes))
    return invalid_argument("moe_experts_gemm: workspace at {} (need device memory, 256-byte aligned)", ws.data);
  // Passes of as many tokens as the workspace holds (the layout grows with the tokens).
  const auto fits = [&](int64_t mm) {
    const Layout l = layout_of(moe_gemm_dims(a, mm));
    return l.total <= ws.bytes && l.rows <= INT32_MAX && mm * a.top_k <= INT32_MAX;
  };
  int64_t pass = a.m;
  if (!fits(pass)) {
    if (!fits(1))
      return invalid_argument("moe_experts_gemm: workspace of {} bytes; one token needs {}", ws.bytes,
                              moe_experts_gemm_workspace_bytes(moe_gemm_dims(a, 1)));
    int64_t lo = 1, hi = a.m;  // fits(lo), !fits(hi)
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
    pass = lo;
  }
  const Layout l = layout_of(moe_gemm_dims(a, pass));
  const int64_t ys = a.y_stride ? a.y_stride : a.hidden;
  for (int64_t t0 = 0; t0 < a.m; t0 += pass) {
    MoeExpertsArgs c = a;
    c.m = std::min(pass, a.m - t0);
    c.x = a.x + t0 * a.hidden;
    c.y = a.y + t0 * ys;
    if (a.top_k > 0) c.expert_idx = a.expert_idx + t0 * a.top_k, c.expert_weight = a.expert_weight + t0 * a.top_k;
    PG_TRY(run_chunk(ctx, c, ws, l, stream));
  }
  return ok_status();
}

}  // namespace pg::ops::cuda
