// The DeepSeek-FP8 MoE expert kernels on the f16 tensor cores (MoeExpertsArgs::f16_activations):
// gate_up (h = silu(gate·x) * (up·x), x rounded to f16) and down (h rounded to f16), each streaming
// weight rows through linear/fp8_mma.cuh's core (exact f16 weights, f32 sums, one block scale per
// 8-row half tile and 64-element step), at decode sizes (the direct paths: one token, 2..8 tokens)
// and on the planned path (larger steps: batches, verify steps of several sequences). Same grids'
// roles, workspace, h layout and summation order over a token's experts as kernel.cu's kernels.
// The CPU definition is ops::cpu::moe_experts; ops::fp8_experts_mma (ops/moe_experts.h) says where
// CUDA takes these kernels (exact mode keeps kernel.cu's f32-x ones).
#include <cuda_runtime.h>

#include "ops/cuda/common/device.h"
#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/smem_limit.cuh"
#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/linear/fp8_mma.cuh"
#include "ops/cuda/moe_experts/block_routing.cuh"
#include "ops/cuda/moe_experts/common.cuh"
#include "ops/cuda/moe_experts/fp8_params.h"

namespace pg::ops::cuda {
namespace {

// Row `row` of an FP8 stack: its codes (k per row) and the row of block scales of its row block.
__device__ __forceinline__ const uint8_t* fp8_codes_row(const MoeWeightParams& w, int64_t row, int64_t k) {
  return static_cast<const uint8_t*>(w.data) + row * k;
}
__device__ __forceinline__ const float* fp8_scales_row(const MoeWeightParams& w, int64_t row) {
  return w.scale_inv + (row / w.block_rows) * w.scale_cols;
}

// Grid: x = inter row tiles (kWarps x 8 x kTiles rows per block), y = expert slot: m = 1
// (p.direct) the token's top_k routed slots, 2..8 tokens (p.direct_multi) the step's distinct routed
// experts in order of first appearance (slots past them exit), planned the plan's active experts
// (ascending id; slots past n_active exit), then the n_shared shared experts; z = splits of a slot's
// 8-pair passes (moe_gate_up_splits: 1 up to 64 tokens).
// Tile i of a warp: mma rows g = gate rows j0 + 8i + g, rows g + 8 = the matching up rows
// (ops::f16_mma_gemv's shapes: each 8-row half in one row block), so lane (g, t) ends with gate and up of
// row j0 + 8i + g for the pass's pairs 2t, 2t + 1 (the mma's columns, 8 pairs a pass). kStagedX:
// the step's x rows staged once per block as f16 B fragments (fp8_mma_staged_bytes), lane g reads
// its pair's token row; else lane g reads it from L2 at every k-step. Both give the same f16 values
// in the same mma slots with the same k-steps, so a pair's h has the same bits at any m. Routed
// slots wait for the routing (PDL) before they read expert_idx, then trigger down's launch
// (p.self_routing, m = 1: they wait for the router's logits and route the token themselves, as the
// NVFP4 kernel's, the block's scratch after the staged x; block (0, 0, 0) writes expert_idx /
// expert_weight, which down reads after its wait).
// kMinBlocks: blocks per SM the registers must allow (moe_fp8_gate_up_min_blocks); at 5 the staging
// issues two items' loads at a time instead of four (<= 96 registers without a spill).
template <int kTiles, int kUnroll, int kWarps, bool kStagedX, int kMinBlocks>
__global__ void __launch_bounds__(kWarps * kWarpSize, kMinBlocks) moe_gate_up_fp8_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr int kJ = 8 * kTiles;  // inter rows per warp
  extern __shared__ uint4 gate_up_fp8_xs[];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
  const int slot = blockIdx.y;
  const bool shared = slot >= p.max_active;
  auto routing = [&] {
    return MoeBlockRouting(reinterpret_cast<char*>(gate_up_fp8_xs) + p.routing_smem, p.routing.n_experts);
  };
  if (!shared) {
    if (p.self_routing) moe_block_route_stage_bias(p.routing, routing(), threadIdx.x, blockDim.x);
    pdl_wait();
  }
  pdl_trigger();
  int64_t expert;
  int lo = 0, hi = 1;  // the slot's pairs: direct multi bit ranks, planned the plan's pair positions
  int64_t h_base = 0;  // direct: the slot's h row; shared: h row of token 0
  uint64_t pairs = 0;  // direct multi, routed: the expert's flat pair indices (bit i: pair i)
  if (!shared && p.direct) {
    if (p.self_routing) {  // block_routing.cuh: the block routes the token
      const MoeBlockRouting r = routing();
      moe_block_route(p.routing, 0, r);
      if (slot == 0 && blockIdx.x == 0 && blockIdx.z == 0) moe_block_route_publish(p.routing, 0, r, threadIdx.x);
      expert = r.idx[slot];
    } else {
      expert = p.expert_idx[slot];
    }
    if (expert < 0 || expert >= p.n_experts) return;  // dropped, as the plan drops it (block-uniform)
    h_base = slot;
  } else if (!shared && p.direct_multi) {  // the step's slot-th distinct expert, if any
    const WarpRouting w = warp_routing(p);
    if (slot >= __popcll(static_cast<long long>(w.first))) return;
    expert = slot_expert(w, slot, pairs);
    hi = __popcll(static_cast<long long>(pairs));
  } else if (!shared) {  // planned: the slot-th active expert, its pairs' plan positions (h rows)
    if (slot >= *p.plan.n_active) return;
    expert = p.plan.active_expert[slot];
    lo = p.plan.seg_begin[slot], hi = p.plan.seg_begin[slot + 1];
  } else {  // shared expert s, its pass j's pairs (shared_slots slots each; 1 on the direct paths, staged x)
    const int slots = kStagedX ? 1 : p.shared_slots;
    const int s = (slot - p.max_active) / slots, j = (slot - p.max_active) % slots;
    expert = p.n_experts + s;
    lo = slots > 1 ? j * kMmaTokens : 0, hi = slots > 1 ? min(p.m, lo + kMmaTokens) : p.m;
    h_base = int64_t(p.m) * p.top_k + int64_t(s) * p.m;
  }
  const int64_t j0 = (int64_t(blockIdx.x) * kWarps + warp) * kJ;
  Fp8MmaRows<kTiles> rows;
  rows.log2_block_cols = p.gate_up.log2_block_cols;
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // gate, up
      const int64_t base = expert * 2 * p.inter + h * int64_t(p.inter);
      const int64_t j = min(j0 + 8 * i + g, int64_t(p.inter) - 1);  // past inter: re-read, never written
      rows.w[i][h] = fp8_codes_row(p.gate_up, base + j, p.hidden);
      rows.s[i][h] = fp8_scales_row(p.gate_up, base + min(j0 + 8 * i, int64_t(p.inter) - 1));
    }
  const int64_t k_steps = p.hidden / kFp8MmaStepElems;
  const bool routed_multi = !shared && p.direct_multi, planned = !shared && !p.direct && !p.direct_multi;
  const int pass_stride = int(gridDim.z) * kMmaTokens;
  for (int q = lo + int(blockIdx.z) * kMmaTokens; q < hi; q += pass_stride) {  // block-uniform passes
    const int m_valid = min(kMmaTokens, hi - q);
    // Lane g's column: pair q + g's token (past the slot's pairs: token 0, a column never written).
    int64_t token = 0;
    if (g < m_valid)
      token = shared         ? q + g
              : routed_multi ? nth_set_bit(pairs, q + g) / p.top_k
              : planned      ? p.plan.pair_flat[q + g] / p.top_k
                             : 0;
    float acc[kTiles][4];
    // Warps past inter stay for the block's barrier (staging x) with no k-steps, and write nothing.
    if constexpr (kStagedX) {
      fp8_mma_stream<kTiles, kUnroll, true>(
          rows, [&] { fp8_mma_stage_x<kMinBlocks >= 5 ? 2 : 4>(p.x, p.hidden, p.m, k_steps, gate_up_fp8_xs); },
          gate_up_fp8_xs + token * k_steps * kFp8MmaXStepVecs, nullptr, 0, j0 < p.inter ? k_steps : 0, acc);
    } else {
      fp8_mma_stream<kTiles, kUnroll, false>(rows, [] {}, nullptr, g < m_valid ? p.x + token * p.hidden : nullptr, 0,
                                             j0 < p.inter ? k_steps : 0, acc);
    }
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int pair = 2 * t + c;
        const int64_t j = j0 + 8 * i + g;
        const float v = silu(acc[i][c]) * acc[i][2 + c];  // d c / d 2 + c: gate / up
        // p.plan.h16: h also in f16, the FP8 staged layout (the row in order: inter % 64 == 0), lane g
        // even writing its element and the next (lane g + 1's, one shuffle) as one word.
        const float v1 = p.plan.h16 ? __shfl_down_sync(kFullMask, v, 4) : 0.0f;
        if (pair < m_valid && j < p.inter) {
          // h row: direct the slot, shared h_base + its token, direct multi the pair's flat index,
          // planned the pair's plan position.
          const int64_t h_row = routed_multi ? nth_set_bit(pairs, q + pair) : h_base + q + pair;
          p.plan.h[h_row * p.inter + j] = v;
          if (p.plan.h16 && g % 2 == 0)
            reinterpret_cast<uint32_t*>(p.plan.h16)[(h_row * p.inter + j) / 2] = f32x2_to_f16x2_sat(v, v1);
        }
      }
    if constexpr (kStagedX) {
      if (q + pass_stride < hi) __syncthreads();  // the next pass stages x again
    }
  }
}

