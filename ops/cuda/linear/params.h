// The linear kernels' interface for both sides: the Params struct, the instantiated tiles and
// the launch functions the .cu files define (return the launch's cudaError_t). fmt-free, so
// kernel files can include it; the Status-returning launcher is linear/launch.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/linear/config.h"

namespace pg::ops::cuda {

// One launch of a linear kernel, passed as `const __grid_constant__`.
struct LinearParams {
  const float* x = nullptr;          // [m, k] f32, row stride x_stride (16-byte aligned rows on the vector path)
  const void* w = nullptr;           // [n, k] f32 | bf16 | fp8 e4m3fn, or [n, k/2] NVFP4 codes; rows contiguous
  const float* scale_inv = nullptr;  // fp8: [ceil(n / block_rows), scale_cols] f32
  const uint8_t* scale_fp8 = nullptr;     // nvfp4: [n, k/16] e4m3fn block scales
  const float* scale_2_rows = nullptr;    // nvfp4: [n / scale_2_group_rows] f32 per-row-group scale_2, or null:
  int64_t scale_2_group_rows = 1;         //  then every row's is scale_2
  float scale_2 = 1.0f;
  float* y = nullptr;                // [m, n] f32, row stride y_stride
  int64_t m = 0, n = 0, k = 0;
  int64_t x_stride = 0, y_stride = 0;  // elements
  int64_t block_rows = 128, block_cols = 128, scale_cols = 0;
  int log2_block_cols = 7;  // vector path: block_cols is a power of two >= 16
  int k_split = 1;          // warps sharing one row group, each over a 1/k_split slice of K
  bool accumulate = false;
};

// Every instantiated vector-path tile: X(format, m_tile, rows_per_warp, unroll). The defaults of
// linear_default_tile() must be in this list; the others are there for the benchmark to compare.
#define PG_LINEAR_TILES_F32(X) \
  X(kF32, 1, 4, 4) X(kF32, 2, 4, 2) X(kF32, 4, 2, 2) X(kF32, 8, 2, 2) X(kF32, 16, 1, 2)
#define PG_LINEAR_TILES_BF16(X)                                                                \
  X(kBF16, 1, 4, 4) X(kBF16, 2, 4, 2) X(kBF16, 4, 2, 2) X(kBF16, 8, 2, 2) X(kBF16, 16, 1, 2) \
  X(kBF16, 1, 2, 4) X(kBF16, 1, 4, 2) X(kBF16, 1, 2, 8) X(kBF16, 1, 1, 8)
#define PG_LINEAR_TILES_NVFP4(X)                                                                      \
  X(kNvfp4, 1, 4, 2) X(kNvfp4, 2, 2, 2) X(kNvfp4, 4, 2, 1) X(kNvfp4, 2, 4, 1)           \
  X(kNvfp4, 1, 2, 2) X(kNvfp4, 1, 2, 4) X(kNvfp4, 1, 4, 1) X(kNvfp4, 1, 1, 4)
#define PG_LINEAR_TILES_FP8(X)                                                                         \
  X(kFp8Block, 1, 2, 4) X(kFp8Block, 2, 2, 2) X(kFp8Block, 4, 2, 2) X(kFp8Block, 8, 1, 2)             \
  X(kFp8Block, 16, 1, 2) X(kFp8Block, 1, 4, 2) X(kFp8Block, 1, 2, 2) X(kFp8Block, 1, 1, 8) X(kFp8Block, 1, 4, 4)

// Vector path, grid (row-group blocks, m tiles) x kLinearThreads. Defined in linear/kernel.cuh,
// instantiated in linear/instantiations/*.cu.
template <LinearWeight F, int kMTile, int kRows, int kUnroll>
cudaError_t launch_linear_vec(const LinearParams& p, dim3 grid, cudaStream_t stream);

// NVFP4 and FP8 on the f16 tensor cores (linear/nvfp4_mma.cuh, fp8_mma.cuh): X(tiles, unroll).
// linear_nvfp4_mma_tile()'s choices must be in this list; the others are there for the benchmark to compare.
#define PG_LINEAR_MMA_TILES(X) X(1, 1) X(1, 2) X(1, 4) X(2, 1) X(2, 2)

// Grid (row-group blocks, ceil(m / 8)) x kLinearThreads; vector path only (k % 32 == 0, aligned
// W, x and x_stride). Instantiated in linear/instantiations/linear_nvfp4_mma.cu. 4 tiles spilled
// (ptxas, 2026-12-01: 128 registers, 100 bytes).
template <int kTiles, int kUnroll>
cudaError_t launch_linear_nvfp4_mma(const LinearParams& p, dim3 grid, cudaStream_t stream);
// DeepSeek-FP8 on the f16 tensor cores (linear/fp8_mma.cuh), the same tiles and grid; K % 64 == 0
// and ops::f16_mma_gemv's FP8 shape. Instantiated in linear/instantiations/linear_fp8_mma.cu.
template <int kTiles, int kUnroll>
cudaError_t launch_linear_fp8_mma(const LinearParams& p, dim3 grid, cudaStream_t stream);
// Blocks of the m = 1 staged-x kernel (nvfp4_x1_ok) one SM holds at K = k; 0 on a CUDA error.
template <int kTiles, int kUnroll>
int linear_nvfp4_x1_blocks_per_sm(int64_t k);

// PEREGRINE_LINEAR_NVFP4_X1_COLUMNS=1 (off unless set; read once, linear/launch.cpp): the persistent
// kernel at 1 x 2 in the column form (nvfp4_mma.cuh's nvfp4_lane_work_cols; an experiment: its rows
// differ from the 2..8-token kernel's).
bool linear_nvfp4_x1_columns();

// Scalar path (any shape and alignment): one warp per output row. linear/scalar.cu.
cudaError_t launch_linear_scalar(LinearWeight f, const LinearParams& p, cudaStream_t stream);

}  // namespace pg::ops::cuda
