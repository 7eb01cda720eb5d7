// The NVFP4 MoE expert kernels on the f16 tensor cores (MoeExpertsArgs::f16_activations): gate_up
// (h = silu(gate·x) * (up·x), x rounded to f16), down direct (m = 1, one warp per slot) and down
// planned (a warp walks the active experts), each streaming weight rows through
// linear/nvfp4_mma.cuh's core (exact f16 weights, up to 8 pairs as the mma's N, f32 sums). Same
// grids, workspace, h layout and summation order over a token's experts as kernel.cu's kernels;
// h is rounded to f16 as down reads it. The CPU definition is ops::cpu::moe_experts.
#include <cuda_runtime.h>

#include <algorithm>

#include "ops/cuda/common/device.h"
#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/smem_limit.cuh"
#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/linear/nvfp4_mma.cuh"
#include "ops/cuda/moe_experts/block_routing.cuh"
#include "ops/cuda/moe_experts/common.cuh"
#include "ops/cuda/moe_experts/nvfp4_params.h"

namespace pg::ops::cuda {
namespace {


// Row `row` of a stack: its codes, e4m3 scales and scale_2 * 2^14 (the unpack's factor).
__device__ __forceinline__ const uint8_t* codes_row(const MoeWeightParams& w, int64_t row, int64_t k) {
  return static_cast<const uint8_t*>(w.data) + row * (k / 2);
}
__device__ __forceinline__ const uint8_t* scales_row(const MoeWeightParams& w, int64_t row) {
  return w.scale_fp8 + row * w.scale_fp8_cols;
}
__device__ __forceinline__ float scale_2_raw(const MoeWeightParams& w, int64_t row) {
  return w.scale_2_rows ? __ldg(w.scale_2_rows + row / w.scale_2_group_rows) : w.scale_2;
}
__device__ __forceinline__ float scale_2_of(const MoeWeightParams& w, int64_t row) {
  return scale_2_raw(w, row) * kE2m1F16Unscale;
}

// Row g + 8h of the 16-row down tile at row0 of `expert` (lane g's mma rows) in the down stack.
// Rows past hidden re-read the last one and are never written.
__device__ __forceinline__ int64_t down_tile_row(const MoeExpertsParams& p, int64_t expert, int64_t row0, int g, int h) {
  return expert * p.hidden + min(row0 + g + 8 * h, int64_t(p.hidden) - 1);
}
// Rows g and g + 8 of that tile: codes, e4m3 scales and scale_2 * 2^14.
__device__ __forceinline__ void down_tile_rows(const MoeExpertsParams& p, int64_t expert, int64_t row0, int g,
                                               const uint8_t* (&wrow)[1][2], const uint8_t* (&srow)[1][2],
                                               float (&s2)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = down_tile_row(p, expert, row0, g, h);
    wrow[0][h] = codes_row(p.down, row, p.inter);
    srow[0][h] = scales_row(p.down, row);
    s2[h] = scale_2_of(p.down, row);
  }
}

// A gate_up block's unit of work: one expert slot's inter rows at j0 (the warp's), for the slot's
// pairs [lo, hi).
struct GateUpUnit {
  int64_t expert = 0;
  int lo = 0, hi = 0;
  int64_t h_base = 0;  // shared: h row of token 0
  uint64_t pairs = 0;  // direct multi, routed: the expert's flat pair indices (bit i: pair i)
  bool shared = false;
  int64_t j0 = 0;
};

// A shared expert's unit: expert s, its pass j's pairs (`slots` passes each; 1 on the direct paths).
__device__ __forceinline__ GateUpUnit gate_up_shared_unit(const MoeExpertsParams& p, int s, int j, int slots) {
  GateUpUnit u;
  u.shared = true;
  u.expert = p.n_experts + s;
  u.lo = slots > 1 ? j * kMmaTokens : 0, u.hi = slots > 1 ? min(p.m, u.lo + kMmaTokens) : p.m;
  u.h_base = int64_t(p.m) * p.top_k + int64_t(s) * p.m;
  return u;
}

// kKSplit = 2's second-half sums, one array a kernel (not one a caller of gate_up_nvfp4_unit).
template <int kRowWarps, int kTiles>
__device__ __forceinline__ float (&gate_up_half_sums())[kRowWarps][kTiles][4][kWarpSize] {
  __shared__ float s_half[kRowWarps][kTiles][4][kWarpSize];
  return s_half;
}

// The unit's work for this warp: its rows' weights streamed (kStagedX: through the warp's ring, x
// from the block's staged rows, stage_x called once the ring's first stages are out; per lane: x
// from L2), then h (and h16) written. wait: the ring waits for the kernel before (PDL) ahead of
// stage_x. Warps past inter and kHalves' second-half warps return after the block's barriers.
template <int kTiles, int kUnroll, bool kStagedX, int kWarps, int kKSplit, class StageX>
__device__ __forceinline__ void gate_up_nvfp4_unit(const MoeExpertsParams& p, const GateUpUnit& u, int warp_id,
                                                   int lane, StageX&& stage_x, bool wait) {
  constexpr int kRowWarps = kStagedX ? kWarps / kKSplit : kWarps;  // warps with distinct rows
  constexpr bool kHalves = kStagedX && kKSplit > 1;                // warps split by K half
  const int warp = kHalves ? warp_id % kRowWarps : warp_id, half = kHalves ? warp_id / kRowWarps : 0;
  const int g = lane / 4, t = lane % 4;
  const int64_t j0 = u.j0;
  const uint8_t* wrow[kTiles][2];
  const uint8_t* srow[kTiles][2];
  float s2[kTiles][2];
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // gate, up
      const int64_t j = min(j0 + 8 * i + g, int64_t(p.inter) - 1);  // past inter: re-read, never written
      const int64_t row = u.expert * 2 * p.inter + h * int64_t(p.inter) + j;
      wrow[i][h] = codes_row(p.gate_up, row, p.hidden);
      srow[i][h] = scales_row(p.gate_up, row);
      // Raw here, times 2^14 where used (exact either way): a multiply here waited for the load
      // before the ring's first copies went out (ncu, 2026-12-03: ptxas kept it in the load's block).
      s2[i][h] = scale_2_raw(p.gate_up, row);
    }
  const int64_t k_chunks = p.hidden / 32, k_steps = (k_chunks + 3) / 4;
  const int64_t k_half = (k_steps + kKSplit - 1) / kKSplit;  // k-steps of the first half
  // This warp's k-steps (staged: its half; per lane: all of them, in halves below).
  const int64_t s0 = kHalves ? min(k_steps, half * k_half) : 0, s1 = kHalves ? min(k_steps, s0 + k_half) : k_steps;

