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
// The tensor-core planned down kernels (NVFP4, FP8): tokens per block (grid.y = ceil(m /
// kMoeMmaTokTile)); per-token sums in shared memory, kMoeWarps x kMoeMmaTokTile x 16 floats (16 KB).
constexpr int kMoeMmaTokTile = 32;
// Their warps of a block that split K (1, 2, 4, 8): grow while the 16-row tiles give fewer than 16
// warps per SM of a 132-SM H200 (a fixed count: kernel and launcher must agree without a parameter)
// and K keeps >= 2 x 128 elements per slice. V3 (7168 x 2048): 448 tiles, split 8; moonlight
// (2048 x 1408): 128 tiles, split 8; a dense MLP's 11264 columns: 8. constexpr: the kernels call it
// too (--expt-relaxed-constexpr), and this header stays plain C++.
constexpr int moe_mma_down_k_split(int64_t hidden, int64_t inter) {
  const int64_t tiles = (hidden + 15) / 16, k_steps = (inter / 32 + 3) / 4, want = int64_t(132) * 16;
  int ks = 1;
  while (ks < 8 && tiles * ks < want && k_steps / (2 * ks) >= 1) ks *= 2;
  return ks;
}
// The tensor-core gate_up kernels' grid.y slots per shared expert (MoeExpertsParams::shared_slots):
// one per 8-pair pass of its m pairs, so that a batch's shared experts spread over as many blocks as
// their passes instead of walking them in series in the grid's last blocks (moonlight at 64 tokens:
// 8 passes). 1 at m <= 8.
inline int moe_shared_gate_up_slots(int64_t m) { return int(m <= 8 ? 1 : (m + 7) / 8); }
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

