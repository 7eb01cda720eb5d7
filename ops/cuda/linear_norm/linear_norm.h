// ops::cuda::linear_norm: the CUDA backend of ops/linear_norm.h, one launch for a GEMV and the
// RMSNorm before it (every block recomputes its rows' norms from x) or after it (the grid's last
// block normalizes the finished rows). Capturable: no allocation, no synchronization.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "ops/cuda/linear_norm/params.h"
#include "ops/linear_norm.h"

namespace pg::ops::cuda {

// Up to kLinearNormMaxRows rows (unsupported above: launch rmsnorm and linear). The GEMV is
// ops::cuda::linear's at the same tile and k_split, with f32 activations whatever
// lin.f16_activations says (no NVFP4 tensor-core variant). in_norm: y's sums are linear's on x
// normalized by ops::cpu::rmsnorm's expression; the inverse RMS differs from the CPU's only by the
// sum of squares' order. counter (out_norm only): one device uint32, zero before the first launch
// (cudaMemset once); every launch leaves it zero, so it serves any sequence of launches and
// graph replays on one stream.
Status linear_norm(const LinearNormArgs& a, unsigned* counter, cudaStream_t stream);

}  // namespace pg::ops::cuda
