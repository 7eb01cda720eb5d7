// validate() of the moe_router contract (ops/moe_router.h); the CPU definition is ops/cpu/moe_router.cpp.
#include "ops/moe_router.h"

#include <cmath>
#include <cstdint>

namespace pg::ops {

Status validate(const MoeRouterArgs& a) {
  PG_TRY(validate(a.routing));
  if (!a.router || (a.routing.m && (!a.x || !a.logits))) return invalid_argument("moe_router: null input");
  if (a.routing.logits != a.logits) return invalid_argument("moe_router: routing.logits is not logits");
  if (a.router->rows != a.routing.n_experts)
    return invalid_argument("moe_router: router of {} rows for {} experts", a.router->rows, a.routing.n_experts);
  if (a.x_stride && a.x_stride < a.router->cols)
    return invalid_argument("moe_router: x_stride {} < hidden {}", a.x_stride, a.router->cols);
  if (a.norm_weight && a.routing.m) {
    if (!a.normed) return invalid_argument("moe_router: norm_weight without a normed buffer");
    if (!std::isfinite(a.eps) || a.eps < 0.0f) return invalid_argument("moe_router: eps {} (want finite, >= 0)", a.eps);
    const int64_t H = a.router->cols, xs = a.x_stride ? a.x_stride : H, m = a.routing.m;
    const auto x0 = reinterpret_cast<uintptr_t>(a.x), x1 = reinterpret_cast<uintptr_t>(a.x + (m - 1) * xs + H);
    const auto y0 = reinterpret_cast<uintptr_t>(a.normed), y1 = reinterpret_cast<uintptr_t>(a.normed + m * H);
    if (y0 < x1 && x0 < y1) return invalid_argument("moe_router: normed overlaps x (the norm reads x while it writes)");
  }
  return ok_status();
}

}  // namespace pg::ops
