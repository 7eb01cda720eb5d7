// The CUDA mla_attention's interface for both sides: launch heuristics (tile constants and the
// split-KV plan), the kernel Params and the launch function mla_attention.cu defines. fmt-free,
// so the kernel file includes it; the Status-returning launcher is mla_attention_launch.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pg::ops::cuda {

// ---- Tile constants ------------------------------------------------------------------------
// One block: one token, a group of kHeads heads (8 or 16, a template parameter), one split of
// the token's context, walked in chunks of kMlaChunkRows cache rows staged in shared memory
// (double-buffered with cp.async) and used by all heads of the group: the latent KV is shared
// by every head (MQA-like).
constexpr int kMlaThreads = 256;
constexpr int kMlaWarps = kMlaThreads / 32;
constexpr int kMlaBf16MaxWidth = 640;  // a bf16 pool's staged row: D (rounded up to 4, or 16 for the tensor cores)
constexpr int kMlaChunkRows = 32;  // cache rows per chunk; the softmax gives each lane one row
// Scores S[kHeads][32 rows] = Q·Kᵀ: a lane holds 32 / kHeads rows (2 at 16 heads, 4 at 8) and
// one float4 column slice; per float4 step it loads its rows' K float4 (conflict-free: the row
// stride is an odd number of float4) and kHeads Q float4 (broadcasts) for 128 FMAs. The slices
// of a warp are reduced with shuffles, the 8 warps' partials through shared memory.
// o[kHeads][R] += P·V: thread = 8 heads x 4 columns; kHeads / 8 head octets x 128 column quads,
// the remaining factor of 256 threads as row phases (16 heads: 1, 8 heads: 2, summed at the end).
constexpr int kMlaOutHeads = 8;
constexpr int kMlaColQuads = 128;
constexpr int kMlaMaxRank = 4 * kMlaColQuads;  // 512: kv_lora_rank limit
constexpr int kMlaMergeFloats = kMlaOutHeads * 4 * kMlaColQuads;  // the row phases' merge buffer

// kRows: cache rows per chunk, kMlaChunkRows. 16 is a plan's other unit (mla_plan's chunk_rows: twice
// the splits at short contexts, half the rows a warp walks per split), no longer launched: as
// PEREGRINE_ATTENTION_CHUNK_ROWS=16 it lost twice (session 17; H200, 2026-12-05, moonlight nvfp4
// decode 626.9 -> 603.1 / 602.7 tok/s, -3.8%, without the deferred combine it has no form of).
template <int kHeads, int kRows = kMlaChunkRows>
struct MlaTile {
  static_assert(kHeads == 8 || kHeads == 16, "8 or 16 heads per block");
  static_assert(kRows == 16 || kRows == 32, "16 or 32 rows per chunk");
  static constexpr int kHeadsPerWarp = kHeads / kMlaWarps;   // softmax: heads of one warp
  static constexpr int kRowsPerLane = kRows / kHeads;        // score tile rows (1, 2 or 4)
  static constexpr int kRowLanes = kRows / kRowsPerLane;     // lanes of one column group (16 or 8)
  static constexpr int kColGroups = 32 / kRowLanes;          // column groups of a warp (kRowsPerLane at 32 rows)
  static constexpr int kSlices = kMlaWarps * kColGroups;     // float4 column slices of D
  static constexpr int kOctets = kHeads / kMlaOutHeads;      // P·V head octets
  static constexpr int kPhases = kMlaThreads / (kOctets * kMlaColQuads);  // P·V row phases
  static constexpr int kPStride = kHeads + 4;  // sP row: 16-byte aligned, few store conflicts
  static_assert(kHeadsPerWarp * kMlaWarps == kHeads && kRowsPerLane * kRowLanes == kRows);
  static_assert(kColGroups >= kRowsPerLane && kColGroups * kRowLanes == 32);
  static_assert(kPhases * kOctets * kMlaColQuads == kMlaThreads && kPStride % 4 == 0);
};