// m = 1, as moe_down_direct_nvfp4_kernel: grid x = hidden row tiles of 16 x kTiles rows, a block of
// n_slots x k_split warps (moe_nvfp4_down_direct_split), one warp per (slot, K slice) with h row
// `slot` as the mma's only real column. kStaged: every slot's h row staged per block as f16 B
// fragments (gate_up's f16 copy of h in one bulk copy where p.plan.h16, else fp8_mma_stage_x);
// else lane (0, t) reads its slot's h from L2 at every k-step. The
// first weight loads go out before the wait for h (PDL); the partial sums meet in shared memory:
// each slot's K slices, then the slots in the contract's order (by rank).
template <int kTiles, int kUnroll, bool kStaged>
__global__ void __launch_bounds__(kMoeDirectMaxSlots * kWarpSize)
    moe_down_direct_fp8_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr int kR = kMmaRows * kTiles;
  extern __shared__ uint4 down_fp8_hs[];  // [n_slots][inter / 64 steps] h as B fragments
  __shared__ float s_part[kMoeDirectMaxSlots][kR];  // [rank * k_split + K slice][row]
  __shared__ uint64_t h_bar;                         // kStaged: moe_h_frags_copy's
  if constexpr (kStaged) moe_h_frags_init(p, &h_bar);
  const int n_slots = p.top_k + p.n_shared, k_split = moe_nvfp4_down_direct_split(n_slots);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
  const int slot = warp / k_split, kpart = warp % k_split;
  // p.self_routing: gate_up's block (0, 0, 0) wrote expert_idx / expert_weight; read after the wait
  // (a block of this kernel becomes resident only as gate_up's leave its SM: routing here would sit
  // on the layer's path, as session 34's 2..8-token down measured).
  if (p.self_routing) pdl_wait();
  const auto [expert, rank, shared, valid] = moe_direct_slot(p, slot);
  const int64_t row0 = int64_t(blockIdx.x) * kR, e = valid ? expert : 0;
  Fp8MmaRows<kTiles> rows;
  rows.log2_block_cols = p.down.log2_block_cols;
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = e * p.hidden + min(row0 + kMmaRows * i + g + 8 * h, int64_t(p.hidden) - 1);
      rows.w[i][h] = fp8_codes_row(p.down, row, p.inter);
      rows.s[i][h] = fp8_scales_row(p.down, e * p.hidden + min(row0 + kMmaRows * i, int64_t(p.hidden) - 1));
    }
  const int64_t all_steps = p.inter / kFp8MmaStepElems, k_steps = valid ? all_steps : 0;
  const int64_t per_part = (k_steps + k_split - 1) / k_split;
  const int64_t s0 = min(k_steps, kpart * per_part), s1 = min(k_steps, s0 + per_part);
  float acc[kTiles][4];
  if constexpr (kStaged) {
    fp8_mma_stream<kTiles, kUnroll, true>(
        rows,
        [&] {  // gate_up's f16 copy of h (the same values) in one bulk copy, or h's f32 rows converted
          if (p.plan.h16) moe_h_frags_copy(p, uint32_t(n_slots * all_steps * kFp8MmaXStepVecs * sizeof(uint4)), down_fp8_hs, &h_bar);
          else fp8_mma_stage_x(p.plan.h, p.inter, n_slots, all_steps, down_fp8_hs);
        },
        down_fp8_hs + slot * all_steps * kFp8MmaXStepVecs, nullptr, s0, s1, acc);
  } else {
    fp8_mma_stream<kTiles, kUnroll, false>(rows, [] {}, nullptr, g == 0 ? p.plan.h + int64_t(slot) * p.inter : nullptr,
                                           s0, s1, acc);
  }
  const float wgt = shared ? 1.0f : valid ? p.expert_weight[slot] : 0.0f;
  if (t == 0) {  // d0 / d2: rows g / g + 8, token 0
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) s_part[rank * k_split + kpart][kMmaRows * i + g + 8 * h] = valid ? wgt * acc[i][2 * h] : 0.0f;
  }
  __syncthreads();
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
}

