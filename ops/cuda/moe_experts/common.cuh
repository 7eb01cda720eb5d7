// Device helpers both MoE expert kernel files share (moe_experts/kernel.cu, nvfp4_kernel.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/moe_experts/config.h"
#include "ops/cuda/moe_experts/params.h"

namespace pg::ops::cuda {

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

// First index in [lo, hi) of the ascending a[] with a[i] >= v.
__device__ __forceinline__ int lower_bound(const int32_t* a, int lo, int hi, int v) {
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (a[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// The planned down kernels' block prologue: for every active expert a, its id and its pairs
// [s_lo[a], s_hi[a]) among this block's token tile [t0, t1) (the plan's segments, cut to the tile
// when the grid has several), into shared memory by the block's kMoeThreads threads.
__device__ __forceinline__ void moe_tile_segments(const MoeExpertsParams& p, int n_active, int t0, int t1,
                                                  int32_t* s_expert, int32_t* s_lo, int32_t* s_hi) {
  for (int a = threadIdx.x; a < n_active; a += kMoeThreads) {
    int lo = p.plan.seg_begin[a], hi = p.plan.seg_begin[a + 1];
    if (gridDim.y > 1) {  // this tile's tokens: flat pair indices [t0 * top_k, t1 * top_k)
      lo = lower_bound(p.plan.pair_flat, lo, hi, t0 * p.top_k);
      hi = lower_bound(p.plan.pair_flat, lo, hi, t1 * p.top_k);
    }
    s_expert[a] = p.plan.active_expert[a];
    s_lo[a] = lo;
    s_hi[a] = hi;
  }
}

}  // namespace pg::ops::cuda