  for (int q = u.lo + int(blockIdx.z) * kMmaTokens; q < u.hi; q += int(gridDim.z) * kMmaTokens) {
    const int m_valid = min(kMmaTokens, u.hi - q);
    float acc[kTiles][4];
    // Lane g's column: pair q + g's token (past the slot's pairs: token 0, a column never written).
    int64_t token = 0;
    if (g < m_valid) {
      const int pi = q + g;
      token = p.direct         ? 0
              : u.shared       ? pi
              : p.direct_multi ? nth_set_bit(u.pairs, pi) / p.top_k
                               : p.plan.pair_flat[pi] / p.top_k;
    }
    if constexpr (kStagedX) {  // one pass: m <= kMoeDirectMaxTokens (the direct paths) pairs per slot
      static_assert(kMoeDirectMaxTokens <= kMmaTokens, "a direct slot's pairs fit one pass");
      extern __shared__ uint4 gate_up_nvfp4_smem[];  // moe_nvfp4_gate_up_staged_bytes: m rows of x, then the rings
      const int rows = p.direct ? 1 : p.m;
      const int64_t row_vecs = k_steps * kNvfp4MmaXStepVecs;
      nvfp4_mma_stream_ring<kTiles, kUnroll, /*kWholeSteps=*/true>(
          wrow, srow, stage_x, gate_up_nvfp4_smem + token * row_vecs,
          nvfp4_x1_ring<kTiles, kUnroll>(gate_up_nvfp4_smem, p.hidden, rows, warp_id), k_chunks, s0,
          j0 < p.inter ? s1 : s0, acc, wait);
      pg_tl_mark(TimelineKernel::kGateUp, 2);
      if constexpr (kKSplit > 1) {  // the second half's sums to the first half's warp
        auto& s_half = gate_up_half_sums<kRowWarps, kTiles>();
        if (half == 1)
#pragma unroll
          for (int i = 0; i < kTiles; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) s_half[warp][i][j][lane] = acc[i][j];
        __syncthreads();
        if (half == 1) return;
#pragma unroll
        for (int i = 0; i < kTiles; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] += s_half[warp][i][j][lane];
      }
      if (j0 >= p.inter) return;
    } else {
      const float* xr = g < m_valid ? p.x + token * p.hidden : nullptr;
      nvfp4_mma_stream<kTiles, kUnroll, false>(wrow, srow, xr, k_chunks, 0, k_half, acc);
      if constexpr (kKSplit > 1) {  // the second half into its own sums, then added as the staged path adds them
        float acc2[kTiles][4];
        nvfp4_mma_stream<kTiles, kUnroll, false>(wrow, srow, xr, k_chunks, k_half, k_steps, acc2);
#pragma unroll
        for (int i = 0; i < kTiles; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] += acc2[i][j];
      }
    }
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int pair = 2 * t + c;
        const int64_t j = j0 + 8 * i + g;
        const float gate = acc[i][c] * (s2[i][0] * kE2m1F16Unscale);
        const float up = acc[i][2 + c] * (s2[i][1] * kE2m1F16Unscale);
        const float v = silu(gate) * up;
        // p.plan.h16: lane g < 4 also writes the f16 pair (element j, element j + 4) of its column,
        // word g of the B fragment vector that holds j's group of 8 (nvfp4_mma_x_vec's pairs; j0 and
        // the tile's rows are multiples of 8). Every lane shuffles: lane g + 4 holds j + 4.
        const float v4 = p.plan.h16 ? __shfl_down_sync(kFullMask, v, 4 * 4) : 0.0f;
        if (pair < m_valid && j < p.inter) {
          // h row: shared pair (s, t) at h_base + t; routed: the plan's pair position, or (direct,
          // direct multi) the pair's flat index.
          const int64_t h_row = u.shared         ? u.h_base + q + pair
                                : p.direct_multi ? nth_set_bit(u.pairs, q + pair)
                                                 : q + pair;
          p.plan.h[h_row * p.inter + j] = v;
          if (p.plan.h16 && g < 4) {
            const int64_t row_words = (int64_t(p.inter) / 32 + 3) / 4 * (kNvfp4MmaXStepVecs * 4);
            const int64_t word = h_row * row_words + (j / 128) * (kNvfp4MmaXStepVecs * 4) +
                                 (4 * ((j % 32) / 8) + (j / 32) % 4) * 4 + g;
            reinterpret_cast<uint32_t*>(p.plan.h16)[word] = f32x2_to_f16x2_sat(v, v4);
          }
        }
      }
  }
}

// Grid: x = inter row tiles (kWarps x 8 x kTiles rows per block), y = expert slot (max_active
// routed, then n_shared shared), z = splits of the slot's pair passes (as moe_gate_up_kernel).
// Tile i of a warp: mma rows g = gate rows j0 + 8i + g, rows g + 8 = the matching up rows; lane
// (g, t) ends with gate and up of row j0 + 8i + g for pairs 2t, 2t + 1 of the pass. kStagedX: m = 1
// (p.direct) or 2..8 (p.direct_multi), nvfp4_x1_ok, K % 128 == 0: the step's x rows (m of them) are staged
// once per block as f16 B fragments (moe_nvfp4_gate_up_staged_bytes), lane g reads its pair's token
// row, and the weights stream through each warp's shared-memory ring (nvfp4_mma_stream_ring; the
// same f16 values in the same mma slots, the same sums in the same order as the per-lane path).
// A slot has at most m <= 8 pairs, one pass of the mma's 8 columns. Per lane (!kStagedX), lane g
// reads its pair's x from L2 at every k-step, in line with its weight loads. kWarps: warps per
// block (moe_nvfp4_gate_up_warps). Staged at 4 warps: at least 6 blocks per SM, 80 registers (no
// spill; at 5 blocks ptxas took 85, and three such blocks left no room in the register file for the
// prefetching down's 512 x 64 beside them): moonlight's 2-token grid of 14 slots x 44 blocks is 616
// blocks, one wave. At one token the launch may cap the blocks per SM (gate_up_launch).
//
// kKSplit = 2 (moe_nvfp4_gate_up_k_split): each row's K in two halves summed apart, then added
// (acc = first half's + second half's). Staged: twice the warps for the same rows, warp w on rows
// of row warp w % (kWarps / 2) and half w / (kWarps / 2), the halves meeting in shared memory (at
// moonlight's one-token grid 10.7 warps an SM did not hide the unpack's dependent chains: ncu, 16%
// occupancy, 52% of cycles with no eligible warp); per lane, one warp streams both halves into
// two sums. The same bits on every path for a given split.
//
// kPersist (p.direct_multi, staged x; MoeNvfp4Variant::gate_up_persist_blocks): a 1-D grid of at
// most the blocks resident at once, block b taking units b, b + gridDim.x, ... of a flat index:
// the shared experts' (slot, row tile) units first (they need no routing), then the step's
// distinct routed experts' (none past their count). The grid of a block a unit (routed slots up to
// max_active, most of them past the step's distinct experts at 4 tokens) runs in more than one wave
// at moonlight's verify sizes (~1,000 blocks against 792 resident on an H100), and the blocks of
// its second wave pile up on a few SMs (session 47's timeline); here a block's further units stream
// on the SM it already holds, x staged once. Each unit's sums are the one-unit grid's: the same bits.
// The default where a block a unit would not fit at once (gate_up_launch: measured there).
template <int kTiles, int kUnroll, bool kStagedX, int kWarps, int kKSplit = 1, bool kPersist = false>
__global__ void __launch_bounds__(kWarps * kWarpSize,
                                  kStagedX && kKSplit > 1  ? 3
                                  : kStagedX && kWarps == 4 ? 6
                                                            : kMoeMinBlocksPerSm * kMoeWarps / kWarps)
    moe_gate_up_nvfp4_kernel(const __grid_constant__ MoeExpertsParams p) {
  static_assert(kKSplit == 1 || kKSplit == 2, "K in one or two halves");
  static_assert(!kPersist || kStagedX, "the persistent grid stages x once per block");
  constexpr int kJ = 8 * kTiles;  // inter rows per warp
  constexpr int kRowWarps = kStagedX ? kWarps / kKSplit : kWarps;  // warps with distinct rows
  const unsigned tid = kStagedX ? pinned_thread_idx() : threadIdx.x;  // pinned: for the ring's loop
  const int warp_id = tid / kWarpSize, lane = tid % kWarpSize;
  constexpr bool kHalves = kStagedX && kKSplit > 1;
  const int warp = kHalves ? warp_id % kRowWarps : warp_id;  // the warp's rows in the block's
  // kStagedX: the step's x rows, staged once per block. A routed slot issues its share's first loads
  // right after its wait, beside the expert id's load, so that the two L2 round trips overlap (ncu,
  // 2026-12-03, moonlight: the conversions waiting for x were 8% of the kernel's stall samples).
  Nvfp4XStager<2> x_stager(p.x, p.hidden, p.direct ? 1 : p.m, p.hidden / 32, (p.hidden / 32 + 3) / 4);
  pg_tl_mark(TimelineKernel::kGateUp, 0);
  extern __shared__ uint4 gate_up_nvfp4_dyn[];
  if constexpr (kPersist) {
    // 32-bit unit indices (the launch's grid: (slots) x (row tiles) < 2^31), one 32-bit division a
    // unit: a 64-bit one is a ~70-instruction call before the unit's first weight copy (the first build
    // made four; at k = 1's one unit a block it ran 3.0% slower than the one-unit grid, with these 2.6%).
    const int tiles = (p.inter + kRowWarps * kJ - 1) / (kRowWarps * kJ);
    const int shared_units = p.n_shared * tiles;
    int units = shared_units + p.max_active * tiles;  // at most; the routing tells how many
    // As the one-unit grid: a block whose first unit is routed waits for the routing (PDL) and loads
    // its x share after it; one whose first is shared loads x once its ring's first stages are out.
    const bool routed_first = int(blockIdx.x) >= shared_units;
    bool waited = routed_first, routed = false;
    if (routed_first) {
      pdl_wait();
      pg_tl_mark(TimelineKernel::kGateUp, 1);
      x_stager.load();
    }
    pdl_trigger();
    WarpRouting w;
    // Unit u into `unit`; false past the step's units (block-uniform: every warp reads the same
    // routing).
    auto unit_at = [&](int u, GateUpUnit& unit) {
      if (u >= units) return false;
      if (u < shared_units) {
        const int s = u / tiles;
        unit = gate_up_shared_unit(p, s, 0, 1);
        unit.j0 = (int64_t(u - s * tiles) * kRowWarps + warp) * kJ;
        return true;
      }
      if (!routed) {
        if (!waited) pdl_wait(), waited = true;
        w = warp_routing(p);
        routed = true;
        units = shared_units + __popcll(static_cast<long long>(w.first)) * tiles;
        if (u >= units) return false;
      }
      const int r = u - shared_units, slot = r / tiles;
      unit = GateUpUnit{};  // after a shared unit: not shared, no h_base
      unit.expert = slot_expert(w, slot, unit.pairs);
      unit.lo = 0, unit.hi = __popcll(static_cast<long long>(unit.pairs));
      unit.j0 = (int64_t(r - slot * tiles) * kRowWarps + warp) * kJ;
      return true;
    };
    // The first unit stages x (its own code, so that the stager's registers die with it), the rest
    // stream on.
    GateUpUnit unit;
    if (!unit_at(int(blockIdx.x), unit)) return;
    gate_up_nvfp4_unit<kTiles, kUnroll, kStagedX, kWarps, kKSplit>(
        p, unit, warp_id, lane,
        [&] {
          if (!routed_first) x_stager.load();  // a shared first unit: x comes from the kernel before
          x_stager.finish(gate_up_nvfp4_dyn);
        },
        /*wait=*/false);
    for (int u = int(blockIdx.x + gridDim.x); unit_at(u, unit); u += int(gridDim.x))
      gate_up_nvfp4_unit<kTiles, kUnroll, kStagedX, kWarps, kKSplit>(p, unit, warp_id, lane, [] {}, /*wait=*/false);
  } else {
    // p.self_routing: the block's routing scratch, after what the kernel's dynamic shared memory holds.
    auto routing = [&] {
      return MoeBlockRouting(reinterpret_cast<char*>(gate_up_nvfp4_dyn) + p.routing_smem, p.routing.n_experts);
    };
    const int slot = blockIdx.y;
    const bool shared = slot >= p.max_active;
    GateUpUnit unit;
    // As moe_gate_up_kernel: routed slots wait for the routing (PDL launch) before down may launch
    // (self-routing: for the router's logits, the routing's input; down routes from them too).
    if (!shared) {
      if (p.self_routing) moe_block_route_stage_bias(p.routing, routing(), tid, kWarps * kWarpSize);
      pdl_wait();
      pg_tl_mark(TimelineKernel::kGateUp, 1);
      if constexpr (kStagedX) x_stager.load();
    }
    if (p.direct || p.direct_multi) pdl_trigger();
    if (!shared && p.direct) {
      if (p.self_routing) {  // block_routing.cuh: the block routes the token, x's loads in flight
        const MoeBlockRouting r = routing();
        moe_block_route(p.routing, 0, r);
        pg_tl_mark(TimelineKernel::kGateUp, 4);
        if (slot == 0 && blockIdx.x == 0 && blockIdx.z == 0) moe_block_route_publish(p.routing, 0, r, tid);
        unit.expert = r.idx[slot];
      } else {
        unit.expert = p.expert_idx[slot];
      }
      if (unit.expert < 0 || unit.expert >= p.n_experts) return;  // dropped, as the plan drops it
      unit.lo = slot, unit.hi = slot + 1;
    } else if (!shared && p.direct_multi) {  // slot: the step's slot-th distinct expert, if any
      const WarpRouting w = warp_routing(p);
      if (slot >= __popcll(static_cast<long long>(w.first))) return;
      unit.expert = slot_expert(w, slot, unit.pairs);
      unit.lo = 0, unit.hi = __popcll(static_cast<long long>(unit.pairs));
    } else if (!shared) {
      if (slot >= *p.plan.n_active) return;
      unit.expert = p.plan.active_expert[slot];
      unit.lo = p.plan.seg_begin[slot], unit.hi = p.plan.seg_begin[slot + 1];
    } else {  // shared_slots slots a shared expert (1 on the direct paths, staged x)
      const int slots = kStagedX ? 1 : p.shared_slots;
      unit = gate_up_shared_unit(p, (slot - p.max_active) / slots, (slot - p.max_active) % slots, slots);
    }
    unit.j0 = (int64_t(blockIdx.x) * kRowWarps + warp) * kJ;
    // kStagedX: warps past inter stay for the block's barrier (staging x) with no k-steps, write nothing.
    if (!kStagedX && unit.j0 >= p.inter) return;
    gate_up_nvfp4_unit<kTiles, kUnroll, kStagedX, kWarps, kKSplit>(
        p, unit, warp_id, lane,
        [&] {
          if (shared) x_stager.load();  // after the ring's wait: x comes from the kernel before
          x_stager.finish(gate_up_nvfp4_dyn);
        },
        /*wait=*/!shared);
  }
  pg_tl_mark(TimelineKernel::kGateUp, 3);
}