// 2 <= m <= kMoeDirectMaxTokens (p.direct_multi), as moe_down_multi_nvfp4_kernel's per-lane mode
// with the m = 1 kernel's arithmetic: grid x = hidden row tiles of 16 rows, a block of
// kMoeDirectMaxSlots warps taking the (expert slot, K slice) tasks warp, warp + 16, ... (distinct
// routed experts in order of first appearance, then the shared ones; K cut as the m = 1 kernel cuts
// it). A task streams its expert's 16 rows once for all of its pairs (a pass per 8 pairs, lane g
// reading its pair's h row from L2) and leaves weight * down·h per (K slice, h row, output row) in
// shared memory; the block then adds each token's terms in the m = 1 kernel's order, so a token's
// output has the bits it has alone.
__global__ void __launch_bounds__(kMoeDirectMaxSlots * kWarpSize)
    moe_down_multi_fp8_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr int kR = kMmaRows, kWarps = kMoeDirectMaxSlots, kUnroll = kMoeFp8DownUnroll;
  static_assert(kMoeDirectMaxSlots * kMoeDirectMaxTokens <= kMoeDirectMaxHRows, "s_part holds every (K slice, h row)");
  __shared__ float s_part[kMoeDirectMaxHRows][kR];  // [K slice * n_h + h row][output row]
  __shared__ int32_t s_order[kMoeDirectMaxRouted];  // [m, top_k]: token t's pairs in summing order (-1: dropped)
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
  const int n_routed = p.m * p.top_k, n_h = p.m * (p.top_k + p.n_shared);
  const int k_split = moe_nvfp4_down_direct_split(p.top_k + p.n_shared);
  const WarpRouting w = warp_routing(p);
  const int n_distinct = __popcll(static_cast<long long>(w.first));
  const int n_tasks = (n_distinct + p.n_shared) * k_split;
  const int64_t row0 = int64_t(blockIdx.x) * kR;
  const int64_t k_steps = p.inter / kFp8MmaStepElems, per_part = (k_steps + k_split - 1) / k_split;
  for (int task = warp; task < n_tasks; task += kWarps) {  // warp-uniform: slot_expert's shuffles see every lane
    const MoeMultiSlot sl = moe_multi_slot(p, w, task / k_split, n_distinct);
    const int kpart = task % k_split;
    Fp8MmaRows<1> rows;
    rows.log2_block_cols = p.down.log2_block_cols;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rows.w[0][h] = fp8_codes_row(p.down, sl.expert * p.hidden + min(row0 + g + 8 * h, int64_t(p.hidden) - 1), p.inter);
      rows.s[0][h] = fp8_scales_row(p.down, sl.expert * p.hidden + min(row0, int64_t(p.hidden) - 1));
    }
    const int64_t s0 = min(k_steps, kpart * per_part), s1 = min(k_steps, s0 + per_part);
    for (int q = 0; q < sl.n_pairs; q += kMmaTokens) {
      const int m_valid = min(kMmaTokens, sl.n_pairs - q);
      // Column c of this pass: pair q + c's h row (routed: its flat index).
      auto h_row = [&](int c) { return sl.shared ? sl.h_base + q + c : nth_set_bit(sl.pairs, q + c); };
      const float* xrow = g < m_valid ? p.plan.h + int64_t(h_row(g)) * p.inter : nullptr;
      float acc[1][4];
      fp8_mma_stream<1, kUnroll, false>(rows, [] {}, nullptr, xrow, s0, s1, acc);
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // d fragment j: row g + 8 (j / 2), column 2t + j % 2
        const int c = 2 * t + j % 2;
        if (c < m_valid) {
          const int hr = h_row(c);
          const float wgt = sl.shared ? 1.0f : p.expert_weight[hr];
          s_part[kpart * n_h + hr][g + 8 * (j / 2)] = wgt * acc[0][j];  // as the m = 1 kernel: weight x sum
        }
      }
    }
  }
  pdl_wait();  // warps without a task; y is written below
  moe_token_order(p, s_order);
  __syncthreads();
  moe_down_multi_sum<kR>(p, s_part, s_order, k_split, n_routed, n_h, row0);
}

