// The MoE expert kernels: plan (group pairs by expert), gate_up (h = silu(gate·x) * (up·x) per
// (token, expert) pair, every selected expert's rows streamed once per 8 of its pairs) and down
// (per output row, the token's experts summed in the contract's order). Weight rows stream in
// 16-byte chunks dequantized in registers as in linear/kernel.cuh (f32, bf16, fp8, NVFP4 with a
// scale_2 per expert); odd shapes take the same kernels with one element per "chunk". The CPU
// definition is ops::cpu::moe_experts.
#include <cuda_runtime.h>

#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/linear/kernel.cuh"  // unpack_chunk
#include "ops/cuda/moe_experts/common.cuh"
#include "ops/cuda/moe_experts/params.h"

namespace pg::ops::cuda {
namespace {

// Elements of one streamed chunk: 16 bytes on the vector path, one element on the scalar path.
template <LinearWeight F, bool kVec>
constexpr int chunk_elems() {
  return kVec ? linear_vec_elems(F) : 1;
}

// Chunk c of a weight row (scalar path: element c, its raw bits in .x).
template <LinearWeight F, bool kVec>
__device__ __forceinline__ uint4 load_chunk(const uint8_t* row, int64_t c) {
  if constexpr (kVec) {
    return ld_stream(row + c * kLinearVecBytes);
  } else if constexpr (F == LinearWeight::kF32) {
    return make_uint4(__ldg(reinterpret_cast<const unsigned int*>(row) + c), 0, 0, 0);
  } else if constexpr (F == LinearWeight::kBF16) {
    return make_uint4(__ldg(reinterpret_cast<const unsigned short*>(row) + c), 0, 0, 0);
  } else if constexpr (F == LinearWeight::kNvfp4) {  // element c: code c % 2 of device byte c / 2
    return make_uint4(nvfp4_device_code(__ldg(row + c / 2), uint32_t(c % 2)), 0, 0, 0);
  } else {
    return make_uint4(__ldg(row + c), 0, 0, 0);
  }
}

template <LinearWeight F, bool kVec>
__device__ __forceinline__ void unpack(const uint4& v, float (&out)[chunk_elems<F, kVec>()]) {
  if constexpr (kVec) {
    unpack_chunk<F>(v, out);
  } else if constexpr (F == LinearWeight::kF32) {
    out[0] = __uint_as_float(v.x);
  } else if constexpr (F == LinearWeight::kBF16) {
    out[0] = __uint_as_float(v.x << 16);
  } else if constexpr (F == LinearWeight::kNvfp4) {
    out[0] = e2m1_to_f32(v.x);
  } else {
    out[0] = fp8_e4m3_to_f32(uint8_t(v.x));
  }
}

// The scales of one weight row: fp8's row of f32 block scales (scale_inv), or NVFP4's row of e4m3
// block scales and the row's scale_2 (per expert in a stack).
struct RowScales {
  const void* blocks = nullptr;
  float scale_2 = 1.0f;
};


// acc[i][r] = this lane's part of row r · x row i, for i < m_valid (the warp sums the lanes).
// All kR x kU loads of a step are issued before the first multiply; fp8 scales each chunk's dot
// once (a chunk lies in one scale block on the vector path); NVFP4 each 16-element block's dot
// (linear/kernel.cuh's nvfp4_chunk_dot on the vector path), then the row's sum by its scale_2.
// kWaitAfterFirstLoads: the x rows are written by the kernel launched before this one (PDL): the
// first step's weight loads are issued, then the lane waits for that kernel (pdl_wait) before it
// reads x; weights never depend on it. A lane with no chunk does not wait here: its caller must.
template <LinearWeight F, bool kVec, int kM, int kR, int kU, bool kWaitAfterFirstLoads = false>
__device__ __forceinline__ void stream_dot(const uint8_t* const (&wrow)[kR], const RowScales (&srow)[kR],
                                           const float* const (&xrow)[kM], int m_valid, int64_t n_chunks,
                                           const MoeWeightParams& w, float (&acc)[kM][kR]) {
  constexpr int kE = chunk_elems<F, kVec>();
  constexpr bool kFp8 = F == LinearWeight::kFp8Block;
  constexpr bool kNvfp4 = F == LinearWeight::kNvfp4;
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[i][r] = 0.0f;

  for (int64_t c = lane; c < n_chunks; c += int64_t(kWarpSize) * kU) {
    uint4 wv[kU][kR];
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const int64_t cc = c + int64_t(kWarpSize) * u;
        wv[u][r] = cc < n_chunks ? load_chunk<F, kVec>(wrow[r], cc) : make_uint4(0, 0, 0, 0);
      }
    if constexpr (kWaitAfterFirstLoads) {
      if (c == lane) pdl_wait();
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t cc = c + int64_t(kWarpSize) * u;
      if constexpr (kNvfp4 && kVec) {
        if (cc < n_chunks) {
          float2 sc[kR];
#pragma unroll
          for (int r = 0; r < kR; ++r) sc[r] = nvfp4_chunk_scales(static_cast<const uint8_t*>(srow[r].blocks), cc);
          nvfp4_chunk_dot<kM, kR>(wv[u], sc, [&](int i) { return xrow[i] + cc * kE; }, m_valid, acc);
        }
      } else if (cc < n_chunks) {
        float wf[kR][kE];
        float sc[kR];
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          unpack<F, kVec>(wv[u][r], wf[r]);
          if constexpr (kFp8)
            sc[r] = __ldg(static_cast<const float*>(srow[r].blocks) +
                          (kVec ? (cc * kE) >> w.log2_block_cols : cc / w.block_cols));
          if constexpr (kNvfp4)  // scalar path: element cc's 16-element block
            sc[r] = fp8_e4m3_to_f32(__ldg(static_cast<const uint8_t*>(srow[r].blocks) + cc / kNvfp4Block));
        }
#pragma unroll
        for (int i = 0; i < kM; ++i) {
          if (i < m_valid) {
            float xf[kE];
            if constexpr (kVec) {
#pragma unroll
              for (int q = 0; q < kE / 4; ++q) {
                const float4 t = ld_act4(xrow[i] + cc * kE + 4 * q);
                xf[4 * q] = t.x, xf[4 * q + 1] = t.y, xf[4 * q + 2] = t.z, xf[4 * q + 3] = t.w;
              }
            } else {
              xf[0] = ld_act(xrow[i] + cc);
            }
#pragma unroll
            for (int r = 0; r < kR; ++r) {
              float d = 0.0f;
#pragma unroll
              for (int e = 0; e < kE; ++e) d = fmaf(wf[r][e], xf[e], d);
              acc[i][r] = kFp8 || kNvfp4 ? fmaf(d, sc[r], acc[i][r]) : acc[i][r] + d;
            }
          }
        }
      }
    }
  }
  if constexpr (kNvfp4) {  // the row's scale_2 (and, on the vector path, the unpack's 2^14)
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const float s2 = kVec ? srow[r].scale_2 * kE2m1F16Unscale : srow[r].scale_2;
#pragma unroll
      for (int i = 0; i < kM; ++i) acc[i][r] *= s2;
    }
  }
}