// gate_up at m = 1: bf16 4 gate + 4 up rows x 2 chunks per lane, fp8 2 + 2 rows x 2 (the H200
// sweep of 2026-12-01 over 1x4, 1x8, 2x4, 2x2, 4x2; fp8 4x2 spills). Larger pair tiles trade
// rows for accumulator registers (m_tile x 2 x rows): one gate/up row pair x 4 chunks, 8 loads in
// flight per lane (bf16 pair tiles 4 and 8 had 1 x 2 until 2026-12-02: the same 2 blocks per SM
// at 117 registers for tile 8, 92 for 4, with twice the loads in flight); fp8 at tile 8 keeps
// 1 x 2 (1 x 4 spills). Not yet swept at m > 1.
// Scalar path (odd shapes): 4-byte loads, performance irrelevant.
constexpr MoeTile moe_gate_up_tile(LinearWeight f, bool vec, int m_tile) {
  if (!vec) return {1, 4};
  // NVFP4: a 16-byte chunk is 32 elements (moonlight's 2048 are 2 chunks per lane, V3's 7168 are
  // 7): 2 gate/up row pairs x 2 chunks (128 B per lane in flight) at m = 1. Not yet swept.
  if (f == LinearWeight::kNvfp4) return m_tile == 1 ? MoeTile{2, 2} : MoeTile{1, 2};
  if (f == LinearWeight::kFp8Block) return m_tile == 1 ? MoeTile{2, 2} : m_tile <= 4 ? MoeTile{1, 4} : MoeTile{1, 2};
  if (m_tile == 1) return {4, 2};  // the sweep: +3% moonlight, +7% its dense MLP over 1 x 4
  return {1, 4};
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

// down at m = 1, direct: a block holds `groups` row tiles x n_slots warps (at least 8 warps when
// the slots are few: a dense MLP is one slot); the block's threads stay <= kMoeDirectMaxSlots warps.
constexpr int moe_down_direct_groups(int n_slots) { return n_slots >= 8 ? 1 : 8 / n_slots; }
static_assert(kMoeDirectMaxSlots >= 8, "groups x slots <= kMoeDirectMaxSlots");

// down at m = 1, direct: one warp per (expert slot, `rows` output rows). Chosen by a sweep on the
// H200 (cold L2, GB/s of the whole op; moonlight bf16 / fp8, V3 bf16 / fp8): bf16 4 x 2 (+8% and
// +3% over 2 x 8), fp8 4 x 4 (8 x 2 was 5% faster on moonlight but spills). A single slot (a dense
// MLP, its rows 5-18x longer) takes long rows per lane instead: bf16 1 x 8 (+18% over 2 x 8 on
// moonlight's dense MLP when blocks were one warp; now 8 row tiles of one warp per block).
constexpr MoeTile moe_down_direct_tile(LinearWeight f, bool vec, bool single_slot) {
  if (!vec) return {1, 4};
  if (f == LinearWeight::kFp8Block) return {4, 4};
  if (f == LinearWeight::kBF16) return single_slot ? MoeTile{1, 8} : MoeTile{4, 2};
  // NVFP4: moonlight's 1408 columns are 1.4 chunks per lane, V3's 2048 are 2: 4 rows x 2; a dense
  // MLP's single slot (11264 columns, 11 chunks per lane) 1 x 4. Not yet swept.
  if (f == LinearWeight::kNvfp4) return single_slot ? MoeTile{1, 4} : MoeTile{4, 2};
  return {2, 4};
}

// NVFP4 down direct (moe_experts/nvfp4_kernel.cu, m = 1 and the direct multi path): warps splitting
// K per slot, the most (<= 8, a power of two) with n_slots x split <=
// kMoeDirectMaxSlots warps per block: a dense MLP (1 slot) 8, moonlight (8 slots) 2, V3 (9) 1.
// 16-row tiles alone give moonlight's dense down (2048 rows x 11264) 128 warps of 88 k-steps.
constexpr int moe_nvfp4_down_direct_split(int n_slots) {
  int ks = 1;
  while (ks < 8 && n_slots * ks * 2 <= kMoeDirectMaxSlots) ks *= 2;
  return ks;
}

// m = 2..8 ("direct multi": decode batches and speculative verify steps): no plan kernel. Every
// warp derives the step's distinct routed experts from expert_idx itself (the m * top_k <=
// kMoeDirectMaxRouted pairs, two per lane), so each distinct expert's rows are read once for all
// of its tokens and both weight kernels start without waiting for a one-block plan. Beyond these
// limits (prefill, big batches) the plan path groups the pairs.
constexpr int kMoeDirectMaxTokens = 8;
constexpr int kMoeDirectMaxRouted = 64;       // two pairs per lane of a 32-lane warp
constexpr int kMoeDirectMaxHRows = 128;       // m * (top_k + n_shared): h rows one down block sums
inline bool moe_direct_multi_fits(int64_t m, int64_t top_k, int64_t n_shared) {
  return m >= 1 && m <= kMoeDirectMaxTokens && m * top_k <= kMoeDirectMaxRouted &&
         m * (top_k + n_shared) <= kMoeDirectMaxHRows && top_k + n_shared >= 1;
}

// down, direct multi: a block of kMoeWarps warps owns `groups` row tiles of `rows` rows and every
// expert slot of the step (distinct routed experts, then shared); warp w takes the (slot, row
// tile) tasks w, w + kMoeWarps, ... so all slots' rows stream at once, as at m = 1. Few slots (a
// dense MLP is one) give the block several row tiles, so its 8 warps all work.
inline int moe_down_multi_groups(int64_t max_slots) {
  return max_slots >= kMoeWarps || max_slots < 1 ? 1 : int(kMoeWarps / max_slots);
}

// down, direct multi: `rows` x `unroll` chunks in flight per lane (8 as m = 1's bf16 4 x 2), the
// accumulators m_tile x rows. The routed experts of a verify step have 1-2 tokens each, the
// shared ones all m (passes of m_tile). Not yet swept on the H200; ptxas: no spills.
constexpr MoeTile moe_down_multi_tile(LinearWeight f, bool vec, int m_tile) {
  if (!vec) return {1, 4};
  if (f == LinearWeight::kFp8Block) return m_tile <= 2 ? MoeTile{2, 4} : MoeTile{2, 2};
  return m_tile <= 4 ? MoeTile{4, 2} : MoeTile{2, 4};
}

}  // namespace pg::ops::cuda