// h rows 0 .. n_rows - 1 into xs from gate_up's f16 fragments (p.plan.h16) with one bulk copy
// (moe_h_frags_copy), in place of nvfp4_mma_stage_x_rows over p.plan.h: the same f16 values in the
// same places. Warp 0 then writes the zeros the stager writes where gate_up writes nothing (the
// chunks past k_chunks in a row's last k-step). H200 (2026-12-04, c254386, one call alternating with
// PEREGRINE_MOE_NVFP4_H_FRAGS=0): moonlight nvfp4 +0.7%, V3 4L nvfp4 +1.4% (its staged down's 9
// rows), the k = 1 verify step -1.6%.
__device__ __forceinline__ void moe_h_frags_stage(const MoeExpertsParams& p, int n_rows, int64_t k_chunks,
                                                  int64_t k_steps, uint4* xs, uint64_t* bar) {
  const int row_vecs = int(k_steps) * kNvfp4MmaXStepVecs;
  if (!moe_h_frags_copy(p, uint32_t(n_rows * row_vecs * sizeof(uint4)), xs, bar)) return;
  if (const int rem = int(k_chunks % 4)) {
    const int per_row = (4 - rem) * 4;  // chunks rem .. 3 of the last k-step, words q = 0 .. 3 of each
    for (int i = int(threadIdx.x); i < n_rows * per_row; i += kWarpSize) {
      const int r = i / per_row, u = i % per_row;
      xs[r * row_vecs + (row_vecs - kNvfp4MmaXStepVecs) + 4 * (u % 4) + rem + u / 4] = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

// How the m = 1 down feeds its mmas (moe_down_direct_nvfp4_kernel's kMode): h per lane from L2,
// h staged per block, or h staged and the block's weights prefetched to shared memory.
enum class MoeDownMode { kPerLane, kStaged, kPrefetch };

// m = 1 (p.direct), as moe_down_direct_kernel: grid x = hidden row tiles of 16 x kTiles rows, a
// block of n_slots x k_split warps (moe_nvfp4_down_direct_split), one warp per (slot, K slice) with
// h row `slot` as the mma's only real column: 16-row tiles leave few warps (a dense MLP's single
// slot: hidden / 16), so K is split. The first weight loads go out before the wait for h (PDL);
// the partial sums meet in shared memory: each slot's K slices, then the slots in the contract's
// order. kPerLane: lane (0, t) of a warp reads its slot's h from L2 at every k-step. kStaged: the
// block first stages every slot's h row as f16 B fragments in shared memory,
// as the linear kernel stages x (every lane reads its step's fragments with 4 shared loads; the
// per-lane path costs lanes g > 0 its x-load and conversion instructions too: 375 warp
// instructions per KB of weights at moonlight's MoE shape, ncu, 2026-12-01). Same f16 values in
// the same slots, same sums: the same bits. Measured (H200, 2026-12-01, d759236, staged for every
// m = 1 down): moonlight's dense down 21.1 -> 17.5 us (ncu, locked clocks; 4.3M -> 3.0M
// instructions), but V3 nvfp4's MoE op 118.6 -> 132.9 us eager, whose 9 h rows are 8 serial L2
// round trips per thread before the first mma. Re-measured with the same staging (still 9 round
// trips a thread) against the per lane path (H200, 2026-12-03, alternating in one call): V3 4L nvfp4
// 832.3 -> 844.2 tok/s, so staged is the default where the prefetch does not apply (V3's 448 blocks;
// MoeNvfp4Variant::down_staged, PEREGRINE_MOE_NVFP4_DOWN_STAGED=0 turns it off). Since then
// nvfp4_mma_stage_x_rows issues 4 items' loads at once (2 round trips a thread there). kPrefetch: every weight byte of
// the block goes to shared memory before the wait for h: each warp's k-steps are issued at once as
// cp.async stages into its own region (moe_nvfp4_down_prefetch_bytes), then pdl_wait, then every
// slot's h is staged (gate_up's f16 fragments in one bulk copy, moe_h_frags_stage; else
// nvfp4_mma_stage_x_rows) and the mmas read both from shared memory. Launched with PDL
// after gate_up, whose routed blocks let it launch once the routing is complete, its blocks take the
// SMs gate_up leaves room on and fetch their 100-200 KB while gate_up runs; after gate_up only h,
// the mmas and the sums remain. The default where the grid fits one block per SM (down_direct_launch).
// All three modes: the same f16 values in the same mma slots, the same sums, the same bits.
// kPrefetch blocks let the kernels after them launch as they start, so that the next layer's first
// kernel is resident and waiting when this one completes (else it launched at the completion: its
// first block started 1.2 us after the down's last block ended, docs/decode-status.md session 29).
// H200, 2026-12-04, one call alternating, 2 rounds: moonlight nvfp4 633.1 -> 635.2 tok/s (+0.3%),
// V3 4L nvfp4 0.0% (not this mode), the k = 1 verify step 2.186 -> 2.183 ms.
template <int kTiles, int kUnroll, MoeDownMode kMode>
__global__ void __launch_bounds__(kMoeDirectMaxSlots * kWarpSize)
    moe_down_direct_nvfp4_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr int kR = kMmaRows * kTiles;
  __shared__ float s_part[kMoeDirectMaxSlots][kR];  // [rank * k_split + K slice][row]
  __shared__ uint64_t h_bar;                         // moe_h_frags_stage's (staged modes)
  const int n_slots = p.top_k + p.n_shared, k_split = moe_nvfp4_down_direct_split(n_slots);
  const unsigned tid = pinned_thread_idx();
  const int warp = tid / kWarpSize, lane = tid % kWarpSize, g = lane / 4, t = lane % 4;
  const int slot = warp / k_split, kpart = warp % k_split;
  const int64_t row0 = int64_t(blockIdx.x) * kR;
  pg_tl_mark(TimelineKernel::kDown, 0);
  if constexpr (kMode != MoeDownMode::kPerLane) moe_h_frags_init(p, &h_bar);
  if constexpr (kMode == MoeDownMode::kPrefetch) pdl_trigger();
  // p.self_routing: the block routes the token before its wait (block_routing.cuh), from the logits
  // the router completed before gate_up's routed blocks let this kernel launch; its scratch after
  // the mode's dynamic shared memory.
  extern __shared__ uint4 down_nvfp4_dyn[];
  const MoeBlockRouting routing(reinterpret_cast<char*>(down_nvfp4_dyn) + p.routing_smem, p.routing.n_experts);
  if (p.self_routing) {
    moe_block_route_stage_bias(p.routing, routing, tid, blockDim.x);
    moe_block_route_call(p.routing, 0, routing);
    pg_tl_mark(TimelineKernel::kDown, 5);
  }
  const auto [expert, rank, shared, valid] = moe_direct_slot(p, slot, p.self_routing ? routing.idx : p.expert_idx);
  const uint8_t* wrow[kTiles][2];
  const uint8_t* srow[kTiles][2];
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = (valid ? expert : 0) * p.hidden + min(row0 + kMmaRows * i + g + 8 * h, int64_t(p.hidden) - 1);
      wrow[i][h] = codes_row(p.down, row, p.inter);
      srow[i][h] = scales_row(p.down, row);
    }
  // Each output row's scale_2 (raw), loaded before the weights and the wait where registers allow
  // (one tile; at two the 64-register kernels spilled): otherwise the epilogue loads it after the
  // mmas, one more round trip on the layer's path.
  auto s2_row = [&](int i, int h) {
    return scale_2_raw(p.down, (valid ? expert : 0) * p.hidden +
                                   min(row0 + kMmaRows * i + g + 8 * h, int64_t(p.hidden) - 1));
  };
  float s2[kTiles][2] = {};
  if constexpr (kTiles == 1) s2[0][0] = s2_row(0, 0), s2[0][1] = s2_row(0, 1);
  const int64_t k_chunks = p.inter / 32, k_steps = valid ? (k_chunks + 3) / 4 : 0;
  const int64_t per_part = (k_steps + k_split - 1) / k_split;
  const int64_t s0 = min(k_steps, kpart * per_part), s1 = min(k_steps, s0 + per_part);
  const int64_t all_steps = (k_chunks + 3) / 4;  // the staged h's k-steps per row (every slot's)
  float acc[kTiles][4];
  if constexpr (kMode == MoeDownMode::kPrefetch) {
    using Stage = Nvfp4RingStage<kTiles, kUnroll>;
    extern __shared__ uint4 down_prefetch_smem[];  // [warps][stages] Stage, then the staged h
    const int stages = moe_nvfp4_down_prefetch_stages(all_steps, k_split, kUnroll);
    Stage* ring = reinterpret_cast<Stage*>(down_prefetch_smem) + int64_t(warp) * stages;
    uint4* xs = reinterpret_cast<uint4*>(reinterpret_cast<Stage*>(down_prefetch_smem) + int64_t(blockDim.x / kWarpSize) * stages);
    const int n = s1 > s0 ? int((s1 - s0 + kUnroll - 1) / kUnroll) : 0;
    // Whole stages (every step below s1 and inside K) through the lane's pointers, a last partial one
    // with the clamps (nvfp4_lane_issue_tail, nvfp4_mma.cuh).
    const int nw = nvfp4_lane_whole_stages(int(s0), int(s1), int(k_chunks), kUnroll, false);
    const Nvfp4LaneRing<kTiles, kUnroll> lr(ring, lane);
    constexpr int kSlot = Nvfp4LaneRing<kTiles, kUnroll>::kBytes;
    {
      const uint64_t policy = l2_evict_first_policy();
      Nvfp4LaneSrc<kTiles> src;
      src.at(wrow, srow, s0, t);
      int j = 0;
      for (; j < nw; ++j) nvfp4_lane_issue<kTiles, kUnroll>(src, lr.w_at(j * kSlot), lr.sc_at(j * kSlot), policy);
      if (j < n)
        nvfp4_lane_issue_tail<kTiles, kUnroll>(src, lr.w_at(j * kSlot), lr.sc_at(j * kSlot), policy, int(s0) + j * kUnroll,
                                               int(s1), int(k_chunks), t);
    }
    pdl_wait();  // h comes from gate_up
    pg_tl_mark(TimelineKernel::kDown, 1);
    if (p.plan.h16) moe_h_frags_stage(p, n_slots, k_chunks, all_steps, xs, &h_bar);
    else nvfp4_mma_stage_x_rows(p.plan.h, p.inter, n_slots, k_chunks, all_steps, xs);
    cp_async_wait_all();
    __syncthreads();  // xs staged by every thread; each lane reads only its own copies of the weights
    pg_tl_mark(TimelineKernel::kDown, 2);
#pragma unroll
    for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    const uint4* xl = xs + (int64_t(slot) * all_steps + s0) * kNvfp4MmaXStepVecs + t;
    const uint32_t sel = nvfp4_lane_scale_sel(lane);
    for (int j = 0; j < n; ++j, xl += kUnroll * kNvfp4MmaXStepVecs)
      nvfp4_lane_work<kTiles, kUnroll>(lr.w_at(j * kSlot), lr.sc_at(j * kSlot), xl,
                                       j < nw ? kUnroll : int(s1 - s0) - j * kUnroll, sel, acc);
  } else {
    if constexpr (kMode == MoeDownMode::kStaged) {
      extern __shared__ uint4 down_nvfp4_hs[];  // [n_slots][all k-steps] h as B fragments
      nvfp4_mma_stream_staged_regs<kTiles, kUnroll>(
          wrow, srow,
          [&] {
            if (p.plan.h16) moe_h_frags_stage(p, n_slots, k_chunks, all_steps, down_nvfp4_hs, &h_bar);
            else nvfp4_mma_stage_x_rows(p.plan.h, p.inter, n_slots, k_chunks, all_steps, down_nvfp4_hs);
          },
          down_nvfp4_hs + slot * all_steps * kNvfp4MmaXStepVecs, k_chunks, s0, s1, acc);
    } else {
      const float* xrow = g == 0 ? p.plan.h + int64_t(slot) * p.inter : nullptr;
      nvfp4_mma_stream<kTiles, kUnroll, true>(wrow, srow, xrow, k_chunks, s0, s1, acc);
    }
    pdl_wait();  // warps without k-steps; y is written below
  }
  const float wgt = shared ? 1.0f : valid ? (p.self_routing ? routing.weight : p.expert_weight)[slot] : 0.0f;
  if (t == 0) {  // d0 / d2: rows g / g + 8, token 0
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = kMmaRows * i + g + 8 * h;
        const float s2r = kTiles == 1 ? s2[i][h] : s2_row(i, h);
        s_part[rank * k_split + kpart][r] = valid ? wgt * (acc[i][2 * h] * (s2r * kE2m1F16Unscale)) : 0.0f;
      }
  }
  __syncthreads();
  pg_tl_mark(TimelineKernel::kDown, 3);
  const int r = threadIdx.x;
  const int64_t row = row0 + r;
  if (r < kR && row < p.hidden) {
    float v = 0.0f;
    for (int k = 0; k < n_slots; ++k) {  // slots by rank; each slot's K slices first
      float d = s_part[k * k_split][r];
      for (int kp = 1; kp < k_split; ++kp) d += s_part[k * k_split + kp][r];
      v += d;
    }
    float* yp = p.y + row;
    *yp = p.accumulate ? *yp + v : v;
  }
  pg_tl_mark(TimelineKernel::kDown, 4);
}

