// CPU reference definitions of the MLA helper ops the CUDA decode step needs: embedding,
// mla_kv_write and head_linear (contracts in ops/embedding.h, ops/mla_kv_write.h,
// ops/head_linear.h). RoPE's reference is ops::cpu::rope (cpu_ops.h).
#pragma once

#include "core/thread_pool.h"
#include "ops/embedding.h"
#include "ops/head_linear.h"
#include "ops/mla_kv_write.h"
#include "ops/mla_prep.h"

namespace pg::ops::cpu {

// y[t] = table row tokens[t], dequantized (matrix_row_to_f32). Aborts on an id outside the table.
void embedding(const EmbeddingArgs& a);
// cache row of (token_seq[t], positions[t]) = [rmsnorm(c_kv) * w | rope(k_pe)]: the model's
// sequence (ops::cpu::rmsnorm, then ops::cpu::rope at offset R). Aborts on an out-of-range
// position or block id.
void mla_kv_write(const MlaKvWriteArgs& a);
// y[t,h,n] = dot(W[h,n,:], x[t,h,:]) (ops::cpu::dot's fixed order), parallel over (h, n).
void head_linear(const HeadLinearArgs& a, ThreadPool& pool);
// mla_kv_write, rope and head_linear of the three parts, in turn.
void mla_prep(const MlaPrepArgs& a, ThreadPool& pool);

}  // namespace pg::ops::cpu
