// The kernel interface of the MLA helper ops (embedding, rope, mla_kv_write, head_linear) for
// both sides: Params structs, tile constants and launch heuristics, and the launch functions
// mla_ops.cu defines (returning the launch's cudaError_t). fmt-free, so the .cu includes it; the
// Status-returning launchers that validate Args and fill these are in mla_ops_launch.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "ops/cuda/linear/config.h"  // LinearWeight, linear_vec_elems: the fmt-free weight formats
#include "ops/cuda/mla_attention_params.h"  // MlaPartials: head_linear_combine's input

namespace pg::ops::cuda {

// ---- embedding: grid (column blocks, token slots), y[t] = dequantized table row tokens[t]. ----
constexpr int kEmbeddingThreads = 256;
constexpr int64_t kEmbeddingMaxGridY = 65535;  // tokens beyond it loop (grid-stride)

struct EmbeddingParams {
  const void* table = nullptr;       // [vocab, H] f32 | bf16 | fp8 e4m3fn, rows contiguous
  const float* scale_inv = nullptr;  // fp8: [ceil(vocab / block_rows), scale_cols] f32
  const int32_t* tokens = nullptr;   // [m]; ids outside [0, vocab) are skipped (rows left as they were)
  float* y = nullptr;                // [m, H] f32, row stride y_stride
  int64_t m = 0, vocab = 0, hidden = 0, y_stride = 0;
  int64_t block_rows = 128, block_cols = 128, scale_cols = 0;
  bool vec = false;  // 16-byte path: H * elem % 16 == 0, table and y rows 16-byte aligned, fp8 block_cols % 16 == 0
};
cudaError_t launch_embedding(LinearWeight f, const EmbeddingParams& p, cudaStream_t stream);

// ---- rope in place, grid (token, slice of (head, pair) items): one pair per thread. ----
constexpr int kRopeThreads = 128;

// ---- rope_cos_sin: the step's cos / sin of every (token, pair), one thread each. ----
// A decode step computes them once for every layer's mla_prep, whose kernel then holds no double
// sincos (its Payne-Hanek reduction included: ~1,900 of mla_prep's ~2,500 SASS instructions were
// the kv_write and rope roles; a launch runs its code cold, docs/decode-status.md).
struct RopeCosSinParams {
  const int64_t* positions = nullptr;  // [m]
  const float* inv_freq = nullptr;     // [rope_dim / 2] f32
  float* cos_sin = nullptr;            // [m, rope_dim] f32: cos of pair k at column k, sin at rope_dim / 2 + k
  int64_t m = 0, rope_dim = 0;
  float attention_factor = 1.0f;
};
cudaError_t launch_rope_cos_sin(const RopeCosSinParams& p, cudaStream_t stream);

struct RopeParams {
  float* x = nullptr;                  // [m, n_heads, ...] f32; rope part at `offset` of each head
  const int64_t* positions = nullptr;  // [m]
  const float* inv_freq = nullptr;     // [rope_dim / 2] f32 (device copy of RopeTable::inv_freq)
  const float* cos_sin = nullptr;      // or the step's [m, rope_dim] from rope_cos_sin (then inv_freq is unused)
  int64_t m = 0, n_heads = 1, head_stride = 0, row_stride = 0, offset = 0, rope_dim = 0;
  float attention_factor = 1.0f;
  bool interleave = true;
};
cudaError_t launch_rope(const RopeParams& p, cudaStream_t stream);

// ---- mla_kv_write, one block per token: rmsnorm(c_kv) and rope(k_pe) into the cache row. ----
// 128 threads: kv_lora_rank 512 is 4 elements per thread; the 32 rope pairs take one warp.
constexpr int kKvWriteThreads = 128;

struct MlaKvWriteParams {
  const float* kv = nullptr;           // [m, R + P] f32, row stride kv_stride
  const float* norm_weight = nullptr;  // [R] f32
  const int64_t* positions = nullptr;  // [m]
  const float* inv_freq = nullptr;     // [P / 2] f32
  const float* cos_sin = nullptr;      // or the step's [m, P] from rope_cos_sin (then inv_freq is unused)
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks_per_seq]
  const int32_t* token_seq = nullptr;     // [m]
  float* cache = nullptr;              // [n_blocks, block_size, R + P] f32
  uint16_t* cache16 = nullptr;         // or the pool in bf16 (cache null): the f32 values rounded to nearest even
  int64_t m = 0, kv_lora_rank = 0, rope_dim = 0, block_size = 0, max_blocks_per_seq = 0, n_blocks = 0, kv_stride = 0;
  float eps = 1e-6f, attention_factor = 1.0f;
  bool interleave = true;
};
cudaError_t launch_mla_kv_write(const MlaKvWriteParams& p, cudaStream_t stream);