// ---- Split-KV plan ---------------------------------------------------------------------------
// The block's shared memory (~180-210 KB at D = 576: Q, 2 K chunks of 32 x 580 floats, the score
// partials) allows one block per SM, so a split grid aims at one wave: splits are added until
// m x head_groups x n_splits reaches the SM count, never beyond (a second, partly filled wave
// would double the time), and only while every split keeps >= one chunk of rows. The splits of
// a (token, head group) are combined in the same kernel: each split block writes its partial,
// takes a ticket from a counter in the workspace, and the last n_combiners to arrive wait for
// the rest (all are resident: see mla_plan) and each combine a slice of the group's outputs;
// the last of them resets the counter, so every launch (and graph replay) starts from zero.
// Batch 1: moonlight (16 heads) 2 groups of 8 x up to 66 splits; V3 (128 heads) 8 groups of 16 x
// 16 splits; m x head_groups x 2 > SMs (prefill, big batches): one split, no combine.
constexpr int kMlaMaxSplits = 256;      // the combine's weights in shared memory
constexpr int kMlaMaxCombiners = 32;    // blocks that share one group's combine
constexpr int kMlaCombineBatch = 16;    // partial loads a combine thread issues before summing them
constexpr int64_t kMlaCounterSlots = 1024;  // counters at the workspace's head: >= items of a split plan
constexpr int64_t kMlaSmallHeadWork = 32;   // m x n_heads up to this: 8 heads per block (more blocks)
constexpr int kMlaDefaultSmCount = 132;     // H100/H200 SXM, when the device cannot be asked

inline int64_t mla_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct MlaPlan {
  int heads = 16;          // heads per block: 8 or 16
  int64_t head_groups = 1;  // ceil(n_heads / heads)
  int64_t n_splits = 1;     // splits per (token, head group); 1: no workspace, no combine
  int n_combiners = 1;      // blocks sharing a group's combine (1: the last one alone, no waiting)
  int chunk_rows = kMlaChunkRows;  // rows per chunk and the split rows' unit (16: a plan no launch takes)
};

// From host-known bounds only: the grid stays valid (and the workspace large enough) for any
// ctx_len <= max_ctx, since every token spreads its own context over these n_splits (see
// mla_split_rows). sm_count <= 0 (unknown): the default SM count for the grid, one combiner.
// Combiners wait for the other splits of their group, so they must never hold every SM while a
// block they wait on is not yet resident: items x n_combiners <= SMs / 2 leaves half the SMs to
// blocks that never wait (and the whole split grid, <= SMs blocks, fits in one wave anyway).
// tensor_cores: the tensor-core kernel's plan, always 16 heads per block (one mma M tile).
// chunk_rows: 16 or 32 (kMlaChunkRows; the tensor-core kernel takes 32 only; the launcher asks 32 only).
inline MlaPlan mla_plan(int64_t m, int64_t n_heads, int64_t max_ctx, int sm_count, bool tensor_cores = false,
                        int chunk_rows = kMlaChunkRows) {
  MlaPlan p;
  p.chunk_rows = tensor_cores || chunk_rows != 16 ? kMlaChunkRows : 16;
  if (m <= 0 || n_heads <= 0) return p;
  p.heads = !tensor_cores && (n_heads <= 8 || m * n_heads <= kMlaSmallHeadWork) ? 8 : 16;
  p.head_groups = mla_ceil_div(n_heads, p.heads);
  const int64_t items = m * p.head_groups;
  const int64_t target = sm_count > 0 ? sm_count : kMlaDefaultSmCount;
  if (items * 2 > target || items > kMlaCounterSlots) return p;
  int64_t s = target / items;
  const int64_t by_rows = mla_ceil_div(max_ctx, p.chunk_rows);
  s = s < by_rows ? s : by_rows;
  s = s < kMlaMaxSplits ? s : kMlaMaxSplits;
  p.n_splits = s > 1 ? s : 1;
  if (p.n_splits > 1 && sm_count > 0) {
    int64_t c = int64_t(sm_count) / (2 * items);
    c = c < p.n_splits ? c : p.n_splits;
    c = c < kMlaMaxCombiners ? c : kMlaMaxCombiners;
    p.n_combiners = int(c > 1 ? c : 1);
  }
  return p;
}

