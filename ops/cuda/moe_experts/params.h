// The MoE expert kernels' interface for both sides: the Params struct, the workspace layout and
// the launch functions kernel.cu defines (returning the launch's cudaError_t). fmt-free, so the
// kernel file includes it; the Status-returning launcher is moe_experts/launch.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/kernels.h"  // MoeRoutingParams
#include "ops/cuda/moe_experts/config.h"

namespace pg::ops::cuda {

// The step's routing grouped by expert, written by the plan kernel into the workspace.
// "Active" experts are the routed experts at least one (token, slot) pair chose.
struct MoePlanBuffers {
  int32_t* n_active = nullptr;       // [1] active routed experts
  int32_t* active_expert = nullptr;  // [max_active] their ids, ascending
  int32_t* seg_begin = nullptr;      // [max_active + 1] first pair of each active expert in pair_flat
  int32_t* pair_flat = nullptr;      // [m * top_k] flat pair index t * top_k + k, by expert then ascending
  float* h = nullptr;                // [m * (top_k + n_shared), inter] f32 silu(gate·x) * (up·x): routed pair
                                     //  at its pair_flat position, shared pair (s, t) at m*top_k + s*m + t
  // The direct paths' second copy of h as f16 B fragments, where the tensor-core gate_up writes it
  // (null: not written), h's rows back to back in the down's staged layout: NVFP4's
  // nvfp4_mma_stage_x_rows (k_steps x 16 uint4 a row; the chunks past inter / 32 in a row's last
  // k-step never written), FP8's fp8_mma_stage_x (the row in order). The down kernels that stage h
  // take it with one bulk copy (common.cuh's moe_h_frags_copy).
  uint4* h16 = nullptr;
};

// The workspace layout, each array 256-byte aligned (offsets in bytes).
struct MoeWorkspaceLayout {
  size_t n_active = 0, active_expert = 0, seg_begin = 0, pair_flat = 0, h = 0, h16 = 0, total = 0;
};
inline MoeWorkspaceLayout moe_workspace_layout(int64_t m, int64_t top_k, int64_t n_shared, int64_t n_experts,
                                               int64_t inter) {
  const auto up = [](size_t b) { return (b + 255) / 256 * 256; };
  const int64_t max_active = m * top_k < n_experts ? m * top_k : n_experts;
  MoeWorkspaceLayout l;
  size_t o = 0;
  l.n_active = o, o += up(sizeof(int32_t));
  l.active_expert = o, o += up(size_t(max_active) * sizeof(int32_t));
  l.seg_begin = o, o += up(size_t(max_active + 1) * sizeof(int32_t));
  l.pair_flat = o, o += up(size_t(m * top_k) * sizeof(int32_t));
  l.h = o, o += up(size_t(m * (top_k + n_shared) * inter) * sizeof(float));
  l.h16 = o, o += up(size_t(m * (top_k + n_shared)) * size_t(((inter + 31) / 32 + 3) / 4) * 256);  // 128 f16 a k-step
  l.total = o;
  return l;
}

// One weight stack as the kernels see it.
struct MoeWeightParams {
  const void* data = nullptr;        // [n_rows, k] f32 | bf16 | fp8 e4m3fn, or [n_rows, k/2] NVFP4 codes
  const float* scale_inv = nullptr;  // fp8: [n_rows / block_rows, scale_cols]
  const uint8_t* scale_fp8 = nullptr;   // nvfp4: [n_rows, scale_fp8_cols = k/16] e4m3fn
  int64_t scale_fp8_cols = 0;
  const float* scale_2_rows = nullptr;  // nvfp4: [n_rows / scale_2_group_rows] f32 (one per expert part),
  int64_t scale_2_group_rows = 1;       //  or null: scale_2 for every row
  float scale_2 = 1.0f;
  int64_t block_rows = 128, block_cols = 128, scale_cols = 0;
  int log2_block_cols = 7;           // vector path, fp8: block_cols is a power of two >= 16
};

// A self-routing block's scratch (moe_experts/block_routing.cuh; MoeExpertsParams::self_routing):
// E scores, E selection values, E biases, the top_k choices and weights, a reduction's room.
constexpr int64_t kMoeSelfRoutingMaxExperts = 256;  // V3's; the rank loop is E x E / threads compares
constexpr int kMoeBlockRoutingMaxTopK = 32;
__host__ __device__ constexpr size_t moe_block_routing_floats(int64_t n_experts) {
  return size_t(3 * n_experts + 2 * kMoeBlockRoutingMaxTopK + 32 + 4);
}
__host__ __device__ constexpr size_t moe_block_routing_bytes(int64_t n_experts) {
  return (moe_block_routing_floats(n_experts) * sizeof(float) + 15) / 16 * 16;
}

// One call of the op, passed as `const __grid_constant__` to every kernel.
struct MoeExpertsParams {
  const float* x = nullptr;              // [m, hidden] f32
  const int32_t* expert_idx = nullptr;   // [m, top_k]
  const float* expert_weight = nullptr;  // [m, top_k]
  MoeWeightParams gate_up;               // [(n_experts + n_shared) * 2 * inter, hidden]
  MoeWeightParams down;                  // [(n_experts + n_shared) * hidden, inter]
  float* y = nullptr;                    // [m, hidden] f32, row stride y_stride
  MoePlanBuffers plan;
  int m = 0, hidden = 0, inter = 0, n_experts = 0, top_k = 0, n_shared = 0;
  int max_active = 0;  // min(n_experts, m * top_k): the grid's routed expert slots
  int64_t y_stride = 0;
  bool accumulate = false;
  // m = 1 and top_k + n_shared <= kMoeDirectMaxSlots: no plan; gate_up's slot s is pair s
  // (expert_idx[s], h row s; shared expert s at h row top_k + s) and down is
  // moe_down_direct_kernel, launched with PDL.
  bool direct = false;
  // 1 <= m <= kMoeDirectMaxTokens within moe_direct_multi_fits, not direct, NVFP4 stacks only on
  // the tensor-core kernels (nvfp4_kernel.cu, whose down is moe_down_multi_nvfp4_kernel): no
  // plan; gate_up's grid.y slot s < max_active is the s-th distinct routed expert in order of
  // first appearance in expert_idx (slots beyond the step's distinct count exit), then the shared
  // experts. h row of routed pair (t, k) is its flat index t * top_k + k, shared pair (s, t) at
  // m * top_k + s * m + t. down is moe_down_multi_kernel, launched with PDL.
  bool direct_multi = false;
  int multi_groups = 1;  // direct multi: row tiles per down block (moe_down_multi_groups)
  // The tensor-core gate_up kernels (nvfp4_kernel.cu, fp8_kernel.cu): grid.y slots per shared expert,
  // each one 8-pair pass of its m tokens (moe_shared_gate_up_slots): slot max_active + s * this + j is
  // shared expert s's pairs [8j, 8j + 8). 1 on the direct paths (m <= 8: one pass).
  int shared_slots = 1;
  // Direct or direct multi: gate_up is launched with PDL right after the router (no plan kernel
  // between). Its shared-expert blocks start at once (the router passes its own pdl_wait before it
  // triggers, so x is complete); the routed blocks wait for the routing, then trigger down.
  bool gate_up_pdl = false;
  // Direct (m = 1) on the NVFP4 or FP8 tensor-core kernels, under gate_up_pdl: the router wrote only
  // the logits (routing.logits; moe_router's MoeRouterMode::kLogitsOnly), and the kernels route the
  // token themselves (moe_experts/block_routing.cuh): every routed gate_up block after its wait, and
  // NVFP4's down blocks before their own; gate_up's block (0, 0, 0) writes routing.expert_idx /
  // expert_weight (= expert_idx / expert_weight) for readers after the layer, FP8's down among them
  // (after its wait). routing_smem: the byte offset of the block's routing scratch in the kernel's
  // dynamic shared memory (the launcher's).
  bool self_routing = false;
  MoeRoutingParams routing;
  uint32_t routing_smem = 0;
};

// Groups the m * top_k pairs by expert (one block; ids outside [0, n_experts) are dropped).
cudaError_t launch_moe_plan(const MoeExpertsParams& p, cudaStream_t stream);
// h for every active expert's pairs and the shared experts'. `vec`: the 16-byte path (hidden a
// multiple of the chunk, aligned rows); m_tile one of 1, 2, 4, 8.
cudaError_t launch_moe_gate_up(const MoeExpertsParams& p, LinearWeight f, bool vec, int m_tile, cudaStream_t stream);
// y (+)= the weighted sum over each token's experts of down·h, in the contract's order.
cudaError_t launch_moe_down(const MoeExpertsParams& p, LinearWeight f, bool vec, int m_tile, cudaStream_t stream);

}  // namespace pg::ops::cuda
