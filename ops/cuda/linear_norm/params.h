// linear_norm's kernel interface for both sides (fmt-free, so kernel files include it): the
// Params struct, the instantiated tiles and the launch functions the .cu files define. The
// Status-returning launcher is linear_norm/launch.cpp; the GEMV itself is linear's (linear/).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/linear/config.h"
#include "ops/cuda/linear/params.h"

namespace pg::ops::cuda {

// Rows (tokens) one launch takes: the norms' per-row sums live in registers (one per row), and
// every block of an in_norm launch recomputes its rows' norms from x (8 rows of hidden 7168:
// 229 KB from L2 per block). Decode-sized steps; larger ones launch rmsnorm and linear.
constexpr int kLinearNormMaxRows = 8;

// Which norm the kernel fuses (ops/linear_norm.h).
enum class LinearNormMode : uint8_t { kIn, kOut };

struct LinearNormParams {
  LinearParams lin;                 // the linear's own (k_split included); lin.m <= kLinearNormMaxRows
  const float* in_norm = nullptr;   // kIn: [k] f32
  const float* out_norm = nullptr;  // kOut: [n] f32
  float* y_normed = nullptr;        // kOut: [m, n] f32, row stride y_normed_stride
  int64_t y_normed_stride = 0;
  unsigned* counter = nullptr;      // kOut: blocks done; zero between launches (the last block resets it)
  float eps = 1e-6f;
  // The normalized rows are 16-byte aligned with a length and stride of whole float4, and so is
  // the norm weight (kIn: x, x_stride, k, in_norm; kOut: y, y_normed, strides, n, out_norm).
  bool norm_vec4 = false;
};

// The vector-path tiles instantiated per mode: linear_default_tile() at m tiles 1..8 (NVFP4 at
// m = 1 also rows 2: linear_nvfp4_rows()). X(format, m_tile, rows_per_warp, unroll).
#define PG_LINEAR_NORM_TILES(X)                                                                       \
  X(kF32, 1, 4, 4) X(kF32, 2, 4, 2) X(kF32, 4, 2, 2) X(kF32, 8, 2, 2)                                 \
  X(kBF16, 1, 2, 4) X(kBF16, 2, 4, 2) X(kBF16, 4, 2, 2) X(kBF16, 8, 2, 2)                             \
  X(kFp8Block, 1, 4, 2) X(kFp8Block, 2, 2, 2) X(kFp8Block, 4, 2, 2) X(kFp8Block, 8, 1, 2)             \
  X(kNvfp4, 1, 4, 2) X(kNvfp4, 1, 2, 2) X(kNvfp4, 2, 2, 2) X(kNvfp4, 4, 2, 1)

// Vector path, grid (row-group blocks, m tiles) x kLinearThreads, as linear_vec_kernel's.
// Defined in linear_norm/kernel.cuh, instantiated in linear_norm/instantiations/*.cu.
template <LinearWeight F, int kMTile, int kRows, int kUnroll, LinearNormMode kMode>
cudaError_t launch_linear_norm_vec(const LinearNormParams& p, dim3 grid, cudaStream_t stream);

// Scalar path (any shape and alignment): one warp per output row (linear_norm/scalar.cu).
cudaError_t launch_linear_norm_scalar(LinearWeight f, LinearNormMode mode, const LinearNormParams& p,
                                      cudaStream_t stream);

}  // namespace pg::ops::cuda