// Rows of one split of a token with ctx cache rows: a whole number of chunks of chunk_rows, at least
// one, such that n_splits splits cover ctx. Host and device compute it alike.
__host__ __device__ inline int64_t mla_split_rows(int64_t ctx, int64_t n_splits, int64_t chunk_rows = kMlaChunkRows) {
  const int64_t per = (ctx + n_splits - 1) / n_splits;
  const int64_t rows = (per + chunk_rows - 1) / chunk_rows * chunk_rows;
  return rows > chunk_rows ? rows : chunk_rows;
}

// Workspace floats of a plan: kMlaCounterSlots uint32 counters (first, at a fixed place for every
// plan sharing the workspace), then per (token, group, split) kHeads partial outputs of R floats
// and kHeads (max, sum) pairs. 0 when the plan has one split.
inline size_t mla_workspace_floats(const MlaPlan& p, int64_t m, int64_t kv_lora_rank) {
  if (p.n_splits <= 1) return 0;
  return size_t(kMlaCounterSlots) + size_t(m * p.head_groups * p.n_splits * p.heads * (kv_lora_rank + 2));
}

// ---- Kernel parameters -------------------------------------------------------------------------
// One launch, passed as `const __grid_constant__`.
struct MlaAttentionParams {
  const float* q_lat = nullptr;           // [m, n_heads, R] f32 at the strides below
  const float* q_pe = nullptr;            // [m, n_heads, P] f32 at the strides below
  const float* kv = nullptr;              // [n_blocks, block_size, D = R + P] f32
  const uint16_t* kv16 = nullptr;         // or the pool in bf16 (kv null): the kernels' kBf16 instantiations
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks_per_seq]
  const int32_t* token_seq = nullptr;     // [m]
  const int64_t* ctx_len = nullptr;       // [m]
  float* o_lat = nullptr;                 // [m, n_heads, R] f32, contiguous
  // Workspace (n_splits > 1): counters [kMlaCounterSlots] u32 (zero between launches);
  // ws_o [m, head_groups, n_splits, heads, R]: a split's unnormalized Σ p_j c_kv[j];
  // ws_ml [m, head_groups, n_splits, heads, 2]: its running max (log2 units) and Σ p_j.
  unsigned* counters = nullptr;
  float* ws_o = nullptr;
  float* ws_ml = nullptr;
  int64_t q_lat_row_stride = 0, q_lat_head_stride = 0;  // elements
  int64_t q_pe_row_stride = 0, q_pe_head_stride = 0;    // elements
  int64_t m = 0, n_heads = 0;
  int block_size = 0, max_blocks_per_seq = 0;
  int block_shift = -1;  // log2(block_size) when a power of two (shifts, not divisions, per row), else -1
  int max_rows = 0;  // block_size x max_blocks_per_seq (< 2^31): ctx_len is clamped to it
  int kv_lora_rank = 0, rope_dim = 0, d = 0;  // R, P, D = R + P
  int d4 = 0;               // ceil(D / 4): float4 columns the score loop walks (zero-padded)
  int dp = 0;               // shared row stride in floats: 4 x (d4 rounded up to odd), conflict-free
                            // (tensor cores: dk rounded up to 8 mod 32, see mla_tc_row_stride)
  int dk = 0;               // tensor cores: D rounded up to 16 (the mma's k steps), zeros past D
  int head_groups = 1, n_splits = 1, n_combiners = 1;
  float scale_log2 = 0;     // softmax_scale x log2(e): scores in log2 units, exp2 in the softmax
  bool vec_kv = false;      // D % 4 == 0 and kv 16-byte aligned: 16-byte cp.async, else 4-byte (kv16: 8-byte
                            // aligned, 8-byte loads, else 2-byte)
  bool vec_q = false;       // R, P and the q strides % 4 == 0, q pointers 16-byte aligned
  bool vec_out = false;     // R % 4 == 0 and o_lat / ws 16-byte aligned: float4 stores
  // The two-pass kernels (mla_attention_two_pass.cu): scores [m][s_rows][kMlaTpHeads] f32 in the
  // workspace (after the counters), s_rows = the host's context bound; tp_blocks pass-1 blocks
  // per token, tp_slices pass-2 column slices of kMlaTpCols.
  float* ws_s = nullptr;
  int s_rows = 0, tp_blocks = 0, tp_slices = 0;
  int chunk_rows = kMlaChunkRows;  // the kernel's rows per chunk (MlaPlan::chunk_rows): kMlaChunkRows
  // The deferred form (mla_attention_defer_ok): every split leaves its partial in ws_o / ws_ml and
  // no block combines; W_UV's kernel does (MlaPartials, head_linear_combine).
  bool defer = false;
  // The CUDA-core kernel loads a block's first chunk before its wait where that chunk holds none of
  // the step's own rows (mla_attention.cu; attention_early_chunk, common/env.h).
  bool early_chunk = false;
};

