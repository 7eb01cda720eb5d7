// The CPU definition of moe_router (ops/moe_router.h): linear, then moe_routing.
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/moe_router.h"

namespace pg::ops::cpu {

void moe_router(const MoeRouterArgs& a, ThreadPool& pool) {
  LinearArgs la;
  la.x = a.x, la.w = a.router, la.y = a.logits, la.m = a.routing.m, la.x_stride = a.x_stride;
  if (a.norm_weight) {  // the post-attention norm first: the router reads its output
    RmsNormArgs r;
    r.x = a.x, r.weight = a.norm_weight, r.y = a.normed, r.m = a.routing.m, r.n = a.router->cols;
    r.x_stride = a.x_stride, r.y_stride = a.normed_stride, r.eps = a.norm_eps;
    rmsnorm(r);
    la.x = a.normed, la.x_stride = a.normed_stride;
  }
  linear(la, pool);
  moe_routing(a.routing);
}

}  // namespace pg::ops::cpu
