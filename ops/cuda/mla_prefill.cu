// The staging and softmax kernels of ops::cuda::mla_prefill (the GEMMs are cuBLASLt's):
// gather the sequence's cache rows as bf16 (and their c_kv part transposed, the second GEMM's
// weight layout), pack the scaled queries as bf16, and the causal softmax of each score row.
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>

#include "ops/cuda/common/bf16.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/mla_prefill_params.h"

namespace pg::ops::cuda {
namespace {

constexpr int kGatherRows = 32;  // positions per block: one 32-wide tile of vt per c_kv column
constexpr int kThreads = 256;

// One block: positions j0 .. j0 + 31. Rows staged in shared memory as bf16, then written as kv
// rows and as 32-wide segments of vt's rows.
__global__ void __launch_bounds__(kThreads) mla_gather_kernel(const __grid_constant__ MlaGatherParams p) {
  extern __shared__ uint16_t s_tile[];  // [kGatherRows][D]
  const int64_t j0 = int64_t(blockIdx.x) * kGatherRows;
  const int64_t D = p.D;
  for (int64_t i = threadIdx.x; i < kGatherRows * D; i += kThreads) {
    const int64_t jj = i / D, c = i % D, j = j0 + jj;
    uint16_t b = 0;  // bf16(0)
    if (j < p.ctx) {
      const int64_t blk = p.table[j / p.block_size], at = (blk * p.block_size + j % p.block_size) * D + c;
      b = p.pool16 ? p.pool16[at] : to_bf16_bits(p.pool[at]);  // a bf16 pool's value is its own rounding
    }
    s_tile[i] = b;
    if (j < p.C) p.kv[j * D + c] = b;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < int64_t(kGatherRows) * p.R; i += kThreads) {
    const int64_t r = i / kGatherRows, jj = i % kGatherRows, j = j0 + jj;
    if (j < p.C) p.vt[r * p.ld_vt + j] = s_tile[jj * D + r];
  }
}

__global__ void __launch_bounds__(kThreads) mla_pack_q_kernel(const __grid_constant__ MlaPackQParams p) {
  const int64_t D = p.R + p.P, n = p.rows * D;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
    const int64_t row = i / D, c = i % D;
    const int64_t t = p.t0 + row / p.n_heads, h = row % p.n_heads;
    const float v = c < p.R ? p.q_lat[t * p.q_lat_row_stride + h * p.q_lat_head_stride + c]
                            : p.q_pe[t * p.q_pe_row_stride + h * p.q_pe_head_stride + (c - p.R)];
    p.q[i] = to_bf16_bits(p.scale * v);
  }
}

// One block per score row: max, then the sum of exponentials, then the weights (two passes over
// the row after the max; it stays in L2).
__global__ void __launch_bounds__(kThreads) mla_softmax_kernel(const __grid_constant__ MlaSoftmaxParams p) {
  __shared__ float s_red[kThreads / kWarpSize];
  const int64_t row = blockIdx.x;
  const int64_t n = p.first_pos + row / p.n_heads + 1;  // positions this row attends to
  const float* s = p.s + row * p.ld;
  uint16_t* out = p.p + row * p.ld;
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) mx = fmaxf(mx, s[j]);
  mx = warp_max(mx);
  if (threadIdx.x % kWarpSize == 0) s_red[threadIdx.x / kWarpSize] = mx;
  __syncthreads();
  mx = -FLT_MAX;
  for (int w = 0; w < kThreads / kWarpSize; ++w) mx = fmaxf(mx, s_red[w]);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) sum += __expf(s[j] - mx);
  sum = block_sum<kThreads>(sum, s_red);
  const float inv = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < p.cols; j += kThreads) out[j] = to_bf16_bits(j < n ? __expf(s[j] - mx) * inv : 0.0f);
}

}  // namespace

cudaError_t launch_mla_gather(const MlaGatherParams& p, cudaStream_t stream) {
  const unsigned blocks = unsigned((p.C + kGatherRows - 1) / kGatherRows);
  const size_t smem = size_t(kGatherRows) * size_t(p.D) * sizeof(uint16_t);
  if (smem > 48 * 1024) {
    if (cudaError_t e = cudaFuncSetAttribute(mla_gather_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        e != cudaSuccess)
      return e;
  }
  mla_gather_kernel<<<blocks, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_mla_pack_q(const MlaPackQParams& p, cudaStream_t stream) {
  const int64_t n = p.rows * (p.R + p.P);
  const unsigned blocks = unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096));
  mla_pack_q_kernel<<<blocks, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_mla_softmax(const MlaSoftmaxParams& p, cudaStream_t stream) {
  mla_softmax_kernel<<<unsigned(p.rows), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