template <LinearWeight F>
__device__ __forceinline__ RowScales scale_row(const MoeWeightParams& w, int64_t row) {
  RowScales s;
  if constexpr (F == LinearWeight::kFp8Block) {
    s.blocks = w.scale_inv + (row / w.block_rows) * w.scale_cols;
  } else if constexpr (F == LinearWeight::kNvfp4) {
    s.blocks = w.scale_fp8 + row * w.scale_fp8_cols;
    s.scale_2 = w.scale_2_rows ? __ldg(w.scale_2_rows + row / w.scale_2_group_rows) : w.scale_2;
  }
  return s;
}

// Rows row0 .. row0 + kR of `expert`'s down matrix: their bytes and scales. Rows past hidden
// re-read the last one and are never written.
template <LinearWeight F, int kR>
__device__ __forceinline__ void down_rows(const MoeExpertsParams& p, int64_t expert, int64_t row0,
                                          const uint8_t* (&wrow)[kR], RowScales (&srow)[kR]) {
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t row = expert * p.hidden + min(row0 + r, int64_t(p.hidden) - 1);
    wrow[r] = static_cast<const uint8_t*>(p.down.data) + row * linear_row_bytes(F, p.inter);
    srow[r] = scale_row<F>(p.down, row);
  }
}

// One block: counting sort of the m * top_k (token, slot) pairs by expert, stable (flat order
// within an expert, so a token range is a contiguous run). Counters in shared memory.
__global__ void __launch_bounds__(kMoePlanThreads) moe_plan_kernel(const __grid_constant__ MoeExpertsParams p) {
  extern __shared__ int32_t s_plan[];
  int32_t* count = s_plan;                 // [n_experts]
  int32_t* cursor = s_plan + p.n_experts;  // [n_experts] next free pair slot of each expert
  const int n = p.m * p.top_k, n_exp = p.n_experts;
  for (int e = threadIdx.x; e < n_exp; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int e = p.expert_idx[i];
    if (e >= 0 && e < n_exp) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (threadIdx.x >= kWarpSize) return;

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
    const unsigned act = __ballot_sync(kFullMask, c > 0);
    if (c > 0) {
      const int a = n_act + __popc(act & below);
      p.plan.active_expert[a] = e;
      p.plan.seg_begin[a] = total + incl - c;
      cursor[e] = total + incl - c;
    }
    total += __shfl_sync(kFullMask, incl, kWarpSize - 1);
    n_act += __popc(act);
  }
  if (lane == 0) {
    p.plan.seg_begin[n_act] = total;
    *p.plan.n_active = n_act;
  }
  __syncwarp();
  // Stable scatter, 32 pairs per step: equal ids in a step are ranked by lane.
  for (int i0 = 0; i0 < n; i0 += kWarpSize) {
    const int i = i0 + lane;
    const int e = i < n ? p.expert_idx[i] : -1;
    const bool valid = e >= 0 && e < n_exp;
    const unsigned peers = __match_any_sync(kFullMask, valid ? e : -1);
    int base = 0;
    if (valid) {
      base = cursor[e];
      p.plan.pair_flat[base + __popc(peers & below)] = i;
    }
    __syncwarp();
    if (valid && lane == __ffs(peers) - 1) cursor[e] = base + __popc(peers);
    __syncwarp();
  }
}

