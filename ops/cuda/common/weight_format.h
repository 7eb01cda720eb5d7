// Host side of the weight formats the CUDA kernels read (ops/matrix.h -> ops/cuda/linear/config.h
// LinearWeight), shared by the launchers. NVFP4 is read by the GEMV (linear), the MoE experts and
// the bf16 staging of the prefill GEMMs; the other launchers reject it with a Status before
// mapping a format.
#pragma once

#include "core/status.h"
#include "ops/cuda/linear/config.h"
#include "ops/matrix.h"

namespace pg::ops::cuda {

// `nvfp4_ok`: the op has an NVFP4 kernel.
inline Status check_kernel_format(const Matrix& w, const char* op, bool nvfp4_ok = false) {
  if (w.format == WeightFormat::kNvfp4 && !nvfp4_ok)
    return unsupported("{}: NVFP4 weights have no CUDA kernel for this op; keep this tensor bf16 or run with --device cpu",
                       op);
  return ok_status();
}

// The kernels' format of a checked matrix (check_kernel_format first).
inline LinearWeight to_kernel_format(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return LinearWeight::kF32;
    case WeightFormat::kBF16: return LinearWeight::kBF16;
    case WeightFormat::kFp8Block: return LinearWeight::kFp8Block;
    case WeightFormat::kNvfp4: return LinearWeight::kNvfp4;
  }
  return LinearWeight::kF32;
}

}  // namespace pg::ops::cuda
