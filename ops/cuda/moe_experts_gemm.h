// ops::cuda::moe_experts_gemm: the MoE expert MLPs (ops/moe_experts.h) for prefill-sized m on
// tensor cores: each active expert's tokens gathered into bf16 rows, gate_up and down as cuBLASLt
// bf16 GEMMs (gemm_bf16) on the expert's slice of the stacked weights, SiLU * mul in between, and
// a combine that sums each token's experts in the contract's order. The decode-sized op (CUDA-core
// GEMV, graph-capturable) stays ops::cuda::moe_experts.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "ops/cuda/gemm/gemm.h"
#include "ops/moe_experts.h"

namespace pg::ops::cuda {

// What a workspace is sized for: a pass over max_m tokens of a layer with these dims.
// stage_weights: the expert weights are expanded into the workspace first (f32 / FP8 / NVFP4
// weights, or bf16 ones whose rows are not whole 16-byte chunks); moe_gemm_dims() derives it.
struct MoeGemmDims {
  int64_t max_m = 0, top_k = 0, n_shared = 0, n_experts = 0, hidden = 0, inter = 0;
  bool stage_weights = false;
};

// The dims of the layer `a` describes (its weights, top_k, n_shared, ...) for passes of max_m
// tokens; a.m and the pointers other than the weights are ignored.
MoeGemmDims moe_gemm_dims(const MoeExpertsArgs& a, int64_t max_m);

// Device bytes for one pass of d.max_m tokens (256-byte aligned parts):
//   staging bf16  [rows, max(ld(hidden), ld(inter))]  gathered x, then h = silu(gate) * up
//   staging f32   [rows, max(ld(2 inter), ld(hidden))] gate_up outputs, then down outputs
//   weights bf16  max(2 inter x ld(hidden), hidden x ld(inter)) when stage_weights: one
//                 expert's gate_up or down rows expanded (or re-strided) at a time
//   plan          int32: per-tile histograms, counts, segments, row -> token, pair -> row
// with rows = n_shared * round_up(max_m, 32) + max_m * top_k + min(n_experts, max_m * top_k) * 31
// and ld(c) = round_up(c, 8). Moonlight (2048 / 1408, 64 + 2 top 6, bf16) at max_m 8192: 1.04 GB,
// at 4096: 0.53 GB; its dense layers (inter 11264) at 8192: 0.92 GB. A runner serving several
// layer kinds allocates the largest of their sizes.
size_t moe_experts_gemm_workspace_bytes(const MoeGemmDims& d);

// Caller-owned device memory (256-byte aligned), e.g. from the runner's arena. A call makes as
// few passes over the tokens as the bytes allow: one when bytes >= the size for (a's dims, a.m).
struct MoeGemmWorkspace {
  void* data = nullptr;
  size_t bytes = 0;
};

// y (+)= moe_experts(a), same contract and summation order as ops::cpu::moe_experts; only the
// dot products round differently: x, the expanded weights and h are rounded to bf16 (nearest
// even), every product is exact in f32 and summed in f32 by the tensor cores.
// Steps per pass (a chunk of tokens as large as the workspace allows):
//   1. plan kernels group the (token, slot) pairs by expert (flat order within an expert);
//   2. the per-expert counts are copied to the host: ONE cudaStreamSynchronize per pass. So this
//      op is NOT graph-capturable; it is meant for prefill chunks, which run eagerly (decode steps
//      use ops::cuda::moe_experts inside their graphs);
//   3. x rows gathered to bf16 per expert segment (shared experts: all tokens);
//   4. per segment (shared experts first, then active routed experts): gate_up GEMM
//      [rows, 2 inter] = x_e · gate_up_eᵀ (f32 / FP8 / NVFP4 weights first expanded to bf16 into
//      one of two workspace buffers on ctx.staging()'s stream, the next expert's while the GEMM
//      reads the current one's); then SiLU * mul -> bf16 h; per segment: down GEMM
//      [rows, hidden] = h_e · down_eᵀ;
//   5. combine: y[t] (+)= sum over t's routed experts (ascending id, equal ids by slot) of
//      weight * out, then + the shared experts' outputs in order (deterministic: no atomics).
// Expert ids outside [0, n_experts) are skipped (as ops::cuda::moe_experts). Any m works (the
// runner should prefer ops::cuda::moe_experts below ~64 tokens); the tiny models' odd dims work
// too (rows re-strided into the workspace). Limits (prefill_gemm_params.h): n_experts <= 1024,
// top_k <= 32, n_shared <= 64; larger layers get Unsupported. y may alias x. Every GEMM's row
// count is a multiple of 32, so each weight shape sees at most (largest pass) / 32 + 1 cuBLASLt
// heuristic calls over the process (cached in ctx; the first prefills pay them).
Status moe_experts_gemm(GemmContext& ctx, const MoeExpertsArgs& a, const MoeGemmWorkspace& ws, cudaStream_t stream);

}  // namespace pg::ops::cuda
