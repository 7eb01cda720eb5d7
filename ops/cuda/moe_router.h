// ops::cuda::moe_router: the CUDA backend of ops/moe_router.h, the router GEMV and moe_routing in
// one launch. Capturable: no allocation, no synchronization.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "ops/cuda/kernels.h"
#include "ops/moe_router.h"

namespace pg::ops::cuda {

// The logits are ops::cuda::linear's bits and the routing ops::cuda::moe_routing's (the same
// sums in the same order). The one-launch path (one thread-block cluster) takes f32 / bf16
// routers on linear's vector path, up to kRouterMaxTokens tokens and logits that fit rank 0's
// shared memory (moe_router_smem_bytes <= kRouterMaxSmemBytes); other cases launch linear, then
// moe_routing. With in_norm, the norm folds into the one-launch path up to kRouterTokenTile
// tokens (every block computes the inverse RMS); else rmsnorm runs first as its own launch.
// Stateless: the cluster barrier needs no counter between launches.
Status moe_router(const MoeRouterArgs& a, cudaStream_t stream);

// The routing kernel's Params of a validated MoeRoutingArgs (cuda_ops.cpp), shared by both launchers.
MoeRoutingParams moe_routing_params(const MoeRoutingArgs& a);

}  // namespace pg::ops::cuda
