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

// in_norm: every block reads its m tile's x rows once more for the norm (the main loop then
// finds them in L1). Worth it while those rows fit the L1 of the SM's two blocks (256 KB L1 + smem
// on the H200; 64 KB of rows a block): moonlight (hidden 2048) to 8 rows, V3's hidden 7168 to 2,
// its q_b (1536) to 8. Beyond, the rows stream from L2 twice and the kernel may lose the launch it
// saves; the runner then keeps the separate rmsnorm (it stays correct at any m <= 8).
constexpr int64_t kLinearNormInMaxRowBytes = 64 * 1024;
inline bool linear_norm_in_pays(int64_t m, int64_t k) {
  return m <= kLinearNormMaxRows && linear_m_tile(m) * k * int64_t(sizeof(float)) <= kLinearNormInMaxRowBytes;
}
// out_norm: one block (the grid's last) reads the m finished rows twice from L2 and writes them
// normalized, at one SM's share of L2 bandwidth: 64 KB of rows (~1 us) is below a launch's
// ~3-5 us; V3's 8 rows of 7168 (229 KB, ~3-4 us) would not be.
constexpr int64_t kLinearNormOutMaxRowBytes = 64 * 1024;
inline bool linear_norm_out_pays(int64_t m, int64_t n) {
  return m <= kLinearNormMaxRows && m * n * int64_t(sizeof(float)) <= kLinearNormOutMaxRowBytes;
}

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

// NVFP4 with f16 activations at one token: linear's staged-x tensor-core kernel (linear/nvfp4_mma.cuh)
// at its m = 1 tile of 1 x 2 steps, x' = in_norm * (x * inv) staged in place of x (kIn) or the
// out_norm epilogue after it (kOut). Grid and k_split as linear_plan gives them
// (linear_norm/instantiations/nvfp4_x1.cu).
constexpr MmaTile kLinearNormNvfp4Tile{1, 2};
cudaError_t launch_linear_norm_nvfp4_x1(LinearNormMode mode, const LinearNormParams& p, dim3 grid, cudaStream_t stream);

// Scalar path (any shape and alignment): one warp per output row (linear_norm/scalar.cu).
cudaError_t launch_linear_norm_scalar(LinearWeight f, LinearNormMode mode, const LinearNormParams& p,
                                      cudaStream_t stream);

}  // namespace pg::ops::cuda
