// DeepSeek-FP8 weights (e4m3, f32 block scales over block_rows x block_cols) on the f16 tensor
// cores at small M (decode, verify steps, small batches): W rows are the mma's A, converted to
// f16 in registers exactly (every e4m3 value is an f16: one cvt per two codes), up to 8 tokens of
// x (rounded to f16) its B, f32 accumulation. The CPU definition is ops::cpu::linear with x
// rounded to f16 (LinearArgs::f16_activations).
//
// Why: the f32-x kernel (kernel.cuh) converts every weight e4m3 -> f16 -> f32 and multiplies it
// once per token on the CUDA cores, so its time grows with m (H200, bench_ops_cuda, 2026-12-01,
// 7168 -> 18432: 63.9% of the HBM read ceiling at m = 1, 18.5% at m = 4, 2.7% at m = 16); here a
// weight costs half a cvt and 1/128 of an mma per lane whatever m <= 8 is (measured there,
// 2026-12-01, c20f052, per-lane x at m > 1: 72.8% at m = 1, 37.0% at m = 4).
//
// x. The block's tokens' x are staged once per block as f16 B fragments where they fit
// (fp8_mma_staged_bytes), lane g reading token g's row; else each lane g reads its token's x from
// L2 at every k-step. The tile (and so k_split) does not depend on m (linear_fp8_mma_tile): a
// token's row has the same bits at any m.
//
// Layout. As linear/nvfp4_mma.cuh's, with 16-element chunks: lane (g = lane/4, t = lane%4) loads
// 16 bytes (16 codes) of row g and of row g + 8 at chunk 4s + t of k-step s (64 elements). Word q
// of the chunk (codes 4q..4q+3) feeds mma q: a0 / a1 = rows g / g + 8 elements (4q, 4q + 1), a2 /
// a3 = elements (4q + 2, 4q + 3), and B b0 / b1 = token g's x at the same elements. Every lane of
// a column t maps its fragment slots to the same physical k, as the mma requires.
//
// Scales. block_cols >= 64 and block_rows % 16 == 0 (ops::f16_mma_gemv): a k-step
// lies in one column block and a 16-row tile in one row block, so one f32 scale covers a tile's
// step. The step's four mmas start from zero, then acc = fma(scale, step sum, acc) in f32.
//
// Exactness. The products code x f16(x) are exact in the mma; the only numeric changes against
// the f32 reference are x rounded to f16 (relative 2^-11, |x| > 65504 saturated), the tensor
// core's f32 accumulation order and the block scale applied to a step's sum instead of per weight.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/smem_limit.cuh"
#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/linear/config.h"
#include "ops/cuda/linear/nvfp4_mma.cuh"  // linear_mma_split_sum (format-free)
#include "ops/cuda/linear/params.h"

namespace pg::ops::cuda {

// 16 f32 of x at xc (token g's elements of this lane's chunk) as B fragments: b[q] = (4q, 4q + 1),
// (4q + 2, 4q + 3). Zeros when !ok.
__device__ __forceinline__ void fp8_mma_x(const float* xc, bool ok, uint32_t (&b)[4][2]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if (ok) {
      const float4 v = ld_act4(xc + 4 * q);
      b[q][0] = f32x2_to_f16x2_sat(v.x, v.y);
      b[q][1] = f32x2_to_f16x2_sat(v.z, v.w);
    } else {
      b[q][0] = b[q][1] = 0u;
    }
  }
}

// One k-step of one 16-row tile: w[0] / w[1] the 16 codes of rows g / g + 8, sc[0] / sc[1] the
// block scales of rows 0..7 / 8..15 (the MoE gate_up's tile is 8 gate and 8 up rows; the linear's
// one block); acc += sc * (A · B) per row half.
__device__ __forceinline__ void fp8_mma_tile(const uint4 (&w)[2], const float (&sc)[2], const uint32_t (&b)[4][2],
                                             float (&acc)[4]) {
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t lo = q == 0 ? w[0].x : q == 1 ? w[0].y : q == 2 ? w[0].z : w[0].w;
    const uint32_t hi = q == 0 ? w[1].x : q == 1 ? w[1].y : q == 2 ? w[1].z : w[1].w;
    mma_m16n8k16_f16(d, e4m3x2_to_f16x2_bits(lo), e4m3x2_to_f16x2_bits(hi), e4m3x2_hi_to_f16x2_bits(lo),
                     e4m3x2_hi_to_f16x2_bits(hi), b[q][0], b[q][1]);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) acc[j] = fmaf(sc[j / 2], d[j], acc[j]);
}