// Grid: x = inter row tiles (kMoeWarps x rows per block), y = expert slot (max_active routed
// slots, then n_shared shared), z = splits of the slot's pair passes. Warp: `rows` gate rows j and
// the matching up rows, over kM pairs per pass.
template <LinearWeight F, bool kVec, int kM>
__global__ void __launch_bounds__(kMoeThreads, kMoeMinBlocksPerSm)
    moe_gate_up_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr MoeTile kTile = moe_gate_up_tile(F, kVec, kM);
  constexpr int kR = kTile.rows, kW = 2 * kR, kU = kTile.unroll;
  constexpr int kE = chunk_elems<F, kVec>();
  static_assert(kM * kR <= kWarpSize, "one lane per output of the warp");
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int slot = blockIdx.y;
  const bool shared = slot >= p.max_active;
  int64_t expert;
  int lo, hi;
  int64_t h_base = 0;  // shared: h row of token 0
  uint64_t pairs = 0;  // direct multi, routed: the expert's flat pair indices (bit i: pair i)
  // m = 1: slot s is pair s; the down kernel (PDL) may launch once every block has triggered, and
  // it reads expert_idx before its own wait. Routed slots read the routing: under PDL
  // (p.gate_up_pdl) they wait for the router first and trigger only then, so down still launches
  // after the routing is complete; shared slots read only x, complete before the router triggered.
  // An ordinary launch makes the wait a no-op. (Measured 2026-12-01: PDL on gate_up and
  // mla_attention too, with an early trigger in down and no shared-first start, took V3 bf16
  // decode from 523 to 487 tok/s; without any PDL it ran 531.)
  if (!shared) pdl_wait();
  if (p.direct || p.direct_multi) pdl_trigger();
  if (!shared && p.direct) {
    expert = p.expert_idx[slot];
    if (expert < 0 || expert >= p.n_experts) return;  // dropped, as the plan drops it
    lo = slot;
    hi = slot + 1;
  } else if (!shared && p.direct_multi) {  // slot: the step's slot-th distinct expert, if any
    const WarpRouting w = warp_routing(p);
    if (slot >= __popcll(static_cast<long long>(w.first))) return;
    expert = slot_expert(w, slot, pairs);
    lo = 0;
    hi = __popcll(static_cast<long long>(pairs));
  } else if (!shared) {
    if (slot >= *p.plan.n_active) return;
    expert = p.plan.active_expert[slot];
    lo = p.plan.seg_begin[slot];
    hi = p.plan.seg_begin[slot + 1];
  } else {
    const int s = slot - p.max_active;
    expert = p.n_experts + s;
    lo = 0;
    hi = p.m;
    h_base = int64_t(p.m) * p.top_k + int64_t(s) * p.m;
  }
  const int64_t j0 = (int64_t(blockIdx.x) * kMoeWarps + warp) * kR;
  if (j0 >= p.inter) return;

  const uint8_t* wrow[kW];
  RowScales srow[kW];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t j = min(j0 + r, int64_t(p.inter) - 1);  // rows past inter re-read the last; never written
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // gate rows, then up rows
      const int64_t row = expert * 2 * p.inter + half * int64_t(p.inter) + j;
      wrow[half * kR + r] = static_cast<const uint8_t*>(p.gate_up.data) + row * linear_row_bytes(F, p.hidden);
      srow[half * kR + r] = scale_row<F>(p.gate_up, row);
    }
  }
  const int64_t n_chunks = p.hidden / kE;

  for (int q = lo + int(blockIdx.z) * kM; q < hi; q += int(gridDim.z) * kM) {
    const int m_valid = min(kM, hi - q);
    const float* xrow[kM];
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      const int pi = q + min(i, m_valid - 1);
      const int64_t token = p.direct   ? 0
                            : shared   ? pi
                            : p.direct_multi ? nth_set_bit(pairs, pi) / p.top_k
                                       : p.plan.pair_flat[pi] / p.top_k;
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
      // h row: shared pair (s, t) at h_base + t; routed: the plan's pair position, or (direct)
      // the pair's flat index.
      const int64_t h_row = shared ? h_base + q + i : p.direct_multi ? nth_set_bit(pairs, q + i) : q + i;
      p.plan.h[h_row * p.inter + j0 + r] = silu(g) * u;
    }
  }
}

