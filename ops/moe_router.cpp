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
  return ok_status();
}

}  // namespace pg::ops
