// Launch heuristics and tile constants of the small-M linear (GEMV) kernels; no kernel code.
// A warp owns `rows_per_warp` output rows (and a 1/k_split slice of K); each lane streams 16-byte
// chunks of those rows, `unroll` chunks per row in flight, so one lane has rows x unroll x 16 B
// of weight loads outstanding before it first multiplies.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pg::ops::cuda {

// The weight formats of ops/matrix.h's WeightFormat, restated here because kernel files (.cu)
// include no header that pulls in fmt (nvcc rejects fmt 9's constexpr code): see linear/launch.cpp.
enum class LinearWeight : uint8_t { kF32, kBF16, kFp8Block, kNvfp4 };

constexpr int kLinearThreads = 256;
constexpr int kLinearWarps = kLinearThreads / 32;
// At most 128 registers per thread: 2 blocks x 256 threads per SM (16 warps).
constexpr int kLinearMinBlocksPerSm = 2;
// Rows of x one block multiplies per pass over W (m above this streams W once per 16 rows).
constexpr int kLinearMaxMTile = 16;
// k_split's second rule: grow while the grid has fewer than this many warps per SM (few output
// rows). Little's law asks ~32 KB in flight per SM (4.4 TB/s x ~1 us / 132 SMs); 16 warps x 32
// lanes x >= 128 B is 2x that.
constexpr int kLinearMinWarpsPerSm = 16;
// The same rule for the per-block NVFP4 / FP8 tensor-core kernels (linear_nvfp4_mma_k_split), whose
// blocks each stage all of x: fewer, longer K slices measured faster there. Swept in models (H200,
// 2026-12-03, 32f6b03, 2 rounds alternating in one call, b = 1 after 1,024 tokens): 16 -> 12 -> 8 gave
// V3 4 layers nvfp4 855.2 -> 866.9 -> 867.0 tok/s, fp8 761.8 -> 768.2 -> 772.8, moonlight nvfp4 624.8
// -> 624.7 -> 624.8. At 8 V3's o_proj and dense down split K in 4 (not 8), V3's q_b and moonlight's
// dense gate|up in 1 (not 2).
constexpr int kLinearMmaMinWarpsPerSm = 8;

// Bytes of W in one vector load, and elements of each format in it (NVFP4: two per byte, so one
// 16-byte chunk is 32 elements = two 16-element scale blocks).
constexpr int kLinearVecBytes = 16;
constexpr int linear_elem_bytes(LinearWeight f) { return f == LinearWeight::kF32 ? 4 : f == LinearWeight::kBF16 ? 2 : 1; }
constexpr int linear_vec_elems(LinearWeight f) {
  return f == LinearWeight::kNvfp4 ? 2 * kLinearVecBytes : kLinearVecBytes / linear_elem_bytes(f);
}
// Bytes of one W row of k elements (NVFP4: k / 2, k even).
constexpr int64_t linear_row_bytes(LinearWeight f, int64_t k) {
  return f == LinearWeight::kNvfp4 ? k / 2 : k * linear_elem_bytes(f);
}
// NVFP4 elements per e4m3 block scale (ops::kNvfp4GroupSize, restated fmt-free).
constexpr int kNvfp4Block = 16;

struct LinearTile {
  int m_tile = 1;         // rows of x per block (the kernel's register tile)
  int rows_per_warp = 1;  // output rows per warp
  int unroll = 1;         // 16-byte chunks per row in flight per lane
};

// The m tile: the next power of two >= m, capped at 16.
inline int linear_m_tile(int64_t m) {
  int t = 1;
  while (t < m && t < kLinearMaxMTile) t *= 2;
  return t;
}

// Default tile per (format, m tile). Registers: acc m_tile x rows, loads rows x unroll x 4,
// dequantized rows x vec_elems; each choice stays under the 128-register cap (checked by ptxas
// -warn-spills in the build). M = 1 choices from the H200 sweep of bench_ops_cuda
// (2026-11-30): bf16 rows 2 x unroll 4 (82% vs 79% for 4 x 4 at 7168x18432), fp8 rows 4 x
// unroll 2 (60% vs 51% for 2 x 4).
constexpr LinearTile linear_default_tile(LinearWeight f, int m_tile) {
  // NVFP4: a chunk is 32 elements and the ALU work per byte is 4x bf16's; a word (8 elements) per
  // row is dequantized at a time and reused by the tile's x rows. m above 4 takes several m tiles
  // of 4 (the weights re-read from L2): 8- and 16-row tiles spilled (ptxas, 2026-12-01). Not yet
  // swept on the H200 (bench_ops_cuda lists the instantiated alternatives).
  if (f == LinearWeight::kNvfp4) {
    switch (m_tile) {
      case 1: return {1, 4, 2};
      case 2: return {2, 2, 2};
      default: return {4, 2, 1};
    }
  }
  if (f == LinearWeight::kFp8Block) {
    switch (m_tile) {
      case 1: return {1, 4, 2};
      case 2: return {2, 2, 2};
      case 4: return {4, 2, 2};
      default: return {m_tile, 1, 2};
    }
  }
  switch (m_tile) {  // bf16 and f32
    case 1: return {1, f == LinearWeight::kBF16 ? 2 : 4, 4};
    case 2: return {2, 4, 2};
    case 4: return {4, 2, 2};
    case 8: return {8, 2, 2};
    default: return {16, 1, 2};
  }
}

