// mla_kv_write: the fused tail of MLA's KV path (deepseek_model.cpp layer_forward): from the
// kv_a_proj_with_mqa output [c_kv | k_pe] of each new token, writes the paged-cache row of its
// (sequence, position) = [rmsnorm(c_kv) * kv_a_layernorm | rope(k_pe)], leaving kv unchanged.
// Same math as the model's sequence (RmsNorm over kv_lora_rank, then RoPE of k_pe at offset R).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "ops/rope.h"

namespace pg::ops {

struct MlaKvWriteArgs {
  const float* kv = nullptr;           // [m, R + P] f32, row stride kv_stride (kv_a_proj output, read only)
  const float* norm_weight = nullptr;  // [R] f32 (kv_a_layernorm)
  float eps = 1e-6f;                   // rms_norm_eps
  const int64_t* positions = nullptr;  // [m]: position of token t in its sequence
  const RopeTable* table = nullptr;    // host table: rope_dim / 2 inverse frequencies, attention_factor, interleave
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks_per_seq]: physical block ids
  const int32_t* token_seq = nullptr;     // [m]: the row of block_tables token t belongs to
  float* cache = nullptr;              // one layer's pool: [n_blocks, block_size, R + P] f32
  uint16_t* cache_bf16 = nullptr;      // or the pool in bf16 (exactly one of cache / cache_bf16): the
                                       // f32 row rounded to nearest even (core/dtype.h's f32_to_bf16)
  int64_t m = 0;
  int64_t kv_lora_rank = 0;            // R
  int64_t rope_dim = 0;                // P (qk_rope_head_dim), even
  int64_t block_size = 0, max_blocks_per_seq = 0, n_blocks = 0;
  int64_t kv_stride = 0;               // elements between rows of kv; 0 = R + P
};

// Shapes and pointers only. Token data (positions, block ids) must be in range: the caller's
// step layout validated them; the CPU reference aborts on a violation, the CUDA kernel skips
// the token (its cache row stays as it was).
Status validate(const MlaKvWriteArgs& a);

}  // namespace pg::ops