// The planned path, as moe_down_nvfp4_kernel (its grid, token tiles, K split, slot loop and
// summing order): grid x = hidden row tiles (kMoeWarps / k_split x 16 rows per block), y = token
// tiles of kMoeMmaTokTile. A warp: 16 output rows and a 1/k_split slice of K; loops over the active
// experts (ascending id), then the shared experts, in passes of 8 pairs (the mma's N, lane g reading
// its pair's h row from L2), and adds weight * down·h into its per-token sums in shared memory pair
// by pair in pair order; then the K slices' sums are added in slice order (not the contract's
// association when k_split > 1: at most k_split more roundings of the combine, as NVFP4's).
__global__ void __launch_bounds__(kMoeThreads, kMoeMinBlocksPerSm) moe_down_fp8_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr int kUnroll = kMoeFp8DownUnroll;
  extern __shared__ int32_t s_slots[];  // [3][max_active]: expert id, first and end pair in this token tile
  __shared__ float s_acc[kMoeWarps][kMoeMmaTokTile][kMmaRows];
  int32_t* s_expert = s_slots;
  int32_t* s_lo = s_slots + p.max_active;
  int32_t* s_hi = s_lo + p.max_active;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
  const int t0 = int(blockIdx.y) * kMoeMmaTokTile, t1 = min(p.m, t0 + kMoeMmaTokTile);
  const int n_active = *p.plan.n_active;

  moe_tile_segments(p, n_active, t0, t1, s_expert, s_lo, s_hi);
  for (int i = lane; i < kMoeMmaTokTile * kMmaRows; i += kWarpSize) (&s_acc[warp][0][0])[i] = 0.0f;
  __syncthreads();

  const int k_split = moe_fp8_down_k_split(p.hidden, p.inter), kpart = warp % k_split;
  const int64_t row0 = (int64_t(blockIdx.x) * (kMoeWarps / k_split) + warp / k_split) * kMmaRows;
  const int64_t k_steps = p.inter / kFp8MmaStepElems, per_part = (k_steps + k_split - 1) / k_split;
  const int64_t s0 = min(k_steps, kpart * per_part), s1 = min(k_steps, s0 + per_part);
  // Rows past hidden: no slots (the barrier below is reached by every warp).
  const int n_slots = row0 < p.hidden ? n_active + p.n_shared : 0;
  for (int slot = 0; slot < n_slots; ++slot) {
    const bool shared = slot >= n_active;
    const auto [expert, h_base, lo, hi] = moe_planned_slot(p, slot, n_active, t0, t1, s_expert, s_lo, s_hi);
    if (lo >= hi) continue;
    Fp8MmaRows<1> rows;
    rows.log2_block_cols = p.down.log2_block_cols;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rows.w[0][h] = fp8_codes_row(p.down, expert * p.hidden + min(row0 + g + 8 * h, int64_t(p.hidden) - 1), p.inter);
      rows.s[0][h] = fp8_scales_row(p.down, expert * p.hidden + min(row0, int64_t(p.hidden) - 1));
    }
    for (int q = lo; q < hi; q += kMmaTokens) {
      const int m_valid = min(kMmaTokens, hi - q);
      const float* xrow = g < m_valid ? p.plan.h + (h_base + q + g) * p.inter : nullptr;
      float acc[1][4];
      fp8_mma_stream<1, kUnroll, false>(rows, [] {}, nullptr, xrow, s0, s1, acc);
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
          s_acc[warp][tok - t0][g] += wgt * (i % 2 ? acc[0][1] : acc[0][0]);
          s_acc[warp][tok - t0][g + 8] += wgt * (i % 2 ? acc[0][3] : acc[0][2]);
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

}  // namespace