// NVFP4 at m = 1: rows per warp for n output rows. Four rows keep 8 chunks per lane in flight,
// but at small n (moonlight's 2048..4096-row projections: 512..1024 warps, ~4-8 per SM) the grid
// is short of warps; halve to 2 rows while it has fewer than kLinearMinWarpsPerSm per SM. Not 1:
// x (32 f32 per chunk, from L1) is then re-read per row and L1 traffic outgrows the weights'.
// Not yet measured (bench_ops_cuda's NVFP4 variants compare rows 2 and 4).
inline int linear_nvfp4_rows(int64_t n, int sm_count) {
  const int64_t want = int64_t(sm_count > 0 ? sm_count : 132) * kLinearMinWarpsPerSm;
  return (n + 3) / 4 < want ? 2 : 4;
}

// Warps splitting K for one row group (1..kLinearWarps, a power of two). Long K: split while
// every lane keeps >= 2 unrolled steps (the second step's loads overlap the first's math); on
// the H200, bf16 7168x18432 at rows 2 x unroll 4 went 80% -> 83% -> 86% of the read ceiling
// for k_split 1 -> 2 -> 4, while fp8 and K = 2048 shapes, with fewer steps per lane, lost
// from splitting (bench_ops_cuda, 2026-11-30). Few rows: split further while the grid is short
// of warps and each slice still gives every lane one step.
inline int linear_k_split(int64_t row_groups, int64_t k_chunks, int unroll, int sm_count) {
  const int64_t step = int64_t(32) * unroll;  // chunks a warp consumes per unrolled step
  const int64_t want = int64_t(sm_count > 0 ? sm_count : 132) * kLinearMinWarpsPerSm;
  int ks = 1;
  while (ks < kLinearWarps && k_chunks / (2 * ks) >= 2 * step) ks *= 2;
  while (ks < kLinearWarps && row_groups * ks < want && k_chunks / (2 * ks) >= step) ks *= 2;
  return ks;
}

// ---- NVFP4 and FP8 on the f16 tensor cores (linear/nvfp4_mma.cuh, fp8_mma.cuh; LinearArgs::f16_activations) ----
// A warp owns `tiles` tiles of 16 rows (the mma's M) for up to 8 tokens (its N; grid.y takes
// m above 8 in tiles of 8) and streams k-steps (NVFP4: 128 elements, FP8: 64): per lane and step
// 2 rows x 16 B per tile, `unroll` steps in flight, so tiles x unroll x 1 KB per warp outstanding.
constexpr int kMmaRows = 16;
constexpr int kMmaTokens = 8;

struct MmaTile {
  int tiles = 1;   // 16-row tiles per warp
  int unroll = 1;  // k-steps in flight per lane
};

// Default tile: 2 tiles x 2 steps (4 KB in flight per warp, 64 KB per SM at 16 warps) where the
// grid has the warps for it, else 1 tile x 2 steps double-buffered (nvfp4_mma_stream_staged_regs:
// the next 2 steps' loads in flight during the mmas). H200 sweep (bench_ops_cuda, 2026-12-01,
// 57caff3, m = 1, the heuristic's k_split): 7168->18432 1 x 2 43.7 us vs 1 x 4 45.4; V3 o_proj
// 16384->7168 39.3 vs 41.9; V3 q_a+kv_a 14.3 vs 15.3; lm_heads keep 2 x 2 (V3 172 us, 65.6% of
// HBM). The same tile at any m, and the same k_split (linear_plan), so a token's row has the same
// bits at any m, as FP8's: a verify step's rows are those of its tokens decoded one at a time
// (steps of 2..8 tokens took 1 x 4 with x read per lane until 2026-12-02).
inline MmaTile linear_nvfp4_mma_tile(int64_t n, int sm_count) {
  const int64_t want = int64_t(sm_count > 0 ? sm_count : 132) * kLinearMinWarpsPerSm;
  if ((n + 31) / 32 >= want) return {2, 2};
  return {1, 2};
}

