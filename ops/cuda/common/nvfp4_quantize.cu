// nvfp4_amax and nvfp4_quantize (nvfp4_quantize.h): a thread per 16-value block.
#include "ops/cuda/common/nvfp4_quantize.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "ops/cuda/common/warp.cuh"

namespace pg::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlock = 16;               // values per block scale (kNvfp4GroupSize)
constexpr float kE2M1Max = 6.0f;         // formats/nvfp4.h's kNvfp4E2M1Max
constexpr float kE4M3Max = 448.0f;       // kNvfp4E4M3Max
constexpr float kE4M3Min = 1.0f / 512;   // kNvfp4E4M3Min

// The 16 values of block b (16 consecutive elements) as f32.
template <bool kBf16>
__device__ __forceinline__ void load_block(const void* src, int64_t b, float (&v)[kBlock]) {
  if constexpr (kBf16) {
    const uint4* p = static_cast<const uint4*>(src) + 2 * b;  // 32 bytes
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4 w = p[h];
      const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[8 * h + 2 * i] = __uint_as_float(u[i] << 16);
        v[8 * h + 2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
      }
    }
  } else {
    const float4* p = static_cast<const float4*>(src) + 4 * b;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 w = p[i];
      v[4 * i] = w.x, v[4 * i + 1] = w.y, v[4 * i + 2] = w.z, v[4 * i + 3] = w.w;
    }
  }
}

// Non-negative floats order as their bits: the grid's maximum by one atomicMax on the bits.
template <bool kBf16>
__global__ void __launch_bounds__(kThreads) amax_kernel(const void* src, int64_t blocks, unsigned* out) {
  float m = 0.0f;
  for (int64_t b = int64_t(blockIdx.x) * kThreads + threadIdx.x; b < blocks; b += int64_t(gridDim.x) * kThreads) {
    float v[kBlock];
    load_block<kBf16>(src, b, v);
#pragma unroll
    for (int j = 0; j < kBlock; ++j) m = fmaxf(m, fabsf(v[j]));
  }
  m = warp_max(m);
  if (threadIdx.x % kWarpSize == 0) atomicMax(out, __float_as_uint(m));
}

// quantize_row's arithmetic (formats/nvfp4.cpp) for one block, without the MSE search.
template <bool kBf16>
__global__ void __launch_bounds__(kThreads) quantize_kernel(const void* src, int64_t blocks, float scale_2,
                                                            uint8_t* packed, uint8_t* scale_fp8) {
  const int64_t b = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (b >= blocks) return;
  float v[kBlock];
  load_block<kBf16>(src, b, v);
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kBlock; ++j) amax = fmaxf(amax, fabsf(v[j]));
  float q = amax / (kE2M1Max * scale_2);
  if (q == 0.0f) q = 1.0f;
  q = fminf(fmaxf(q, kE4M3Min), kE4M3Max);
  const __nv_fp8_storage_t s = __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3);
  const float denom = __half2float(__half(__nv_cvt_fp8_to_halfraw(s, __NV_E4M3))) * scale_2;
  uint32_t w[2] = {0u, 0u};
#pragma unroll
  for (int j = 0; j < kBlock; ++j) w[j / 8] |= uint32_t(nvfp4_encode_rne(v[j] / denom)) << (4 * (j % 8));
  reinterpret_cast<uint2*>(packed)[b] = make_uint2(w[0], w[1]);
  scale_fp8[b] = uint8_t(s);
}

}  // namespace

cudaError_t nvfp4_amax(const void* src, bool src_bf16, int64_t n, float* amax, cudaStream_t stream) {
  if (n < 0 || n % kBlock) return cudaErrorInvalidValue;
  unsigned* d = nullptr;
  if (cudaError_t e = cudaMallocAsync(&d, sizeof(unsigned), stream); e != cudaSuccess) return e;
  cudaError_t e = cudaMemsetAsync(d, 0, sizeof(unsigned), stream);
  const int64_t blocks = n / kBlock;
  const unsigned grid = unsigned(std::min<int64_t>(1024, (blocks + kThreads - 1) / kThreads));
  if (e == cudaSuccess && grid > 0) {
    if (src_bf16) amax_kernel<true><<<grid, kThreads, 0, stream>>>(src, blocks, d);
    else amax_kernel<false><<<grid, kThreads, 0, stream>>>(src, blocks, d);
    e = cudaGetLastError();
  }
  unsigned bits = 0;
  if (e == cudaSuccess) e = cudaMemcpyAsync(&bits, d, sizeof(unsigned), cudaMemcpyDeviceToHost, stream);
  const cudaError_t f = cudaFreeAsync(d, stream);
  if (e == cudaSuccess) e = f;
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  std::memcpy(amax, &bits, sizeof(float));
  return e;
}

cudaError_t nvfp4_quantize(const void* src, bool src_bf16, int64_t rows, int64_t cols, float scale_2, uint8_t* packed,
                           uint8_t* scale_fp8, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || cols % kBlock || !(scale_2 > 0.0f)) return cudaErrorInvalidValue;
  const int64_t blocks = rows * (cols / kBlock);
  if (blocks == 0) return cudaSuccess;
  const int64_t grid = (blocks + kThreads - 1) / kThreads;
  if (grid > INT32_MAX) return cudaErrorInvalidValue;
  if (src_bf16) quantize_kernel<true><<<unsigned(grid), kThreads, 0, stream>>>(src, blocks, scale_2, packed, scale_fp8);
  else quantize_kernel<false><<<unsigned(grid), kThreads, 0, stream>>>(src, blocks, scale_2, packed, scale_fp8);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return cudaStreamSynchronize(stream);
}

}  // namespace pg::ops::cuda