// The split partials of a deferred launch, for the kernel that combines them (W_UV's): where they
// are and the plan that laid them out. A token's active splits follow from its ctx_len as in the
// attention (mla_split_rows over n_splits in chunks of chunk_rows, ctx clamped to max_rows; none
// when ctx <= 0: o_lat is zero). Head h of token t is item t x head_groups + h / heads, slot h % heads:
// ws_o[((item x n_splits + s) x heads + slot) x R + c], ws_ml[((item x n_splits + s) x heads + slot) x 2 + {0, 1}].
struct MlaPartials {
  bool deferred = false;  // set by mla_attention when it left the combine to W_UV
  const float* ws_o = nullptr;
  const float* ws_ml = nullptr;
  const int64_t* ctx_len = nullptr;
  int n_splits = 0, heads = 0, head_groups = 0, chunk_rows = 0, max_rows = 0;
  int64_t n_heads = 0, kv_lora_rank = 0;
};

// Whether p (its plan, paths and workspace) can take the deferred form: the lean CUDA-core
// kernel at 32-row chunks with more than one split. Defined in mla_attention.cu.
bool mla_attention_defer_ok(const MlaAttentionParams& p);
// The same for the tensor-core kernel (its vector instantiation with more than one split; defined in
// mla_attention_tc.cu). Taken unless PEREGRINE_ATTENTION_DEFER_TC=0 (attention_defer_tc()).
bool mla_attention_tc_defer_ok(const MlaAttentionParams& p);

// Shared memory floats of one block (rows: the chunk's, 32 or 16): sQ [heads][dp] | work |
// sRed [8 warps][heads][rows] | sP [rows][heads + 4] | sAlpha, sM, sL [heads] | the combine's ticket (1 int). work holds the 2 K chunks, after the chunk loop the
// row phases' merge buffer, and in a combiner the weights [n_splits][heads] and [heads] inverses.
__host__ __device__ inline size_t mla_work_floats(int heads, int dp, int n_splits, int rows = kMlaChunkRows) {
  size_t w = 2 * size_t(rows) * size_t(dp);
  if (heads == 8 && w < size_t(kMlaMergeFloats)) w = kMlaMergeFloats;
  const size_t comb = size_t(n_splits + 1) * size_t(heads);
  return w > comb ? w : comb;
}
inline size_t mla_smem_floats(int heads, int dp, int n_splits, int rows = kMlaChunkRows) {
  return size_t(heads) * dp + mla_work_floats(heads, dp, n_splits, rows) + size_t(kMlaWarps) * heads * rows +
         size_t(rows) * (heads + 4) + 3 * size_t(heads) + 1;
}

