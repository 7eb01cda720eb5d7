// linear_norm's NVFP4 kernels at one token: linear's staged-x tensor-core GEMV (the same loads,
// tiles, k_split and sums: linear_nvfp4_mma_body) with the norm fused in.
//   kIn:  every block computes the inverse RMS of x (norm.cuh rms_inv_rows: one fixed order, so
//         every block the same bits) and stages x' = in_norm * (x * inv), ops::cpu::rmsnorm's
//         expression, rounded to f16 as the plain kernel rounds x: the GEMV sees the CPU's
//         normalized row up to the sum of squares' order and that rounding.
//   kOut: the GEMV as linear's, then out_norm_epilogue (the grid's last block normalizes y).
// Saves the rmsnorm launches around the attention projections at decode.
#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/linear/nvfp4_mma.cuh"
#include "ops/cuda/linear_norm/norm.cuh"
#include "ops/cuda/linear_norm/params.h"

namespace pg::ops::cuda {
namespace {

template <int kTiles, int kUnroll, LinearNormMode kMode>
__global__ void __launch_bounds__(kLinearThreads, kLinearMinBlocksPerSm)
    linear_norm_nvfp4_x1_kernel(const __grid_constant__ LinearNormParams pp) {
  __shared__ float scratch[kLinearWarps][kLinearNormMaxRows];
  if constexpr (kMode == LinearNormMode::kIn) {
    linear_nvfp4_mma_body<kTiles, kUnroll, kNvfp4XOne>(
        pp.lin,
        [&](uint4* xs, int64_t k_chunks, int64_t k_steps) {
          float inv[1];
          rms_inv_rows<1, false>(pp.lin.x, pp.lin.x_stride, 1, pp.lin.k, pp.eps, pp.norm_vec4, inv, scratch);
          nvfp4_mma_stage_x_rows(pp.lin.x, 0, 1, k_chunks, k_steps, xs, pp.in_norm, inv[0]);
        },
        [] {});
  } else {
    linear_nvfp4_mma_body<kTiles, kUnroll, kNvfp4XOne>(
        pp.lin,
        [&](uint4* xs, int64_t k_chunks, int64_t k_steps) { nvfp4_mma_stage_x_block(pp.lin.x, k_chunks, k_steps, xs); },
        [&] { out_norm_epilogue(pp, scratch); });
  }
}

template <LinearNormMode kMode>
cudaError_t launch(const LinearNormParams& p, dim3 grid, cudaStream_t stream) {
  constexpr auto kKernel = linear_norm_nvfp4_x1_kernel<kLinearNormNvfp4Tile.tiles, kLinearNormNvfp4Tile.unroll, kMode>;
  if (cudaError_t e = launch_pdl(kKernel, grid, dim3(kLinearThreads), 0, stream, p); e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_linear_norm_nvfp4_x1(LinearNormMode mode, const LinearNormParams& p, dim3 grid,
                                        cudaStream_t stream) {
  return mode == LinearNormMode::kIn ? launch<LinearNormMode::kIn>(p, grid, stream)
                                     : launch<LinearNormMode::kOut>(p, grid, stream);
}

}  // namespace pg::ops::cuda