template <int kMinBlocks>
cudaError_t gate_up_fp8_launch(const MoeExpertsParams& p, dim3 grid, bool staged, cudaStream_t stream) {
  constexpr int kTiles = 1, kUnroll = kMoeFp8GateUpUnroll, kWarps = kMoeFp8GateUpWarps;
  const dim3 block(kWarps * kWarpSize);
  const size_t xs = staged ? fp8_mma_staged_bytes(p.m, p.hidden) : 0;
  // p.self_routing: the block's routing scratch after the staged x (16-byte multiples).
  const size_t routing_bytes = p.self_routing ? moe_block_routing_bytes(p.routing.n_experts) : 0;
  MoeExpertsParams q = p;
  q.routing_smem = uint32_t(xs);
  if (xs > 0) {
    constexpr auto kKernel = moe_gate_up_fp8_kernel<kTiles, kUnroll, kWarps, true, kMinBlocks>;
    if (cudaError_t e = raise_smem_limit_once<kKernel>(); e != cudaSuccess) return e;
    if (cudaError_t e = launch_pdl_if(p.gate_up_pdl, kKernel, grid, block, xs + routing_bytes, stream, q); e != cudaSuccess)
      return e;
  } else {
    if (cudaError_t e = launch_pdl_if(p.gate_up_pdl, moe_gate_up_fp8_kernel<kTiles, kUnroll, kWarps, false, kMinBlocks>,
                                      grid, block, routing_bytes, stream, q);
        e != cudaSuccess)
      return e;
  }
  return cudaGetLastError();
}

