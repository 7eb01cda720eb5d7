// The CUDA backend of the op contracts (ops/*.h): same Args as ops::cpu, pointers on the device.
// Launchers enqueue on `stream`, never synchronize, never allocate: all are capturable in a CUDA graph.
//
// Activation dtype (this first cut): f32 activations in device memory, exactly as the Args
// declare them, with f32 accumulation; weights stay in their stored format (bf16, f32, DeepSeek
// FP8 128x128 blocks) and are dequantized in registers. At batch 1 activations are <0.1% of the
// bytes a GEMV reads, so f32 costs nothing measurable there; bf16 activations are the next step
// once tensor-core tiles (m > 8) need them.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "ops/linear.h"
#include "ops/moe_routing.h"
#include "ops/rmsnorm.h"
#include "ops/rmsnorm_residual.h"

namespace pg::ops::cuda {

// y = x · Wᵀ (+ y). Fast path: M = 1..16 rows (GEMV / small GEMM streaming W once per 16 rows of
// x with 16-byte loads); larger m works (W is streamed once per 16 rows). Shapes off the vector
// path (K not a multiple of 16 bytes of W, unaligned pointers) take a slower scalar kernel.
Status linear(const LinearArgs& a, cudaStream_t stream);

// y = rmsnorm(x) * weight, one block per row. y may alias x.
Status rmsnorm(const RmsNormArgs& a, cudaStream_t stream);
// residual += x; y = rmsnorm(residual) * weight. y may alias x.
Status rmsnorm_residual(const RmsNormResidualArgs& a, cudaStream_t stream);

// Router logits -> expert indices and weights, one warp per token. Same indices as ops::cpu
// (including the tie order); the CUDA path takes n_experts <= 1024 and n_group <= 32.
Status moe_routing(const MoeRoutingArgs& a, cudaStream_t stream);

}  // namespace pg::ops::cuda
