// The CUDA launchers of the MLA helper ops: same Args as ops::cpu (ops/cpu/mla_ops.h,
// ops::cpu::rope), pointers on the device. They enqueue on `stream`, never synchronize and never
// allocate: all are capturable in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "ops/embedding.h"
#include "ops/cuda/mla_attention_params.h"
#include "ops/head_linear.h"
#include "ops/mla_kv_write.h"
#include "ops/mla_prep.h"
#include "ops/rope.h"

namespace pg::ops::cuda {

// y[t] = table row tokens[t] in f32 (the same bits as ops::cpu::embedding). An id outside the
// table (the caller validates them) leaves its y row unwritten.
Status embedding(const EmbeddingArgs& a, cudaStream_t stream);

// RoPE in place (ops::cpu::rope). a.table is the host table (attention_factor, interleave, and
// its size checks rope_dim); inv_freq_device is the device copy of a.table->inv_freq
// [rope_dim / 2] f32. Angles and cos/sin as the CPU computes them (f32 angle, double cos/sin).
Status rope(const RopeArgs& a, const float* inv_freq_device, cudaStream_t stream);

// The fused cache write of the new tokens' [rmsnorm(c_kv) | rope(k_pe)] (ops::cpu::mla_kv_write),
// one block per token; a.table and inv_freq_device as for rope. Tokens whose position or block
// id is out of range (a caller bug) are skipped.
Status mla_kv_write(const MlaKvWriteArgs& a, const float* inv_freq_device, cudaStream_t stream);

// y[t,h,:] = W[h] · x[t,h,:] (ops::cpu::head_linear). Vector path (k a whole number of 16-byte
// chunks of W, n even, W / x 16-byte aligned with x strides multiples of 4): W streamed once
// per block in 16-byte loads and reused for the block's tokens (all of them for m <= 64).
// Other shapes take a generic warp-per-row kernel.
Status head_linear(const HeadLinearArgs& a, cudaStream_t stream);

// head_linear whose x (o_lat [m, n_heads, R]) is the combine of a deferred mla_attention's split
// partials (mla_attention's defer_to; the partials must have been written by the launch just
// before on `stream`): W_UV's op with the attention's combine in its prologue. a.x is not read.
// head_linear_combine_ok says whether a's shape takes it (the vector path, k <= 512, and a block's
// tokens x heads x k within kHeadCombineFloats: moonlight / V3 up to 8 tokens); where it does not,
// run the attention without defer_to and head_linear after it.
bool head_linear_combine_ok(const HeadLinearArgs& a);
Status head_linear_combine(const HeadLinearArgs& a, const MlaPartials& parts, cudaStream_t stream);

// The cos / sin rope and mla_kv_write compute, of m positions at once: cos_sin [m, rope_dim] f32,
// cos of pair k at column k, its sin at rope_dim / 2 + k (rope_dim = 2 x table.inv_freq.size());
// inv_freq_device as for rope. A decode step computes them once for every layer's mla_prep.
Status rope_cos_sin(const int64_t* positions, int64_t m, const RopeTable& table, const float* inv_freq_device,
                    float* cos_sin, cudaStream_t stream);

// mla_kv_write + rope (q_pe) + head_linear (W_UK) in one launch (ops/mla_prep.h), the same bits
// as the three launchers above. cos_sin_device: rope_cos_sin of a.kv_write.positions (the q_rope
// positions are the same, validate() checks). Shapes off head_linear's vector path take three launches.
Status mla_prep(const MlaPrepArgs& a, const float* cos_sin_device, cudaStream_t stream);

}  // namespace pg::ops::cuda
