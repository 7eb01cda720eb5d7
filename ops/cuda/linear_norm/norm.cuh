// The row norms linear_norm's kernels share: the block-wide inverse RMS of up to kMaxRows rows
// (the in_norm prologue every block runs) and the out_norm epilogue the grid's last block runs.
// Same expressions as ops::cpu::rmsnorm; only the order of the sum of squares differs.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/linear_norm/params.h"

namespace pg::ops::cuda {

// kFromL2: rows other blocks of this grid wrote during the launch (the out_norm epilogue), read
// from L2 (ld.global.cg): never a line this SM's L1 kept from before they were written. Else
// activations of an earlier kernel, plain loads below pdl_wait (vec.cuh's ld_act).
template <bool kFromL2>
__device__ __forceinline__ float4 ld_row4(const float* p) {
  if constexpr (kFromL2) return __ldcg(reinterpret_cast<const float4*>(p));
  else return ld_act4(p);
}
template <bool kFromL2>
__device__ __forceinline__ float ld_row(const float* p) {
  if constexpr (kFromL2) return __ldcg(p);
  else return ld_act(p);
}

// inv[i] = 1 / sqrt(mean(v_i²) + eps) for rows i < rows (<= kMaxRows) of v (row stride
// `stride`, n elements), the CPU's expression with IEEE sqrt and division. The sum of squares in
// one fixed order: per thread an FMA chain over float4 (vec4) or elements threadIdx.x,
// + kLinearThreads, ...; a warp butterfly; then the warps in order. So every thread of every block
// gets the same bits (each block of an in_norm launch sees the same normalized x). The loads of
// all rows are issued together (one L2 round trip for m rows, not m). Blocks of kLinearThreads;
// every thread must call it (barriers); `scratch` is shared memory of [kLinearWarps][kLinearNormMaxRows].
template <int kMaxRows, bool kFromL2>
__device__ __forceinline__ void rms_inv_rows(const float* v, int64_t stride, int rows, int64_t n, float eps, bool vec4,
                                             float (&inv)[kMaxRows], float (*scratch)[kLinearNormMaxRows]) {
  static_assert(kMaxRows <= kLinearNormMaxRows, "scratch holds kLinearNormMaxRows rows");
  float ss[kMaxRows];
#pragma unroll
  for (int i = 0; i < kMaxRows; ++i) ss[i] = 0.0f;
  if (vec4) {
    for (int64_t j = threadIdx.x; j < n / 4; j += kLinearThreads)
#pragma unroll
      for (int i = 0; i < kMaxRows; ++i)
        if (i < rows) {
          const float4 t = ld_row4<kFromL2>(v + i * stride + 4 * j);
          ss[i] = fmaf(t.x, t.x, ss[i]), ss[i] = fmaf(t.y, t.y, ss[i]);
          ss[i] = fmaf(t.z, t.z, ss[i]), ss[i] = fmaf(t.w, t.w, ss[i]);
        }
  } else {
    for (int64_t j = threadIdx.x; j < n; j += kLinearThreads)
#pragma unroll
      for (int i = 0; i < kMaxRows; ++i)
        if (i < rows) {
          const float t = ld_row<kFromL2>(v + i * stride + j);
          ss[i] = fmaf(t, t, ss[i]);
        }
  }
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int i = 0; i < kMaxRows; ++i) ss[i] = warp_sum(ss[i]);
  if (lane == 0)
#pragma unroll
    for (int i = 0; i < kMaxRows; ++i) scratch[warp][i] = ss[i];
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kMaxRows; ++i) {
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < kLinearWarps; ++w) t += scratch[w][i];
    inv[i] = 1.0f / sqrtf(t / float(n) + eps);
  }
  __syncthreads();  // scratch may be reused
}

// out_norm: once every block has stored its part of y, the grid's last block normalizes the m
// finished rows of y into y_normed = out_norm * (y * inv) (threadFenceReduction: each block
// publishes its stores, then counts; the last one resets the counter for the next launch or graph
// replay). Every thread of every block must call it, after its stores to y.
__device__ __forceinline__ void out_norm_epilogue(const LinearNormParams& p,
                                                  float (*scratch)[kLinearNormMaxRows]) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(p.counter, 1u) == gridDim.x * gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (threadIdx.x == 0) atomicExch(p.counter, 0u);  // every block has counted
  const float* y = p.lin.y;
  const int64_t ys = p.lin.y_stride, zs = p.y_normed_stride, n = p.lin.n;
  const int rows = int(p.lin.m);
  float inv[kLinearNormMaxRows];
  rms_inv_rows<kLinearNormMaxRows, true>(y, ys, rows, n, p.eps, p.norm_vec4, inv, scratch);
  if (p.norm_vec4) {
    for (int64_t j = threadIdx.x; j < n / 4; j += kLinearThreads) {
      const float4 w = ld_f4(p.out_norm + 4 * j);
#pragma unroll
      for (int i = 0; i < kLinearNormMaxRows; ++i)
        if (i < rows) {
          const float4 t = ld_row4<true>(y + i * ys + 4 * j);
          *reinterpret_cast<float4*>(p.y_normed + i * zs + 4 * j) =
              make_float4(w.x * (t.x * inv[i]), w.y * (t.y * inv[i]), w.z * (t.z * inv[i]), w.w * (t.w * inv[i]));
        }
    }
  } else {
    for (int64_t j = threadIdx.x; j < n; j += kLinearThreads) {
      const float w = __ldg(p.out_norm + j);
#pragma unroll
      for (int i = 0; i < kLinearNormMaxRows; ++i)
        if (i < rows) p.y_normed[i * zs + j] = w * (ld_row<true>(y + i * ys + j) * inv[i]);
    }
  }
}

}  // namespace pg::ops::cuda
