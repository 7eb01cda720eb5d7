// The decode-path MoE expert kernels (m <= 64, m * top_k <= 512): two launches, no plan kernel.
// Every block groups the step's pairs by expert itself (block_plan: m * top_k ids), the gate_up
// kernel streams a grid of one wave over evenly split items, and the down kernel (launched with
// PDL) plans and prefetches its first weights into L2 while gate_up finishes. Included by kernel.cu.
#pragma once

#include "ops/cuda/moe_experts/stream.cuh"

namespace pg::ops::cuda::moe_detail {

// The step's routing grouped by expert, in shared memory: the plan kernel's stable counting sort
// (kernel.cu), so it is the same in every block of both kernels and gate_up's h rows are where
// down reads them. Pointers into the dynamic shared memory (moe_decode_plan_smem_bytes).
struct BlockPlan {
  const int32_t* idx = nullptr;    // [m * top_k] expert_idx, -1 where outside [0, n_experts)
  const int32_t* act = nullptr;    // [n_act] active routed experts, ascending
  const int32_t* seg = nullptr;    // [n_act + 1] first position of each in `pairs`
  const int32_t* pairs = nullptr;  // [n_routed] flat pair index t * top_k + k, by expert then ascending
  int n_act = 0, n_routed = 0;
};

// Contains __syncthreads: every thread of the block calls it, before any early exit.
__device__ __forceinline__ BlockPlan block_plan(const MoeExpertsParams& p, int32_t* smem) {
  constexpr int kPer = kMoeDecodeMaxPairs / kMoeThreads;
  const int n = p.m * p.top_k, n_exp = p.n_experts;
  int32_t* count = smem;  // [n_experts]: pairs per expert, then each expert's next free position
  int32_t* idx = count + n_exp;
  int32_t* act = idx + n;
  int32_t* seg = act + p.max_active;
  int32_t* pairs = seg + p.max_active + 1;
  int32_t* n_act_s = pairs + n;
  int mine[kPer];  // the ids first: their global loads overlap the zeroing
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = int(threadIdx.x) + k * kMoeThreads;
    mine[k] = i < n ? p.expert_idx[i] : -1;
  }
  for (int e = threadIdx.x; e < n_exp; e += kMoeThreads) count[e] = 0;
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = int(threadIdx.x) + k * kMoeThreads;
    if (i < n) {
      const bool valid = mine[k] >= 0 && mine[k] < n_exp;
      idx[i] = valid ? mine[k] : -1;
      if (valid) atomicAdd(&count[mine[k]], 1);
    }
  }
  __syncthreads();
  if (threadIdx.x < kWarpSize) {
    // Warp 0: exclusive scan of the counts -> segments and the active list, 32 experts per step.
    const int lane = threadIdx.x;
    const unsigned below = (1u << lane) - 1u;
    int total = 0, n_act = 0;
    for (int e0 = 0; e0 < n_exp; e0 += kWarpSize) {
      const int e = e0 + lane;
      const int c = e < n_exp ? count[e] : 0;
      int incl = c;
#pragma unroll
      for (int o = 1; o < kWarpSize; o *= 2) {
        const int t = __shfl_up_sync(kFullMask, incl, o);
        if (lane >= o) incl += t;
      }
      const unsigned act_mask = __ballot_sync(kFullMask, c > 0);
      if (c > 0) {
        const int a = n_act + __popc(act_mask & below);
        act[a] = e;
        seg[a] = total + incl - c;
        count[e] = total + incl - c;
      }
      total += __shfl_sync(kFullMask, incl, kWarpSize - 1);
      n_act += __popc(act_mask);
    }
    if (lane == 0) seg[n_act] = total, *n_act_s = n_act;
    __syncwarp();
    // Stable scatter, 32 pairs per step: equal ids in a step are ranked by lane.
    for (int i0 = 0; i0 < n; i0 += kWarpSize) {
      const int i = i0 + lane;
      const int e = i < n ? idx[i] : -1;
      const unsigned peers = __match_any_sync(kFullMask, e);
      int base = 0;
      if (e >= 0) {
        base = count[e];
        pairs[base + __popc(peers & below)] = i;
      }
      __syncwarp();
      if (e >= 0 && lane == __ffs(peers) - 1) count[e] = base + __popc(peers);
      __syncwarp();
    }
  }
  __syncthreads();
  BlockPlan b;
  b.idx = idx, b.act = act, b.seg = seg, b.pairs = pairs;
  b.n_act = *n_act_s;
  b.n_routed = seg[b.n_act];
  return b;
}

