// validate() of the moe_router contract (ops/moe_router.h); the CPU definition is ops/cpu/moe_router.cpp.
#include "ops/moe_router.h"

namespace pg::ops {

Status validate(const MoeRouterArgs& a) {
  PG_TRY(validate(a.routing));
  if (!a.router || (a.routing.m && (!a.x || !a.logits))) return invalid_argument("moe_router: null input");
  if (a.routing.logits != a.logits) return invalid_argument("moe_router: routing.logits is not logits");
  if (a.router->rows != a.routing.n_experts)
    return invalid_argument("moe_router: router of {} rows for {} experts", a.router->rows, a.routing.n_experts);
  if (a.x_stride && a.x_stride < a.router->cols)
    return invalid_argument("moe_router: x_stride {} < hidden {}", a.x_stride, a.router->cols);
  if (a.norm_weight) {
    if (a.routing.m && !a.normed) return invalid_argument("moe_router: a norm weight but no output for the normed rows");
    if (a.normed_stride && a.normed_stride < a.router->cols)
      return invalid_argument("moe_router: normed_stride {} < hidden {}", a.normed_stride, a.router->cols);
    if (!(a.norm_eps >= 0.0f)) return invalid_argument("moe_router: norm eps {} (want >= 0)", a.norm_eps);
  } else if (a.normed) {
    return invalid_argument("moe_router: an output for normed rows but no norm weight");
  }
  return ok_status();
}

}  // namespace pg::ops
