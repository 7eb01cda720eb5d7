// linear_norm's vector-path kernel: linear's own kernel body (linear/kernel.cuh linear_vec_body:
// the same loads, tiles, k_split and summation order) with the RMSNorm fused in as its fusion policy:
//   kIn:  every block first computes the inverse RMS of its m tile's rows of x (x is 8-28 KB a row,
//         L2-resident), then scales x as it loads it: x' = in_norm * (x * inv), ops::cpu::rmsnorm's
//         expression, so the GEMV sees the CPU's normalized values up to the sum of squares' order.
//   kOut: the GEMV as linear's, then out_norm_epilogue (the last block normalizes the finished rows).
// Included only by linear_norm/instantiations/*.cu.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/linear/kernel.cuh"
#include "ops/cuda/linear_norm/norm.cuh"
#include "ops/cuda/linear_norm/params.h"

namespace pg::ops::cuda {

// kIn: begin() computes the inverse RMS of the m tile's x rows, x() normalizes x as it is loaded.
template <int kMTile>
struct LinearInNorm {
  static_assert(kMTile <= kLinearNormMaxRows, "the norms' rows live in registers");
  static constexpr bool kKeepAllWarps = false;
  const LinearNormParams& pp;
  float (*scratch)[kLinearNormMaxRows];
  float inv[kMTile];
  __device__ __forceinline__ void begin(const float* xb, int m_valid) {
#pragma unroll
    for (int i = 0; i < kMTile; ++i) inv[i] = 1.0f;
    rms_inv_rows<kMTile, false>(xb, pp.lin.x_stride, m_valid, pp.lin.k, pp.eps, true, inv, scratch);
  }
  template <int kN>
  __device__ __forceinline__ void x(int i, int64_t k0, float (&xf)[kN]) const {
    static_assert(kN % 4 == 0, "whole float4s of the norm weight");
#pragma unroll
    for (int q = 0; q < kN / 4; ++q) {
      const float4 g = ld_f4(pp.in_norm + k0 + 4 * q);
      const float gf[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) xf[4 * q + e] = gf[e] * (xf[4 * q + e] * inv[i]);  // ops::cpu::rmsnorm's y_j
    }
  }
  __device__ __forceinline__ void end() {}
};

// kOut: the plain GEMV, then the grid's last block normalizes the finished rows (block barriers:
// every warp stays to the end).
struct LinearOutNorm {
  static constexpr bool kKeepAllWarps = true;
  const LinearNormParams& pp;
  float (*scratch)[kLinearNormMaxRows];
  __device__ __forceinline__ void begin(const float* /*xb*/, int /*m_valid*/) {}
  template <int kN>
  __device__ __forceinline__ void x(int /*row*/, int64_t /*k0*/, float (&/*xf*/)[kN]) const {}
  __device__ __forceinline__ void end() { out_norm_epilogue(pp, scratch); }
};

// Grid and warp roles as linear_vec_kernel's.
template <LinearWeight F, int kMTile, int kRows, int kUnroll, LinearNormMode kMode>
__global__ void __launch_bounds__(kLinearThreads, kLinearMinBlocksPerSm)
    linear_norm_vec_kernel(const __grid_constant__ LinearNormParams pp) {
  __shared__ float scratch[kLinearWarps][kLinearNormMaxRows];
  if constexpr (kMode == LinearNormMode::kIn) {
    LinearInNorm<kMTile> fusion{pp, scratch};
    linear_vec_body<F, kMTile, kRows, kUnroll>(pp.lin, fusion);
  } else {
    LinearOutNorm fusion{pp, scratch};
    linear_vec_body<F, kMTile, kRows, kUnroll>(pp.lin, fusion);
  }
}

template <LinearWeight F, int kMTile, int kRows, int kUnroll, LinearNormMode kMode>
cudaError_t launch_linear_norm_vec(const LinearNormParams& p, dim3 grid, cudaStream_t stream) {
  if (cudaError_t e = launch_pdl(linear_norm_vec_kernel<F, kMTile, kRows, kUnroll, kMode>, grid, dim3(kLinearThreads), 0,
                                 stream, p);
      e != cudaSuccess)
    return e;
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
