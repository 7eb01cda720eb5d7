// moe_router: the MoE router as one op, the fusion of deepseek_model.cpp's router projection and
// moe_routing: logits = x · routerᵀ (f32), then the experts and weights of ops/moe_routing.h.
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
};

// The routing contract, a router of [routing.n_experts, hidden], and routing.logits == logits.
Status validate(const MoeRouterArgs& a);

}  // namespace pg::ops
