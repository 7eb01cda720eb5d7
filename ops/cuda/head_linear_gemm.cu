// head_linear_gemm's staging kernel: the per-head inputs x[t, h, :] (any row / head strides, f32)
// as one dense bf16 matrix [m, n_heads, ld], rounded to nearest even as core/dtype.h's f32_to_bf16.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>

#include "ops/cuda/common/bf16.cuh"
#include "ops/cuda/prefill_gemm_params.h"

namespace pg::ops::cuda {
namespace {

constexpr int kChunk = 8;  // bf16 elements per 16-byte store
constexpr int kHeadStageThreads = 128;
constexpr int64_t kMaxGridY = 65535;


// grid (ceil(ld / 8 / threads), min(m * n_heads, 65535)): thread = one 8-column chunk of a (t, h) row.
__global__ void __launch_bounds__(kHeadStageThreads) head_stage_kernel(const __grid_constant__ HeadStageParams p) {
  const int64_t c0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kChunk;
  if (c0 >= p.ld) return;
  const int64_t rows = p.m * p.n_heads;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t t = r / p.n_heads, h = r % p.n_heads;
    const float* src = p.x + t * p.x_row_stride + h * p.x_head_stride + c0;
    uint32_t w[4] = {0, 0, 0, 0};  // columns >= k are zero padding
    if (p.vec && c0 + kChunk <= p.k) {
      const float4 a = __ldg(reinterpret_cast<const float4*>(src)), b = __ldg(reinterpret_cast<const float4*>(src + 4));
      w[0] = pack_bf16x2(a.x, a.y), w[1] = pack_bf16x2(a.z, a.w);
      w[2] = pack_bf16x2(b.x, b.y), w[3] = pack_bf16x2(b.z, b.w);
    } else {
#pragma unroll
      for (int j = 0; j < kChunk; ++j)
        if (c0 + j < p.k) w[j / 2] |= uint32_t(to_bf16_bits(__ldg(src + j))) << (16 * (j % 2));
    }
    *reinterpret_cast<uint4*>(p.xs + r * p.ld + c0) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

}  // namespace

cudaError_t launch_head_stage(const HeadStageParams& p, cudaStream_t stream) {
  const int64_t rows = p.m * p.n_heads;
  if (rows <= 0 || p.ld <= 0) return cudaSuccess;
  const int64_t chunks = (p.ld + kChunk - 1) / kChunk;
  // Short rows (the tiny models' k) take a block of just enough whole warps.
  const int64_t threads = std::min<int64_t>(kHeadStageThreads, (chunks + 31) / 32 * 32);
  const dim3 grid(unsigned((chunks + threads - 1) / threads), unsigned(std::min(rows, kMaxGridY)));
  head_stage_kernel<<<grid, unsigned(threads), 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
