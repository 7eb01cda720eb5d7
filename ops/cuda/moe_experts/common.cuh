// Device helpers both MoE expert kernel files share (moe_experts/kernel.cu, nvfp4_kernel.cu): the
// direct multi path's routing as every warp derives it, the planned path's tile segments.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/common/cp_async.cuh"
#include "ops/cuda/common/warp.cuh"
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

// Routed pair i's expert id, -1 past the pairs or outside [0, n_experts) (dropped, as the plan
// drops it). A plain load: the routing kernel finished before gate_up began (an ordinary launch),
// so down (PDL) may read it before its pdl_wait.
__device__ __forceinline__ int routed_id(const MoeExpertsParams& p, int i) {
  if (i >= p.m * p.top_k) return -1;
  const int e = p.expert_idx[i];
  return e >= 0 && e < p.n_experts ? e : -1;
}

// The step's routing as every warp of the direct multi path derives it, with no plan kernel, no
// shared memory and no barrier: lane l holds pairs l and l + 32 (kMoeDirectMaxRouted), and bit i
// of `first` marks pair i when its expert appears at no lower flat index (the distinct experts, in
// order of first appearance).
struct WarpRouting {
  int e_lo = -1, e_hi = -1;
  uint64_t first = 0;
};

// Every lane must execute every *_sync intrinsic here (the full mask): the match is taken before
// the e >= 0 test, never inside `e >= 0 && ...`, whose short circuit skipped it on the lanes
// without a pair (lanes >= m * top_k, dropped ids). That divergent match.sync is undefined (by
// the PTX spec the matching lanes wait for lanes that wait at the ballot) and it hung or faulted
// on the H200 (2026-12-01): the lanes of a warp saw different `first` masks, so a lane could take
// a routed slot past its own distinct count, nth_set_bit gave -1 and slot_expert expert -1
// (weight rows before the stack, x rows and h rows past m).
__device__ __forceinline__ WarpRouting warp_routing(const MoeExpertsParams& p) {
  const int lane = threadIdx.x % kWarpSize;
  const unsigned below = (1u << lane) - 1u;
  WarpRouting w;
  w.e_lo = routed_id(p, lane);
  const unsigned peers_lo = __match_any_sync(kFullMask, w.e_lo);  // every lane, -1 too
  const bool first_lo = w.e_lo >= 0 && (peers_lo & below) == 0;
  bool first_hi = false;
  if (p.m * p.top_k > kWarpSize) {  // warp-uniform
    w.e_hi = routed_id(p, kWarpSize + lane);
    const unsigned peers_hi = __match_any_sync(kFullMask, w.e_hi);  // every lane, -1 too
    first_hi = w.e_hi >= 0 && (peers_hi & below) == 0;
    for (int s = 0; s < kWarpSize; ++s)  // and not among pairs 0..31
      if (__shfl_sync(kFullMask, w.e_lo, s) == w.e_hi) first_hi = false;
  }
  w.first = uint64_t(__ballot_sync(kFullMask, first_lo)) | uint64_t(__ballot_sync(kFullMask, first_hi)) << 32;
  return w;
}

// Index of the n-th (from 0) set bit of v; v has more than n.
__device__ __forceinline__ int nth_set_bit(uint64_t v, int n) {
  for (int i = 0; i < n; ++i) v &= v - 1;
  return __ffsll(static_cast<long long>(v)) - 1;
}

// The expert of the routing's distinct slot `slot` (< popc(first)); warp-uniform (a shuffle).
__device__ __forceinline__ int slot_expert_id(const WarpRouting& w, int slot) {
  const int j = nth_set_bit(w.first, slot);
  return __shfl_sync(kFullMask, j < kWarpSize ? w.e_lo : w.e_hi, j % kWarpSize);
}
// The same and the mask of its pairs.
__device__ __forceinline__ int slot_expert(const WarpRouting& w, int slot, uint64_t& pairs) {
  const int e = slot_expert_id(w, slot);
  pairs = uint64_t(__ballot_sync(kFullMask, w.e_lo == e)) | uint64_t(__ballot_sync(kFullMask, w.e_hi == e)) << 32;
  return e;
}

// The direct multi down kernels' summing order: s_order[t * top_k + j] is token t's j-th routed
// pair in the contract's order (by (expert id, slot); dropped ids first, as -1). Threads below
// m * top_k write one entry each; the caller's barrier publishes them.
__device__ __forceinline__ void moe_token_order(const MoeExpertsParams& p, int32_t* s_order) {
  const int n_routed = p.m * p.top_k;
  if (int(threadIdx.x) < n_routed) {
    const int i = threadIdx.x, k0 = i / p.top_k * p.top_k, e = routed_id(p, i);
    int rank = 0;
    for (int k = 0; k < p.top_k; ++k) {
      const int f = routed_id(p, k0 + k);
      rank += f < e || (f == e && k0 + k < i);
    }
    s_order[k0 + rank] = e >= 0 ? i : -1;
  }
}

