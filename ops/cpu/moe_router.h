// CPU reference of moe_router (ops/moe_router.h).
#pragma once

#include "core/thread_pool.h"
#include "ops/moe_router.h"

namespace pg::ops::cpu {

// routing.logits = x · routerᵀ (ops::cpu::linear), then ops::cpu::moe_routing.
void moe_router(const MoeRouterArgs& a, ThreadPool& pool);

}  // namespace pg::ops::cpu