cudaError_t launch_moe_gate_up_fp8(const MoeExpertsParams& p, bool staged, cudaStream_t stream) {
  if (p.max_active + p.n_shared == 0) return cudaSuccess;  // no expert: h is never read
  constexpr int kRowsPerBlock = kMoeFp8GateUpWarps * 8;  // one tile of 8 gate + 8 up rows per warp
  const bool direct = p.direct || p.direct_multi;  // one pass per slot: x staged where it fits
  const dim3 grid(unsigned((int64_t(p.inter) + kRowsPerBlock - 1) / kRowsPerBlock),
                  unsigned(p.max_active + p.n_shared * p.shared_slots), unsigned(direct ? 1 : moe_gate_up_splits(p.m)));
  const int64_t blocks = int64_t(grid.x) * grid.y * grid.z;
  return moe_fp8_gate_up_min_blocks(blocks, current_device_props().sm_count) == 5
             ? gate_up_fp8_launch<5>(p, grid, staged && direct, stream)
             : gate_up_fp8_launch<4>(p, grid, staged && direct, stream);
}

template <int kTiles>
cudaError_t down_direct_fp8_launch(const MoeExpertsParams& p, bool staged, cudaStream_t stream) {
  constexpr int kUnroll = kMoeFp8DownUnroll;
  const int n_slots = p.top_k + p.n_shared, k_split = moe_nvfp4_down_direct_split(n_slots);
  const dim3 grid(unsigned((int64_t(p.hidden) + kMmaRows * kTiles - 1) / (kMmaRows * kTiles)));
  const dim3 block(unsigned(n_slots * k_split * kWarpSize));
  const size_t hs = moe_fp8_down_staged_bytes(n_slots, p.inter);
  if (staged && hs <= kFp8StagedMaxBytes) {
    constexpr auto kKernel = moe_down_direct_fp8_kernel<kTiles, kUnroll, true>;
    if (cudaError_t e = raise_smem_limit_once<kKernel>(); e != cudaSuccess) return e;
    if (cudaError_t e = launch_pdl(kKernel, grid, block, hs, stream, p); e != cudaSuccess) return e;
  } else {
    if (cudaError_t e = launch_pdl(moe_down_direct_fp8_kernel<kTiles, kUnroll, false>, grid, block, 0, stream, p);
        e != cudaSuccess)
      return e;
  }
  return cudaGetLastError();
}