// Grid: x = hidden row tiles (kMoeWarps x rows per block), y = token tiles of kMoeTokTile. Warp:
// `rows` output rows; loops over the active experts (ascending id), then the shared experts, and
// adds weight * down·h into its per-token sums in shared memory: a fixed order, no atomics.
template <LinearWeight F, bool kVec, int kM>
__global__ void __launch_bounds__(kMoeThreads, kMoeMinBlocksPerSm)
    moe_down_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr MoeTile kTile = moe_down_tile(F, kVec, kM);
  constexpr int kR = kTile.rows, kU = kTile.unroll;
  constexpr int kE = chunk_elems<F, kVec>();
  extern __shared__ int32_t s_slots[];  // [3][max_active]: expert id, first and end pair in this token tile
  __shared__ float s_acc[kMoeWarps][kMoeTokTile][kR];
  int32_t* s_expert = s_slots;
  int32_t* s_lo = s_slots + p.max_active;
  int32_t* s_hi = s_lo + p.max_active;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int t0 = int(blockIdx.y) * kMoeTokTile, t1 = min(p.m, t0 + kMoeTokTile);
  const int n_active = *p.plan.n_active;

  moe_tile_segments(p, n_active, t0, t1, s_expert, s_lo, s_hi);
  for (int i = lane; i < kMoeTokTile * kR; i += kWarpSize) (&s_acc[warp][0][0])[i] = 0.0f;
  __syncthreads();

  const int64_t row0 = (int64_t(blockIdx.x) * kMoeWarps + warp) * kR;
  if (row0 >= p.hidden) return;
  const int64_t n_chunks = p.inter / kE;
  const int n_slots = n_active + p.n_shared;
  for (int slot = 0; slot < n_slots; ++slot) {
    const bool shared = slot >= n_active;
    const auto [expert, h_base, lo, hi] = moe_planned_slot(p, slot, n_active, t0, t1, s_expert, s_lo, s_hi);
    if (lo >= hi) continue;
    const uint8_t* wrow[kR];
    RowScales srow[kR];
    down_rows<F, kR>(p, expert, row0, wrow, srow);
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
              const int f = p.plan.pair_flat[q + i];
              tok = f / p.top_k, wgt = p.expert_weight[f];
            }
            float v = 0.0f;