// Task `task` of a multi down warp (moe_down_multi_nvfp4_kernel): its expert slot, K slice, and lane
// g's weight rows (g and g + 8 of the tile at row0) with their scale_2. Warp-uniform (moe_multi_slot).
struct MoeMultiTask {
  MoeMultiSlot slot;
  int kpart = 0;
  const uint8_t* wrow[1][2];
  const uint8_t* srow[1][2];
  float s2[2];
};
__device__ __forceinline__ MoeMultiTask moe_multi_task(const MoeExpertsParams& p, const WarpRouting& w, int task,
                                                      int k_split, int n_distinct, int64_t row0, int g) {
  MoeMultiTask k;
  const int slot = task / k_split;
  k.kpart = task % k_split;
  k.slot = moe_multi_slot(p, w, slot, n_distinct);
  down_tile_rows(p, k.slot.expert, row0, g, k.wrow, k.srow, k.s2);
  return k;
}

// Lane (g, t)'s d columns 2t and 2t + 1 of a multi down pass with m_valid columns (column c: h row
// h_row(c)): each one's h row and weight (shared: 1; past m_valid: h row 0, weight 0), once each. The
// ring path reads them before the pass's mmas (the weights' loads hide under them); the per-lane path
// after, where its registers are (read before, its unroll-4 kernel spilled 60 bytes instead of 8).
template <class HRow>
__device__ __forceinline__ void moe_down_multi_cols(const MoeExpertsParams& p, int t, int m_valid, bool shared,
                                                    HRow&& h_row, int (&hr)[2], float (&wgt)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int c = 2 * t + h;
    hr[h] = c < m_valid ? h_row(c) : 0;
    wgt[h] = shared ? 1.0f : c < m_valid ? p.expert_weight[hr[h]] : 0.0f;
  }
}

