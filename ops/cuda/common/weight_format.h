// Host side of the weight formats the CUDA kernels read (ops/matrix.h -> ops/cuda/linear/config.h
// LinearWeight), shared by the launchers. NVFP4 has no CUDA kernel yet (issue 6): launchers
// reject it with a Status before mapping a format.
#pragma once

#include "core/status.h"
#include "ops/cuda/linear/config.h"
#include "ops/matrix.h"

namespace pg::ops::cuda {

inline Status check_kernel_format(const Matrix& w, const char* op) {
  if (w.format == WeightFormat::kNvfp4)
    return unsupported("{}: NVFP4 weights have no CUDA kernel yet; run NVFP4 checkpoints with --device cpu", op);
  return ok_status();
}

// The kernels' format of a checked matrix (check_kernel_format first).
inline LinearWeight to_kernel_format(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return LinearWeight::kF32;
    case WeightFormat::kBF16: return LinearWeight::kBF16;
    case WeightFormat::kFp8Block: return LinearWeight::kFp8Block;
    case WeightFormat::kNvfp4: break;
  }
  return LinearWeight::kF32;
}

}  // namespace pg::ops::cuda