// Grid: one wave (sm_count x occupancy blocks, fewer when there are fewer items). Items are
// (expert slot, group of `rows` gate/up row pairs), slot-major: the active routed experts, then
// the shared ones; warp w of W takes items [w * n / W, (w + 1) * n / W), so warps differ by at most
// one item and consecutive warps read consecutive rows. Per item the warp runs the slot's pairs
// kM at a time (later passes re-read the rows from L1/L2) and writes h.
template <LinearWeight F, bool kVec, int kM>
__global__ void __launch_bounds__(kMoeThreads, kMoeMinBlocksPerSm)
    moe_gate_up_decode_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr MoeTile kTile = moe_gate_up_decode_tile(F, kVec, kM);
  constexpr int kR = kTile.rows, kW = 2 * kR, kU = kTile.unroll;
  constexpr int kE = chunk_elems<F, kVec>();
  static_assert(kM * kR <= kWarpSize, "one lane per output of the warp");
  extern __shared__ int32_t s_plan[];
  const BlockPlan pl = block_plan(p, s_plan);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t n_groups = (int64_t(p.inter) + kR - 1) / kR;
  const int64_t n_items = int64_t(pl.n_act + p.n_shared) * n_groups;
  const int64_t n_warps = int64_t(gridDim.x) * kMoeWarps, gw = int64_t(blockIdx.x) * kMoeWarps + warp;
  const int64_t it_end = (gw + 1) * n_items / n_warps;
  const int64_t n_chunks = p.hidden / kE;

  for (int64_t it = gw * n_items / n_warps; it < it_end; ++it) {
    const int slot = int(it / n_groups);
    const int64_t j0 = (it % n_groups) * kR;
    const bool shared = slot >= pl.n_act;
    int64_t expert, h_base = 0;  // shared: h row of token 0
    int lo, hi;
    if (!shared) {
      expert = pl.act[slot], lo = pl.seg[slot], hi = pl.seg[slot + 1];
    } else {
      const int s = slot - pl.n_act;
      expert = p.n_experts + s, lo = 0, hi = p.m;
      h_base = int64_t(p.m) * p.top_k + int64_t(s) * p.m;
    }
    const uint8_t* wrow[kW];
    const float* srow[kW];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int64_t j = min(j0 + r, int64_t(p.inter) - 1);  // rows past inter re-read the last; never written
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // gate rows, then up rows
        const int64_t row = expert * 2 * p.inter + half * int64_t(p.inter) + j;
        wrow[half * kR + r] = static_cast<const uint8_t*>(p.gate_up.data) + row * p.hidden * linear_elem_bytes(F);
        srow[half * kR + r] = scale_row<F>(p.gate_up, row);
      }
    }
    for (int q = lo; q < hi; q += kM) {
      const int m_valid = min(kM, hi - q);
      const float* xrow[kM];
#pragma unroll
      for (int i = 0; i < kM; ++i) {
        const int pi = q + min(i, m_valid - 1);
        const int64_t token = shared ? pi : pl.pairs[pi] / p.top_k;
        xrow[i] = p.x + token * p.hidden;
      }
      float acc[kM][kW];
      stream_dot<F, kVec, kM, kW, kU>(wrow, srow, xrow, m_valid, n_chunks, p.gate_up, acc);
      float g = 0.0f, u = 0.0f;  // lane i * kR + r keeps pair i, row r
#pragma unroll
      for (int i = 0; i < kM; ++i)
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          const float gs = warp_sum(acc[i][r]), us = warp_sum(acc[i][kR + r]);
          if (lane == i * kR + r) g = gs, u = us;
        }
      const int i = lane / kR, r = lane % kR;
      if (lane < kM * kR && i < m_valid && j0 + r < p.inter) {
        const int64_t h_row = shared ? h_base + q + i : q + i;
        p.plan.h[h_row * p.inter + j0 + r] = silu(g) * u;
      }
    }
  }
  pdl_launch_dependents();  // this warp has no item left: the down kernel may start filling the SMs
}

