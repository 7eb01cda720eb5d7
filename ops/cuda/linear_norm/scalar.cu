// linear_norm's scalar path (any K, any alignment: the shapes the vector path leaves, e.g. the
// tiny golden models): linear/scalar.cu's kernel (one warp per output row, W read by
// linear/weight_at.cuh) with the norm of linear_norm/norm.cuh before or after it.
#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/linear/weight_at.cuh"
#include "ops/cuda/linear_norm/norm.cuh"
#include "ops/cuda/linear_norm/params.h"

namespace pg::ops::cuda {
namespace {

template <LinearWeight F, LinearNormMode kMode>
__global__ void __launch_bounds__(kLinearThreads) linear_norm_scalar_kernel(const __grid_constant__ LinearNormParams pp) {
  constexpr bool kIn = kMode == LinearNormMode::kIn;
  const LinearParams& p = pp.lin;
  __shared__ float scratch[kLinearWarps][kLinearNormMaxRows];
  pdl_trigger();
  pdl_wait();  // x (and y, when accumulating) come from the kernels before
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kLinearWarps + warp;
  const int rows = int(p.m);
  // kIn: the rows' inverse RMS in shared memory, so that the row loop below needs no unrolling.
  __shared__ float row_inv[kLinearNormMaxRows];
  if constexpr (kIn) {
    float inv[kLinearNormMaxRows];
    rms_inv_rows<kLinearNormMaxRows, false>(p.x, p.x_stride, rows, p.k, pp.eps, pp.norm_vec4, inv, scratch);
    if (threadIdx.x == 0)
#pragma unroll
      for (int i = 0; i < kLinearNormMaxRows; ++i) row_inv[i] = inv[i];
    __syncthreads();
  }
  if (row < p.n) {  // uniform over the warp
    for (int i = 0; i < rows; ++i) {
      const float* x = p.x + i * p.x_stride;
      const float inv = kIn ? row_inv[i] : 1.0f;
      float acc = 0.0f;
      for (int64_t c = lane; c < p.k; c += kWarpSize) {
        float xv = ld_act(x + c);
        if constexpr (kIn) xv = __ldg(pp.in_norm + c) * (xv * inv);  // ops::cpu::rmsnorm's y_j
        acc = fmaf(weight_at<F>(p, row, c), xv, acc);
      }
      acc = warp_sum(acc);
      if (lane == 0) {
        float* yp = p.y + i * p.y_stride + row;
        *yp = p.accumulate ? *yp + acc : acc;
      }
    }
  }
  if constexpr (!kIn) out_norm_epilogue(pp, scratch);
}

template <LinearNormMode kMode>
cudaError_t launch_mode(LinearWeight f, const LinearNormParams& p, dim3 grid, cudaStream_t stream) {
  const dim3 block(kLinearThreads);
  switch (f) {
    case LinearWeight::kF32: return launch_pdl(linear_norm_scalar_kernel<LinearWeight::kF32, kMode>, grid, block, 0, stream, p);
    case LinearWeight::kBF16: return launch_pdl(linear_norm_scalar_kernel<LinearWeight::kBF16, kMode>, grid, block, 0, stream, p);
    case LinearWeight::kFp8Block:
      return launch_pdl(linear_norm_scalar_kernel<LinearWeight::kFp8Block, kMode>, grid, block, 0, stream, p);
    case LinearWeight::kNvfp4: return launch_pdl(linear_norm_scalar_kernel<LinearWeight::kNvfp4, kMode>, grid, block, 0, stream, p);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_linear_norm_scalar(LinearWeight f, LinearNormMode mode, const LinearNormParams& p,
                                      cudaStream_t stream) {
  const int64_t blocks = (p.lin.n + kLinearWarps - 1) / kLinearWarps;
  if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  const dim3 grid{unsigned(blocks)};
  const cudaError_t e = mode == LinearNormMode::kIn ? launch_mode<LinearNormMode::kIn>(f, p, grid, stream)
                                                    : launch_mode<LinearNormMode::kOut>(f, p, grid, stream);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
