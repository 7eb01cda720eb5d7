// The CPU reference implementations: the definition of every op (plain loops, fp32
// accumulation, dequantize on read), parallel over independent outputs so that results do not
// depend on the number of threads.
#pragma once

#include "core/thread_pool.h"
#include "ops/linear.h"
#include "ops/mla_attention.h"
#include "ops/moe_routing.h"
#include "ops/rmsnorm.h"
#include "ops/rmsnorm_residual.h"
#include "ops/rope.h"

namespace pg::ops::cpu {

void linear(const LinearArgs& a, ThreadPool& pool);
void rmsnorm(const RmsNormArgs& a);
void rmsnorm_residual(const RmsNormResidualArgs& a);
void rope(const RopeArgs& a);
void mla_attention(const MlaAttentionArgs& a, ThreadPool& pool);
void moe_routing(const MoeRoutingArgs& a);

// Dot product of two f32 vectors in a fixed summation order (16 interleaved partial sums,
// then a fixed tree), so every backend thread count gives the same bits.
float dot(const float* a, const float* b, int64_t n);
// out[j] = dot(x, row r0 + j of w) for j < n_rows, in any weight format: bf16 and NVFP4 rows converted
// inside the dots, f32 rows read in place, FP8 rows dequantized a few rows at a time; several rows
// at once (ops/cpu/simd.h), each value dot()'s bits.
void dot_rows(const Matrix& w, int64_t r0, int64_t n_rows, const float* x, float* out);
// y[i] += alpha * x[i]
void axpy(float alpha, const float* x, float* y, int64_t n);

}  // namespace pg::ops::cpu