// Before waiting for gate_up: pull this block's rows [row0, row0 + n_rows) of its first
// kMoeDownPrefetchSlots experts into L2 (one expert's rows are contiguous), so the weight stream
// does not stop while gate_up drains and the down kernel starts. Vector path only (aligned rows).
template <LinearWeight F>
__device__ __forceinline__ void prefetch_down_rows(const MoeExpertsParams& p, const BlockPlan& pl, int64_t row0,
                                                   int64_t n_rows) {
  const int n_slots = min(pl.n_act + p.n_shared, kMoeDownPrefetchSlots);
  const int64_t row_bytes = int64_t(p.inter) * linear_elem_bytes(F);
  const int64_t bytes = n_rows * row_bytes;  // a multiple of 16 on the vector path
  const int64_t n_pieces = (bytes + kMoePrefetchPieceBytes - 1) / kMoePrefetchPieceBytes;
  for (int64_t t = threadIdx.x; t < n_slots * n_pieces; t += kMoeThreads) {
    const int slot = int(t / n_pieces);
    const int64_t piece = t % n_pieces;
    const int64_t expert = slot < pl.n_act ? pl.act[slot] : p.n_experts + (slot - pl.n_act);
    const int64_t off = piece * kMoePrefetchPieceBytes;
    const uint8_t* base = static_cast<const uint8_t*>(p.down.data) + (expert * p.hidden + row0) * row_bytes + off;
    prefetch_l2(base, uint32_t(min(int64_t(kMoePrefetchPieceBytes), bytes - off)));
  }
}

// m = 1. Grid: x = hidden row tiles (kMoeWarps x rows per block). Warp: `rows` output rows; walks
// the token's terms in the contract's order (routed experts ascending, then shared), `terms` of
// them streamed at once, and adds weight * down·h into its sums in that order.
template <LinearWeight F, bool kVec>
__global__ void __launch_bounds__(kMoeThreads, kMoeMinBlocksPerSm)
    moe_down_term_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr MoeTermTile kTile = moe_down_term_tile(F, kVec);
  constexpr int kR = kTile.rows, kS = kTile.terms, kU = kTile.unroll;
  constexpr int kE = chunk_elems<F, kVec>();
  static_assert(kR <= kWarpSize, "one lane per output row");
  extern __shared__ int32_t s_plan[];
  const BlockPlan pl = block_plan(p, s_plan);
  const int64_t block_row0 = int64_t(blockIdx.x) * kMoeWarps * kR;
  if constexpr (kVec) {
    if (int(blockIdx.x) < p.prefetch_blocks)
      prefetch_down_rows<F>(p, pl, block_row0, min(int64_t(kMoeWarps) * kR, int64_t(p.hidden) - block_row0));
  }
  pdl_wait();  // h is gate_up's output; y may alias x

  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t row0 = block_row0 + int64_t(warp) * kR;
  if (row0 >= p.hidden) return;
  const int64_t n_chunks = p.inter / kE;
  const int n_terms = pl.n_routed + p.n_shared;
  float total[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) total[r] = 0.0f;
  for (int g = 0; g < n_terms; g += kS) {
    const int s_valid = min(kS, n_terms - g);
    const uint8_t* wrow[kS][kR];
    const float* srow[kS][kR];
    const float* xrow[kS];
    float wgt[kS];
#pragma unroll
    for (int s = 0; s < kS; ++s) {
      const int q = g + min(s, s_valid - 1);
      int64_t expert, h_row;
      if (q < pl.n_routed) {
        const int f = pl.pairs[q];
        expert = pl.idx[f], h_row = q, wgt[s] = p.expert_weight[f];
      } else {  // shared expert s': h row m * top_k + s' * m + 0
        const int sh = q - pl.n_routed;
        expert = p.n_experts + sh, h_row = int64_t(p.top_k) + sh, wgt[s] = 1.0f;
      }
      xrow[s] = p.plan.h + h_row * p.inter;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const int64_t row = expert * p.hidden + min(row0 + r, int64_t(p.hidden) - 1);  // past hidden: never written
        wrow[s][r] = static_cast<const uint8_t*>(p.down.data) + row * p.inter * linear_elem_bytes(F);
        srow[s][r] = scale_row<F>(p.down, row);
      }
    }
    float acc[kS][kR];
    stream_dot_terms<F, kVec, kS, kR, kU>(wrow, srow, xrow, s_valid, n_chunks, p.down, acc);
#pragma unroll
    for (int s = 0; s < kS; ++s)
      if (s < s_valid)
#pragma unroll
        for (int r = 0; r < kR; ++r) total[r] += wgt[s] * warp_sum(acc[s][r]);
  }
#pragma unroll
  for (int r = 0; r < kR; ++r)
    if (lane == r && row0 + r < p.hidden) {
      float* yp = p.y + row0 + r;
      *yp = p.accumulate ? *yp + total[r] : total[r];
    }
}

