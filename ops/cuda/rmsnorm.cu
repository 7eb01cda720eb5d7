// rmsnorm and rmsnorm_residual on the GPU, one block per row; mirrors ops::cpu::rmsnorm and
// ops::cpu::rmsnorm_residual (same expression per element; only the order of the sum of
// squares differs, see tests/ops/rmsnorm_test.cpp for the tolerance this implies).
#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/config.h"
#include "ops/cuda/kernels.h"

namespace pg::ops::cuda {
namespace {

// Pass 1 reads (and with kResidual adds and stores) the row and sums squares; pass 2 re-reads
// the row each thread itself touched in pass 1 (so y aliasing x is safe) and writes y.
template <int kThreads, bool kResidual>
__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(const __grid_constant__ RmsNormParams p) {
  __shared__ float scratch[kThreads / kWarpSize];
  pdl_trigger();
  pdl_wait();  // x and residual come from the kernel before
  const int64_t row = blockIdx.x;
  const float* x = p.x + row * p.x_stride;
  float* r = kResidual ? p.residual + row * p.r_stride : nullptr;
  float* y = p.y + row * p.y_stride;
  // The row after the add: where pass 2 reads it from.
  const float* v = kResidual ? r : x;
  float ss = 0.0f;
  if (p.vec4) {
    for (int64_t j = threadIdx.x; j < p.n / 4; j += kThreads) {
      float4 t = *reinterpret_cast<const float4*>(x + 4 * j);
      if constexpr (kResidual) {
        const float4 q = *reinterpret_cast<const float4*>(r + 4 * j);
        t.x += q.x, t.y += q.y, t.z += q.z, t.w += q.w;  // residual + x, as the CPU's r[j] += x[j]
        *reinterpret_cast<float4*>(r + 4 * j) = t;
      }
      ss = fmaf(t.x, t.x, ss), ss = fmaf(t.y, t.y, ss), ss = fmaf(t.z, t.z, ss), ss = fmaf(t.w, t.w, ss);
    }
  } else {
    for (int64_t j = threadIdx.x; j < p.n; j += kThreads) {
      float t = x[j];
      if constexpr (kResidual) {
        t = r[j] + t;
        r[j] = t;
      }
      ss = fmaf(t, t, ss);
    }
  }
  const float ms = block_sum<kThreads>(ss, scratch) / float(p.n);
  const float inv = 1.0f / sqrtf(ms + p.eps);  // IEEE sqrt and division, as the CPU's
  if (p.vec4) {
    for (int64_t j = threadIdx.x; j < p.n / 4; j += kThreads) {
      const float4 t = *reinterpret_cast<const float4*>(v + 4 * j);
      const float4 w = __ldg(reinterpret_cast<const float4*>(p.weight) + j);
      *reinterpret_cast<float4*>(y + 4 * j) = make_float4(w.x * (t.x * inv), w.y * (t.y * inv), w.z * (t.z * inv), w.w * (t.w * inv));
    }
  } else {
    for (int64_t j = threadIdx.x; j < p.n; j += kThreads) y[j] = p.weight[j] * (v[j] * inv);
  }
}

}  // namespace

cudaError_t launch_rmsnorm(const RmsNormParams& p, int64_t m, bool residual, cudaStream_t stream) {
  if (m <= 0) return cudaSuccess;
  if (m > INT32_MAX) return cudaErrorInvalidConfiguration;
  const unsigned grid = unsigned(m);
  const bool small = rmsnorm_threads(p.n) == kRmsNormThreadsSmall;
  cudaError_t e;
  if (residual) {
    e = small ? launch_pdl(rmsnorm_kernel<kRmsNormThreadsSmall, true>, grid, kRmsNormThreadsSmall, 0, stream, p)
              : launch_pdl(rmsnorm_kernel<kRmsNormThreadsLarge, true>, grid, kRmsNormThreadsLarge, 0, stream, p);
  } else {
    e = small ? launch_pdl(rmsnorm_kernel<kRmsNormThreadsSmall, false>, grid, kRmsNormThreadsSmall, 0, stream, p)
              : launch_pdl(rmsnorm_kernel<kRmsNormThreadsLarge, false>, grid, kRmsNormThreadsLarge, 0, stream, p);
  }
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
