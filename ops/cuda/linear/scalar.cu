// The scalar linear kernel: any K, any alignment (the shapes the vector path leaves). One warp per
// output row, lanes strided over K, W dequantized per element exactly as ops::cpu::linear does
// (fp8 value x its block scale, NVFP4 (e2m1 x block scale) x scale_2, then the product with x).
#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/linear/params.h"

namespace pg::ops::cuda {
namespace {

template <LinearWeight F>
__device__ __forceinline__ float weight_at(const LinearParams& p, int64_t row, int64_t c) {
  if constexpr (F == LinearWeight::kF32) {
    return __ldg(static_cast<const float*>(p.w) + row * p.k + c);
  } else if constexpr (F == LinearWeight::kBF16) {
    return __uint_as_float(uint32_t(__ldg(static_cast<const unsigned short*>(p.w) + row * p.k + c)) << 16);
  } else if constexpr (F == LinearWeight::kFp8Block) {
    const uint8_t v = static_cast<const uint8_t*>(p.w)[row * p.k + c];
    return fp8_e4m3_to_f32(v) * __ldg(p.scale_inv + (row / p.block_rows) * p.scale_cols + c / p.block_cols);
  } else {  // NVFP4: (e2m1 * block scale) * scale_2, as ops::matrix_row_to_f32
    const uint8_t b = __ldg(static_cast<const uint8_t*>(p.w) + row * (p.k / 2) + c / 2);
    const float s = fp8_e4m3_to_f32(__ldg(p.scale_fp8 + row * (p.k / kNvfp4Block) + c / kNvfp4Block));
    const float s2 = p.scale_2_rows ? __ldg(p.scale_2_rows + row / p.scale_2_group_rows) : p.scale_2;
    return (e2m1_to_f32(c % 2 ? b >> 4 : b & 0xfu) * s) * s2;
  }
}

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