// ---- head_linear: y[t,h,:] = W[h] · x[t,h,:]. ----
// Vector path. W is [n_heads * n, k] rows, streamed once in 16-byte chunks. A lane group of
// kL lanes (kL = 4..32, a power of two) owns kHeadRowsPerLane adjacent rows; lane s of the
// group holds chunks s, s + kL, ... (kHeadChunksPerLane of each row) in registers, so one lane
// has 2 x 4 x 16 B = 128 B of W loads in flight. When kL x 4 chunks cover a row (k <= 128 bf16
// with kL = 4: W_UK; k <= 512 bf16 with kL = 16: W_UV), W is loaded once and reused for every
// token the block owns, kHeadMTile tokens per pass; longer rows take segments of kL x 4 chunks
// and re-read W per pass. Then a shuffle sum over the group's kL lanes.
constexpr int kHeadThreads = 128;  // 4 warps: moonlight's 16-head matrices still give 128 blocks
constexpr int kHeadWarps = kHeadThreads / 32;
constexpr int kHeadRowsPerLane = 2;    // rows of W per lane group (the vector path needs n % 2 == 0)
constexpr int kHeadChunksPerLane = 4;  // 16-byte chunks per row per lane per segment
constexpr int kHeadMTileLarge = 8;     // tokens per accumulator pass (m > 1): 8 x 2 accumulators
// 2..8 tokens (head_token_loads(); PEREGRINE_HEAD_TOKEN_LOADS=0 for the large tile there):
// 4 tokens a pass, each token's x chunks loaded together before its sums (head_linear_vec_block's
// kXTok); not for FP8 (16 floats a chunk), whose steps keep the large tile.
constexpr int kHeadMTileSmall = 4;
constexpr bool head_has_small_tile(LinearWeight f) { return f != LinearWeight::kFp8Block; }
// Tokens a block keeps W for (one W read per block): a decode batch of up to 64 tokens reads W
// from HBM once. Above that, blocks split the tokens while the grid is short of
// kHeadMinBlocksPerSm blocks per SM, each block keeping >= kHeadMinTokensPerBlock tokens.
constexpr int64_t kHeadMinTokensPerBlock = 64;
constexpr int64_t kHeadMinBlocksPerSm = 32;

// Lanes per row for k_chunks 16-byte chunks of W per row: the fewest (>= 4) whose kL x 4 chunks
// cover the row, at most 32 (then segments).
inline int head_lanes_per_row(int64_t k_chunks) {
  int l = 4;
  while (l < 32 && int64_t(l) * kHeadChunksPerLane < k_chunks) l *= 2;
  return l;
}
inline int64_t head_rows_per_block(int lanes) { return int64_t(kHeadWarps) * (32 / lanes) * kHeadRowsPerLane; }
// Blocks along the tokens (grid.y) for m tokens over row_blocks blocks of rows.
inline int64_t head_token_blocks(int64_t m, int64_t row_blocks, int sm_count) {
  const int64_t want = int64_t(sm_count > 0 ? sm_count : 132) * kHeadMinBlocksPerSm;
  const int64_t most = std::max<int64_t>(1, m / kHeadMinTokensPerBlock);
  return std::max<int64_t>(1, std::min(most, (want + row_blocks - 1) / row_blocks));
}

