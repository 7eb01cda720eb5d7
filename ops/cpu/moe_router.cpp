// The CPU definition of moe_router (ops/moe_router.h): (rmsnorm,) linear, then moe_routing.
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/moe_router.h"

namespace pg::ops::cpu {

void moe_router(const MoeRouterArgs& a, ThreadPool& pool) {
  LinearArgs la;
  la.x = a.x, la.w = a.router, la.y = a.logits, la.m = a.routing.m, la.x_stride = a.x_stride;
  if (a.norm_weight) {  // the MLP's RMSNorm first, into normed
    RmsNormArgs r;
    r.x = a.x, r.x_stride = a.x_stride, r.weight = a.norm_weight, r.y = a.normed, r.m = a.routing.m;
    r.n = a.router->cols, r.eps = a.eps;
    rmsnorm(r);
    la.x = a.normed, la.x_stride = 0;
  }
  linear(la, pool);
  moe_routing(a.routing);
}

}  // namespace pg::ops::cpu
