// linear_norm's vector-path kernel: linear_vec_kernel (linear/kernel.cuh: the same loads, tiles,
// k_split and summation order) with the RMSNorm fused in:
//   kIn:  every block first computes the inverse RMS of its m tile's rows of x (x is 8-28 KB a row,
//         L2-resident), then scales x as it loads it: x' = in_norm * (x * inv), ops::cpu::rmsnorm's
//         expression, so the GEMV sees the CPU's normalized values up to the sum of squares' order.
//   kOut: the GEMV as linear's, then out_norm_epilogue (the last block normalizes the finished rows).
// Included only by linear_norm/instantiations/*.cu.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/linear/kernel.cuh"
#include "ops/cuda/linear_norm/norm.cuh"
#include "ops/cuda/linear_norm/params.h"

namespace pg::ops::cuda {

// nvfp4_chunk_dot (linear/kernel.cuh) on normalized x: element e of row i is g[e] * (x[e] * inv[i]),
// g the chunk's 32 norm weights at gc. The same products and sums otherwise.
template <int kMTile, int kRows>
__device__ __forceinline__ void nvfp4_chunk_dot_normed(const uint4 (&wv)[kRows], const float2 (&sc)[kRows],
                                                       const float* xc, int64_t xs, const float* gc,
                                                       const float (&inv)[kMTile], int m_valid,
                                                       float (&acc)[kMTile][kRows]) {
#pragma unroll
  for (int b = 0; b < 2; ++b) {  // scale block b: words 2b, 2b + 1
    float d[kMTile][kRows];
#pragma unroll
    for (int i = 0; i < kMTile; ++i)
#pragma unroll
      for (int r = 0; r < kRows; ++r) d[i][r] = 0.0f;
#pragma unroll
    for (int q = 2 * b; q < 2 * b + 2; ++q) {
      float wf[kRows][8];  // element 8q + j of the chunk at wf[r][j]
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const uint32_t word = q == 0 ? wv[r].x : q == 1 ? wv[r].y : q == 2 ? wv[r].z : wv[r].w;
        uint32_t h[4];
        e2m1x8_to_f16x2(word, h);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 f = f16x2_bits_to_f32(h[j]);
          wf[r][j] = f.x, wf[r][j + 4] = f.y;
        }
      }
      const float4 ga = ld_f4(gc + 8 * q), gb = ld_f4(gc + 8 * q + 4);
      const float gf[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
#pragma unroll
      for (int i = 0; i < kMTile; ++i) {
        if (i < m_valid) {
          const float* xp = xc + i * xs;
          const float4 xa = ld_act4(xp + 8 * q), xb = ld_act4(xp + 8 * q + 4);
          const float xr[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int j = 0; j < 8; ++j) d[i][r] = fmaf(wf[r][j], gf[j] * (xr[j] * inv[i]), d[i][r]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kMTile; ++i)
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[i][r] = fmaf(d[i][r], b == 0 ? sc[r].x : sc[r].y, acc[i][r]);
  }
}

// Grid and warp roles as linear_vec_kernel's.
template <LinearWeight F, int kMTile, int kRows, int kUnroll, LinearNormMode kMode>
__global__ void __launch_bounds__(kLinearThreads, kLinearMinBlocksPerSm)
    linear_norm_vec_kernel(const __grid_constant__ LinearNormParams pp) {
  constexpr int kVec = linear_vec_elems(F);
  constexpr int kOut = kMTile * kRows;  // outputs of one warp; lane j < kOut writes output j
  static_assert(kOut <= kWarpSize, "one lane per output of the warp");
  static_assert(kMTile <= kLinearNormMaxRows, "the norms' rows live in registers");
  constexpr bool kFp8 = F == LinearWeight::kFp8Block;
  constexpr bool kNvfp4 = F == LinearWeight::kNvfp4;
  constexpr bool kIn = kMode == LinearNormMode::kIn;
  const LinearParams& p = pp.lin;
  __shared__ float scratch[kLinearWarps][kLinearNormMaxRows];

  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int k_split = p.k_split;
  const int kpart = warp % k_split;
  const int64_t row0 = (int64_t(blockIdx.x) * (kLinearWarps / k_split) + warp / k_split) * kRows;
  const int64_t m0 = int64_t(blockIdx.y) * kMTile;
  const int m_valid = int(min(int64_t(kMTile), p.m - m0));

  const int64_t k_chunks = p.k / kVec;  // vector path: k % kVec == 0
  const int64_t per_part = (k_chunks + k_split - 1) / k_split;
  const int64_t c_begin = kpart * per_part, c_end = min(k_chunks, c_begin + per_part);

  const uint8_t* wrow[kRows];
  const float* srow[kRows];     // fp8: this row's row of block scales
  const uint8_t* srow8[kRows];  // nvfp4: this row's e4m3 block scales
  bool rvalid[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = min(row0 + r, p.n - 1);  // rows past n re-read row n-1 and are never written
    rvalid[r] = row0 + r < p.n;
    wrow[r] = static_cast<const uint8_t*>(p.w) + row * linear_row_bytes(F, p.k);
    srow[r] = kFp8 ? p.scale_inv + (row / p.block_rows) * p.scale_cols : nullptr;
    srow8[r] = kNvfp4 ? p.scale_fp8 + row * (p.k / kNvfp4Block) : nullptr;
  }
  const float* xb = p.x + m0 * p.x_stride;

  // PDL: the weights' first loads go to L2 before waiting for the kernel that writes x (kIn's
  // norm pass then overlaps them).
  pdl_trigger();
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t cc = c_begin + lane + int64_t(kWarpSize) * u;
      if (cc < c_end && rvalid[r]) prefetch_l2(wrow[r] + cc * kLinearVecBytes);
    }
  pdl_wait();

  float inv[kMTile];  // kIn: the inverse RMS of x rows m0 + i
#pragma unroll
  for (int i = 0; i < kMTile; ++i) inv[i] = 1.0f;
  if constexpr (kIn) rms_inv_rows<kMTile, false>(xb, p.x_stride, m_valid, p.k, pp.eps, true, inv, scratch);

  float acc[kMTile][kRows];
#pragma unroll
  for (int i = 0; i < kMTile; ++i)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[i][r] = 0.0f;

  for (int64_t c = c_begin + lane; c < c_end; c += int64_t(kWarpSize) * kUnroll) {
    uint4 wv[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int64_t cc = c + int64_t(kWarpSize) * u;
        wv[u][r] = (cc < c_end && rvalid[r]) ? ld_stream(wrow[r] + cc * kLinearVecBytes) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t cc = c + int64_t(kWarpSize) * u;
      if constexpr (kNvfp4) {
        if (cc < c_end) {
          float2 sc[kRows];
#pragma unroll
          for (int r = 0; r < kRows; ++r) sc[r] = nvfp4_chunk_scales(srow8[r], cc);
          const float* xc = xb + cc * kVec;
          const int64_t xs = p.x_stride;
          if constexpr (kIn)
            nvfp4_chunk_dot_normed<kMTile, kRows>(wv[u], sc, xc, xs, pp.in_norm + cc * kVec, inv, m_valid, acc);
          else
            nvfp4_chunk_dot<kMTile, kRows>(wv[u], sc, [=](int i) { return xc + i * xs; }, m_valid, acc);
        }
      } else if (cc < c_end) {
        float wf[kRows][kVec];
        float sc[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          unpack_chunk<F>(wv[u][r], wf[r]);
          if constexpr (kFp8) sc[r] = __ldg(srow[r] + ((cc * kVec) >> p.log2_block_cols));
        }
        float gf[kIn ? kVec : 1];  // kIn: the chunk's norm weights
        if constexpr (kIn) {
#pragma unroll
          for (int q = 0; q < kVec / 4; ++q) {
            const float4 g = ld_f4(pp.in_norm + cc * kVec + 4 * q);
            gf[4 * q] = g.x, gf[4 * q + 1] = g.y, gf[4 * q + 2] = g.z, gf[4 * q + 3] = g.w;
          }
        }
#pragma unroll
        for (int i = 0; i < kMTile; ++i) {
          if (i < m_valid) {
            const float* xp = xb + i * p.x_stride + cc * kVec;
            float xf[kVec];
#pragma unroll
            for (int q = 0; q < kVec / 4; ++q) {
              const float4 t = ld_act4(xp + 4 * q);
              xf[4 * q] = t.x, xf[4 * q + 1] = t.y, xf[4 * q + 2] = t.z, xf[4 * q + 3] = t.w;
            }
            if constexpr (kIn) {
#pragma unroll
              for (int e = 0; e < kVec; ++e) xf[e] = gf[e] * (xf[e] * inv[i]);  // ops::cpu::rmsnorm's y_j
            }
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              float d = 0.0f;
#pragma unroll
              for (int e = 0; e < kVec; ++e) d = fmaf(wf[r][e], xf[e], d);
              acc[i][r] = kFp8 ? fmaf(d, sc[r], acc[i][r]) : acc[i][r] + d;
            }
          }
        }
      }
    }
  }

  // Reduce over the warp; lane j keeps output j = (i, r) = (j / kRows, j % kRows).
  float mine = 0.0f;
#pragma unroll
  for (int i = 0; i < kMTile; ++i)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float v = warp_sum(acc[i][r]);
      if (lane == i * kRows + r) mine = v;
    }
  if (k_split > 1) {  // uniform over the block
    __shared__ float partial[kLinearWarps][kOut];
    if (lane < kOut) partial[warp][lane] = mine;
    __syncthreads();
    if (kpart == 0)  // no early return for the others: out_norm_epilogue has barriers
      for (int s = 1; s < k_split; ++s) mine += lane < kOut ? partial[warp + s][lane] : 0.0f;  // fixed order
  }
  const int i = lane / kRows, r = lane % kRows;
  if (kpart == 0 && lane < kOut && i < m_valid && row0 + r < p.n) {
    if constexpr (kNvfp4)  // the per-tensor (or per-row-group) scale_2 and the unpack's 2^14
      mine *= (p.scale_2_rows ? __ldg(p.scale_2_rows + (row0 + r) / p.scale_2_group_rows) : p.scale_2) * kE2m1F16Unscale;
    float* yp = p.y + (m0 + i) * p.y_stride + row0 + r;
    *yp = p.accumulate ? *yp + mine : mine;
  }
  if constexpr (!kIn) out_norm_epilogue(pp, scratch);
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