// The weight registers of kUnroll k-steps: codes of rows g / g + 8 per tile, and their scales.
template <int kTiles, int kUnroll>
struct Fp8MmaStage {
  uint4 w[kUnroll][kTiles][2];
  float sc[kUnroll][kTiles][2];
};

// A warp's weight rows: w[i][h] the codes of row g + 8h of tile i, s[i][h] the rows of block
// scales of its rows 8h..8h+7 (one row block each); log2_block_cols finds a step's column block.
template <int kTiles>
struct Fp8MmaRows {
  const uint8_t* w[kTiles][2];
  const float* s[kTiles][2];
  int log2_block_cols;
};

// Issues the loads of k-steps [s, s + kUnroll) (zeros past s1).
template <int kTiles, int kUnroll>
__device__ __forceinline__ void fp8_mma_load(const Fp8MmaRows<kTiles>& r, int64_t s, int64_t s1,
                                             Fp8MmaStage<kTiles, kUnroll>& st) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const bool ok = s + u < s1;
    const int64_t c = (s + u) * 4 + t;
    const int64_t sb = ((s + u) * kFp8MmaStepElems) >> r.log2_block_cols;
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        st.w[u][i][h] = ok ? ld_stream(r.w[i][h] + c * kLinearVecBytes) : make_uint4(0, 0, 0, 0);
        st.sc[u][i][h] = ok ? __ldg(r.s[i][h] + sb) : 0.0f;
      }
  }
}

// Staged x: the block's tokens' x for the whole K once per block as f16 B fragments, token r's
// k-step s at xs[(r k_steps + s) 8 .. + 7]: uint4 2t + j holds chunk t's words q = 2j, 2j + 1
// (b[q][0], b[q][1] each), so lane (g, t) reads its step of token g's row with two 16-byte loads,
// the four lanes of a g 128 contiguous bytes. Every thread of the block a share, kStageBatch items
// with their loads in flight together (a thread's items would otherwise be serial L2 round trips:
// V3's o_proj stages 2,048 items over 256 threads). Reads x (after pdl_wait).
constexpr int kFp8MmaXStepVecs = kFp8MmaStepElems * 2 / 16;
template <int kStageBatch = 4>
__device__ __forceinline__ void fp8_mma_stage_x(const float* x, int64_t x_stride, int rows, int64_t k_steps,
                                                uint4* xs) {
  const int64_t per_row = k_steps * kFp8MmaXStepVecs, n = rows * per_row;
  for (int64_t i0 = threadIdx.x; i0 < n; i0 += int64_t(kStageBatch) * blockDim.x) {
    float4 v[kStageBatch][2];
#pragma unroll
    for (int b = 0; b < kStageBatch; ++b) {
      const int64_t i = i0 + int64_t(b) * blockDim.x;
      if (i < n) {
        const int64_t r = i / per_row, e = i % per_row;
        const int c = int(e % kFp8MmaXStepVecs);  // 2t + j
        const float* xc = x + r * x_stride + (e / kFp8MmaXStepVecs * 4 + c / 2) * 16 + 8 * (c % 2);
        v[b][0] = ld_act4(xc), v[b][1] = ld_act4(xc + 4);
      }
    }
#pragma unroll
    for (int b = 0; b < kStageBatch; ++b) {
      const int64_t i = i0 + int64_t(b) * blockDim.x;
      if (i < n)
        xs[i] = make_uint4(f32x2_to_f16x2_sat(v[b][0].x, v[b][0].y), f32x2_to_f16x2_sat(v[b][0].z, v[b][0].w),
                           f32x2_to_f16x2_sat(v[b][1].x, v[b][1].y), f32x2_to_f16x2_sat(v[b][1].z, v[b][1].w));
    }
  }
}
__device__ __forceinline__ void fp8_mma_x_staged(const uint4* xs, int64_t s, uint32_t (&b)[4][2]) {
  const int t = threadIdx.x % 4;
  const uint4 v0 = xs[s * kFp8MmaXStepVecs + 2 * t], v1 = xs[s * kFp8MmaXStepVecs + 2 * t + 1];
  b[0][0] = v0.x, b[0][1] = v0.y, b[1][0] = v0.z, b[1][1] = v0.w;
  b[2][0] = v1.x, b[2][1] = v1.y, b[3][0] = v1.z, b[3][1] = v1.w;
}

