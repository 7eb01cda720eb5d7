// ops::cuda::head_linear_gemm: the per-head products of MLA (ops/head_linear.h,
// y[t,h,:] = W[h] · x[t,h,:]) for prefill-sized m on tensor cores, as one cuBLASLt bf16
// GEMM strided-batched over the heads (gemm_bf16). The decode-sized op stays ops::cuda::head_linear.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "ops/cuda/gemm/gemm.h"
#include "ops/head_linear.h"

namespace pg::ops::cuda {

// Scratch bytes for one pass over m tokens (256-byte aligned parts):
//   weights [n_heads, n, ld(k)] bf16  when W is f32, or bf16 whose rows are not whole 16-byte
//                                     chunks (k % 8 != 0) or not 16-byte aligned (else 0 bytes)
//   x       [m, n_heads, ld(k)] bf16  the heads' inputs, rounded to nearest even
// with ld(k) = round_up(k, 8). Moonlight W_UV (16 heads, k 512) at m 8192: 128 MiB; DeepSeek-V3
// W_UV (128 heads) at 8192: 1 GiB -- a smaller scratch works too, see head_linear_gemm.
size_t head_linear_gemm_scratch_bytes(int64_t m, int64_t n_heads, int64_t n, int64_t k, HeadWeight w_format,
                                      const void* w);

// y[t,h,:] = W[h] · x[t,h,:] with HeadLinearArgs' strides, any m. x and W are rounded to bf16
// (nearest even; f32 W expanded into the scratch at every call), products exact in f32, summed
// in f32 by the tensor cores: the same contract as ops::cpu::head_linear up to the rounding of x
// and W and the summation order. `scratch` (device, 256-byte aligned) holds the weight part (if
// any) and x for as many tokens as fit: m is processed in passes of that many tokens, so any
// scratch of at least head_linear_gemm_scratch_bytes(1, ...) works (the runner can lend the MoE
// workspace, idle at that point). Never allocates or synchronizes (graph-capturable once each
// pass's shape has been seen: cuBLASLt's heuristic runs at a shape's first use). A layout for
// which cuBLASLt has no algorithm (odd y strides of the tiny models, say) falls back to the
// CUDA-core ops::cuda::head_linear for that pass.
Status head_linear_gemm(GemmContext& ctx, const HeadLinearArgs& a, void* scratch, size_t scratch_bytes,
                        cudaStream_t stream);

}  // namespace pg::ops::cuda
