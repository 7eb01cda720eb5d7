// The CPU definition of moe_router (ops/moe_router.h): linear, then moe_routing.
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/moe_router.h"

namespace pg::ops::cpu {

void moe_router(const MoeRouterArgs& a, ThreadPool& pool) {
  LinearArgs la;
  la.x = a.x, la.w = a.router, la.y = a.logits, la.m = a.routing.m, la.x_stride = a.x_stride;
  linear(la, pool);
  moe_routing(a.routing);
}

}  // namespace pg::ops::cpu