// The mmas of k-steps [s, min(s + kUnroll, s1)) of stage st: B from the staged x (kStaged) or this
// lane's token row xrow (null: a zero column).
template <int kTiles, int kUnroll, bool kStaged>
__device__ __forceinline__ void fp8_mma_work(const Fp8MmaStage<kTiles, kUnroll>& st, const uint4* xs, const float* xrow,
                                             int64_t s, int64_t s1, float (&acc)[kTiles][4]) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    if (s + u >= s1) break;  // warp-uniform
    uint32_t b[4][2];
    if constexpr (kStaged) fp8_mma_x_staged(xs, s + u, b);
    else fp8_mma_x(xrow ? xrow + ((s + u) * 4 + t) * 16 : nullptr, xrow != nullptr, b);
#pragma unroll
    for (int i = 0; i < kTiles; ++i) fp8_mma_tile(st.w[u][i], st.sc[u][i], b, acc[i]);
  }
}

// A warp's k-steps [s0, s1) over kTiles tiles; acc[i] tile i's d fragment (scales applied). The
// first stage's weight loads go out before pdl_wait (weights depend on no kernel); then kStaged's
// stage_x() (every thread of the block must call this) and a barrier. Two register stages
// alternate where they fit (kTiles x kUnroll <= 2), so a stage's loads are in flight during the
// other's mmas.
template <int kTiles, int kUnroll, bool kStaged, class StageX>
__device__ __forceinline__ void fp8_mma_stream(const Fp8MmaRows<kTiles>& rows, StageX&& stage_x, const uint4* xs,
                                               const float* xrow, int64_t s0, int64_t s1, float (&acc)[kTiles][4]) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  Fp8MmaStage<kTiles, kUnroll> a, b;
  if (s0 < s1) fp8_mma_load(rows, s0, s1, a);
  pdl_wait();
  if constexpr (kStaged) {
    stage_x();
    __syncthreads();
  }
  if constexpr (kTiles * kUnroll <= 2) {
    for (int64_t s = s0; s < s1; s += 2 * kUnroll) {
      if (s + kUnroll < s1) fp8_mma_load(rows, s + kUnroll, s1, b);
      fp8_mma_work<kTiles, kUnroll, kStaged>(a, xs, xrow, s, s1, acc);
      if (s + kUnroll >= s1) break;
      if (s + 2 * kUnroll < s1) fp8_mma_load(rows, s + 2 * kUnroll, s1, a);
      fp8_mma_work<kTiles, kUnroll, kStaged>(b, xs, xrow, s + kUnroll, s1, acc);
    }
  } else {
    for (int64_t s = s0; s < s1; s += kUnroll) {
      if (s != s0) fp8_mma_load(rows, s, s1, a);
      fp8_mma_work<kTiles, kUnroll, kStaged>(a, xs, xrow, s, s1, acc);
    }
  }
}