// The kernel at `heads` (8 or 16) per block. Defined in mla_attention.cu.
cudaError_t launch_mla_attention(const MlaAttentionParams& p, int heads, cudaStream_t stream);

// ---- The tensor-core kernel (mla_attention_tc.cu) ------------------------------------------
// One block: one token, 16 heads (the M of m16n8k16 bf16 mma tiles; heads past n_heads are
// zero rows), one split, the same split plan, workspace and fused combine as above (heads = 16).
// Each f32 operand x is split into bf16 hi = bf16(x) and lo = bf16(x - hi), and a product is
// hi·hi + hi·lo + lo·hi (three mmas): |error| <~ 2^-16 |x y| per product instead of bf16's 2^-8,
// so decode steps stay within the f32 reference's tolerance (the CPU needs no emulation).
// Scores S[16 heads][32 rows] per chunk: warp w takes rows 8 (w % 4) .. +8 over half of the k
// steps (w / 4), the halves summed through shared memory; the softmax as the CUDA-core kernel
// (a warp per 2 heads, a lane per row); O[16][R] += P·V: warp w takes the n tiles of 8 columns
// w, w + 8, ... (R <= 512: at most 8 tiles, 32 accumulators).
constexpr int kMlaTcHeads = 16;
constexpr int kMlaTcSStride = 40;  // scores/P rows [16][40]: float2 reads of (g, 2t) conflict-free
constexpr int kMlaTcHalfScores = kMlaWarps / 2 * 32 * 4;  // the upper k half's 4 warps x 32 lanes x 4 scores
constexpr int kMlaTcMaxDk = 704;  // D <= 704 (DeepSeek's 576): the block's shared memory holds it
inline int mla_tc_dk(int d) { return (d + 15) / 16 * 16; }
// Row stride of a staged chunk: >= dk and = 8 (mod 32) floats, so the B fragments' float2 reads
// (8 rows x 4 column pairs) hit 32 different banks.
inline int mla_tc_row_stride(int dk) { return dk + ((8 - dk % 32) + 32) % 32; }
// Shared memory floats of one block: sQ (hi and lo A fragments: dk x 16 floats) | work (2 chunks
// of 32 rows, or the combine's weights) | the upper half's scores | sS [16][40] | sAlpha, sM, sL
// [16] | the ticket.
__host__ __device__ inline size_t mla_tc_work_floats(int dp, int n_splits) {
  const size_t w = 2 * size_t(kMlaChunkRows) * size_t(dp), comb = size_t(n_splits + 1) * kMlaTcHeads;
  return w > comb ? w : comb;
}
__host__ __device__ inline size_t mla_tc_smem_floats(int dk, int dp, int n_splits) {
  return size_t(dk) * 16 + mla_tc_work_floats(dp, n_splits) + size_t(kMlaTcHalfScores) +
         size_t(kMlaTcHeads) * kMlaTcSStride + 3 * size_t(kMlaTcHeads) + 1;
}
cudaError_t launch_mla_attention_tc(const MlaAttentionParams& p, cudaStream_t stream);

