// The CPU definition of moe_router (ops/moe_router.h): [rmsnorm,] linear, then moe_routing.
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/moe_router.h"

namespace pg::ops::cpu {

void moe_router(const MoeRouterArgs& a, ThreadPool& pool) {
  LinearArgs la;
  la.x = a.x, la.w = a.router, la.y = a.logits, la.m = a.routing.m, la.x_stride = a.x_stride;
  if (a.in_norm) {
    RmsNormArgs n;
    n.x = a.x, n.x_stride = a.x_stride, n.weight = a.in_norm, n.y = a.x_normed, n.m = a.routing.m;
    n.n = a.router->cols, n.eps = a.eps;
    rmsnorm(n);
    la.x = a.x_normed, la.x_stride = 0;
  }
  linear(la, pool);
  moe_routing(a.routing);
}

}  // namespace pg::ops::cpu