// A multi down pass's d fragment into the block's partial sums: weight x (sum x scale_2) for each of
// its m_valid columns and the tile's 16 output rows, at s_part[part0 + h row]; lane (g, t) holds rows
// g and g + 8 of columns 2t and 2t + 1 (hr, wgt: moe_down_multi_cols).
__device__ __forceinline__ void moe_down_multi_part(float (*s_part)[kMmaRows], int part0, int g, int t, int m_valid,
                                                    const int (&hr)[2], const float (&wgt)[2], const float (&acc)[4],
                                                    const float (&s2)[2]) {
#pragma unroll
  for (int j = 0; j < 4; ++j)  // d fragment j: row g + 8 (j / 2), column 2t + j % 2
    if (2 * t + j % 2 < m_valid) s_part[part0 + hr[j % 2]][g + 8 * (j / 2)] = wgt[j % 2] * (acc[j] * s2[j / 2]);
}

// 2 <= m <= kMoeDirectMaxTokens (p.direct_multi), as moe_down_multi_kernel with the m = 1 kernel's
// arithmetic: grid x = hidden row tiles of 16 rows, a block of kMoeDirectMaxSlots warps. Every
// warp derives the step's distinct routed experts from expert_idx (warp_routing) and takes the
// (expert slot, K slice) tasks warp, warp + kMoeDirectMaxSlots, ...: distinct routed experts in
// order of first appearance, then the shared ones, K cut into moe_nvfp4_down_direct_split(top_k +
// n_shared) slices as the m = 1 kernel cuts it. A task streams its expert's 16 rows once for all
// of its pairs (the mma's 8 columns; a pass per 8 pairs) and leaves weight * down·h per (K slice,
// h row, output row) in shared memory; the block then adds each token's terms in the m = 1
// kernel's order (a pair's K slices first, then the pairs by (expert id, slot), then the shared
// experts), so a token's output has the bits it has alone. Launched with PDL after gate_up: a
// warp issues its first task's weight loads, then waits for h.
//
// kRing (moe_nvfp4_down_multi_ring_bytes): a warp's tasks are one stream of k-steps through its
// cp.async ring of kMoeNvfp4DownMultiRingStages slots, so the next task's weights are in flight
// while this one multiplies (per lane, a task's loads wait for the task before it: at 2 tokens
// moonlight's 27 tasks on 16 warps are two rounds of round trips); all but one of its slots go out
// before the wait for h, then the block stages every h row as f16 B fragments (moe_h_frags_stage's one
// copy, or nvfp4_mma_stage_x_rows) and lane g
// reads its pair's row from shared memory. One pass per task (m <= 8 pairs). The same f16 values in
// the same mma slots, the same sums: the same bits. A task's setup is split by what needs it: the
// issuing cursor only its expert's rows (one shuffle, the copy sources built once a task under one
// L2 policy a warp); the multiplying loop the pairs, and loads scale_2 and the pairs' weights before
// the mmas that hide them. K slices by shifts (k_split is a power of two), in 32 bits.
template <int kUnroll, bool kRing>
__global__ void __launch_bounds__(kMoeDirectMaxSlots * kWarpSize)
    moe_down_multi_nvfp4_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr int kR = kMmaRows, kWarps = kMoeDirectMaxSlots;
  // k_split x n_h <= kMoeDirectMaxHRows: split x (top_k + n_shared) <= kMoeDirectMaxSlots when the
  // split is > 1 (moe_nvfp4_down_direct_split), and m <= 8 with m x (top_k + n_shared) <= 128.
  static_assert(kMoeDirectMaxSlots * kMoeDirectMaxTokens <= kMoeDirectMaxHRows, "s_part holds every (K slice, h row)");
  __shared__ float s_part[kMoeDirectMaxHRows][kR];     // [K slice * n_h + h row][output row]
  __shared__ int32_t s_order[kMoeDirectMaxRouted];     // [m, top_k]: token t's pairs in summing order (-1: dropped)
  __shared__ uint64_t h_bar;                           // moe_h_frags_stage's (kRing)
  const unsigned tid = pinned_thread_idx();
  const int warp = tid / kWarpSize, lane = tid % kWarpSize, g = lane / 4, t = lane % 4;
  const int n_routed = p.m * p.top_k, n_h = p.m * (p.top_k + p.n_shared);
  const int k_split = moe_nvfp4_down_direct_split(p.top_k + p.n_shared);
  const WarpRouting w = warp_routing(p);
  const int n_distinct = __popcll(static_cast<long long>(w.first));
  const int n_tasks = (n_distinct + p.n_shared) * k_split;
  const int64_t row0 = int64_t(blockIdx.x) * kR;
  const int64_t k_chunks = p.inter / 32, k_steps = (k_chunks + 3) / 4;
  if constexpr (kRing) {
    static_assert(kMoeDirectMaxTokens <= kMmaTokens, "a task's pairs fit one pass");
    constexpr int kRingStages = kMoeNvfp4DownMultiRingStages(kUnroll);
    using Stage = Nvfp4RingStage<1, kUnroll>;
    moe_h_frags_init(p, &h_bar);
    extern __shared__ uint4 down_multi_smem[];  // [n_h] staged h rows, then [warps][kRingStages] Stage
    const int steps = int(k_steps), row_vecs = steps * kNvfp4MmaXStepVecs;
    uint4* xs = down_multi_smem;
    Stage* ring = reinterpret_cast<Stage*>(down_multi_smem + n_h * row_vecs) + warp * kRingStages;
    const int ks_shift = __ffs(k_split) - 1, per_part = (steps + k_split - 1) >> ks_shift;
    auto steps_of = [&](int task, int& s0, int& s1) {
      s0 = min(steps, (task & (k_split - 1)) * per_part), s1 = min(steps, s0 + per_part);
      return (s1 - s0 + kUnroll - 1) / kUnroll;  // its ring stages
    };
    int total = 0;
    for (int task = warp; task < n_tasks; task += kWarps) {
      int s0, s1;
      total += steps_of(task, s0, s1);
    }
    // The issuing cursor runs kRingStages - 1 stages ahead of the multiplying loop, over the same
    // tasks: c_left stages of the task left, c_whole of them whole (every step below c_s1 and inside
    // K; at most the task's last is not), its next at k-step c_s, through the lane's pointers
    // (nvfp4_lane_issue / nvfp4_lane_issue_tail, nvfp4_mma.cuh).
    const uint64_t policy = l2_evict_first_policy();
    int c_task = warp - kWarps, c_left = 0, c_whole = 0, c_s = 0, c_s1 = 0, issued = 0;
    Nvfp4LaneSrc<1> c_src;
    const Nvfp4LaneRing<1, kUnroll> lr(ring, lane);
    constexpr int kSlot = Nvfp4LaneRing<1, kUnroll>::kBytes;
    auto issue = [&](int slot_off) {  // warp-uniform (slot_expert_id's shuffle)
      if (issued++ >= total) {
        cp_async_commit();
        return;
      }
      while (c_left == 0) {
        c_task += kWarps;
        c_left = steps_of(c_task, c_s, c_s1);
        c_whole = nvfp4_lane_whole_stages(c_s, c_s1, int(k_chunks), kUnroll, false);
        const int slot = c_task >> ks_shift;
        const int64_t expert = slot < n_distinct ? slot_expert_id(w, slot) : p.n_experts + (slot - n_distinct);
        const uint8_t* wrow[1][2];
        const uint8_t* srow[1][2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t row = down_tile_row(p, expert, row0, g, h);
          wrow[0][h] = codes_row(p.down, row, p.inter);
          srow[0][h] = scales_row(p.down, row);
        }
        c_src.at(wrow, srow, c_s, t);
      }
      if (c_whole > 0) nvfp4_lane_issue<1, kUnroll>(c_src, lr.w_at(slot_off), lr.sc_at(slot_off), policy), --c_whole;
      else nvfp4_lane_issue_tail<1, kUnroll>(c_src, lr.w_at(slot_off), lr.sc_at(slot_off), policy, c_s, c_s1,
                                                   int(k_chunks), t);
      c_s += kUnroll, --c_left;
    };
#pragma unroll
    for (int j = 0; j < kRingStages - 1; ++j) issue(j * kSlot);
    pdl_wait();  // h comes from gate_up
    if (p.plan.h16) moe_h_frags_stage(p, n_h, k_chunks, k_steps, xs, &h_bar);
    else nvfp4_mma_stage_x_rows(p.plan.h, p.inter, n_h, k_chunks, k_steps, xs);
    __syncthreads();
    const uint32_t sel = nvfp4_lane_scale_sel(lane);
    Nvfp4SlotCursor<kRingStages, kSlot> cur;
    for (int task = warp; task < n_tasks; task += kWarps) {
      const int kpart = task & (k_split - 1);
      const auto [expert, pairs, n_pairs, h_base, shared] = moe_multi_slot(p, w, task >> ks_shift, n_distinct);
      const int m_valid = n_pairs;  // <= 8: one pass
      auto h_row = [&](int c) { return shared ? h_base + c : nth_set_bit(pairs, c); };
      // Read after the mmas, loaded before them: scale_2 * 2^14 of rows g and g + 8 (as down_tile_rows),
      // and the h rows and weights of this lane's d columns.
      float s2[2], wgt[2];
      int hr[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) s2[h] = scale_2_of(p.down, down_tile_row(p, expert, row0, g, h));
      moe_down_multi_cols(p, t, m_valid, shared, h_row, hr, wgt);
      int s0, s1;
      const int n = steps_of(task, s0, s1);
      const uint4* xl = xs + h_row(g < m_valid ? g : 0) * row_vecs;  // past the pairs: a column never written
      float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
      const int nw = nvfp4_lane_whole_stages(s0, s1, int(k_chunks), kUnroll, false);
      const uint4* xj = xl + s0 * kNvfp4MmaXStepVecs + t;
      for (int j = 0; j < n; ++j, xj += kUnroll * kNvfp4MmaXStepVecs) {
        issue(cur.wr);
        cp_async_wait<kRingStages - 1>();  // this stage's group has landed
        nvfp4_lane_work<1, kUnroll>(lr.w_at(cur.rd), lr.sc_at(cur.rd), xj, j < nw ? kUnroll : s1 - s0 - j * kUnroll,
                                    sel, acc);
        cur.next();
      }
      moe_down_multi_part(s_part, kpart * n_h, g, t, m_valid, hr, wgt, acc[0], s2);
    }
  } else {  // h per lane from L2
    const int64_t per_part = (k_steps + k_split - 1) / k_split;
    for (int task = warp; task < n_tasks; task += kWarps) {  // warp-uniform: slot_expert's shuffles see every lane
      const MoeMultiTask k = moe_multi_task(p, w, task, k_split, n_distinct, row0, g);
      const auto [expert, pairs, n_pairs, h_base, shared] = k.slot;
      const int kpart = k.kpart;
      const float(&s2)[2] = k.s2;
      const int64_t s0 = min(k_steps, kpart * per_part), s1 = min(k_steps, s0 + per_part);
      for (int q = 0; q < n_pairs; q += kMmaTokens) {
        const int m_valid = min(kMmaTokens, n_pairs - q);
        // Column c of this pass: pair q + c's h row (routed: its flat index).
        auto h_row = [&](int c) { return shared ? h_base + q + c : nth_set_bit(pairs, q + c); };
        const float* xrow = g < m_valid ? p.plan.h + int64_t(h_row(g)) * p.inter : nullptr;
        float acc[1][4];
        nvfp4_mma_stream<1, kUnroll, true>(k.wrow, k.srow, xrow, k_chunks, s0, s1, acc);
        float wgt[2];
        int hr[2];
        moe_down_multi_cols(p, t, m_valid, shared, h_row, hr, wgt);
        moe_down_multi_part(s_part, kpart * n_h, g, t, m_valid, hr, wgt, acc[0], s2);
      }
    }
  }
  pdl_wait();  // warps without a k-step; y is written below
  moe_token_order(p, s_order);
  __syncthreads();
  moe_down_multi_sum<kR>(p, s_part, s_order, k_split, n_routed, n_h, row0);
}