struct HeadLinearParams {
  const float* x = nullptr;  // [m, n_heads, k] f32 (strides below); vector path: 16-byte aligned chunks
  const void* w = nullptr;   // [n_heads, n, k] f32 | bf16 | e4m3fn, contiguous
  const float* w_scale = nullptr;  // e4m3fn: [n_heads * n, scale_cols] f32, one per row and 2^log2_group columns
  int64_t scale_cols = 0;
  int log2_group = 7;
  float y_scale = 1.0f;  // y = y_scale x (W · x) (HeadLinearArgs::y_scale)
  float* y = nullptr;        // [m, n_heads, n] f32 (strides below)
  int64_t x_row_stride = 0, x_head_stride = 0, y_row_stride = 0, y_head_stride = 0;
  int64_t m = 0, n_heads = 0, n = 0, k = 0;
  int64_t tokens_per_block = 0;  // vector path: tokens of grid.y block b are [b * tpb, (b + 1) * tpb)
};
// Vector path: grid (row blocks, token blocks) x kHeadThreads; `lanes` from head_lanes_per_row;
// m_tile: tokens a pass, 1, kHeadMTileLarge or (not FP8) kHeadMTileSmall (mla_ops_launch.cpp's head_plan).
cudaError_t launch_head_linear_vec(LinearWeight f, int lanes, int m_tile, const HeadLinearParams& p, dim3 grid,
                                   cudaStream_t stream);
// head_linear_combine (W_UV after a deferred mla_attention): the vector path's blocks with x
// combined from the attention's split partials into shared memory per block (mla_ops.cu): one
// grid row of blocks (every token in each block); a block's rows touch at most heads_per_block
// heads, staged [m][heads_per_block][R] (x_row_stride heads_per_block x R), which must fit in
// kHeadCombineFloats.
constexpr int64_t kHeadCombineFloats = 4096;  // 16 KB: moonlight / V3 (R 512, one head a block) up to 8 tokens
struct HeadCombineParams {
  HeadLinearParams lin;
  MlaPartials parts;
  int heads_per_block = 1;
};
// The most heads (n rows each, `rows` in all) the rows of one block of rows_per_block touch.
inline int head_combine_heads_per_block(int64_t rows_per_block, int64_t n, int64_t rows) {
  int64_t most = 1;
  for (int64_t r0 = 0; r0 < rows; r0 += rows_per_block)
    most = std::max(most, (std::min(r0 + rows_per_block, rows) - 1) / n - r0 / n + 1);
  return int(most);
}
cudaError_t launch_head_linear_combine(LinearWeight f, int lanes, int m_tile, const HeadCombineParams& p,
                                      dim3 grid, cudaStream_t stream);
// Generic path (any k, n, strides, alignment): one warp per row of W, tokens along grid.y.
constexpr int kHeadScalarTokensPerBlock = 64;
cudaError_t launch_head_linear_scalar(LinearWeight f, const HeadLinearParams& p, cudaStream_t stream);

// ---- mla_prep: mla_kv_write + rope (q_pe) + head_linear (W_UK, vector path) in one launch. ----
// A decode step's three small MLA kernels are independent of each other (kv_write reads the kv
// columns and writes the cache; rope rewrites the q_pe columns in place; W_UK reads the q_nope
// columns), so one grid of kHeadThreads-thread blocks runs all three, each block one role:
// [0, m) the kv_write blocks (one per token), then m x rope_slices rope blocks, then uk_blocks W_UK
// blocks of head_linear's vector path (row block b % row_blocks, token block b / row_blocks).
// The short roles come first: after V3's 1,024 W_UK blocks (two waves at 4 an SM) kv_write's chain
// of round trips started in the second wave. Every role runs the very code of its own kernel, so
// the outputs are those of the three launches bit for bit. The W_UK blocks load their first
// weights before waiting on PDL.
static_assert(kKvWriteThreads == kHeadThreads && kRopeThreads == kHeadThreads, "one block size for every role");

struct MlaPrepParams {
  MlaKvWriteParams kv;
  RopeParams rope;
  HeadLinearParams uk;
  int64_t uk_row_blocks = 0, uk_blocks = 0;  // W_UK: row blocks x token blocks
  int64_t rope_slices = 0;                   // rope blocks per token
  // Let the kernel after (the attention) launch only as each block ends its work, instead of as it
  // starts (mla_prep_late_trigger: the default).
  bool late_trigger = false;
};
// grid = uk_blocks + kv.m + kv.m x rope_slices blocks; dynamic shared memory rope_dim floats.
cudaError_t launch_mla_prep(LinearWeight f, int lanes, int m_tile, const MlaPrepParams& p, cudaStream_t stream);

}  // namespace pg::ops::cuda