// m = 2..64. Grid: x = hidden row tiles (kMoeWarps x rows per block); every token in the block.
// Warp: `rows` output rows; loops over the active experts (ascending id), then the shared ones,
// kM pairs per pass, and adds weight * down·h into its per-token sums in shared memory: a fixed
// order (the contract's), no atomics.
template <LinearWeight F, bool kVec, int kM>
__global__ void __launch_bounds__(kMoeThreads, kMoeMinBlocksPerSm)
    moe_down_decode_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr MoeTile kTile = moe_down_tile(F, kVec, kM);
  constexpr int kR = kTile.rows, kU = kTile.unroll;
  constexpr int kE = chunk_elems<F, kVec>();
  extern __shared__ int32_t s_plan[];
  __shared__ float s_acc[kMoeWarps][kMoeDecodeMaxM][kR];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  for (int i = lane; i < kMoeDecodeMaxM * kR; i += kWarpSize) (&s_acc[warp][0][0])[i] = 0.0f;
  const BlockPlan pl = block_plan(p, s_plan);  // its barriers also order the zeroing
  const int64_t block_row0 = int64_t(blockIdx.x) * kMoeWarps * kR;
  if constexpr (kVec) {
    if (int(blockIdx.x) < p.prefetch_blocks)
      prefetch_down_rows<F>(p, pl, block_row0, min(int64_t(kMoeWarps) * kR, int64_t(p.hidden) - block_row0));
  }
  pdl_wait();  // h is gate_up's output; y may alias x

  const int64_t row0 = block_row0 + int64_t(warp) * kR;
  if (row0 >= p.hidden) return;
  const int64_t n_chunks = p.inter / kE;
  const int n_slots = pl.n_act + p.n_shared;
  for (int slot = 0; slot < n_slots; ++slot) {
    const bool shared = slot >= pl.n_act;
    int64_t expert, h_base = 0;
    int lo, hi;
    if (!shared) {
      expert = pl.act[slot], lo = pl.seg[slot], hi = pl.seg[slot + 1];
    } else {
      const int s = slot - pl.n_act;
      expert = p.n_experts + s, lo = 0, hi = p.m;
      h_base = int64_t(p.m) * p.top_k + int64_t(s) * p.m;
    }
    const uint8_t* wrow[kR];
    const float* srow[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int64_t row = expert * p.hidden + min(row0 + r, int64_t(p.hidden) - 1);  // past hidden: never written
      wrow[r] = static_cast<const uint8_t*>(p.down.data) + row * p.inter * linear_elem_bytes(F);
      srow[r] = scale_row<F>(p.down, row);
    }
    for (int q = lo; q < hi; q += kM) {
      const int m_valid = min(kM, hi - q);
      const float* xrow[kM];
#pragma unroll
      for (int i = 0; i < kM; ++i) xrow[i] = p.plan.h + (h_base + q + min(i, m_valid - 1)) * p.inter;
      float acc[kM][kR];
      stream_dot<F, kVec, kM, kR, kU>(wrow, srow, xrow, m_valid, n_chunks, p.down, acc);
#pragma unroll
      for (int i = 0; i < kM; ++i)
#pragma unroll
        for (int r = 0; r < kR; ++r) acc[i][r] = warp_sum(acc[i][r]);
      if (lane < kR) {  // lane r owns row r's sums; pairs in order
#pragma unroll
        for (int i = 0; i < kM; ++i) {
          if (i < m_valid) {
            int tok;
            float wgt;
            if (shared) {
              tok = q + i, wgt = 1.0f;
            } else {
              const int f = pl.pairs[q + i];
              tok = f / p.top_k, wgt = p.expert_weight[f];
            }
            float v = 0.0f;
#pragma unroll
            for (int r = 0; r < kR; ++r)
              if (lane == r) v = acc[i][r];
            s_acc[warp][tok][lane] += wgt * v;
          }
        }
      }
    }
  }
  __syncwarp();
  for (int idx = lane; idx < p.m * kR; idx += kWarpSize) {
    const int t = idx / kR, r = idx % kR;
    if (row0 + r < p.hidden) {
      float* yp = p.y + int64_t(t) * p.y_stride + row0 + r;
      const float v = s_acc[warp][t][r];
      *yp = p.accumulate ? *yp + v : v;
    }
  }
}

}  // namespace pg::ops::cuda::moe_detail