// The planned path, as moe_down_kernel: grid x = hidden row tiles (kMoeWarps / k_split x 16 rows
// per block), y = token tiles of kMoeNvfp4TokTile. A warp: 16 output rows and a 1/k_split slice of
// K (moe_nvfp4_down_k_split); loops over the active experts (ascending id), then the shared
// experts, in passes of 8 pairs (the mma's N), and adds weight * down·h into its per-token sums in
// shared memory pair by pair in pair order (a token that chose an expert twice keeps its slot
// order); then the K slices' sums are added in slice order. A fixed order, no atomics, but not the
// contract's association when k_split > 1: per token sum_slice (sum_expert w_e d_e,slice) instead of
// sum_expert w_e (sum_slice d_e,slice): at most k_split more roundings of the combine.
template <int kUnroll>
__global__ void __launch_bounds__(kMoeThreads, kMoeMinBlocksPerSm)
    moe_down_nvfp4_kernel(const __grid_constant__ MoeExpertsParams p) {
  extern __shared__ int32_t s_slots[];  // [3][max_active]: expert id, first and end pair in this token tile
  __shared__ float s_acc[kMoeWarps][kMoeNvfp4TokTile][kMmaRows];
  int32_t* s_expert = s_slots;
  int32_t* s_lo = s_slots + p.max_active;
  int32_t* s_hi = s_lo + p.max_active;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
  const int t0 = int(blockIdx.y) * kMoeNvfp4TokTile, t1 = min(p.m, t0 + kMoeNvfp4TokTile);
  const int n_active = *p.plan.n_active;

  moe_tile_segments(p, n_active, t0, t1, s_expert, s_lo, s_hi);
  for (int i = lane; i < kMoeNvfp4TokTile * kMmaRows; i += kWarpSize) (&s_acc[warp][0][0])[i] = 0.0f;
  __syncthreads();

  const int k_split = moe_nvfp4_down_k_split(p.hidden, p.inter), kpart = warp % k_split;
  const int64_t row0 = (int64_t(blockIdx.x) * (kMoeWarps / k_split) + warp / k_split) * kMmaRows;
  const int64_t k_chunks = p.inter / 32, k_steps = (k_chunks + 3) / 4;
  const int64_t per_part = (k_steps + k_split - 1) / k_split;
  const int64_t s0 = min(k_steps, kpart * per_part), s1 = min(k_steps, s0 + per_part);
  // Rows past hidden: no slots (the barrier below is reached by every warp).
  const int n_slots = row0 < p.hidden ? n_active + p.n_shared : 0;
  for (int slot = 0; slot < n_slots; ++slot) {
    const bool shared = slot >= n_active;
    const auto [expert, h_base, lo, hi] = moe_planned_slot(p, slot, n_active, t0, t1, s_expert, s_lo, s_hi);
    if (lo >= hi) continue;
    const uint8_t* wrow[1][2];
    const uint8_t* srow[1][2];
    float s2[2];
    down_tile_rows(p, expert, row0, g, wrow, srow, s2);
    for (int q = lo; q < hi; q += kMmaTokens) {
      const int m_valid = min(kMmaTokens, hi - q);
      const float* xrow = g < m_valid ? p.plan.h + (h_base + q + g) * p.inter : nullptr;
      float acc[1][4];
      nvfp4_mma_stream<1, kUnroll, false>(wrow, srow, xrow, k_chunks, s0, s1, acc);
      for (int i = 0; i < m_valid; ++i) {  // pair order; lane (g, i / 2) holds pair i of rows g, g + 8
        if (t == i / 2) {
          int tok;
          float wgt;
          if (shared) {
            tok = q + i, wgt = 1.0f;
          } else {
            const int f = p.plan.pair_flat[q + i];
            tok = f / p.top_k, wgt = p.expert_weight[f];
          }
          const float v0 = (i % 2 ? acc[0][1] : acc[0][0]) * s2[0], v1 = (i % 2 ? acc[0][3] : acc[0][2]) * s2[1];
          s_acc[warp][tok - t0][g] += wgt * v0;
          s_acc[warp][tok - t0][g + 8] += wgt * v1;
        }
        __syncwarp();
      }
    }
  }
  __syncthreads();
  if (kpart != 0 || row0 >= p.hidden) return;
  for (int idx = lane; idx < (t1 - t0) * kMmaRows; idx += kWarpSize) {
    const int tl = idx / kMmaRows, r = idx % kMmaRows;
    if (row0 + r < p.hidden) {
      float v = s_acc[warp][tl][r];
      for (int kp = 1; kp < k_split; ++kp) v += s_acc[warp + kp][tl][r];  // slice order
      float* yp = p.y + int64_t(t0 + tl) * p.y_stride + row0 + r;
      *yp = p.accumulate ? *yp + v : v;
    }
  }
}

