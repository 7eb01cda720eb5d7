// linear_norm: a linear with the RMSNorm next to it in one op (decode-plan.md: "RMSNorm (each
// block recomputes it) -> one GEMV", and "o_proj GEMV -> residual add" followed by the MLP's norm):
//   in_norm:   y (+)= (rmsnorm(x) * in_norm) · Wᵀ                 (input_norm -> q_kv_a_proj)
//   out_norm:  y (+)= x · Wᵀ;  y_normed = rmsnorm(y) * out_norm    (o_proj's residual add -> post_norm)
// Defined as exactly that composition of ops::cpu::rmsnorm and ops::cpu::linear (ops/cpu/linear_norm.h).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "ops/linear.h"

namespace pg::ops {

struct LinearNormArgs {
  LinearArgs lin;                   // x [m, k], W [n, k], y [m, n] f32 (lin.accumulate: y += ...)
  const float* in_norm = nullptr;   // [k] f32: normalize each row of x first, or null
  const float* out_norm = nullptr;  // [n] f32: normalize each finished row of y into y_normed, or null
  float* y_normed = nullptr;        // [m, n] f32, row stride y_normed_stride (0 = n); out_norm only
  int64_t y_normed_stride = 0;      // elements
  float eps = 1e-6f;
};

// Exactly one of in_norm / out_norm; y_normed with out_norm, and never y itself.
inline Status validate(const LinearNormArgs& a) {
  PG_TRY(validate(a.lin));
  if ((a.in_norm != nullptr) == (a.out_norm != nullptr))
    return invalid_argument("linear_norm: give exactly one of in_norm and out_norm");
  if (a.out_norm && a.lin.m && !a.y_normed) return invalid_argument("linear_norm: out_norm without y_normed");
  if (a.y_normed_stride && a.y_normed_stride < a.lin.w->rows)
    return invalid_argument("linear_norm: y_normed_stride {} < rows {}", a.y_normed_stride, a.lin.w->rows);
  if (a.out_norm && a.lin.m && static_cast<const void*>(a.y_normed) == static_cast<const void*>(a.lin.y))
    return invalid_argument("linear_norm: y_normed must not alias y (it would overwrite the residual stream)");
  return ok_status();
}

}  // namespace pg::ops
