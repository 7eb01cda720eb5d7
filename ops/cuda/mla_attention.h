// ops::cuda::mla_attention: the CUDA backend of ops/mla_attention.h (DeepSeek MLA, absorbed form,
// over the paged f32 latent cache), flash-decoding split-KV plus a combine. Graph-capturable:
// no allocation, no synchronization, the grid sized from a host-known context bound.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "ops/mla_attention.h"

namespace pg::ops::cuda {

// Floats of scratch the launcher needs for m tokens whose ctx_len are all <= max_ctx (0 when
// the plan has one split per token, as in prefill). Depends on the current device's SM count.
size_t mla_attention_workspace_floats(int64_t m, int64_t n_heads, int64_t kv_lora_rank, int64_t max_ctx);

// o_lat per MlaAttentionArgs (device pointers). max_ctx: a host-known upper bound of every
// ctx_len[t]; the grid is sized from it so that a CUDA graph captured with a bound stays valid
// for any ctx_len <= bound (blocks past a token's ctx_len exit early). Validates the Args' shape
// (ops::validate without its host read of ctx_len, which lives on the device here) and returns a
// Status naming what is wrong. Limits of this kernel: kv_lora_rank <= 512, kv_lora_rank +
// rope_dim small enough for the block's shared memory (<= 660).
Status mla_attention(const MlaAttentionArgs& a, int64_t max_ctx, float* workspace, size_t workspace_floats,
                     cudaStream_t stream);

}  // namespace pg::ops::cuda