// kKSplit = 2: the staged kernel at kWarps warps (kWarps / 2 rows' warps), the per-lane one at
// kWarps / 2 warps streaming both halves: the same grid.
// persist_blocks (launch_moe_gate_up_nvfp4's): the persistent grid where it applies.
template <int kTiles, int kUnroll, int kWarps = kMoeWarps, int kKSplit = 1>
cudaError_t gate_up_launch(const MoeExpertsParams& p_in, bool multi_staged, int blocks_per_sm, int persist_blocks,
                           cudaStream_t stream) {
  MoeExpertsParams p = p_in;  // routing_smem set below
  const size_t routing_bytes = p.self_routing ? moe_block_routing_bytes(p.routing.n_experts) : 0;
  constexpr int kRowsPerBlock = kWarps / kKSplit * 8 * kTiles;
  const int64_t bx = (int64_t(p.inter) + kRowsPerBlock - 1) / kRowsPerBlock;
  const dim3 grid(unsigned(bx), unsigned(p.max_active + p.n_shared * p.shared_slots), unsigned(moe_gate_up_splits(p.m)));
  // x staged per block: m = 1 always; 2..8 tokens where the m rows leave room for 4 blocks per SM.
  const int rows = p.direct ? 1 : p.m;
  size_t smem = moe_nvfp4_gate_up_staged_bytes(rows, p.hidden, kWarps, kTiles, kUnroll);
  const size_t multi_max =
      kKSplit > 1 ? kMoeNvfp4GateUpSplitMultiStagedMaxBytes : kMoeNvfp4GateUpMultiStagedMaxBytes;
  // The rings copy whole k-steps (K % 128 == 0: no chunk of a step outside K) and a lane's two
  // scales as one aligned 4-byte word.
  if ((p.direct || (p.direct_multi && multi_staged && smem <= multi_max)) && p.hidden % 128 == 0 &&
      nvfp4_x1_ok(p.hidden, p.gate_up.scale_fp8) && p.gate_up.scale_fp8_cols % 4 == 0) {
    // < 0 (the default): at one token, the blocks an SM must hold for the grid to fit in one wave.
    // Registers (80) and shared memory would let 6 share an SM, and placed unevenly some SMs then
    // stream 6 blocks' weights: V3's 576 blocks ran 717.8 tok/s that way against 761.9 at 5 per SM
    // (H200, 2026-12-01, 19fc2f0, one call; moonlight's 352 at 3 per SM: 514.6 vs 514.3). The multi
    // grids keep what their registers allow (their verify figures are at that occupancy). Not when
    // the experts route themselves (only where down prefetches): padded, no down block fit beside
    // gate_up's (moonlight: 3 x 57 KB, down 145 KB), so down fetched its weights only as gate_up's
    // blocks left (the timeline at 27e47fc: none of 36,966 down blocks started on an SM before its
    // last gate_up block ended); unpadded (3 x 26 KB) they fetch while gate_up streams.
    if (blocks_per_sm < 0) {
      const int64_t blocks = int64_t(grid.x) * grid.y * grid.z, sms = current_device_props().sm_count;
      blocks_per_sm = p.direct && !p.self_routing && sms > 0 ? int((blocks + sms - 1) / sms) : 0;
    }
    // Pad the shared memory so that at most blocks_per_sm blocks fit an SM (each block also
    // costs the SM 1 KB of reserved shared memory).
    const int per_sm = current_device_props().smem_per_sm;
    p.routing_smem = uint32_t(smem), smem += routing_bytes;  // the routing scratch after the rings (16-byte multiples)
    if (blocks_per_sm > 0 && per_sm > 0) smem = std::max(smem, size_t(per_sm / (blocks_per_sm + 1) - 1024 + 16));
    static_assert(sizeof(Nvfp4RingStage<kTiles, kUnroll>) == size_t(kTiles) * kUnroll * kNvfp4RingStageBytes,
                  "moe_nvfp4_gate_up_staged_bytes counts the ring's stage size");
    if (p.direct_multi && persist_blocks != 0) {
      // Instantiated for the default tiles (moonlight's 4 warps, V3's K in halves) alone: other tiles
      // take the one-unit grid, unless a grid was asked for (persist_blocks > 0).
      if constexpr (kTiles == 1 && kUnroll == 2 && (kWarps == kMoeNvfp4GateUpWarps || kKSplit == 2)) {
        if (p.self_routing) return cudaErrorInvalidValue;  // the one-token path's alone
        constexpr auto kPersistKernel = moe_gate_up_nvfp4_kernel<kTiles, kUnroll, true, kWarps, kKSplit, true>;
        if (cudaError_t e = raise_smem_limit_once<kPersistKernel>(); e != cudaSuccess) return e;
        int per_sm = 0;
        if (cudaError_t e = blocks_per_sm_once<kPersistKernel>(kWarps * kWarpSize, smem, per_sm); e != cudaSuccess)
          return e;
        const int64_t units = int64_t(grid.x) * grid.y;  // shared_slots is 1 on the direct paths
        const int64_t resident = std::max<int64_t>(1, int64_t(per_sm) * current_device_props().sm_count);
        // The resident grid (persist_blocks < 0, the default) only where a block a unit would not fit
        // at once, and not at K in halves. Measured (H100, 2026-12-06, alternating in one call each):
        // everywhere (ebe232b), moonlight nvfp4's verify steps k = 1 / 2 / 3 +3.1 / -0.9 / -1.7% (k = 1's
        // 616 units fit at once either way), V3 4L nvfp4's k = 1 (1,088 units at K in halves, 396
        // resident) +1.6%; so where it is taken now (8869b1f, 51883fe, a857589) k = 1 0.0 / 0.0 / 0.0%,
        // k = 2 -0.7 / -0.5 / +0.1%, k = 3 -1.6 / -1.6 / -1.7%, decode 0.0%; as the default (2ab78b3,
        // against PERSIST=0) k = 1 / 2 / 3 0.0 / -0.2 / -2.8% (3.076 vs 3.166 ms), decode 0.0%. Open: the
        // kernel at one unit a block in the one-unit grid's order (PERSIST=660 at k = 1) was 2.6-2.8%
        // slower a step than that grid, so a unit costs it something the one-unit kernel does not pay
        // (not the 64-bit divisions, not the order: routed slots first lost, k = 2 / 3 +4.2 / +1.1%).
        if (persist_blocks > 0 || (units > resident && kKSplit == 1)) {
          const int64_t blocks = std::min(units, persist_blocks > 0 ? int64_t(persist_blocks) : resident);
          if (cudaError_t e = launch_pdl_if(p.gate_up_pdl, kPersistKernel, dim3(unsigned(blocks)),
                                            dim3(kWarps * kWarpSize), smem, stream, p);
              e != cudaSuccess)
            return e;
          return cudaGetLastError();
        }
      } else if (persist_blocks > 0) {
        return cudaErrorInvalidValue;
      }
    }
    constexpr auto kKernel = moe_gate_up_nvfp4_kernel<kTiles, kUnroll, true, kWarps, kKSplit>;
    if (cudaError_t e = raise_smem_limit_once<kKernel>(); e != cudaSuccess) return e;
    if (cudaError_t e = launch_pdl_if(p.gate_up_pdl, kKernel, grid, dim3(kWarps * kWarpSize), smem, stream, p);
        e != cudaSuccess)
      return e;
    return cudaGetLastError();
  }
  constexpr int kLaneWarps = kWarps / kKSplit;
  constexpr auto kLaneKernel = moe_gate_up_nvfp4_kernel<kTiles, kUnroll, false, kLaneWarps, kKSplit>;
  p.routing_smem = 0;
  if (cudaError_t e =
          launch_pdl_if(p.gate_up_pdl, kLaneKernel, grid, dim3(kLaneWarps * kWarpSize), routing_bytes, stream, p);
      e != cudaSuccess)
    return e;
  return cudaGetLastError();
}

