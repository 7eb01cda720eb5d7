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
  // NVFP4 weights: a backend may round x to f16 (round to nearest even, |x| > 65504 saturated to
  // +-65504) and multiply on f16 tensor cores; the weights stay exact (code * block scale is an
  // f16), sums stay f32. CUDA does so on its vector path (K % 32 == 0, aligned); the CPU
  // definition ignores it. false: exact f32 activations (CudaRunnerOptions::exact).
  bool f16_activations = true;
};

Status validate(const LinearArgs& a);

}  // namespace pg::ops
