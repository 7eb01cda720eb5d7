// Launch heuristics and tile constants of the MoE expert kernels (kernel.cu); no kernel code.
// Both weight kernels stream 16-byte chunks of weight rows exactly as the linear GEMV does
// (linear/config.h): a warp owns `rows` weight rows, each lane keeps rows x unroll loads in flight.
#pragma once

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

struct MoeTile {
  int rows = 1;    // gate_up: gate/up row pairs per warp (2 x rows weight rows); down: output rows per warp
  int unroll = 1;  // chunks per weight row in flight per lane
};

// gate_up at m = 1 streams 2 rows x 4 chunks per lane (bf16), the linear kernel's best M = 1
// shape (rows 2 x unroll 4, 82% of the H200 read ceiling); fp8 4 rows x 2 (linear's fp8 M = 1
// choice). Larger pair tiles trade unroll for accumulator registers (m_tile x 2 x rows).
// Scalar path (odd shapes): 4-byte loads, performance irrelevant.
constexpr MoeTile moe_gate_up_tile(LinearWeight f, bool vec, int m_tile) {
  if (!vec) return {1, 4};
  // NVFP4: a 16-byte chunk is 32 elements (moonlight's 2048 are 2 chunks per lane, V3's 7168 are
  // 7): 2 gate/up row pairs x 2 chunks (128 B per lane in flight) at m = 1. Not yet swept.
  if (f == LinearWeight::kNvfp4) return m_tile == 1 ? MoeTile{2, 2} : MoeTile{1, 2};
  if (f == LinearWeight::kFp8Block) return m_tile == 1 ? MoeTile{2, 2} : MoeTile{1, 2};
  return m_tile <= 2 ? MoeTile{1, 4} : MoeTile{1, 2};
}

// down at m = 1: a warp loops over the active experts for its output rows, so the bytes in flight
// per SM are capped by (rows per SM) x one expert row: moonlight's 2048 rows x 1408 bf16 give
// 5.5 chunks per lane per row, all issued at once with rows 1 x unroll 8 on 256 blocks (~45 KB
// per SM in flight); V3 fp8 (7168 x 2048: 4 chunks per lane per row) takes rows 2 x unroll 4.
constexpr MoeTile moe_down_tile(LinearWeight f, bool vec, int m_tile) {
  if (!vec) return {1, 4};
  // NVFP4: moonlight's 1408 columns are 1.4 chunks per lane, V3's 2048 are 2. Pair tiles of 4 and
  // 8 spilled with unroll 2 (ptxas, 2026-12-01). Not yet swept.
  if (f == LinearWeight::kNvfp4) return m_tile == 1 ? MoeTile{2, 2} : m_tile == 2 ? MoeTile{1, 2} : MoeTile{1, 1};
  if (f == LinearWeight::kFp8Block) return m_tile == 1 ? MoeTile{2, 4} : m_tile <= 4 ? MoeTile{2, 2} : MoeTile{1, 2};
  return m_tile == 1 ? MoeTile{1, 8} : m_tile <= 4 ? MoeTile{2, 2} : MoeTile{1, 2};
}

// m = 1 ("direct": the token's slots are the pairs, no plan kernel) when the token's slots fit one
// block of one warp each.
constexpr int kMoeDirectMaxSlots = 16;

// down at m = 1, direct: one warp per (expert slot, `rows` output rows), all of its row chunks in
// flight in one step where they fit: bf16 2 x 8 (moonlight's 1408 columns are 5.5 chunks per
// lane, V3's 2048 are 8), fp8 4 x 4 (2.75 and 4 chunks per lane).
constexpr MoeTile moe_down_direct_tile(LinearWeight f, bool vec) {
  if (!vec) return {1, 4};
  if (f == LinearWeight::kFp8Block) return {4, 4};
  if (f == LinearWeight::kBF16) return {2, 8};
  if (f == LinearWeight::kNvfp4) return {4, 2};  // 1.4 (moonlight) and 2 (V3) chunks per lane per row
  return {2, 4};
}

}  // namespace pg::ops::cuda