// ---- DeepSeek-FP8 on the f16 tensor cores (linear/fp8_mma.cuh; LinearArgs::f16_activations) ----
// The NVFP4 kernel's tiles (16 rows x up to 8 tokens, MmaTile, PG_LINEAR_MMA_TILES) and
// bytes per lane and k-step (2 rows x 16 B per tile), over k-steps of 64 elements (16 e4m3 codes
// per row and lane). Taken where every tile's step has one f32 block scale: K % 64 == 0,
// block_cols a power of two >= 64, block_rows % 16 == 0 (DeepSeek's 128 x 128 blocks qualify):
// ops::f16_mma_gemv (ops/linear.h), which the launchers and the CPU's emulation ask.
constexpr int kFp8MmaStepElems = 64;
// A block's tokens' x (its 8-token tile's, m - 8 blockIdx.y of them) are staged as f16 in dynamic
// shared memory where they take at most kFp8StagedMaxBytes (two blocks per SM still fit): m = 1 up
// to K = 32768, m = 4 up to 8192, m = 8 up to 4096; larger x is read per lane from L2 at every
// step. fp8_mma_staged_bytes: the bytes a launch stages (0: per lane).
constexpr int64_t kFp8StagedMaxBytes = 64 * 1024;
constexpr size_t fp8_mma_staged_bytes(int64_t m, int64_t k) {
  const int64_t bytes = (m < 8 ? m : 8) * k * 2;
  return bytes <= kFp8StagedMaxBytes ? size_t(bytes) : 0;
}
// Default tile: NVFP4's at m = 1 (linear_nvfp4_mma_tile), whatever m: with the same tile the grid
// has the same k_split, so a token's row has the same bits at any m (an mma's columns do not
// interact, staged and per-lane x give the same f16 values): a verify step's rows are those of
// its tokens decoded one at a time.
inline MmaTile linear_fp8_mma_tile(int64_t n, int sm_count) { return linear_nvfp4_mma_tile(n, sm_count); }

// ---- NVFP4 at m = 1 through shared memory (nvfp4_mma.cuh: nvfp4_mma_stream_ring, linear_nvfp4_x1_kernel) ----
// Token 0's x is staged once per block as f16 (kNvfp4X1StepBytes per k-step of 128, K up to
// kNvfp4X1MaxK) and each warp's weights stream through a ring of stages (kNvfp4RingStageBytes per
// k-step and 16-row tile: 32 lanes x (2 rows x 16 code bytes + 2 x 4 scale bytes)).
constexpr int64_t kNvfp4X1MaxK = 18432;
constexpr int64_t kNvfp4X1StepBytes = 256;
constexpr int64_t kNvfp4RingStageBytes = 1280;
// Stages per ring: 4 single-step stages, or 2 of two steps or tiles: 5 KB per warp, 40 KB per
// 8-warp block at one tile (three blocks per SM with x staged at K <= 7168, at the 72 registers
// of the one-tile kernels).
constexpr int kNvfp4RingStages(int tiles, int unroll) { return tiles * unroll == 1 ? 4 : 2; }

// Dynamic shared memory of a staged-x block of `warps` warps: x, then the warps' rings. (Deeper rings
// for the persistent kernel, 3 or 4 stages at 1 x 2: 9-13% slower on the H200, session 42: two blocks
// an SM instead of three; its bytes in flight are not what bounds it.)
inline size_t nvfp4_x1_smem_bytes(int tiles, int unroll, int warps, int64_t k) {
  return size_t((k / 32 + 3) / 4 * kNvfp4X1StepBytes) +
         size_t(warps) * size_t(kNvfp4RingStages(tiles, unroll)) * size_t(kNvfp4RingStageBytes * tiles * unroll);
}

// 2..8 tokens (an 8-token tile's rows, m - 8 blockIdx.y of them) are staged as f16 in dynamic
// shared memory (linear_nvfp4_mma_kernel's kNvfp4XRows) where they take at most
// kNvfp4StagedRowsMaxBytes, as FP8's (two blocks per SM still fit): 2 rows up to K = 16384, 4 up to
// 8192, 8 up to 4096; larger x is read per lane from L2 at every step. 0: per lane.
constexpr int64_t kNvfp4StagedRowsMaxBytes = 64 * 1024;
constexpr size_t nvfp4_mma_staged_rows_bytes(int64_t m, int64_t k) {
  const int64_t bytes = (m < 8 ? m : 8) * ((k / 32 + 3) / 4) * kNvfp4X1StepBytes;
  return bytes <= kNvfp4StagedRowsMaxBytes ? size_t(bytes) : 0;
}

