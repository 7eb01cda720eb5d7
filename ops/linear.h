// linear: y = x · Wᵀ (+ y when accumulate), the projection every layer is made of.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "ops/matrix.h"

namespace pg::ops {

struct LinearArgs {
  const float* x = nullptr;  // [m, w.cols] f32, row stride x_stride
  const Matrix* w = nullptr;
  float* y = nullptr;        // [m, w.rows] f32, row stride y_stride
  int64_t m = 0;
  int64_t x_stride = 0;      // elements; 0 = w->cols
  int64_t y_stride = 0;      // elements; 0 = w->rows
  bool accumulate = false;   // y += x·Wᵀ instead of y = x·Wᵀ
};

Status validate(const LinearArgs& a);

}  // namespace pg::ops
