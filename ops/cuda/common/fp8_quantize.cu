// fp8_quantize_blocks (fp8_quantize.h): one block of threads per 128 x 128 block of the matrix.
#include "ops/cuda/common/fp8_quantize.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "ops/cuda/common/warp.cuh"

namespace pg::ops::cuda {
namespace {

constexpr int kThreads = 256;

template <bool kBf16>
__device__ __forceinline__ float load_elem(const void* src, int64_t i) {
  if constexpr (kBf16) return __bfloat162float(static_cast<const __nv_bfloat16*>(src)[i]);
  else return static_cast<const float*>(src)[i];
}

// Grid: x = column blocks, y = row blocks. Two passes over the block's elements: the maximum of
// |v|, then the codes; a row of the block is 128 consecutive elements, so a warp's loads are whole
// 256- or 512-byte runs.
template <bool kBf16>
__global__ void __launch_bounds__(kThreads) fp8_quantize_kernel(const void* src, int64_t rows, int64_t cols,
                                                                uint8_t* codes, float* scale_inv) {
  __shared__ float s_max[kThreads / kWarpSize];
  const int64_t r0 = int64_t(blockIdx.y) * kFp8QuantBlock, c0 = int64_t(blockIdx.x) * kFp8QuantBlock;
  const int nr = int(min(kFp8QuantBlock, rows - r0)), nc = int(min(kFp8QuantBlock, cols - c0));
  float mx = 0.0f;
  for (int i = int(threadIdx.x); i < nr * int(kFp8QuantBlock); i += kThreads) {
    const int r = i / int(kFp8QuantBlock), c = i % int(kFp8QuantBlock);
    if (c < nc) mx = fmaxf(mx, fabsf(load_elem<kBf16>(src, (r0 + r) * cols + c0 + c)));
  }
  mx = warp_max(mx);
  if (threadIdx.x % kWarpSize == 0) s_max[threadIdx.x / kWarpSize] = mx;
  __syncthreads();
  mx = 0.0f;
  for (int w = 0; w < kThreads / kWarpSize; ++w) mx = fmaxf(mx, s_max[w]);
  const float s = mx > 0.0f ? mx / 448.0f : 1.0f;
  if (threadIdx.x == 0) scale_inv[int64_t(blockIdx.y) * gridDim.x + blockIdx.x] = s;
  for (int i = int(threadIdx.x); i < nr * int(kFp8QuantBlock); i += kThreads) {
    const int r = i / int(kFp8QuantBlock), c = i % int(kFp8QuantBlock);
    if (c < nc) {
      const int64_t at = (r0 + r) * cols + c0 + c;
      codes[at] = uint8_t(__nv_cvt_float_to_fp8(load_elem<kBf16>(src, at) / s, __NV_SATFINITE, __NV_E4M3));
    }
  }
}

}  // namespace

cudaError_t fp8_quantize_blocks(const void* src, bool src_bf16, int64_t rows, int64_t cols, uint8_t* codes,
                                float* scale_inv, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int64_t bx = (cols + kFp8QuantBlock - 1) / kFp8QuantBlock, by = (rows + kFp8QuantBlock - 1) / kFp8QuantBlock;
  if (bx > INT32_MAX || by > 65535) return cudaErrorInvalidValue;
  const dim3 grid{unsigned(bx), unsigned(by)};
  if (src_bf16) fp8_quantize_kernel<true><<<grid, kThreads, 0, stream>>>(src, rows, cols, codes, scale_inv);
  else fp8_quantize_kernel<false><<<grid, kThreads, 0, stream>>>(src, rows, cols, codes, scale_inv);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return cudaStreamSynchronize(stream);
}

}  // namespace pg::ops::cuda