// The staged-x path's conditions beyond m = 1: K fits the buffer, and whole 4-byte scale copies
// (k % 64 == 0: a row's scales start 4-byte aligned and a lane pair's two chunks are both in or
// both past K).
inline bool nvfp4_x1_ok(int64_t k, const void* scale_fp8) {
  return k <= kNvfp4X1MaxK && k % 64 == 0 && (reinterpret_cast<uintptr_t>(scale_fp8) & 3u) == 0;
}

// Which staged-x m = 1 kernel a shape takes (the planner and the launcher ask the same question):
// the persistent ring kernel at one tile, K <= 8192 and >= 48 MiB of codes, where it measured
// faster; the per-block kernel with the weights in registers everywhere else. bench_ops_cuda on
// the H200 (2026-12-01, graph replays, % of the HBM read ceiling, per-block -> persistent): 7168 ->
// 18432 46.1 -> 51.3, V3 dense gate|up 7168 -> 36864 49.9 -> 57.5; but V3 o_proj (K 16384) 47.4
// -> 43.4, V3 dense down (K 18432) 46.4 -> 44.1, moonlight's o_proj 17.6 -> 12.5 and dense down
// 25.9 -> 17.5, and V3's lm_head at two tiles 71.3 -> 49.7.
// Measured again after session 40's stage loops (H200, 2026-12-05, session 42): the persistent kernel at
// K 16384 / 18432 (V3's o_proj, dense down) 55.7 / 56.5% against the per-block kernel's 61.2 / 61.4%.
constexpr int64_t kNvfp4X1PersistentMinBytes = int64_t(48) << 20;
constexpr int64_t kNvfp4X1PersistentMaxK = 8192;
constexpr bool linear_nvfp4_x1_persistent(int tiles, int64_t n, int64_t k) {
  return tiles == 1 && k <= kNvfp4X1PersistentMaxK && n * (k / 2) >= kNvfp4X1PersistentMinBytes;
}

// K split of the persistent m = 1 kernel (linear_nvfp4_x1_kernel): a block takes units of
// kLinearWarps / k_split row groups (its warps split their K) in turn, `slots` blocks at once, so
// the last round of units leaves SMs idle unless the units fill it. The split (1..kLinearWarps)
// with the fullest rounds (units / (rounds x slots)), the smaller on a tie, among those that give
// every warp at least one stage of `unroll` k-steps.
inline int linear_nvfp4_x1_k_split(int64_t row_groups, int64_t k_steps, int unroll, int64_t slots) {
  int best = 1;
  double best_fill = -1.0;
  for (int ks = 1; ks <= kLinearWarps; ks *= 2) {
    if (ks > 1 && k_steps / ks < unroll) break;
    const int64_t per_unit = kLinearWarps / ks, units = (row_groups + per_unit - 1) / per_unit;
    const int64_t rounds = (units + slots - 1) / slots;
    const double fill = double(units) / double(rounds * slots);
    if (fill > best_fill + 1e-9) best = ks, best_fill = fill;
  }
  return best;
}

// Warps splitting K (1..kLinearWarps, a power of two): grow while the grid is short of
// kLinearMmaMinWarpsPerSm warps per SM and every slice keeps >= one unrolled step (V3's o_proj,
// 7168 rows x 16384 at 1 tile: 448 tiles of 16 rows, split 4 -> 1792 warps of 32 steps;
// moonlight's dense gate|up, 22528 x 2048: 1408 tiles, split 1). min_warps_per_sm: the
// launcher's PEREGRINE_LINEAR_MMA_WARPS_PER_SM (linear/launch.cpp), kLinearMmaMinWarpsPerSm unless set.
inline int linear_nvfp4_mma_k_split(int64_t row_groups, int64_t k_steps, int unroll, int sm_count,
                                    int min_warps_per_sm = kLinearMmaMinWarpsPerSm) {
  const int64_t want = int64_t(sm_count > 0 ? sm_count : 132) * min_warps_per_sm;
  int ks = 1;
  while (ks < kLinearWarps && row_groups * ks < want && k_steps / (2 * ks) >= unroll) ks *= 2;
  return ks;
}

}  // namespace pg::ops::cuda
