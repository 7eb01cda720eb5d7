// ops::cuda::moe_router: the CUDA backend of ops/moe_router.h, the router GEMV and moe_routing in
// one launch. Capturable: no allocation, no synchronization.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "ops/cuda/kernels.h"
#include "ops/moe_router.h"

namespace pg::ops::cuda {

// The logits are ops::cuda::linear's bits and the routing ops::cuda::moe_routing's (the same
// sums in the same order). counter: one device uint32, zero before the first launch (cudaMemset
// once); every launch leaves it zero, so it serves any sequence of launches and graph replays
// on one stream. The one-launch path takes f32 / bf16 routers on linear's vector path and up to
// fused_max_tokens tokens (< 0: kRouterFusedTokens, or PEREGRINE_ROUTER_FUSED_MAX_TOKENS; at most
// kRouterMaxFusedTokens); other cases launch linear, then moe_routing (counter unused). The bits
// are the same either way.
// kLogitsOnly: the one-launch kernel writes the logits alone (the routing is left to the expert
// kernels: moe_experts_routing in moe_experts/moe_experts.h), so expert_idx and expert_weight are not
// written; where that kernel does not apply, linear and moe_routing run as in kRoute.
enum class MoeRouterMode { kRoute, kLogitsOnly };
Status moe_router(const MoeRouterArgs& a, unsigned* counter, cudaStream_t stream, int64_t fused_max_tokens = -1,
                  MoeRouterMode mode = MoeRouterMode::kRoute);

// The routing kernel's Params of a validated MoeRoutingArgs (cuda_ops.cpp), shared by both launchers.
MoeRoutingParams moe_routing_params(const MoeRoutingArgs& a);

}  // namespace pg::ops::cuda
