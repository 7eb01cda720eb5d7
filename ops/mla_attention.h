// mla_attention: DeepSeek MLA in its absorbed form over the paged latent KV cache.
// Per token t (position p_t) and head h, over cache positions j = 0..p_t:
//   score_j = (q_lat[t,h] · c_kv[j] + q_pe[t,h] · k_pe[j]) * softmax_scale
//   o_lat[t,h] = Σ_j softmax(score)_j · c_kv[j]
// The caller forms q_lat = q_nope · W_UK (per head, from kv_b_proj) before, and applies
// W_UV to o_lat after. The cache row of position j is [c_kv (kv_lora_rank) | k_pe (rope_dim)].
#pragma once

#include <cstdint>

#include "core/status.h"

namespace pg::ops {

struct MlaAttentionArgs {
  const float* q_lat = nullptr;   // [m, n_heads, kv_lora_rank] f32 at the q_lat strides
  const float* q_pe = nullptr;    // [m, n_heads, rope_dim] f32 (RoPE applied) at the q_pe strides
  const float* kv = nullptr;      // one layer's pool: [n_blocks, block_size, kv_lora_rank + rope_dim] f32
  const uint16_t* kv_bf16 = nullptr;  // or the pool in bf16 (exactly one of kv / kv_bf16): the same
                                      // rows, each value as core/dtype.h's f32_to_bf16 rounds it
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks_per_seq]: physical block ids
  const int32_t* token_seq = nullptr;     // [m]: which sequence (row of block_tables) token t reads
  const int64_t* ctx_len = nullptr;       // [m]: cache positions token t attends to (p_t + 1)
  float* o_lat = nullptr;         // [m, n_heads, kv_lora_rank] f32
  int64_t m = 0, n_heads = 0, kv_lora_rank = 0, rope_dim = 0;
  int64_t block_size = 0, max_blocks_per_seq = 0, n_blocks = 0;
  float softmax_scale = 1.0f;
  // Strides in elements between tokens (row) and heads of q_lat / q_pe; 0 = contiguous
  // (n_heads x dim, dim). E.g. q_pe read in place from q [m, n_heads, nope + rope] at column nope:
  // q_pe = q + nope, q_pe_row_stride = n_heads x (nope + rope), q_pe_head_stride = nope + rope.
  int64_t q_lat_row_stride = 0, q_lat_head_stride = 0;
  int64_t q_pe_row_stride = 0, q_pe_head_stride = 0;
};

// The strides with 0 resolved to the contiguous layout.
inline int64_t q_lat_head_stride(const MlaAttentionArgs& a) {
  return a.q_lat_head_stride ? a.q_lat_head_stride : a.kv_lora_rank;
}
inline int64_t q_lat_row_stride(const MlaAttentionArgs& a) {
  return a.q_lat_row_stride ? a.q_lat_row_stride : a.n_heads * q_lat_head_stride(a);
}
inline int64_t q_pe_head_stride(const MlaAttentionArgs& a) { return a.q_pe_head_stride ? a.q_pe_head_stride : a.rope_dim; }
inline int64_t q_pe_row_stride(const MlaAttentionArgs& a) {
  return a.q_pe_row_stride ? a.q_pe_row_stride : a.n_heads * q_pe_head_stride(a);
}

Status validate(const MlaAttentionArgs& a);

}  // namespace pg::ops
