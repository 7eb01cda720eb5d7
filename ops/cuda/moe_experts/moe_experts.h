// ops::cuda::moe_experts: the MoE expert MLPs (ops/moe_experts.h) in three graph-capturable
// launches: a one-block plan groups the (token, slot) pairs by expert on the device, a gate/up
// kernel reads every selected expert's gate and up rows once for all of its tokens, a down kernel
// sums each token's experts in the contract's order and writes (or adds to) y. Decode steps of
// m <= 8 tokens (batches, speculative verify steps) can skip the plan: every warp derives the
// distinct experts from expert_idx itself (params.h, `direct_multi`; PEREGRINE_MOE_DIRECT_MULTI=0
// turns it off).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "ops/moe_experts.h"
#include "ops/moe_routing.h"

namespace pg::ops::cuda {

// Device scratch one call needs (plan arrays + the [m * (top_k + n_shared), inter] f32 h).
size_t moe_experts_workspace_bytes(int64_t m, int64_t top_k, int64_t n_shared, int64_t n_experts, int64_t inter);

// Never synchronizes or allocates; the grids depend on the Args' dims only (not on the routing).
// Pointers are device pointers; `workspace` holds moe_experts_workspace_bytes(...) bytes,
// 256-byte aligned. Fast path: m = 1..64 with whole 16-byte chunks per weight row; other shapes
// take the scalar path, any m works (prefill streams an expert once per 8 of its tokens).
Status moe_experts(const MoeExpertsArgs& a, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// The experts of a step whose routing the router left undone (moe_router in MoeRouterMode::kLogitsOnly,
// with `routing`'s args; its expert_idx / expert_weight are a's). Where moe_experts_self_routing says
// so, the kernels route the token themselves (one fewer handoff on the layer's path); else
// moe_routing runs first. The same routing bits either way, written to expert_idx / expert_weight.
Status moe_experts_routing(const MoeExpertsArgs& a, const MoeRoutingArgs& routing, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream);
// One token on the NVFP4 tensor-core kernels' direct path, after_router, both stacks NVFP4 on their
// vector paths, up to kMoeSelfRoutingMaxExperts experts (moe_experts/params.h); on unless
// PEREGRINE_MOE_SELF_ROUTING=0 (read once).
bool moe_experts_self_routing(const MoeExpertsArgs& a, const MoeRoutingArgs& routing);
bool moe_self_routing_enabled();
// The same for the FP8 tensor-core kernels (under moe_self_routing_enabled): on unless
// PEREGRINE_MOE_FP8_SELF_ROUTING=0.
bool moe_fp8_self_routing_enabled();

// Whether m = 2..8 take the direct multi path (on unless PEREGRINE_MOE_DIRECT_MULTI=0; read once).
bool moe_direct_multi_enabled();
// Whether the CUDA runner starts gate_up under PDL after the router (it sets
// MoeExpertsArgs::after_router; on unless PEREGRINE_MOE_GATE_UP_PDL=0; read once).
bool moe_gate_up_pdl_enabled();

// The NVFP4 (and FP8) tensor-core kernels' choices (moe_experts/nvfp4_params.h) for the benchmark's sweep;
// 0 fields take the defaults. Instantiated: tiles 1 x unroll 1, 2, 4 and tiles 2 x unroll 1, 2
// (the direct down not 2 x 2, the planned down 1 x 1 and 1 x 2 only).
struct MoeNvfp4Variant {
  int gate_up_tiles = 0, gate_up_unroll = 0, down_tiles = 0, down_unroll = 0;
  // m = 1 down with every slot's h staged per block (nvfp4_kernel.cu; moe_experts() sets it unless
  // PEREGRINE_MOE_NVFP4_DOWN_STAGED=0).
  bool down_staged = true;
  // m = 1 down with the block's weights copied to shared memory before it waits for gate_up
  // (nvfp4_kernel.cu; where the grid fits one block per SM). Takes precedence over down_staged.
  // moe_experts() sets it unless PEREGRINE_MOE_NVFP4_DOWN_PREFETCH=0.
  bool down_prefetch = false;
  // gate_up's warps per block: 0 the default (nvfp4_params.h's kMoeNvfp4GateUpWarps), else 4 or 8
  // (moe_experts() reads PEREGRINE_MOE_NVFP4_GATE_UP_WARPS).
  int gate_up_warps = 0;
  // gate_up's K in 1 or 2 halves: 0 the default (nvfp4_params.h's moe_nvfp4_gate_up_k_split, which
  // reads PEREGRINE_MOE_NVFP4_GATE_UP_KSPLIT), else that. At 2 the kernel has one grid (4 rows' warps
  // a block), whatever gate_up_warps says. A model's steps must all use one value.
  int gate_up_k_split = 0;
  // gate_up at 2..8 tokens (the direct multi path) with the step's x rows staged per block and the
  // weights through each warp's ring, where it fits (nvfp4_params.h); moe_experts() sets it unless
  // PEREGRINE_MOE_NVFP4_GATE_UP_MULTI_STAGED=0.
  bool gate_up_multi_staged = false;
  // down at 2..8 tokens with each warp's tasks streamed through a cp.async ring and h staged per
  // block, where it fits (nvfp4_params.h); moe_experts() sets it unless
  // PEREGRINE_MOE_NVFP4_DOWN_MULTI_RING=0.
  bool down_multi_ring = false;
  // gate_up (both stacks on the NVFP4 tensor-core kernels at 1..8 tokens, or on FP8's at one) also
  // writes h as f16 B fragments (moe_experts/params.h's MoePlanBuffers::h16), and the down modes that
  // stage h (prefetch, staged, the multi rings) take them with one bulk copy instead of converting h's
  // f32 rows: the same f16 values. moe_experts() sets it unless PEREGRINE_MOE_NVFP4_H_FRAGS=0.
  bool h_frags = true;
  // Staged gate_up blocks per SM at most: > 0 that many, < 0 the one-token grid's ceil(blocks / SMs)
  // (the default; no cap where the experts route themselves, so the prefetching down fits beside it),
  // 0 no cap (nvfp4_params.h; moe_experts() reads PEREGRINE_MOE_NVFP4_GATE_UP_BLOCKS_PER_SM).
  int gate_up_blocks_per_sm = -1;
  // gate_up at 2..8 tokens (x staged, the default tiles) on a persistent grid whose blocks take
  // (slot, row tile) units from a flat index (nvfp4_kernel.cu's kPersist): < 0 (the default) as many
  // blocks as fit the device at once, where a block a unit would not and K is whole (moonlight from 3
  // tokens); > 0 at most that many, everywhere (the tests' several units a block); 0 a block a unit.
  // Same bits. moe_experts() reads PEREGRINE_MOE_NVFP4_GATE_UP_PERSIST (0 off, 1 the default, N > 1).
  int gate_up_persist_blocks = -1;
  // FP8 stacks on the f16 tensor cores (fp8_kernel.cu; ops::fp8_experts_mma), at every step size: on
  // unless PEREGRINE_MOE_FP8_MMA=0 (an A/B switch: the CPU emulation assumes it on); the m = 1 down
  // with every slot's h staged per block unless PEREGRINE_MOE_FP8_DOWN_STAGED=0; gate_up with the
  // step's x staged per block where it fits unless PEREGRINE_MOE_FP8_GATE_UP_STAGED=0. Same bits.
  bool fp8_mma = true;
  bool fp8_down_staged = true;
  bool fp8_gate_up_staged = true;
  // The m = 1 FP8 down's 16-row tiles per warp: 0 the default (fp8_params.h), 1 or 2
  // (PEREGRINE_MOE_FP8_DOWN_TILES).
  int fp8_down_tiles = 0;
};
Status moe_experts_variant(const MoeExpertsArgs& a, const MoeNvfp4Variant& v, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream, const MoeRoutingArgs* routing = nullptr);

}  // namespace pg::ops::cuda
