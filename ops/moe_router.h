// moe_router: the MoE router as one op, the fusion of deepseek_model.cpp's router projection and
// moe_routing: logits = x · routerᵀ (f32), then the experts and weights of ops/moe_routing.h.
// Optionally the layer's post-attention RMSNorm first (norm_weight set): x is then the residual
// stream, the router reads normed = rmsnorm(x) * norm_weight (ops/rmsnorm.h, eps norm_eps) and
// writes it for the MLP, as rmsnorm would.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "ops/matrix.h"
#include "ops/moe_routing.h"

namespace pg::ops {

struct MoeRouterArgs {
  const float* x = nullptr;         // [m, hidden] f32, row stride x_stride (0 = hidden)
  int64_t x_stride = 0;
  const Matrix* router = nullptr;   // [n_experts, hidden] (gate.weight)
  float* logits = nullptr;          // [m, n_experts] f32: written, then routed
  MoeRoutingArgs routing;           // routing.logits == logits
  const float* norm_weight = nullptr;  // [hidden] f32, or null: x is the router's input as it is
  float norm_eps = 1e-6f;
  float* normed = nullptr;          // norm_weight set: [m, hidden] f32, row stride normed_stride (0 = hidden)
  int64_t normed_stride = 0;
};

// The routing contract, a router of [routing.n_experts, hidden], and routing.logits == logits.
Status validate(const MoeRouterArgs& a);

}  // namespace pg::ops
