// moe_experts: the MoE expert MLPs of one layer over only the experts each token selected, plus
// the shared experts, weighted and summed (DeepseekV3MoE.moe_infer + shared_experts).
//   result[t] = sum_k expert_weight[t,k] * E_{idx[t,k]}(x[t]) + sum_{s<n_shared} E_{n_experts+s}(x[t])
//   E_e(v)    = down_e · (silu(gate_e · v) * (up_e · v))
#pragma once

#include <cstdint>

#include "core/status.h"
#include "ops/linear.h"  // f16_mma_gemv
#include "ops/matrix.h"

namespace pg::ops {

// Weights are stacked per expert so that one Matrix covers all experts. The runner builds the
// stacks at load: the n_experts routed experts, then the n_shared shared experts (a shared MLP of
// width n_shared * inter splits exactly into n_shared experts of width inter: gate/up rows
// [s*inter, (s+1)*inter), down columns [s*inter, (s+1)*inter); with FP8 the column split also
// needs inter % block_cols == 0, which only the runner can check).
//
// Summation order (the definition; the CUDA path keeps it, only its dot products round
// differently): per token, the routed experts in ascending expert id (equal ids in slot order),
// then the shared experts in order, each term expert_weight * E_e(x) (shared: weight 1). On the
// CUDA path at decode sizes (m <= 8, m * top_k <= 64; bf16, fp8, f32) a token's result does not
// depend on the other tokens of the step: a verify step's rows have the bits of the same tokens
// decoded one at a time.
// y may alias x.
struct MoeExpertsArgs {
  const float* x = nullptr;              // [m, hidden] f32, the post-attention-RMSNorm output
  const int32_t* expert_idx = nullptr;   // [m, top_k] routed expert ids in [0, n_experts)
  const float* expert_weight = nullptr;  // [m, top_k] routing weights (already normalised and scaled)
  const Matrix* gate_up = nullptr;       // [(n_experts + n_shared) * 2 * inter, hidden]: expert e's gate rows
                                         //  start at row e*2*inter, its up rows at e*2*inter + inter
  const Matrix* down = nullptr;          // [(n_experts + n_shared) * hidden, inter]: expert e's rows at e*hidden
  float* y = nullptr;                    // [m, hidden] f32, row stride y_stride (0 = hidden)
  int64_t m = 0, hidden = 0, inter = 0, n_experts = 0, top_k = 0, n_shared = 0, y_stride = 0;
  bool accumulate = false;               // y += result (the residual add) instead of y = result
  // NVFP4 and FP8 stacks: a backend may round x, and h before down, to f16 (round to nearest
  // even, |v| > 65504 saturated to +-65504) and multiply on f16 tensor cores; the weights stay
  // exact and sums f32. CUDA does so per stack on its vector path (aligned), NVFP4 where K % 32 ==
  // 0 (hidden for gate_up, inter for down), FP8 where fp8_experts_mma() says (below); the CPU
  // definition ignores it. false: exact f32 activations (CudaRunnerOptions::exact).
  bool f16_activations = true;
  // CUDA, a launch-order promise of the caller: the kernel just before in the stream is the MoE
  // router (ops::cuda::moe_router), which lets its dependents launch only after x is complete. At
  // decode sizes the CUDA path then starts gate_up under PDL, its shared experts before the routing
  // is done (the CUDA runner promises it unless PEREGRINE_MOE_GATE_UP_PDL=0). Ignored elsewhere.
  bool after_router = false;
};

// Shapes, pointers and, for FP8 block weights, that every expert's rows start on a scale-row
// boundary (inter a multiple of gate_up.block_rows, hidden a multiple of down.block_rows).
// Expert ids live in device memory on the CUDA path, so their range is not checked here: the
// CPU path aborts on an id outside [0, n_experts); the CUDA path skips it (no out-of-bounds read).
Status validate(const MoeExpertsArgs& a);

// Whether CUDA multiplies an FP8 stack `w` of K = k (hidden for gate_up, inter for down) on f16
// tensor cores, given f16_activations and its vector path: where its shape takes the FP8 GEMV's
// tensor-core kernel (f16_mma_gemv: one block scale per 8-row half tile and 64-element step), at
// every step size below the bf16 GEMM's (as NVFP4). At decode sizes (one token, or 2..8 tokens
// without a plan of the pairs) a token's h and output have the same bits whatever the step's other
// tokens (the m = 1 and 2..8 kernels share tiles, splits and summation order); larger steps take
// the planned kernels. The CPU's emulation of the CUDA numbers rounds x and h to f16 there.
inline bool fp8_experts_mma(const Matrix& w, int64_t k) {
  return w.format == WeightFormat::kFp8Block && f16_mma_gemv(w, k);
}

}  // namespace pg::ops
