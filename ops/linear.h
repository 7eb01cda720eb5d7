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
  // NVFP4 and DeepSeek-FP8 weights: a backend may round x to f16 (round to nearest even, |x| >
  // 65504 saturated to +-65504) and multiply on f16 tensor cores; the weights stay exact (an NVFP4
  // code * block scale and an e4m3 code are f16s), sums stay f32. CUDA does so where
  // f16_mma_gemv() says (below); the CPU definition ignores it. false: exact f32 activations
  // (CudaRunnerOptions::exact).
  bool f16_activations = true;
};

Status validate(const LinearArgs& a);

// Whether CUDA's small-M linear takes its f16 tensor-core kernel for W at K = k, given aligned
// pointers (its vector path) and f16_activations: NVFP4 with k % 32 == 0; FP8 with one block
// scale per 16-row tile and 64-element k-step (k % 64 == 0, block_cols a power of two >= 64,
// block_rows % 16 == 0: one block scale per 8-row half tile and step). The CPU's emulation of the CUDA
// numbers (DeepseekModel::Bf16Emulation) rounds x to f16 exactly there.
inline bool f16_mma_gemv(const Matrix& w, int64_t k) {
  if (w.format == WeightFormat::kNvfp4) return k % 32 == 0;
  if (w.format == WeightFormat::kFp8Block)
    return k % 64 == 0 && w.block_cols >= 64 && (w.block_cols & (w.block_cols - 1)) == 0 && w.block_rows > 0 &&
           w.block_rows % 16 == 0;
  return false;
}

}  // namespace pg::ops
