// The scalar linear kernel: any K, any alignment (the shapes the vector path leaves). One warp per
// output row, lanes strided over K, W dequantized per element exactly as ops::cpu::linear does
// (fp8 value x its block scale, NVFP4 (e2m1 x block scale) x scale_2, then the product with x).
#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/linear/params.h"
#include "ops/cuda/linear/weight_at.cuh"

namespace pg::ops::cuda {
namespace {

template <LinearWeight F>
__global__ void __launch_bounds__(kLinearThreads) linear_scalar_kernel(const __grid_constant__ LinearParams p) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kLinearWarps + warp;
  if (row >= p.n) return;
  for (int64_t i = 0; i < p.m; ++i) {
    const float* x = p.x + i * p.x_stride;
    float acc = 0.0f;
    for (int64_t c = lane; c < p.k; c += kWarpSize) acc = fmaf(weight_at<F>(p, row, c), ld_act(x + c), acc);
    acc = warp_sum(acc);
    if (lane == 0) {
      float* yp = p.y + i * p.y_stride + row;
      *yp = p.accumulate ? *yp + acc : acc;
    }
  }
}

}  // namespace

cudaError_t launch_linear_scalar(LinearWeight f, const LinearParams& p, cudaStream_t stream) {
  const int64_t blocks = (p.n + kLinearWarps - 1) / kLinearWarps;
  if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  const dim3 grid{unsigned(blocks)};
  switch (f) {
    case LinearWeight::kF32: linear_scalar_kernel<LinearWeight::kF32><<<grid, kLinearThreads, 0, stream>>>(p); break;
    case LinearWeight::kBF16: linear_scalar_kernel<LinearWeight::kBF16><<<grid, kLinearThreads, 0, stream>>>(p); break;
    case LinearWeight::kFp8Block:
      linear_scalar_kernel<LinearWeight::kFp8Block><<<grid, kLinearThreads, 0, stream>>>(p);
      break;
    case LinearWeight::kNvfp4: linear_scalar_kernel<LinearWeight::kNvfp4><<<grid, kLinearThreads, 0, stream>>>(p); break;
  }
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
