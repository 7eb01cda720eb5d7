// ops::cuda::mla_attention: the CUDA backend of ops/mla_attention.h (DeepSeek MLA, absorbed form,
// over the paged f32 latent cache), flash-decoding split-KV with the combine fused into the same
// kernel. Graph-capturable: no allocation, no synchronization, the grid sized from a host-known
// context bound.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "ops/cuda/mla_attention_params.h"
#include "ops/mla_attention.h"

namespace pg::ops::cuda {

// Which kernel computes the scores and the weighted sum: the split-KV kernel on the CUDA cores
// (f32 FMAs) or on the bf16 tensor cores (each f32 operand split into a bf16 pair: three products
// per multiply, ~2^-16 relative per product), both with the fused combine; or, on request only,
// the two-pass kernels on the CUDA cores (scores, then softmax · V merged in clusters; n_heads <=
// 16 and m x n_heads <= 64, else the launcher takes kAuto's choice). mla_attention_params.h has
// their plans. kAuto: mla_cores_for's choice by shape.
enum class MlaCores { kCuda, kTensor, kAuto, kCudaTwoPass };

// kAuto's choice: the tensor cores wherever the CUDA-core plan also puts 16 heads in a block
// (m x n_heads > kMlaSmallHeadWork: V3's 128 heads, verify steps, batches); below that the
// CUDA-core kernel's 8-head blocks double the blocks and win. H200, us per launch in a graph,
// CUDA cores / tensor cores / two passes (2026-12-01, 5063ad0): moonlight batch 1 at 1K 12.9 /
// 17.4 / 12.2, at 4K 19.7 / 26.4 / 25.2, at 32K 74.2 / 64.4 / 162.0; moonlight verify of 4 at 1K
// 20.3 / 19.1 / 25.2; batch 8 at 1K 24.8 / 22.7; V3 batch 1 at 1K 25.2 / 22.9, verify of 4 61.9 /
// 54.1. The two passes win only at short contexts and lose badly at long ones, and a decode
// graph serves every context up to max_model_len: kAuto never takes them.
MlaCores mla_cores_for(int64_t m, int64_t n_heads);

// Floats of scratch the launcher needs for m tokens whose ctx_len are all <= max_ctx (0 when
// the plan has one split per token, as in prefill). Depends on the current device's SM count.
// The workspace starts with counters that must be zero before its first use (call
// mla_attention_workspace_init once after allocating it); every launch leaves them zero again,
// so one workspace serves any sequence of launches and graph replays (on one stream at a time),
// whatever their m, max_ctx and cores, as long as it is large enough for each (this size covers
// both kernels' plans).
size_t mla_attention_workspace_floats(int64_t m, int64_t n_heads, int64_t kv_lora_rank, int64_t max_ctx);

// Zeroes the workspace's counters (an async memset on `stream`); once, after allocation.
Status mla_attention_workspace_init(float* workspace, size_t workspace_floats, cudaStream_t stream);

// o_lat per MlaAttentionArgs (device pointers). max_ctx: a host-known upper bound of every
// ctx_len[t]; the grid is sized from it so that a CUDA graph captured with a bound stays valid
// for any ctx_len <= bound (blocks past a token's ctx_len exit early). Validates the Args' shape
// (ops::validate without its host read of ctx_len, which lives on the device here) and returns a
// Status naming what is wrong. Limits: kv_lora_rank <= 512, kv_lora_rank + rope_dim small enough
// for a block's shared memory (CUDA cores <= 660, tensor cores <= 704).
//
// defer_to (optional): asks for the deferred form. Where the plan allows it (the lean CUDA-core
// kernel with more than one split: mla_attention_defer_ok; the tensor-core kernel's vector
// instantiation likewise unless PEREGRINE_ATTENTION_DEFER_TC=0: mla_attention_tc_defer_ok) the
// splits leave their partials in the workspace uncombined, o_lat is not written, and *defer_to
// describes them (deferred = true) for
// head_linear_combine (mla_ops.h), which must run next on the stream; elsewhere the attention
// runs as without it and defer_to->deferred is false.
Status mla_attention(const MlaAttentionArgs& a, int64_t max_ctx, float* workspace, size_t workspace_floats,
                     cudaStream_t stream, MlaCores cores = MlaCores::kCuda, MlaPartials* defer_to = nullptr);

}  // namespace pg::ops::cuda