#pragma unroll
            for (int r = 0; r < kR; ++r)
              if (lane == r) v = acc[i][r];
            s_acc[warp][tok - t0][lane] += wgt * v;
          }
        }
      }
    }
  }
  __syncwarp();
  for (int idx = lane; idx < (t1 - t0) * kR; idx += kWarpSize) {
    const int tl = idx / kR, r = idx % kR;
    if (row0 + r < p.hidden) {
      float* yp = p.y + int64_t(t0 + tl) * p.y_stride + row0 + r;
      const float v = s_acc[warp][tl][r];
      *yp = p.accumulate ? *yp + v : v;
    }
  }
}

// m = 1 (p.direct): grid x = hidden row tiles of `rows`, one warp per expert slot (the token's
// top_k routed slots, then the shared experts). Every selected expert's rows of the tile stream
// at once, where moe_down_kernel's warps walk the experts one after another (latency-bound at
// m = 1). Launched with PDL after gate_up: each warp issues its first weight loads, then waits
// for h. The slots' partial sums meet in shared memory and are added in the contract's order
// (routed by ascending expert id, equal ids by slot, then shared).
template <LinearWeight F, bool kVec, int kR, int kU>
__global__ void __launch_bounds__(kMoeDirectMaxSlots * kWarpSize)
    moe_down_direct_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr int kE = chunk_elems<F, kVec>();
  __shared__ float s_part[kMoeDirectMaxSlots][kR];  // [group * n_slots + rank][row]
  const int n_slots = p.top_k + p.n_shared;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int slot = warp % n_slots, group = warp / n_slots;  // groups: row tiles of one block
  const auto [expert, rank, shared, valid] = moe_direct_slot(p, slot);
  const int n_groups = int(blockDim.x) / kWarpSize / n_slots;
  const int64_t row0 = (int64_t(blockIdx.x) * n_groups + group) * kR;
  const uint8_t* wrow[kR];
  RowScales srow[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t row = (valid ? expert : 0) * p.hidden + min(row0 + r, int64_t(p.hidden) - 1);  // never written
    wrow[r] = static_cast<const uint8_t*>(p.down.data) + row * linear_row_bytes(F, p.inter);
    srow[r] = scale_row<F>(p.down, row);
  }
  const float* xrow[1] = {p.plan.h + int64_t(slot) * p.inter};
  float acc[1][kR];
  stream_dot<F, kVec, 1, kR, kU, true>(wrow, srow, xrow, 1, valid && row0 < p.hidden ? p.inter / kE : 0, p.down, acc);
  pdl_wait();  // lanes without a chunk; y is written below
  const float wgt = shared ? 1.0f : valid ? p.expert_weight[slot] : 0.0f;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const float v = warp_sum(acc[0][r]);
    if (lane == r) s_part[group * n_slots + rank][r] = wgt * v;
  }
  __syncthreads();
  const int g = threadIdx.x / kR, r = threadIdx.x % kR;
  const int64_t row = (int64_t(blockIdx.x) * n_groups + g) * kR + r;
  if (g < n_groups && row < p.hidden) {
    float v = 0.0f;
    for (int k = 0; k < n_slots; ++k) v += s_part[g * n_slots + k][r];
    float* yp = p.y + row;
    *yp = p.accumulate ? *yp + v : v;
  }
}