// Grid: x = row groups (kLinearWarps / k_split per block), y = 8-token tiles of x. Warp w of a
// block: row group blockIdx.x * (warps / k_split) + w / k_split (16 * kTiles rows), K slice
// w % k_split (whole k-steps of 64). kStaged (fp8_mma_staged_bytes > 0): the tile's x rows staged
// per block in dynamic shared memory, lane g reading token g's row (lanes past the tile's tokens
// read row 0: their columns are never written, and an mma's columns do not interact).
template <int kTiles, int kUnroll, bool kStaged>
__global__ void __launch_bounds__(kLinearThreads, kLinearMinBlocksPerSm)
    linear_fp8_mma_kernel(const __grid_constant__ LinearParams p) {
  constexpr int kRowsW = kMmaRows * kTiles;
  extern __shared__ uint4 linear_fp8_xs[];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
  const int k_split = p.k_split, kpart = warp % k_split;
  const int64_t row0 = (int64_t(blockIdx.x) * (kLinearWarps / k_split) + warp / k_split) * kRowsW;
  const int64_t m0 = int64_t(blockIdx.y) * kMmaTokens;
  const int m_valid = int(min(int64_t(kMmaTokens), p.m - m0));
  const int64_t k_steps = p.k / kFp8MmaStepElems;
  const int64_t per_part = (k_steps + k_split - 1) / k_split;
  const int64_t s0 = min(k_steps, kpart * per_part), s1 = min(k_steps, s0 + per_part);

  Fp8MmaRows<kTiles> rows;
  rows.log2_block_cols = p.log2_block_cols;
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    const int64_t tile_row = min(row0 + kMmaRows * i, p.n - 1);  // past n: re-read, never written
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = min(row0 + kMmaRows * i + g + 8 * h, p.n - 1);
      rows.w[i][h] = static_cast<const uint8_t*>(p.w) + row * p.k;
      rows.s[i][h] = p.scale_inv + (tile_row / p.block_rows) * p.scale_cols;  // one block: block_rows % 16 == 0
    }
  }
  const float* xrow = g < m_valid ? p.x + (m0 + g) * p.x_stride : nullptr;

  pdl_trigger();
  float acc[kTiles][4];
  if constexpr (kStaged) {
    const uint4* xs = linear_fp8_xs + (g < m_valid ? g : 0) * k_steps * kFp8MmaXStepVecs;
    fp8_mma_stream<kTiles, kUnroll, true>(
        rows, [&] { fp8_mma_stage_x(p.x + m0 * p.x_stride, p.x_stride, m_valid, k_steps, linear_fp8_xs); }, xs,
        nullptr, s0, s1, acc);
  } else {
    fp8_mma_stream<kTiles, kUnroll, false>(rows, [] {}, nullptr, xrow, s0, s1, acc);
  }

  bool mine = true;
  if (k_split > 1) {  // uniform over the block: every thread reaches the barrier
    __shared__ float partial[kLinearWarps][kTiles][4][kWarpSize];
    mine = linear_mma_split_sum(partial, k_split, acc);
  }
  if (!mine) return;
  // d fragment j: row g + 8 (j / 2) of tile i, token 2t + j % 2.
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t row = row0 + kMmaRows * i + g + 8 * (j / 2);
      const int tok = 2 * t + j % 2;
      if (tok < m_valid && row < p.n) {
        float* yp = p.y + (m0 + tok) * p.y_stride + row;
        *yp = p.accumulate ? *yp + acc[i][j] : acc[i][j];
      }
    }
}

template <int kTiles, int kUnroll>
cudaError_t launch_linear_fp8_mma(const LinearParams& p, dim3 grid, cudaStream_t stream) {
  const size_t smem = fp8_mma_staged_bytes(p.m, p.k);
  if (smem > 0) {
    constexpr auto kKernel = linear_fp8_mma_kernel<kTiles, kUnroll, true>;
    if (cudaError_t e = raise_smem_limit_once<kKernel>(); e != cudaSuccess) return e;
    if (cudaError_t e = launch_pdl(kKernel, grid, dim3(kLinearThreads), smem, stream, p); e != cudaSuccess) return e;
  } else {
    if (cudaError_t e = launch_pdl(linear_fp8_mma_kernel<kTiles, kUnroll, false>, grid, dim3(kLinearThreads), 0,
                                   stream, p);
        e != cudaSuccess)
      return e;
  }
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
