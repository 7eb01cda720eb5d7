// The CUDA mla_attention's interface for both sides: launch heuristics (tile constants and the
// split-KV plan), the kernel Params and the launch function mla_attention.cu defines. fmt-free,
// so the kernel file includes it; the Status-returning launcher is mla_attention_launch.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pg::ops::cuda {

// ---- Tile constants ------------------------------------------------------------------------
// One block: one token, kMlaHeads heads (a head group), one split of the token's context, which
// it walks in chunks of kMlaChunkRows cache rows staged in shared memory (double-buffered with
// cp.async) and used by all heads of the group: the latent KV is shared by every head (MQA-like).
constexpr int kMlaThreads = 256;
constexpr int kMlaWarps = kMlaThreads / 32;
constexpr int kMlaHeads = 16;       // heads per block (moonlight: 1 group, V3: 8, tiny: 1, padded)
constexpr int kMlaChunkRows = 32;   // cache rows per chunk
// Scores S[16 heads][32 rows] = Q·Kᵀ: lane = (row r and r + 16, float4 parity), warp = a 1/8 slice
// of D. Per float4 step a lane loads 2 K float4 (4 shared wavefronts each, conflict-free because
// the row stride is an odd number of float4) and 16 Q float4 (warp broadcasts), for 128 FMAs.
constexpr int kMlaScoreSlices = 2 * kMlaWarps;  // D split into 16 interleaved float4 slices
// o[16 heads][R] += P·V: thread = 8 heads x 4 columns; 2 head octets x 128 column quads.
constexpr int kMlaOutHeads = 8;
constexpr int kMlaColQuads = kMlaThreads / (kMlaHeads / kMlaOutHeads);  // 128
constexpr int kMlaMaxRank = 4 * kMlaColQuads;                            // 512: kv_lora_rank limit
constexpr int kMlaPStride = kMlaHeads + 4;  // sP row stride: 16B-aligned rows, 4-way (not 16-way) store conflicts
static_assert(kMlaHeads == 2 * kMlaWarps, "the softmax gives each warp two heads");
static_assert(kMlaChunkRows == 32, "the softmax gives each lane one row of the chunk");
static_assert(kMlaHeads % kMlaOutHeads == 0 && kMlaMaxRank == 512, "P·V thread tile");

// ---- Split-KV plan ---------------------------------------------------------------------------
// The block's shared memory (~205 KB at R = 512: Q 16 x 580 floats, 2 K chunks 32 x 580, the
// score partials 8 x 16 x 32) allows one block per SM, so the grid aims at one wave: splits are
// added until m x head_groups x n_splits reaches the SM count, never beyond it (a second,
// partly filled wave would double the time). Batch 1, 16 heads: 132 splits; V3 (8 head groups):
// 16 splits; m x head_groups >= SMs (prefill): one split, no combine.
constexpr int kMlaBlocksPerSm = 1;
constexpr int kMlaMaxSplits = 256;                  // the combine kernel's shared arrays
constexpr int64_t kMlaMinSplitRows = kMlaChunkRows;  // at least one full chunk per split
constexpr int kMlaCombineThreads = 128;
constexpr int kMlaDefaultSmCount = 132;  // H100/H200 SXM, when the device cannot be asked

inline int64_t mla_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t mla_head_groups(int64_t n_heads) { return mla_ceil_div(n_heads, kMlaHeads); }

// Splits per (token, head group), from host-known bounds only: the grid stays valid (and the
// workspace large enough) for any ctx_len, since every token spreads its own context over these
// n_splits (see mla_split_rows).
inline int64_t mla_n_splits(int64_t m, int64_t n_heads, int64_t max_ctx, int sm_count) {
  const int64_t items = m * mla_head_groups(n_heads);
  const int64_t target = int64_t(sm_count > 0 ? sm_count : kMlaDefaultSmCount) * kMlaBlocksPerSm;
  if (items <= 0 || items * 2 > target) return 1;
  int64_t s = target / items;
  s = s < mla_ceil_div(max_ctx, kMlaMinSplitRows) ? s : mla_ceil_div(max_ctx, kMlaMinSplitRows);
  s = s < kMlaMaxSplits ? s : kMlaMaxSplits;
  return s > 1 ? s : 1;
}

// Rows of one split of a token with ctx cache rows: a whole number of chunks, >= kMlaMinSplitRows,
// such that n_splits splits cover ctx. Host and device compute it alike.
__host__ __device__ inline int64_t mla_split_rows(int64_t ctx, int64_t n_splits) {
  const int64_t per = (ctx + n_splits - 1) / n_splits;
  const int64_t rows = (per + kMlaChunkRows - 1) / kMlaChunkRows * kMlaChunkRows;
  return rows > kMlaMinSplitRows ? rows : kMlaMinSplitRows;
}

// ---- Kernel parameters -------------------------------------------------------------------------
// One launch of the split-KV kernel and the combine, passed as `const __grid_constant__`.
struct MlaAttentionParams {
  const float* q_lat = nullptr;           // [m, n_heads, R] f32
  const float* q_pe = nullptr;            // [m, n_heads, P] f32
  const float* kv = nullptr;              // [n_blocks, block_size, D = R + P] f32
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks_per_seq]
  const int32_t* token_seq = nullptr;     // [m]
  const int64_t* ctx_len = nullptr;       // [m]
  float* o_lat = nullptr;                 // [m, n_heads, R] f32
  float* ws_o = nullptr;   // [m, n_heads, n_splits, R] f32: a split's unnormalized Σ p_j c_kv[j]
  float* ws_ml = nullptr;  // [m, n_heads, n_splits, 2] f32: its running max (log2 units) and Σ p_j
  int64_t m = 0, n_heads = 0;
  int64_t block_size = 0, max_blocks_per_seq = 0;
  int64_t max_rows = 0;  // block_size x max_blocks_per_seq: ctx_len is clamped to it (no reads past the table)
  int kv_lora_rank = 0, rope_dim = 0, d = 0;  // R, P, D = R + P
  int d4 = 0;               // ceil(D / 4): float4 columns the score loop walks (zero-padded)
  int dp = 0;               // shared row stride in floats: 4 x (d4 rounded up to odd), conflict-free
  int head_groups = 1, n_splits = 1;
  float scale_log2 = 0;     // softmax_scale x log2(e): scores in log2 units, exp2 in the softmax
  bool vec_kv = false;      // D % 4 == 0 and kv 16-byte aligned: 16-byte cp.async, else 4-byte
  bool vec_out = false;     // R % 4 == 0 and o_lat / ws 16-byte aligned: float4 stores
};

// Shared memory floats of one split-KV block.
inline size_t mla_smem_floats(int dp) {
  return size_t(kMlaHeads) * dp + 2 * size_t(kMlaChunkRows) * dp + size_t(kMlaWarps) * kMlaHeads * kMlaChunkRows +
         size_t(kMlaChunkRows) * kMlaPStride + 3 * kMlaHeads;
}

// Split-KV kernel, then (n_splits > 1) the combine. Defined in mla_attention.cu.
cudaError_t launch_mla_attention(const MlaAttentionParams& p, cudaStream_t stream);

}  // namespace pg::ops::cuda