// p.self_routing: each mode's dynamic shared memory, then the block's routing scratch.
template <int kTiles, int kUnroll>
cudaError_t down_direct_launch(const MoeExpertsParams& p_in, bool staged, bool prefetch, cudaStream_t stream) {
  MoeExpertsParams p = p_in;  // routing_smem set below
  const size_t routing_bytes = p.self_routing ? moe_block_routing_bytes(p.routing.n_experts) : 0;
  const int n_slots = p.top_k + p.n_shared, k_split = moe_nvfp4_down_direct_split(n_slots);
  const int64_t rows_per_block = int64_t(kMmaRows) * kTiles;
  const dim3 grid(unsigned((int64_t(p.hidden) + rows_per_block - 1) / rows_per_block));
  const dim3 block(unsigned(n_slots * k_split * kWarpSize));
  const size_t pb = moe_nvfp4_down_prefetch_bytes(n_slots, p.inter, kTiles, kUnroll);
  if (prefetch && moe_nvfp4_down_prefetch_fits(p, kTiles, kUnroll, routing_bytes, current_device_props().sm_count)) {
    static_assert(sizeof(Nvfp4RingStage<kTiles, kUnroll>) == size_t(kTiles) * kUnroll * kNvfp4RingStageBytes,
                  "moe_nvfp4_down_prefetch_bytes counts the ring's stage size");
    constexpr auto kKernel = moe_down_direct_nvfp4_kernel<kTiles, kUnroll, MoeDownMode::kPrefetch>;
    if (cudaError_t e = raise_smem_limit_once<kKernel>(); e != cudaSuccess) return e;
    p.routing_smem = uint32_t(pb);
    return launch_pdl(kKernel, grid, block, pb + routing_bytes, stream, p);
  }
  const size_t hs = moe_nvfp4_down_staged_bytes(n_slots, p.inter);
  if (staged && hs + routing_bytes <= kMoeNvfp4DownStagedMaxBytes) {
    constexpr auto kKernel = moe_down_direct_nvfp4_kernel<kTiles, kUnroll, MoeDownMode::kStaged>;
    if (cudaError_t e = raise_smem_limit_once<kKernel>(); e != cudaSuccess) return e;
    p.routing_smem = uint32_t(hs);
    return launch_pdl(kKernel, grid, block, hs + routing_bytes, stream, p);
  }
  p.routing_smem = 0;
  return launch_pdl(moe_down_direct_nvfp4_kernel<kTiles, kUnroll, MoeDownMode::kPerLane>, grid, block, routing_bytes,
                    stream, p);
}

template <int kUnroll>
cudaError_t down_multi_launch(const MoeExpertsParams& p, bool ring, cudaStream_t stream) {
  const dim3 grid(unsigned((int64_t(p.hidden) + kMmaRows - 1) / kMmaRows));
  const dim3 block(kMoeDirectMaxSlots * kWarpSize);
  if constexpr (kMoeNvfp4DownMultiRingStages(kUnroll) >= 2) {
    const size_t rb = moe_nvfp4_down_multi_ring_bytes(p.m * (p.top_k + p.n_shared), p.inter, kUnroll);
    // One block per SM (its ring and h take most of the SM's shared memory); 4-byte scale words.
    if (ring && rb <= kMoeNvfp4DownMultiRingMaxBytes && nvfp4_x1_ok(p.inter, p.down.scale_fp8) &&
        p.down.scale_fp8_cols % 4 == 0 && int64_t(grid.x) <= current_device_props().sm_count) {
      static_assert(sizeof(Nvfp4RingStage<1, kUnroll>) == size_t(kUnroll) * kNvfp4RingStageBytes,
                    "moe_nvfp4_down_multi_ring_bytes counts the ring's stage size");
      constexpr auto kKernel = moe_down_multi_nvfp4_kernel<kUnroll, true>;
      if (cudaError_t e = raise_smem_limit_once<kKernel>(); e != cudaSuccess) return e;
      return launch_pdl(kKernel, grid, block, rb, stream, p);
    }
  }
  return launch_pdl(moe_down_multi_nvfp4_kernel<kUnroll, false>, grid, block, 0, stream, p);
}

template <int kUnroll>
cudaError_t down_launch(const MoeExpertsParams& p, cudaStream_t stream) {
  const int64_t rows_per_block = int64_t(kMoeWarps / moe_nvfp4_down_k_split(p.hidden, p.inter)) * kMmaRows;
  const int64_t bx = (int64_t(p.hidden) + rows_per_block - 1) / rows_per_block;
  const dim3 grid(unsigned(bx), unsigned((p.m + kMoeNvfp4TokTile - 1) / kMoeNvfp4TokTile));
  const size_t smem = size_t(3) * size_t(p.max_active) * sizeof(int32_t);
  // 16 KB static + the slots: above 48 KB (max_active > 2730, prefill-sized m) needs the opt-in.
  if (smem + sizeof(float) * kMoeWarps * kMoeNvfp4TokTile * kMmaRows > 48 * 1024)
    if (cudaError_t e = cudaFuncSetAttribute(moe_down_nvfp4_kernel<kUnroll>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        e != cudaSuccess)
      return e;
  moe_down_nvfp4_kernel<kUnroll><<<grid, kMoeThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_moe_gate_up_nvfp4(const MoeExpertsParams& p, MmaTile tile, int warps, int k_split, bool multi_staged,
                                     int blocks_per_sm, int persist_blocks, cudaStream_t stream) {
  if (p.max_active + p.n_shared == 0) return cudaSuccess;  // no expert: h is never read
  if (k_split == 2) {  // instantiated for the default tile at 4 rows' warps a block (whatever `warps` says)
    if (tile.tiles == 1 && tile.unroll == 2) return gate_up_launch<1, 2, 8, 2>(p, multi_staged, blocks_per_sm, persist_blocks, stream);
    return cudaErrorInvalidValue;
  }
  if (k_split != 1) return cudaErrorInvalidValue;
  if (warps == 4) {  // instantiated for one tile, unroll 2 (the default) and 4
    if (tile.tiles == 1 && tile.unroll == 2) return gate_up_launch<1, 2, 4>(p, multi_staged, blocks_per_sm, persist_blocks, stream);
    if (tile.tiles == 1 && tile.unroll == 4) return gate_up_launch<1, 4, 4>(p, multi_staged, blocks_per_sm, persist_blocks, stream);
    return cudaErrorInvalidValue;
  }
  if (warps != kMoeWarps) return cudaErrorInvalidValue;
  switch (tile.tiles * 16 + tile.unroll) {
    case 16 + 1: return gate_up_launch<1, 1>(p, multi_staged, blocks_per_sm, persist_blocks, stream);
    case 16 + 2: return gate_up_launch<1, 2>(p, multi_staged, blocks_per_sm, persist_blocks, stream);
    case 16 + 4: return gate_up_launch<1, 4>(p, multi_staged, blocks_per_sm, persist_blocks, stream);
    case 32 + 1: return gate_up_launch<2, 1>(p, multi_staged, blocks_per_sm, persist_blocks, stream);
    case 32 + 2: return gate_up_launch<2, 2>(p, multi_staged, blocks_per_sm, persist_blocks, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_moe_down_nvfp4(const MoeExpertsParams& p, MmaTile tile, bool staged, bool prefetch,
                                  bool multi_ring, cudaStream_t stream) {
  if (p.direct) {
    switch (tile.tiles * 16 + tile.unroll) {
      case 16 + 1: return down_direct_launch<1, 1>(p, staged, prefetch, stream);
      case 16 + 2: return down_direct_launch<1, 2>(p, staged, prefetch, stream);
      case 16 + 4: return down_direct_launch<1, 4>(p, staged, prefetch, stream);
      case 32 + 1: return down_direct_launch<2, 1>(p, staged, prefetch, stream);  // 2 x 2 spilled (ptxas, 2026-12-01)
    }
    return cudaErrorInvalidValue;
  }
  if (tile.tiles != 1) return cudaErrorInvalidValue;
  if (p.direct_multi) {
    switch (tile.unroll) {
      case 1: return down_multi_launch<1>(p, multi_ring, stream);
      case 2: return down_multi_launch<2>(p, multi_ring, stream);
      case 4: return down_multi_launch<4>(p, multi_ring, stream);
    }
    return cudaErrorInvalidValue;
  }
  switch (tile.unroll) {
    case 1: return down_launch<1>(p, stream);
    case 2: return down_launch<2>(p, stream);  // 4 spilled (ptxas, 2026-12-01)
  }
  return cudaErrorInvalidValue;
}

}  // namespace pg::ops::cuda