// 2 <= m <= kMoeDirectMaxTokens (p.direct_multi): grid x = hidden tiles of multi_groups x `rows`
// rows; every warp derives the step's distinct experts from expert_idx (warp_routing) and takes
// the (expert slot, row tile) tasks warp, warp + kMoeWarps, ...: distinct routed experts in order
// of first appearance, then the shared ones. A task streams its expert's rows once for all of its
// pairs (passes of kM) and leaves weight * down·h per (h row, output row) in shared memory; the
// block then sums each token's terms in the contract's order (routed by ascending expert id,
// equal ids by slot, then shared), the same adds in the same order as moe_down_direct_kernel, so
// a token's output has the bits it has alone at m = 1. Launched with PDL after gate_up: each warp
// issues its first task's weight loads, then waits for h.
template <LinearWeight F, bool kVec, int kM, int kR, int kU>
__global__ void __launch_bounds__(kMoeThreads, kMoeMinBlocksPerSm)
    moe_down_multi_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr int kE = chunk_elems<F, kVec>();
  extern __shared__ float s_part[];                  // [multi_groups][n_h][kR]
  __shared__ int32_t s_order[kMoeDirectMaxRouted];  // [m, top_k]: token t's pairs in summing order (-1: dropped)
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int n_routed = p.m * p.top_k, n_h = p.m * (p.top_k + p.n_shared), groups = p.multi_groups;
  const WarpRouting w = warp_routing(p);
  const int n_distinct = __popcll(static_cast<long long>(w.first));
  const int n_tasks = (n_distinct + p.n_shared) * groups;
  bool waited = false;  // this warp's lanes with a chunk have passed pdl_wait
  for (int task = warp; task < n_tasks; task += kMoeWarps) {
    const int slot = task / groups, g = task % groups;
    const MoeMultiSlot sl = moe_multi_slot(p, w, slot, n_distinct);
    const bool shared = sl.shared;
    const int64_t expert = sl.expert;
    const int n_pairs = sl.n_pairs, h_base = sl.h_base;
    uint64_t rest = sl.pairs;  // routed: the pairs (flat indices) not yet in a pass
    const int64_t row0 = (int64_t(blockIdx.x) * groups + g) * kR;
    const uint8_t* wrow[kR];
    RowScales srow[kR];
    down_rows<F, kR>(p, expert, row0, wrow, srow);
    const int64_t n_chunks = row0 < p.hidden ? p.inter / kE : 0;
    for (int q = 0; q < n_pairs; q += kM) {
      const int m_valid = min(kM, n_pairs - q);
      int hrow[kM];  // pass pair i's h row (routed: its flat index)
      const float* xrow[kM];
#pragma unroll
      for (int i = 0; i < kM; ++i) {
        if (shared) {
          hrow[i] = h_base + q + min(i, m_valid - 1);
        } else if (i == 0 || i < m_valid) {
          hrow[i] = __ffsll(static_cast<long long>(rest)) - 1;
          rest &= rest - 1;
        } else {
          hrow[i] = hrow[i - 1];
        }
        xrow[i] = p.plan.h + int64_t(hrow[i]) * p.inter;
      }
      float acc[kM][kR];
      if (!waited && n_chunks > 0)
        stream_dot<F, kVec, kM, kR, kU, true>(wrow, srow, xrow, m_valid, n_chunks, p.down, acc);
      else
        stream_dot<F, kVec, kM, kR, kU, false>(wrow, srow, xrow, m_valid, n_chunks, p.down, acc);
      waited = waited || n_chunks > 0;
#pragma unroll
      for (int i = 0; i < kM; ++i)
#pragma unroll
        for (int r = 0; r < kR; ++r) acc[i][r] = warp_sum(acc[i][r]);
      if (lane < kR) {  // lane r owns row r's terms
#pragma unroll
        for (int i = 0; i < kM; ++i) {
          if (i < m_valid) {
            const float wgt = shared ? 1.0f : p.expert_weight[hrow[i]];
            float v = 0.0f;
#pragma unroll
            for (int r = 0; r < kR; ++r)
              if (lane == r) v = acc[i][r];
            s_part[(g * n_h + hrow[i]) * kR + lane] = wgt * v;
          }
        }
      }
    }
  }
  pdl_wait();  // lanes that streamed nothing; y is written below
  moe_token_order(p, s_order);
  __syncthreads();
  for (int idx = threadIdx.x; idx < groups * kR * p.m; idx += kMoeThreads) {
    const int t = idx / (groups * kR), g = idx % (groups * kR) / kR, r = idx % kR;
    const int64_t row = (int64_t(blockIdx.x) * groups + g) * kR + r;
    if (row >= p.hidden) continue;
    const float* part = s_part + g * n_h * kR + r;
    float v = 0.0f;
    for (int k = 0; k < p.top_k; ++k) {
      const int j = s_order[t * p.top_k + k];
      if (j >= 0) v += part[j * kR];
    }
    for (int sh = 0; sh < p.n_shared; ++sh) v += part[(n_routed + sh * p.m + t) * kR];
    float* yp = p.y + int64_t(t) * p.y_stride + row;
    *yp = p.accumulate ? *yp + v : v;
  }
}