cudaError_t launch_moe_down_fp8(const MoeExpertsParams& p, bool staged, int tiles, cudaStream_t stream) {
  if (!p.direct && !p.direct_multi) {  // planned
    const int64_t rows_per_block = int64_t(kMoeWarps / moe_fp8_down_k_split(p.hidden, p.inter)) * kMmaRows;
    const dim3 grid(unsigned((int64_t(p.hidden) + rows_per_block - 1) / rows_per_block),
                    unsigned((p.m + kMoeMmaTokTile - 1) / kMoeMmaTokTile));
    const size_t smem = size_t(3) * size_t(p.max_active) * sizeof(int32_t);
    // 16 KB static + the slots: above 48 KB (max_active > 2730, prefill-sized m) needs the opt-in.
    if (smem + sizeof(float) * kMoeWarps * kMoeMmaTokTile * kMmaRows > 48 * 1024)
      if (cudaError_t e = cudaFuncSetAttribute(moe_down_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
          e != cudaSuccess)
        return e;
    moe_down_fp8_kernel<<<grid, kMoeThreads, smem, stream>>>(p);
    return cudaGetLastError();
  }
  if (p.direct_multi) {
    const dim3 grid(unsigned((int64_t(p.hidden) + kMmaRows - 1) / kMmaRows));
    if (cudaError_t e = launch_pdl(moe_down_multi_fp8_kernel, grid, dim3(kMoeDirectMaxSlots * kWarpSize), 0, stream, p);
        e != cudaSuccess)
      return e;
    return cudaGetLastError();
  }
  if (!p.direct) return cudaErrorInvalidValue;
  if (tiles == 2) return down_direct_fp8_launch<2>(p, staged, stream);
  if (tiles == 1) return down_direct_fp8_launch<1>(p, staged, stream);
  return cudaErrorInvalidValue;
}

}  // namespace pg::ops::cuda
