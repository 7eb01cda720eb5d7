// The large-M linear (prefill) on tensor cores through cuBLASLt: same contract as ops/linear.h
// (y = x · Wᵀ (+ y), f32 activations, weights in their stored format), computed as a bf16 x bf16
// GEMM with f32 accumulation and f32 output. The small-M GEMV kernels are ops::cuda::linear.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "ops/linear.h"

namespace pg::ops::cuda {

struct GemmBf16Args;  // below

// What gemm_linear needs besides its arguments: the cuBLASLt handle, the preallocated workspace,
// bf16 scratch for x and for expanded weights, and the per-shape algorithm cache. One per stream
// (the scratch and the workspace are reused by every call, ordered by the stream); not thread-safe.
// Created at load; never allocates device memory afterwards.
class GemmContext {
 public:
  // max_m: largest m; max_k, max_n: largest weight cols / rows it will see. Device memory:
  //   x scratch      max_m x round_up(max_k, 8) bf16,
  //   weight scratch max_expand_elems bf16 (-1: max_n x round_up(max_k, 8); 0: none, then only
  //                  bf16 weights whose layout cuBLASLt takes as it is are accepted),
  //   workspace      kGemmWorkspaceBytes.
  // Where one model's largest n and largest k belong to different weights, pass the largest
  // n x round_up(k, 8) of its f32 / FP8 weights as max_expand_elems.
  static Result<GemmContext> create(int64_t max_m, int64_t max_k, int64_t max_n, int64_t max_expand_elems = -1);

  GemmContext(GemmContext&&) noexcept;
  GemmContext& operator=(GemmContext&&) noexcept;
  ~GemmContext();

  int64_t max_m() const;
  int64_t max_k() const;
  int64_t max_n() const;
  // Device bytes this context holds (scratch + workspace).
  int64_t device_bytes() const;
  // Shapes whose algorithm is cached, and cublasLtMatmulAlgoGetHeuristic calls made so far (one
  // per new shape; tests check that a repeated shape makes none).
  int64_t cached_shapes() const;
  int64_t heuristic_calls() const;

  // A second stream and events for a caller that stages operands while a GEMM runs on its own
  // stream (moe_experts_gemm: the next expert's weights dequantized into one half of a
  // double-buffered scratch while the GEMM reads the other). Created with the context; only
  // staging kernels run on it (never cuBLASLt, whose workspace belongs to the caller's stream).
  struct StagingStream {
    cudaStream_t stream = nullptr;
    cudaEvent_t begin = nullptr;                    // the caller's stream up to the call
    cudaEvent_t staged[2] = {nullptr, nullptr};     // buffer b written
    cudaEvent_t consumed[2] = {nullptr, nullptr};   // buffer b's last reader (a GEMM) done
  };
  const StagingStream& staging() const;

  struct Impl;

 private:
  GemmContext();
  std::unique_ptr<Impl> impl_;
  friend Status gemm_prepare(GemmContext& ctx, const LinearArgs& a);
  friend Status gemm_linear(GemmContext& ctx, const LinearArgs& a, cudaStream_t stream);
  friend Status gemm_bf16(GemmContext& ctx, const GemmBf16Args& a, cudaStream_t stream);
};

// cuBLASLt workspace: 32 MiB, NVIDIA's recommendation for Hopper (cuBLAS docs,
// cublasSetWorkspace: "32 MiB for Hopper"); split-K and stream-K algorithms need it.
constexpr int64_t kGemmWorkspaceBytes = int64_t(32) << 20;

// y = x · Wᵀ (+ y when a.accumulate), LinearArgs with device pointers, any m (<= ctx.max_m()).
//   1. x [m, k] f32 (row stride x_stride) is rounded to bf16 (nearest even) into scratch;
//   2. bf16 weights are read as they are; f32 weights and DeepSeek FP8 block weights are first
//      expanded into the bf16 weight scratch (one kernel; FP8: value * scale_inv of its block in
//      f32, then rounded to bf16 -- so FP8 and f32 weights lose precision to bf16 here, unlike
//      ops::cuda::linear, which keeps the f32 product);
//   3. cuBLASLt: Yᵀ [n, m] = W [n, k] (as col-major k x n, transa = T) · Xᵀ (col-major k x m),
//      bf16 inputs, f32 accumulation (CUBLAS_COMPUTE_32F), f32 output with ldc = y_stride,
//      beta = accumulate ? 1 : 0 (beta 0 never reads y).
// Graph-capturable: no allocation, no synchronization. The algorithm of each new shape (m, n, k,
// leading dims, pointer alignments) is chosen by cublasLtMatmulAlgoGetHeuristic at its first use
// and cached; make that first use outside a capture (or call gemm_prepare first).
// A bf16 weight whose layout no cuBLASLt algorithm takes (odd k with odd pointers) is copied
// into the weight scratch with 16-byte rows first, where that scratch is large enough.
Status gemm_linear(GemmContext& ctx, const LinearArgs& a, cudaStream_t stream);

// Picks and caches the algorithm gemm_linear would use for these args, launching nothing (for
// warm-up before graph capture). Pointers are only inspected for their alignment.
Status gemm_prepare(GemmContext& ctx, const LinearArgs& a);

// A GEMM on operands the caller already staged as bf16 (the MoE and per-head prefill paths,
// ops/cuda/moe_experts_gemm.h, ops/cuda/head_linear_gemm.h), optionally strided-batched:
//   for b < batch:  y_b [m, n] (+)= x_b [m, k] · w_bᵀ     (w_b [n, k], f32 accumulation and output)
// as cuBLASLt Y_bᵀ = W_b (col-major k x n, transa = T) · X_bᵀ (col-major k x m), batch strides on
// all three layouts. Uses only the context's handle, workspace and algorithm cache (no scratch,
// so max_m / max_k / max_n do not apply). Graph-capturable like gemm_linear; the algorithm of each
// new shape (dims, leading dims, batch strides, pointer and batch-stride alignments) is chosen at
// its first use and cached (cached_shapes() counts these too). Rows with 16-byte multiples
// (x_stride, w_stride multiples of 8; y_stride a multiple of 4) and 16-byte aligned pointers
// always find an algorithm; other layouts may return Unsupported.
struct GemmBf16Args {
  const uint16_t* x = nullptr;  // [batch][m, k] bf16 at x[b * x_batch_stride + i * x_stride + j]
  const uint16_t* w = nullptr;  // [batch][n, k] bf16 at w[b * w_batch_stride + r * w_stride + j]
  float* y = nullptr;           // [batch][m, n] f32 at y[b * y_batch_stride + i * y_stride + r]
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t x_stride = 0, w_stride = 0, y_stride = 0;  // elements; 0 = dense (k, k, n)
  int64_t x_batch_stride = 0, w_batch_stride = 0, y_batch_stride = 0;  // elements (batch > 1)
  bool accumulate = false;  // y += (beta 1) instead of y = (beta 0: y is never read)
  float alpha = 1.0f;       // y (+)= alpha x (x · wᵀ)
};
Status gemm_bf16(GemmContext& ctx, const GemmBf16Args& a, cudaStream_t stream);

// y[i] = bf16(x[i]) (nearest even; NaN stays NaN), i < n; device pointers, any alignment.
Status round_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream);

}  // namespace pg::ops::cuda
