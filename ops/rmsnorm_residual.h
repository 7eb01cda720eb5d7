// rmsnorm_residual: the residual add fused with the RMSNorm that follows it (decode-plan.md:
// "o_proj -> residual add", then "RMSNorm" of the next block), row by row, fp32 math:
//   residual += x;  y = residual / sqrt(mean(residual²) + eps) * weight
// Defined as exactly that composition: ops::cpu::rmsnorm_residual == the add, then ops::cpu::rmsnorm.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace pg::ops {

struct RmsNormResidualArgs {
  const float* x = nullptr;       // [m, n] f32: the sublayer output to add, row stride x_stride
  float* residual = nullptr;      // [m, n] f32: the residual stream, updated in place, row stride residual_stride
  const float* weight = nullptr;  // [n] f32
  float* y = nullptr;             // [m, n] f32, row stride y_stride; may alias x, never residual
  int64_t m = 0, n = 0;
  int64_t x_stride = 0, residual_stride = 0, y_stride = 0;  // elements; 0 = n
  float eps = 1e-6f;
};

inline Status validate(const RmsNormResidualArgs& a) {
  if (a.n <= 0 || a.m < 0 || !a.weight || (a.m && (!a.x || !a.residual || !a.y)))
    return invalid_argument("rmsnorm_residual: bad arguments m={} n={}", a.m, a.n);
  if ((a.x_stride && a.x_stride < a.n) || (a.residual_stride && a.residual_stride < a.n) || (a.y_stride && a.y_stride < a.n))
    return invalid_argument("rmsnorm_residual: a row stride is below n={}", a.n);
  if (a.m && static_cast<const void*>(a.y) == static_cast<const void*>(a.residual))
    return invalid_argument("rmsnorm_residual: y must not alias residual (it would overwrite the stream)");
  return ok_status();
}

}  // namespace pg::ops
