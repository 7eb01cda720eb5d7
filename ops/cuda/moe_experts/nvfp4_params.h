// The NVFP4 tensor-core MoE expert kernels (moe_experts/nvfp4_kernel.cu): tiles and launch
// functions, fmt-free. Taken by moe_experts/launch.cpp when MoeExpertsArgs::f16_activations is set
// and a stack is on the vector path (its K a multiple of 32, aligned); the plan kernel and the
// workspace are kernel.cu's (params.h).
#pragma once

#include <cuda_runtime_api.h>

#include "ops/cuda/common/env.h"
#include "ops/cuda/linear/config.h"
#include "ops/cuda/moe_experts/params.h"

namespace pg::ops::cuda {

// down, planned path: tokens per block (config.h's kMoeMmaTokTile).
constexpr int kMoeNvfp4TokTile = kMoeMmaTokTile;

// gate_up: a warp's tiles each hold 8 gate rows (the mma's rows g) and the matching 8 up rows
// (rows g + 8), so a lane finds silu(gate) * up of its outputs in its own accumulators. m = 1 at
// V3 (inter 2048, 9 slots): 2304 warps of 56 k-steps at 1 tile; moonlight (1408, 8 slots) 1408
// warps of 16. Not yet swept on the H200 (bench_ops_cuda's moe rows with variants).
inline MmaTile moe_nvfp4_gate_up_tile() { return {1, 2}; }
// gate_up's warps per block at the default tile: 4, so the grid's blocks spread evenly over the
// SMs. Moonlight at one token has 8 slots x 22 blocks of 8 warps = 176 blocks on 132 SMs: 44 SMs
// stream two blocks' weights (295 KB) while 88 stream one, and the kernel lasts as long as the
// busiest SM; with 4 warps, 352 blocks are at most 3 per SM (221 KB) for an average of 197 KB (padded to
// 3 an SM; unpadded since the experts route themselves there, so that down's blocks fit beside them).
// V3: 9 x 32 = 288 blocks, more than the 264 that fit at once (2 per SM), become 576, at most 5 per
// SM (the one-token cap of launch_moe_gate_up_nvfp4). PEREGRINE_MOE_NVFP4_GATE_UP_WARPS=8 for the old grid.
// Measured (H200, 2026-12-01, 78ccd4d, one call, down prefetch on): moonlight nvfp4 521.2 vs 501.1
// tok/s at 8 warps; gate_up under ncu 14.7 vs 17.5 us a launch; V3 nvfp4 4 layers 757.9 vs 735.6,
// its MoE layer 235.6 vs 242.8 us; verify steps at k = 1 / 2 / 3 2.767 / 3.406 / 3.723 ms vs
// 2.809 / 3.488 / 3.805. Unroll 4 at 4 warps (TILES=1x4): 511.3.
constexpr int kMoeNvfp4GateUpWarps = 4;
// gate_up with x staged per block (moe_gate_up_nvfp4_kernel's kStagedX): `rows` rows of K as f16 B
// fragments (m = 1: one; 2..8 tokens: m), then each warp's ring. At 2..8 tokens it is taken where
// the block fits 4 times in an SM's 227 KB (as many as its registers allow at 4 warps): moonlight
// (K 2048, 4 warps) 4 KB a row + 20 KB of rings, every m; V3 (7168) 14 KB a row, m <= 2. Past that
// (or PEREGRINE_MOE_NVFP4_GATE_UP_MULTI_STAGED=0), lane g reads its token's x from L2 at every k-step.
// Measured (H200, 2026-12-01, 2d9cffb, one call): moonlight nvfp4 verify k = 1 / 2 / 3 2.569 / 3.225 /
// 3.580 ms staged, 2.759 / 3.396 / 3.713 per lane; the 2-token launch 22.2 vs 30.5 us under ncu.
inline size_t moe_nvfp4_gate_up_staged_bytes(int rows, int64_t k, int warps, int tiles, int unroll) {
  return size_t(rows) * size_t((k / 32 + 3) / 4 * kNvfp4X1StepBytes) +
         size_t(warps) * size_t(kNvfp4RingStages(tiles, unroll)) * size_t(kNvfp4RingStageBytes * tiles * unroll);
}
constexpr size_t kMoeNvfp4GateUpMultiStagedMaxBytes = size_t(55) << 10;
// gate_up's K in halves (moe_gate_up_nvfp4_kernel's kKSplit): 1 or 2, from the shape alone, so every
// step size (decode, verify, batches) sums a token's rows alike. 8-warp blocks of 72 registers fit
// 3 an SM: their 2..8-token staged blocks may take a third of its shared memory. Measured (H200,
// 2026-12-03, 97119f2, one call alternating, b = 1 after 1,024 tokens): V3 4L nvfp4 805.3 -> 812.6
// tok/s (+0.9%; hidden 7168: 56 k-steps a row, 28 a warp), moonlight nvfp4 613.1 -> 607.4 (-0.9%;
// hidden 2048: 8 k-steps a warp do not pay for a second warp's ~460-instruction prologue, ncu) and
// its verify steps 2.293 / 2.808 / 3.230 -> 2.345 / 2.852 / 3.249 ms. So halves from 4096 up.
// PEREGRINE_MOE_NVFP4_GATE_UP_KSPLIT=1|2 overrides it for every launch.
inline int moe_nvfp4_gate_up_k_split(int64_t hidden) {
  static const int forced = env_int("PEREGRINE_MOE_NVFP4_GATE_UP_KSPLIT", 0);
  if (forced == 1 || forced == 2) return forced;
  return hidden >= 4096 ? 2 : 1;
}
constexpr size_t kMoeNvfp4GateUpSplitMultiStagedMaxBytes = size_t(74) << 10;
// down: 16 output rows per tile; the direct path (m = 1) has one warp per (slot, row tile).
inline MmaTile moe_nvfp4_down_tile() { return {1, 2}; }
// down at m = 1 with h staged (moe_down_direct_nvfp4_kernel's kStaged mode; off unless asked for, see
// launch_moe_down_nvfp4): shared memory of the slots' staged h rows (f16 B fragments, whole
// k-steps), and the most the staged kernel takes (moonlight 8 slots x 1408: 22.5 KB; V3 9 x 2048:
// 36 KB; the dense MLPs' single slot of 11264 / 18432: 22.5 / 36 KB).
inline size_t moe_nvfp4_down_staged_bytes(int n_slots, int64_t inter) {
  return size_t(n_slots) * size_t((inter / 32 + 3) / 4) * size_t(kNvfp4X1StepBytes);
}
constexpr size_t kMoeNvfp4DownStagedMaxBytes = size_t(64) << 10;
// down at m = 1 with the block's weights prefetched (moe_down_direct_nvfp4_kernel's kPrefetch mode; when
// the grid has no more blocks than the device has SMs, so every block can fetch while gate_up
// runs: moonlight's 128, not V3's 448, measured 1.6% slower with it at 2224e11). Moonlight nvfp4
// (H200, 2026-12-01, 78ccd4d): 521.2 tok/s with it, 512.9 without (8-warp gate_up: 501.1 / 493.5): ring
// stages of kUnroll k-steps per warp (a warp's K slice, rounded up), for every (slot, K slice)
// warp, then the staged h rows. Moonlight's MoE (8 slots x 2 slices of 6 steps, 1408): 120 KB +
// 22.5 KB; V3's (9 x 1 x 16 steps, 2048): 180 + 36 KB; the dense MLPs' (1 x 8 slices, 11264 /
// 18432): 120 + 22.5 / 180 + 36 KB. Past the most a block may have, or with K % 64 != 0 (the ring
// copies a lane's scales as one aligned 4-byte word), the per-lane kernel runs.
__host__ __device__ constexpr int moe_nvfp4_down_prefetch_stages(int64_t all_steps, int k_split, int unroll) {
  return int(((all_steps + k_split - 1) / k_split + unroll - 1) / unroll);
}
inline size_t moe_nvfp4_down_prefetch_bytes(int n_slots, int64_t inter, int tiles, int unroll) {
  const int k_split = moe_nvfp4_down_direct_split(n_slots);
  const int64_t all_steps = (inter / 32 + 3) / 4;
  return size_t(n_slots) * size_t(k_split) * size_t(moe_nvfp4_down_prefetch_stages(all_steps, k_split, unroll)) *
             size_t(tiles) * size_t(unroll) * size_t(kNvfp4RingStageBytes) +
         moe_nvfp4_down_staged_bytes(n_slots, inter);
}
constexpr size_t kMoeNvfp4DownPrefetchMaxBytes = (size_t(226) << 10) - 16;  // 227 KB less s_part's 1 KB and h_bar
// Whether the m = 1 down takes the kPrefetch mode (down_direct_launch): `extra` bytes of dynamic
// shared memory beside its own (a self-routing block's scratch), 4-byte aligned scale rows (the
// ring copies a lane's two scales as one word: K % 64 == 0), and a grid of no more blocks than SMs.
inline bool moe_nvfp4_down_prefetch_fits(const MoeExpertsParams& p, int tiles, int unroll, size_t extra, int sm_count) {
  const int n_slots = p.top_k + p.n_shared;
  const int64_t blocks = (int64_t(p.hidden) + int64_t(kMmaRows) * tiles - 1) / (int64_t(kMmaRows) * tiles);
  return moe_nvfp4_down_prefetch_bytes(n_slots, p.inter, tiles, unroll) + extra <= kMoeNvfp4DownPrefetchMaxBytes &&
         nvfp4_x1_ok(p.inter, p.down.scale_fp8) && p.down.scale_fp8_cols % 4 == 0 && blocks <= sm_count;
}

// down at 2..8 tokens through per-warp rings (moe_down_multi_nvfp4_kernel's kRing): every h row
// of the step staged as f16 B fragments (m x (top_k + n_shared) rows of K = inter), then 16 warps'
// rings of kMoeNvfp4DownMultiRingStages stages of `unroll` k-steps (unroll 1: 6 stages, 7.5 KB a
// warp; 2: 3 stages, 7.5 KB; 4: none). Taken where the grid fits one block per SM and this fits
// beside the kernel's 8.25 KB of static shared memory: moonlight (16 x 8 h rows of 1408 at 2
// tokens: 45 KB + 120 KB) up to 4 tokens; not V3 (448 blocks). Else, or with
// PEREGRINE_MOE_NVFP4_DOWN_MULTI_RING=0, each lane reads its pair's h from L2 at every k-step.
// Measured (H200, 2026-12-01, 9a6ad50, one call): moonlight nvfp4 verify k = 1 / 2 / 3 2.554 / 3.156 /
// 3.593 ms with the rings, 2.563 / 3.293 / 3.768 without (before the ring copies kept their sources in
// registers it gained nothing: 96007d0).
__host__ __device__ constexpr int kMoeNvfp4DownMultiRingStages(int unroll) { return unroll == 1 ? 6 : unroll == 2 ? 3 : 0; }
inline size_t moe_nvfp4_down_multi_ring_bytes(int64_t n_h, int64_t inter, int unroll) {
  return size_t(n_h) * size_t((inter / 32 + 3) / 4 * kNvfp4X1StepBytes) +
         size_t(kMoeDirectMaxSlots) * size_t(kMoeNvfp4DownMultiRingStages(unroll)) * size_t(unroll) *
             size_t(kNvfp4RingStageBytes);
}
constexpr size_t kMoeNvfp4DownMultiRingMaxBytes = size_t(227 << 10) - 8448 - 16;  // less s_part, s_order, h_bar

// down planned: warps of a block splitting K (config.h).
__host__ __device__ constexpr int moe_nvfp4_down_k_split(int64_t hidden, int64_t inter) {
  return moe_mma_down_k_split(hidden, inter);
}

// Each launches with the tile given (instantiated: tiles 1 with unroll 1, 2, 4; tiles 2 with
// unroll 1, 2); cudaErrorInvalidValue for another.
// warps: per block, 8 (kMoeWarps) or, at one tile with unroll 2 or 4, 4 (kMoeNvfp4GateUpWarps).
// multi_staged: 2..8 tokens (p.direct_multi) with x staged per block where it fits (above).
// blocks_per_sm > 0: the staged kernel's shared memory padded so that at most that many blocks fit
// an SM; < 0: at one token, ceil(blocks / SMs) (one even wave), else no padding; 0: none
// (PEREGRINE_MOE_NVFP4_GATE_UP_BLOCKS_PER_SM=N sets it).
// persist_blocks != 0: at 2..8 tokens with x staged, the persistent grid (moe_gate_up_nvfp4_kernel's
// kPersist; the default tiles alone): < 0 as many blocks as fit the device at once, where a block per
// unit would not fit at once and K is whole (else, or at other tiles, that grid); > 0 at most that
// many blocks (cudaErrorInvalidValue at other tiles); 0 a block per (slot, row tile).
cudaError_t launch_moe_gate_up_nvfp4(const MoeExpertsParams& p, MmaTile tile, int warps, int k_split, bool multi_staged,
                                     int blocks_per_sm, int persist_blocks, cudaStream_t stream);
// p.direct: the m = 1 kernel (PDL, one warp per slot; not tiles 2 x unroll 2: it spilled), with h
// staged per block when `staged` and moe_nvfp4_down_staged_bytes fits, or the weights prefetched
// (the kPrefetch mode) when `prefetch` and moe_nvfp4_down_prefetch_bytes fits;
// else the planned one (one warp walks the active experts; tiles 1, unroll 1 or 2).
// p.direct_multi: the multi kernel, through rings where moe_nvfp4_down_multi_ring_bytes fits and
// multi_ring.
cudaError_t launch_moe_down_nvfp4(const MoeExpertsParams& p, MmaTile tile, bool staged, bool prefetch,
                                  bool multi_ring, cudaStream_t stream);

}  // namespace pg::ops::cuda