using LaunchFn = cudaError_t (*)(const MoeExpertsParams&, cudaStream_t);

template <LinearWeight F, bool kVec, int kM>
cudaError_t down_multi_launch(const MoeExpertsParams& p, cudaStream_t stream) {
  constexpr MoeTile kTile = moe_down_multi_tile(F, kVec, kM);
  const int64_t rows_per_block = int64_t(p.multi_groups) * kTile.rows;
  const dim3 grid(unsigned((int64_t(p.hidden) + rows_per_block - 1) / rows_per_block));
  const size_t smem = size_t(p.multi_groups) * size_t(p.m * (p.top_k + p.n_shared)) * kTile.rows * sizeof(float);
  return launch_pdl(moe_down_multi_kernel<F, kVec, kM, kTile.rows, kTile.unroll>, grid, dim3(kMoeThreads), smem,
                    stream, p);
}

// Direct multi's down kernels: the vector path at every pair tile, the scalar path at tile 1.
template <LinearWeight F>
cudaError_t down_multi_pick(const MoeExpertsParams& p, bool vec, int m_tile, cudaStream_t stream) {
  if (!vec) return down_multi_launch<F, false, 1>(p, stream);
  switch (m_tile) {
    case 1: return down_multi_launch<F, true, 1>(p, stream);
    case 2: return down_multi_launch<F, true, 2>(p, stream);
    case 4: return down_multi_launch<F, true, 4>(p, stream);
    default: return down_multi_launch<F, true, 8>(p, stream);
  }
}

template <LinearWeight F, bool kVec, bool kSingle>
cudaError_t down_direct_launch(const MoeExpertsParams& p, cudaStream_t stream) {
  constexpr MoeTile kTile = moe_down_direct_tile(F, kVec, kSingle);
  const int n_slots = p.top_k + p.n_shared, groups = moe_down_direct_groups(n_slots);
  const int64_t rows_per_block = int64_t(groups) * kTile.rows;
  const dim3 grid(unsigned((int64_t(p.hidden) + rows_per_block - 1) / rows_per_block));
  return launch_pdl(moe_down_direct_kernel<F, kVec, kTile.rows, kTile.unroll>, grid,
                    dim3(unsigned(groups * n_slots * kWarpSize)), 0, stream, p);
}

template <LinearWeight F, bool kVec>
cudaError_t down_direct_pick(const MoeExpertsParams& p, cudaStream_t stream) {
  return p.top_k + p.n_shared == 1 ? down_direct_launch<F, kVec, true>(p, stream)
                                   : down_direct_launch<F, kVec, false>(p, stream);
}

template <LinearWeight F, bool kVec, int kM>
cudaError_t gate_up_launch(const MoeExpertsParams& p, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kMoeWarps * moe_gate_up_tile(F, kVec, kM).rows;
  const int64_t bx = (int64_t(p.inter) + kRowsPerBlock - 1) / kRowsPerBlock;
  const dim3 grid(unsigned(bx), unsigned(p.max_active + p.n_shared), unsigned(moe_gate_up_splits(p.m)));
  if (cudaError_t e = launch_pdl_if(p.gate_up_pdl, moe_gate_up_kernel<F, kVec, kM>, grid, dim3(kMoeThreads), 0, stream, p);
      e != cudaSuccess)
    return e;
  return cudaGetLastError();
}