// The direct multi down kernels' sums (nvfp4_kernel.cu, fp8_kernel.cu): y rows row0 .. row0 + kR - 1
// of every token from s_part[K slice * n_h + h row][output row], a token's terms in the m = 1
// kernels' order (a pair's K slices in slice order, its routed pairs by s_order, then the shared
// experts), so its output has the bits it has alone. After the barrier that publishes s_part and
// s_order.
template <int kR>
__device__ __forceinline__ void moe_down_multi_sum(const MoeExpertsParams& p, const float (*s_part)[kR],
                                                   const int32_t* s_order, int k_split, int n_routed, int n_h,
                                                   int64_t row0) {
  for (int idx = threadIdx.x; idx < p.m * kR; idx += blockDim.x) {
    const int tok = idx / kR, r = idx % kR;
    const int64_t row = row0 + r;
    if (row >= p.hidden) continue;
    auto term = [&](int hr) {  // a pair's K slices in slice order, as the m = 1 kernel adds them
      float d = s_part[hr][r];
      for (int kp = 1; kp < k_split; ++kp) d += s_part[kp * n_h + hr][r];
      return d;
    };
    float v = 0.0f;
    for (int k = 0; k < p.top_k; ++k) {
      const int j = s_order[tok * p.top_k + k];
      if (j >= 0) v += term(j);
    }
    for (int sh = 0; sh < p.n_shared; ++sh) v += term(n_routed + sh * p.m + tok);
    float* yp = p.y + int64_t(tok) * p.y_stride + row;
    *yp = p.accumulate ? *yp + v : v;
  }
}

// Expert slot `slot` of a planned down kernel's loop: the active experts of its token tile
// [t0, t1) (moe_tile_segments' shared arrays), then the shared experts over the whole tile.
struct MoePlannedSlot {
  int64_t expert = 0, h_base = 0;  // h_base: a shared expert's h row of token 0
  int lo = 0, hi = 0;              // routed: the slot's pairs in this tile; shared: tokens t0 .. t1
};
__device__ __forceinline__ MoePlannedSlot moe_planned_slot(const MoeExpertsParams& p, int slot, int n_active, int t0,
                                                           int t1, const int32_t* s_expert, const int32_t* s_lo,
                                                           const int32_t* s_hi) {
  MoePlannedSlot o;
  if (slot < n_active) {
    o.expert = s_expert[slot], o.lo = s_lo[slot], o.hi = s_hi[slot];
  } else {
    const int s = slot - n_active;
    o.expert = p.n_experts + s, o.lo = t0, o.hi = t1;
    o.h_base = int64_t(p.m) * p.top_k + int64_t(s) * p.m;
  }
  return o;
}

// Expert slot `slot` of a direct multi down kernel's tasks: the step's distinct routed experts
// (warp_routing's order), then the shared experts. Warp-uniform: slot_expert's shuffles and
// ballots need every lane.
struct MoeMultiSlot {
  int64_t expert = 0;
  uint64_t pairs = 0;  // routed: the expert's flat pair indices (bit i: pair i)
  int n_pairs = 0, h_base = 0;  // shared: m tokens from h row h_base
  bool shared = false;
};
__device__ __forceinline__ MoeMultiSlot moe_multi_slot(const MoeExpertsParams& p, const WarpRouting& w, int slot,
                                                       int n_distinct) {
  MoeMultiSlot o;
  o.shared = slot >= n_distinct;
  if (!o.shared) {
    o.expert = slot_expert(w, slot, o.pairs);
    o.n_pairs = __popcll(static_cast<long long>(o.pairs));
  } else {
    o.expert = p.n_experts + (slot - n_distinct);
    o.n_pairs = p.m;
    o.h_base = p.m * p.top_k + (slot - n_distinct) * p.m;
  }
  return o;
}

// Slot `slot` of a one-token step (p.direct: the token's routed slots, then the shared experts)
// and its rank in the contract's summing order (routed by ascending expert id, equal ids by slot,
// then the shared experts in slot order). A routed id outside [0, n_experts) is not valid.
struct MoeDirectSlot {
  int64_t expert = 0;
  int rank = 0;
  bool shared = false, valid = false;
};
// idx: the token's top_k expert ids (p.expert_idx, or a self-routing block's in shared memory).
__device__ __forceinline__ MoeDirectSlot moe_direct_slot(const MoeExpertsParams& p, int slot, const int32_t* idx) {
  MoeDirectSlot o;
  o.shared = slot >= p.top_k;
  o.expert = o.shared ? p.n_experts + (slot - p.top_k) : idx[slot];
  o.valid = o.shared || (o.expert >= 0 && o.expert < p.n_experts);
  o.rank = slot;
  if (!o.shared) {
    o.rank = 0;
    for (int s = 0; s < p.top_k; ++s) {
      const int32_t e = idx[s];
      o.rank += e < o.expert || (e == o.expert && s < slot);
    }
  }
  return o;
}
__device__ __forceinline__ MoeDirectSlot moe_direct_slot(const MoeExpertsParams& p, int slot) {
  return moe_direct_slot(p, slot, p.expert_idx);
}

// h's f16 fragments (MoePlanBuffers::h16, written by gate_up: an earlier grid, complete and visible
// once pdl_wait returns, so no proxy fence) into this block's shared memory with one bulk copy, in
// place of each thread loading h's f32 rows and converting them: thread 0 issues it, warp 0 waits for
// it and returns true (the other warps false at once); the caller's __syncthreads passes the bytes on
// to the block. `bar`: an mbarrier thread 0 initialized with count 1 (moe_h_frags_init, before the
// kernel's pdl_wait); once a launch (its phase 0), after pdl_wait, by every thread.
__device__ __forceinline__ void moe_h_frags_init(const MoeExpertsParams& p, uint64_t* bar) {
  if (p.plan.h16 && threadIdx.x == 0) mbarrier_init(bar, 1);
}
__device__ __forceinline__ bool moe_h_frags_copy(const MoeExpertsParams& p, uint32_t bytes, void* dst, uint64_t* bar) {
  if (threadIdx.x >= kWarpSize) return false;
  if (threadIdx.x == 0) bulk_copy_to_shared(dst, p.plan.h16, bytes, bar);
  __syncwarp();  // thread 0's mbarrier_init before the other lanes poll it
  mbarrier_wait(bar, 0);
  return true;
}

}  // namespace pg::ops::cuda
