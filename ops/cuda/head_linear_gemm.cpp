// ops::cuda::head_linear_gemm: stages W (when needed) and x as bf16 in the scratch, then one
// strided-batched cuBLASLt GEMM over the heads per pass of tokens. Host C++ (no nvcc): the staging
// kernels are behind prefill_gemm_params.h and gemm/convert.h.
#include "ops/cuda/head_linear_gemm.h"

#include <algorithm>

#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/gemm/convert.h"
#include "ops/cuda/mla_ops.h"
#include "ops/cuda/prefill_gemm_params.h"

namespace pg::ops::cuda {
namespace {

constexpr size_t kAlignBytes = 256;
size_t align_up(size_t b) { return (b + kAlignBytes - 1) / kAlignBytes * kAlignBytes; }
bool aligned(const void* p, uintptr_t bytes) { return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0; }

// W is used as it is when bf16 rows are whole 16-byte chunks and 16-byte aligned; f32 and FP8 are
// staged as bf16.
bool stage_weights(HeadWeight f, int64_t k, const void* w) {
  return f != HeadWeight::kBF16 || k % kPrefillLdAlign != 0 || !aligned(w, 16);
}
size_t weight_bytes(int64_t n_heads, int64_t n, int64_t k, HeadWeight f, const void* w) {
  return stage_weights(f, k, w) ? align_up(size_t(n_heads * n * prefill_ld(k)) * 2) : 0;
}
size_t x_bytes_per_token(int64_t n_heads, int64_t k) { return size_t(n_heads * prefill_ld(k)) * 2; }

}  // namespace

size_t head_linear_gemm_scratch_bytes(int64_t m, int64_t n_heads, int64_t n, int64_t k, HeadWeight w_format,
                                      const void* w) {
  return weight_bytes(n_heads, n, k, w_format, w) + align_up(size_t(m) * x_bytes_per_token(n_heads, k));
}

Status head_linear_gemm(GemmContext& ctx, const HeadLinearArgs& a, void* scratch, size_t scratch_bytes,
                        cudaStream_t stream) {
  PG_TRY(validate(a));
  if (a.m == 0) return ok_status();
  const int64_t ldk = prefill_ld(a.k);
  const size_t w_part = weight_bytes(a.n_heads, a.n, a.k, a.w_format, a.w);
  const size_t per_token = x_bytes_per_token(a.n_heads, a.k);
  if (!scratch || !aligned(scratch, kAlignBytes) || scratch_bytes < w_part + per_token)
    return invalid_argument("head_linear_gemm: scratch of {} bytes at {}; need >= {} bytes, 256-byte aligned",
                            scratch_bytes, scratch, w_part + align_up(per_token));
  const int64_t pass_m = std::min<int64_t>(a.m, int64_t((scratch_bytes - w_part) / per_token));
  uint8_t* base = static_cast<uint8_t*>(scratch);
  uint16_t* xs = reinterpret_cast<uint16_t*>(base + w_part);

  // W [n_heads, n, k] -> bf16 [n_heads * n, ldk] (one launch for every head).
  const uint16_t* w = static_cast<const uint16_t*>(a.w);
  int64_t w_stride = a.k;
  if (w_part) {
    ToBf16Params wp;
    wp.src = a.w, wp.dst = reinterpret_cast<uint16_t*>(base);
    wp.rows = a.n_heads * a.n, wp.cols = a.k, wp.src_stride = a.k, wp.dst_stride = ldk;
    if (a.w_format == HeadWeight::kF32) {
      wp.src_type = ToBf16Src::kF32, wp.vec = aligned(a.w, 16) && a.k % 4 == 0;
    } else if (a.w_format == HeadWeight::kFp8) {  // a block of one row and scale_group columns per scale
      wp.src_type = ToBf16Src::kFp8Block, wp.scale_inv = a.w_scale;
      wp.block_rows = 1, wp.block_cols = a.scale_group, wp.scale_cols = (a.k + a.scale_group - 1) / a.scale_group;
      wp.vec = aligned(a.w, 8) && a.k % 8 == 0;
    } else {
      wp.src_type = ToBf16Src::kBF16, wp.vec = aligned(a.w, 16) && a.k % 8 == 0;
    }
    PG_CUDA_TRY(launch_to_bf16(wp, stream));
    w = wp.dst, w_stride = ldk;
  }

  for (int64_t t0 = 0; t0 < a.m; t0 += pass_m) {
    const int64_t mc = std::min(pass_m, a.m - t0);
    HeadStageParams sp;
    sp.x = a.x + t0 * a.x_row_stride, sp.xs = xs;
    sp.x_row_stride = a.x_row_stride, sp.x_head_stride = a.x_head_stride, sp.ld = ldk;
    sp.m = mc, sp.n_heads = a.n_heads, sp.k = a.k;
    sp.vec = aligned(a.x, 16) && a.x_row_stride % 4 == 0 && a.x_head_stride % 4 == 0;
    PG_CUDA_TRY(launch_head_stage(sp, stream));

    // Per head h: Y_h [mc, n] (row stride y_row_stride) = X_h [mc, k] (row stride n_heads * ldk) · W_hᵀ.
    GemmBf16Args g;
    g.x = xs, g.x_stride = a.n_heads * ldk, g.x_batch_stride = ldk;
    g.w = w, g.w_stride = w_stride, g.w_batch_stride = a.n * w_stride;
    g.y = a.y + t0 * a.y_row_stride;
    // One token (or one head) leaves that stride free in the contract; cuBLASLt wants ld >= n.
    g.y_stride = mc == 1 ? std::max(a.y_row_stride, a.n) : a.y_row_stride;
    g.y_batch_stride = a.n_heads == 1 ? 0 : a.y_head_stride;
    g.m = mc, g.n = a.n, g.k = a.k, g.batch = a.n_heads, g.alpha = a.y_scale;
    const Status st = gemm_bf16(ctx, g, stream);
    if (st.code() == StatusCode::kUnsupported) {  // no cuBLASLt algorithm for this layout
      HeadLinearArgs c = a;
      c.m = mc, c.x = a.x + t0 * a.x_row_stride, c.y = a.y + t0 * a.y_row_stride;
      PG_TRY(head_linear(c, stream));
      continue;
    }
    PG_TRY(st);
  }
  return ok_status();
}

}  // namespace pg::ops::cuda