template <LinearWeight F, bool kVec, int kM>
cudaError_t down_launch(const MoeExpertsParams& p, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kMoeWarps * moe_down_tile(F, kVec, kM).rows;
  const int64_t bx = (int64_t(p.hidden) + kRowsPerBlock - 1) / kRowsPerBlock;
  const dim3 grid(unsigned(bx), unsigned((p.m + kMoeTokTile - 1) / kMoeTokTile));
  const size_t smem = size_t(3) * size_t(p.max_active) * sizeof(int32_t);
  moe_down_kernel<F, kVec, kM><<<grid, kMoeThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

// The instantiated kernels: the vector path at every m tile, the scalar path at m tile 1.
template <LinearWeight F, bool kGateUp>
LaunchFn pick_m_tile(bool vec, int m_tile) {
  if (!vec) return kGateUp ? &gate_up_launch<F, false, 1> : &down_launch<F, false, 1>;
  switch (m_tile) {
    case 1: return kGateUp ? &gate_up_launch<F, true, 1> : &down_launch<F, true, 1>;
    case 2: return kGateUp ? &gate_up_launch<F, true, 2> : &down_launch<F, true, 2>;
    case 4: return kGateUp ? &gate_up_launch<F, true, 4> : &down_launch<F, true, 4>;
    default:
      // NVFP4's down kernel spills at 8 pairs per pass (ptxas, 2026-12-01): it takes passes of 4.
      if constexpr (kGateUp) return &gate_up_launch<F, true, 8>;
      else if constexpr (F == LinearWeight::kNvfp4) return &down_launch<F, true, 4>;
      else return &down_launch<F, true, 8>;
  }
}

template <bool kGateUp>
LaunchFn pick(LinearWeight f, bool vec, int m_tile) {
  switch (f) {
    case LinearWeight::kF32: return pick_m_tile<LinearWeight::kF32, kGateUp>(vec, m_tile);
    case LinearWeight::kBF16: return pick_m_tile<LinearWeight::kBF16, kGateUp>(vec, m_tile);
    case LinearWeight::kFp8Block: return pick_m_tile<LinearWeight::kFp8Block, kGateUp>(vec, m_tile);
    case LinearWeight::kNvfp4: return pick_m_tile<LinearWeight::kNvfp4, kGateUp>(vec, m_tile);
  }
  return nullptr;
}

}  // namespace

cudaError_t launch_moe_plan(const MoeExpertsParams& p, cudaStream_t stream) {
  const size_t smem = size_t(2) * size_t(p.n_experts) * sizeof(int32_t);
  moe_plan_kernel<<<1, kMoePlanThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_moe_gate_up(const MoeExpertsParams& p, LinearWeight f, bool vec, int m_tile, cudaStream_t stream) {
  if (p.max_active + p.n_shared == 0) return cudaSuccess;  // no expert: h is never read
  return pick<true>(f, vec, m_tile)(p, stream);
}

cudaError_t launch_moe_down(const MoeExpertsParams& p, LinearWeight f, bool vec, int m_tile, cudaStream_t stream) {
  if (p.direct) {
    switch (f) {
      case LinearWeight::kF32: return vec ? down_direct_pick<LinearWeight::kF32, true>(p, stream)
                                          : down_direct_pick<LinearWeight::kF32, false>(p, stream);
      case LinearWeight::kBF16: return vec ? down_direct_pick<LinearWeight::kBF16, true>(p, stream)
                                           : down_direct_pick<LinearWeight::kBF16, false>(p, stream);
      case LinearWeight::kFp8Block: return vec ? down_direct_pick<LinearWeight::kFp8Block, true>(p, stream)
                                               : down_direct_pick<LinearWeight::kFp8Block, false>(p, stream);
      case LinearWeight::kNvfp4: return vec ? down_direct_pick<LinearWeight::kNvfp4, true>(p, stream)
                                            : down_direct_pick<LinearWeight::kNvfp4, false>(p, stream);
    }
    return cudaErrorInvalidValue;
  }
  if (p.direct_multi) {  // NVFP4 stacks take it on nvfp4_kernel.cu only (launch.cpp)
    switch (f) {
      case LinearWeight::kF32: return down_multi_pick<LinearWeight::kF32>(p, vec, m_tile, stream);
      case LinearWeight::kBF16: return down_multi_pick<LinearWeight::kBF16>(p, vec, m_tile, stream);
      case LinearWeight::kFp8Block: return down_multi_pick<LinearWeight::kFp8Block>(p, vec, m_tile, stream);
      case LinearWeight::kNvfp4: break;
    }
    return cudaErrorInvalidValue;
  }
  return pick<false>(f, vec, m_tile)(p, stream);
}

}  // namespace pg::ops::cuda
