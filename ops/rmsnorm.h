// rmsnorm: y = x / sqrt(mean(x²) + eps) * weight, row by row (DeepSeek's RMSNorm, fp32 math).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "ops/matrix.h"

namespace pg::ops {

struct RmsNormArgs {
  const float* x = nullptr;       // [m, n] f32, row stride x_stride
  const float* weight = nullptr;  // [n] f32
  float* y = nullptr;             // [m, n] f32, row stride y_stride (may alias x)
  int64_t m = 0, n = 0;
  int64_t x_stride = 0, y_stride = 0;  // elements; 0 = n
  float eps = 1e-6f;
};

Status validate(const RmsNormArgs& a);

}  // namespace pg::ops
