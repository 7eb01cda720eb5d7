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

// The same arithmetic with a thread's whole share of the row in registers (vec4 rows of at most
// kPerThread float4 a thread: every hidden size of the family): the row's loads are issued
// together (one round trip; with the residual, the loop above issues a thread's next loads only
// after its stores, which may alias them: V3's rows of 7 float4 a thread took 7 round trips) and
// pass 2 reads the registers, not the row (y may alias x). Each thread sums its squares in the
// loop's order: the same bits. (The weight's loads are written before pdl_wait, but ptxas places
// them after it, with the row's, even as asm volatile.)
template <int kThreads, bool kResidual, int kPerThread>
__global__ void __launch_bounds__(kThreads) rmsnorm_regs_kernel(const __grid_constant__ RmsNormParams p) {
  __shared__ float scratch[kThreads / kWarpSize];
  pg_tl_mark(TimelineKernel::kRmsnorm, 0);
  pdl_trigger();
  const int n4 = int(p.n / 4);
  float4 w[kPerThread], t[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int j = int(threadIdx.x) + i * kThreads;
    if (j < n4) w[i] = __ldg(reinterpret_cast<const float4*>(p.weight) + j);
  }
  pdl_wait();  // x and residual come from the kernel before
  pg_tl_mark(TimelineKernel::kRmsnorm, 1);
  const int64_t row = blockIdx.x;
  const float4* x = reinterpret_cast<const float4*>(p.x + row * p.x_stride);
  float4* r = kResidual ? reinterpret_cast<float4*>(p.residual + row * p.r_stride) : nullptr;
  float4* y = reinterpret_cast<float4*>(p.y + row * p.y_stride);
  float4 q[kResidual ? kPerThread : 1];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int j = int(threadIdx.x) + i * kThreads;
    if (j < n4) {
      t[i] = x[j];
      if constexpr (kResidual) q[i] = r[j];
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int j = int(threadIdx.x) + i * kThreads;
    if (j < n4) {
      if constexpr (kResidual) {
        t[i].x += q[i].x, t[i].y += q[i].y, t[i].z += q[i].z, t[i].w += q[i].w;  // residual + x
        r[j] = t[i];
      }
      ss = fmaf(t[i].x, t[i].x, ss), ss = fmaf(t[i].y, t[i].y, ss), ss = fmaf(t[i].z, t[i].z, ss), ss = fmaf(t[i].w, t[i].w, ss);
    }
  }
  const float ms = block_sum<kThreads>(ss, scratch) / float(p.n);
  const float inv = 1.0f / sqrtf(ms + p.eps);  // IEEE sqrt and division, as the CPU's
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int j = int(threadIdx.x) + i * kThreads;
    if (j < n4)
      y[j] = make_float4(w[i].x * (t[i].x * inv), w[i].y * (t[i].y * inv), w[i].z * (t[i].z * inv), w[i].w * (t[i].w * inv));
  }
  pg_tl_mark(TimelineKernel::kRmsnorm, 2);
}

template <int kThreads, bool kResidual>
cudaError_t launch_rows(const RmsNormParams& p, unsigned grid, cudaStream_t stream) {
  if (p.vec4 && p.n / 4 <= int64_t(kRmsNormRegsPerThread) * kThreads)
    return launch_pdl(rmsnorm_regs_kernel<kThreads, kResidual, kRmsNormRegsPerThread>, grid, kThreads, 0, stream, p);
  return launch_pdl(rmsnorm_kernel<kThreads, kResidual>, grid, kThreads, 0, stream, p);
}

}  // namespace

cudaError_t launch_rmsnorm(const RmsNormParams& p, int64_t m, bool residual, cudaStream_t stream) {
  if (m <= 0) return cudaSuccess;
  if (m > INT32_MAX) return cudaErrorInvalidConfiguration;
  const unsigned grid = unsigned(m);
  const bool small = rmsnorm_threads(p.n) == kRmsNormThreadsSmall;
  cudaError_t e;
  if (residual) {
    e = small ? launch_rows<kRmsNormThreadsSmall, true>(p, grid, stream) : launch_rows<kRmsNormThreadsLarge, true>(p, grid, stream);
  } else {
    e = small ? launch_rows<kRmsNormThreadsSmall, false>(p, grid, stream) : launch_rows<kRmsNormThreadsLarge, false>(p, grid, stream);
  }
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
