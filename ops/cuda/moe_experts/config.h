// Launch heuristics and tile constants of the MoE expert kernels (kernel.cu); no kernel code.
// Both weight kernels stream 16-byte chunks of weight rows exactly as the linear GEMV does
// (linear/config.h): a warp owns `rows` weight rows, each lane keeps rows x unroll loads in flight.
// Two paths: decode (m <= 64, m * top_k <= 512: two launches, the routing grouped by expert in
// shared memory by every block, decode.cuh) and prefill (a plan kernel, then the same two steps
// with the plan in the workspace, kernel.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/cuda/linear/config.h"

namespace pg::ops::cuda {

constexpr int kMoeThreads = 256;
constexpr int kMoeWarps = kMoeThreads / 32;
// At most 128 registers per thread: 2 blocks x 256 threads per SM.
constexpr int kMoeMinBlocksPerSm = 2;
// (token, expert) pairs one warp multiplies per pass over an expert's rows (the register tile);
// an expert chosen by more tokens takes several passes (the later ones mostly from L1/L2).
constexpr int kMoeMaxMTile = 8;
// down kernel: tokens per block (grid.y = ceil(m / kMoeTokTile)); per-token sums live in shared
// memory, kMoeWarps x kMoeTokTile x rows floats (4 KB at rows 2).
constexpr int kMoeTokTile = 64;
// plan kernel: one block; per-expert counters in shared memory (2 x 4 B per expert).
constexpr int kMoePlanThreads = 512;
constexpr int64_t kMoePlanMaxExperts = 4096;
// down kernel: per active expert 3 ints of dynamic shared memory (id, first and end pair).
constexpr int64_t kMoeMaxActiveSlots = 3072;
// gate_up kernel, grid.z: blocks sharing one (expert, row tile), striding its pair passes. At
// decode (m <= 64, a few pairs per expert) one; prefill splits a popular expert's passes.
inline int moe_gate_up_splits(int64_t m) { return int(m <= 64 ? 1 : m >= 1024 ? 16 : (m + 63) / 64); }

// The pair tile: the next power of two >= m, capped at kMoeMaxMTile (m = 1: every expert has one pair).
inline int moe_m_tile(int64_t m) {
  int t = 1;
  while (t < m && t < kMoeMaxMTile) t *= 2;
  return t;
}

// Decode path limits: the plan of m * top_k pairs fits a block (2 pairs per thread), per-expert
// counters in shared memory (4 B per expert), every token in one token tile of the down kernel.
constexpr int kMoeDecodeMaxM = kMoeTokTile;
constexpr int kMoeDecodeMaxPairs = 2 * kMoeThreads;
constexpr int64_t kMoeDecodeMaxExperts = 4096;
inline bool moe_decode_path(int64_t m, int64_t top_k, int64_t n_experts) {
  return m <= kMoeDecodeMaxM && m * top_k <= kMoeDecodeMaxPairs && n_experts <= kMoeDecodeMaxExperts;
}
// Shared memory of the decode kernels' block plan (decode.cuh block_plan), in bytes:
// counters [n_experts], ids [n], active ids [max_active], segments [max_active + 1], pairs [n], n_active.
inline size_t moe_decode_plan_smem_bytes(int64_t m, int64_t top_k, int64_t n_experts) {
  const int64_t n = m * top_k, max_active = n < n_experts ? n : n_experts;
  return size_t(n_experts + 2 * n + 2 * max_active + 2) * sizeof(int32_t);
}
// Down kernel, before it waits for gate_up (PDL): blocks below sm_count x this prefetch into L2
// their rows of the first kMoeDownPrefetchSlots experts (~the first wave's first step: 264 blocks
// x 3 experts x 8 rows x 4 KB = 26 MB at V3 bf16, half the 50 MB L2), in bulk pieces of
// kMoePrefetchPieceBytes.
constexpr int kMoeDownPrefetchBlocksPerSm = 2;
constexpr int kMoeDownPrefetchSlots = 3;
constexpr uint32_t kMoePrefetchPieceBytes = 16384;

struct MoeTile {
  int rows = 1;    // gate_up: gate/up row pairs per warp (2 x rows weight rows); down: output rows per warp
  int unroll = 1;  // chunks per weight row in flight per lane
};

// gate_up, pair tile m_tile >= 2 (decode at m = 2..64, prefill at 8): the pair tile's accumulators
// (m_tile x 2 x rows) leave room for one pair x 2..4 chunks per lane. Scalar path (odd shapes):
// one element per load, performance irrelevant.
constexpr MoeTile moe_gate_up_tile(LinearWeight f, bool vec, int m_tile) {
  if (!vec) return {1, 4};
  if (f == LinearWeight::kFp8Block) return {1, 2};
  return m_tile <= 2 ? MoeTile{1, 4} : MoeTile{1, 2};
}

// Decode gate_up: a warp streams whole items (one expert's `rows` gate/up row pairs), items split
// evenly over a grid of one wave, so small items balance better. m = 1 takes one pair (2 rows) x
// 4 chunks per lane in every format: 8 loads, the linear kernel's best M = 1 depth (bf16 rows 2
// x unroll 4: 82% of the H200 read ceiling); bf16 hidden 2048 is 2 steps per item, fp8 one.
constexpr MoeTile moe_gate_up_decode_tile(LinearWeight f, bool vec, int m_tile) {
  if (!vec || m_tile == 1) return {1, 4};
  return moe_gate_up_tile(f, vec, m_tile);
}

// Decode down at m = 1 ("terms"): a warp owns `rows` output rows and streams `terms` experts at
// once (each with its own h row), so rows x terms x unroll loads are in flight per lane: 12 at
// 1 x 3 x 4 (6 KB per warp, ~96 KB per SM at 16 warps); moonlight's 8 experts take 3 groups,
// V3's 9 exactly 3. The previous one-expert-at-a-time loop had ~2.8 KB per warp in flight.
struct MoeTermTile {
  int rows = 1, terms = 1, unroll = 1;
};
constexpr MoeTermTile moe_down_term_tile(LinearWeight, bool vec) {
  return vec ? MoeTermTile{1, 3, 4} : MoeTermTile{1, 3, 1};
}

// down, pair tile m_tile >= 2 (a warp loops over the experts for its rows, one pair tile at a
// time): rows x unroll within the accumulator budget (m_tile x rows). Scalar path as gate_up.
constexpr MoeTile moe_down_tile(LinearWeight f, bool vec, int m_tile) {
  if (!vec) return {1, 4};
  return m_tile <= 4 ? MoeTile{2, 2} : MoeTile{1, 2};
}

}  // namespace pg::ops::cuda