// ---- The two-pass kernels (mla_attention_two_pass.cu) ----------------------------------------
// For few heads and few tokens (moonlight's 16 heads at batch 1 and in verify steps) the split-KV
// kernels' partials outweigh the rows they summarize (a split of 32 rows x 576 f32 reads 74 KB
// and writes 16 x 512 f32 = 32 KB, then the combine re-reads them), and their per-block chain
// (stage, score, softmax, P·V, publish, ticket, spin, combine) is the step's latency. Two passes
// instead, each one round trip of loads:
//   pass 1: tp_blocks blocks per token split its rows; each stages Q (all heads) and its rows in
//           tiles of kMlaTpTileRows and writes the scaled scores S [row][16 heads] (log2 units);
//   pass 2: per (token, column slice of kMlaTpCols latent columns) a cluster of kMlaTpRanks blocks
//           splits the rows; each stages S and V[rows][slice] in chunks of kMlaTpChunkRows, keeps
//           an online softmax per head, and the cluster merges its ranks' (max, sum, o) through
//           distributed shared memory: no global partials, no atomics, no spin.
// The cache is read twice (scores: all D columns; values: the R latent ones), from L2 at short
// contexts. Launched as a PDL pair: pass 2 stages its first chunk of V while pass 1 runs.
// Measured (H200, 5063ad0, moonlight batch 1): 12.2 us at 1K vs the split-KV kernel's 12.9, but
// 25.2 vs 19.7 at 4K and 162 vs 74 at 32K: each pass is still a chain of dependent round trips
// (ctx_len, table, rows; then S), and pass 2 walks a rank's rows in serial chunks of 128 with
// three barriers each. So it runs only on request (PEREGRINE_DECODE_ATTENTION=twopass); what it
// shows is that at 1K the attention's ~12 us is latency, not work, in either design.
constexpr int kMlaTpHeads = 16;         // heads per token (n_heads <= 16); the S row stride
constexpr int kMlaTpTileRows = 16;      // pass 1: rows per staged tile (4 row quads)
constexpr int kMlaTpColSlices = 16;     // pass 1: lanes that split D (a half-warp)
constexpr int kMlaTpCols = 32;          // pass 2: latent columns per block (8 quads)
constexpr int kMlaTpRanks = 8;          // pass 2: blocks of one cluster, splitting the rows
constexpr int kMlaTpChunkRows = 128;    // pass 2: rows per staged chunk (8 row phases x 16)
constexpr int kMlaTpSStride = 20;       // pass 2: sS row stride (floats): 8 rows, 32 banks
constexpr int kMlaTpVStride = 36;       // pass 2: sV row stride (floats): 8 rows, 32 banks
constexpr int64_t kMlaTpMaxHeadWork = 64;  // m x n_heads up to this (n_heads <= 16): two passes

// Whether the two-pass kernels take m tokens of n_heads heads.
inline bool mla_two_pass_fits(int64_t m, int64_t n_heads) {
  return m > 0 && n_heads > 0 && n_heads <= kMlaTpHeads && m * n_heads <= kMlaTpMaxHeadWork;
}
// Pass-1 blocks per token: one wave over the SMs.
inline int mla_tp_blocks(int64_t m, int sm_count) {
  const int64_t sms = sm_count > 0 ? sm_count : kMlaDefaultSmCount, b = sms / (m > 0 ? m : 1);
  return int(b > 1 ? b : 1);
}
// Workspace floats: the counters' slots (kept in place for the other kernels), then S.
inline size_t mla_tp_workspace_floats(int64_t m, int64_t max_ctx) {
  return size_t(kMlaCounterSlots) + size_t(m) * size_t(max_ctx) * kMlaTpHeads;
}
// Shared memory floats: pass 1 sQ [16][dp] | 2 tiles [16][dp]; pass 2 two chunks of sS [128][20]
// and sV [128][36] | sRedMax [8 warps][16] | sM, sAlpha [16] | sO [16][32] | sL [16].
inline size_t mla_tp_scores_smem_floats(int dp) { return size_t(kMlaTpHeads + 2 * kMlaTpTileRows) * size_t(dp); }
constexpr size_t kMlaTpPvSmemFloats = 2 * size_t(kMlaTpChunkRows) * (kMlaTpSStride + kMlaTpVStride) +
                                      size_t(kMlaWarps) * kMlaTpHeads + 2 * kMlaTpHeads +
                                      size_t(kMlaTpHeads) * kMlaTpCols + kMlaTpHeads;
cudaError_t launch_mla_attention_two_pass(const MlaAttentionParams& p, cudaStream_t stream);

}  // namespace pg::ops::cuda
