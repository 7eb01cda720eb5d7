// ops::cuda::mla_prefill: the absorbed MLA attention (ops/mla_attention.h) of prefill chunks on
// tensor cores. MLA's latent cache is shared by every head (multi-query), so for a run of tokens
// of one sequence the scores of all (token, head) rows are one GEMM against the cache and the
// output one GEMM with it:
//   S [rows, ctx] = bf16(scale * [q_lat | q_pe]) [rows, R + P] · bf16(cache) [ctx, R + P]ᵀ
//   P = softmax over each row's causal prefix (f32), rounded to bf16
//   o_lat [rows, R] = P · bf16(c_kv) [ctx, R]
// rows = (token, head) pairs of a query chunk, as many as the workspace holds (S is rows x ctx).
// Same contract as ops::cpu::mla_attention up to the bf16 rounding of q, the cache and the
// softmax weights (f32 sums): DeepseekModel's bf16 emulation reproduces those roundings.
// The decode-sized op stays ops::cuda::mla_attention (CUDA cores, split-KV, graph-capturable).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/status.h"
#include "ops/cuda/gemm/gemm.h"
#include "ops/mla_attention.h"

namespace pg::ops::cuda {

// Tokens [t0, t1) of the step, all of sequence `seq` (row of the block tables), at consecutive
// positions start_pos, start_pos + 1, ...: each attends to cache positions 0..its own.
struct MlaPrefillRun {
  int64_t t0 = 0, t1 = 0, start_pos = 0, seq = 0;
};

// Shapes the GEMM path takes: 16-byte rows of bf16 (R and R + P multiples of 8).
bool mla_prefill_supported(int64_t kv_lora_rank, int64_t rope_dim);

// Workspace for runs attending to at most max_ctx positions, with chunks of up to chunk_rows
// (token, head) rows (at least n_heads): the bf16 cache and its transposed c_kv part
// (max_ctx x (2R + P)), the bf16 queries (chunk_rows x (R + P)), the f32 scores and bf16 weights
// (chunk_rows x max_ctx x 6 bytes). Rounded up to 8 positions; parts 256-byte aligned.
size_t mla_prefill_workspace_bytes(int64_t max_ctx, int64_t n_heads, int64_t kv_lora_rank, int64_t rope_dim,
                                   int64_t chunk_rows);

// o_lat for the tokens of `runs` (the other tokens of `a` are not touched). `a` gives the device
// pointers, strides and dims as for ops::cuda::mla_attention (block_tables, kv, q_lat, q_pe, o_lat;
// o_lat must be contiguous [m, n_heads, R]); token_seq / ctx_len are not read: `runs` (host) says
// the same. Chunks are as large as `workspace` allows for the runs' longest context. Not
// graph-capturable (a host loop over runs and chunks, and cuBLASLt picks an algorithm per new
// shape); never synchronizes.
Status mla_prefill(GemmContext& ctx, const MlaAttentionArgs& a, std::span<const MlaPrefillRun> runs, void* workspace,
                   size_t workspace_bytes, cudaStream_t stream);

}  // namespace pg::ops::cuda
