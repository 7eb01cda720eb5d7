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
// lin.f16_activations says, except NVFP4 at one token with f16 activations where
// linear_norm_nvfp4_fits(W) and the normalized rows and norm weight are 16-byte aligned: linear's
// staged-x tensor-core kernel, with the normalized x staged (in_norm: x' rounded to f16, as linear
// rounds x) or its last block normalizing y (out_norm). in_norm: y's sums
// are linear's on x normalized by ops::cpu::rmsnorm's expression; the inverse RMS differs from the
// CPU's only by the sum of squares' order. counter (out_norm only): one device uint32, zero before
// the first launch (cudaMemset once); every launch leaves it zero, so it serves any sequence of
// launches and graph replays on one stream.
Status linear_norm(const LinearNormArgs& a, unsigned* counter, cudaStream_t stream);

// Whether an NVFP4 W's norm at one token takes the tensor-core kernel (W's shape and scales only;
// the normalized rows and the norm weight must also be 16-byte aligned): linear would take its
// per-block staged-x kernel at kLinearNormNvfp4Tile (not the persistent one) and the scales allow
// the staged path. The runner fuses an NVFP4 projection's norm only then.
bool linear_norm_nvfp4_fits(const Matrix& w);

}  // namespace pg::ops::cuda
