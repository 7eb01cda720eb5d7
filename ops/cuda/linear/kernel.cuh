// The small-M linear kernel (vector path): y[m0.., rows] = x · Wᵀ with W streamed once from HBM
// in 16-byte loads and dequantized in registers; f32 accumulation. Included only by the
// instantiation files (linear/instantiations/*.cu). The CPU definition is ops::cpu::linear.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/linear/config.h"
#include "ops/cuda/linear/params.h"

namespace pg::ops::cuda {

// NVFP4 chunks are unpacked a word (8 elements) at a time inside the loop (nvfp4_chunk_dot), so
// only 8 dequantized values per row are live, not 32.
// One 16-byte chunk of W -> its kVec f32 values (fp8: without the block scale).
template <LinearWeight F>
__device__ __forceinline__ void unpack_chunk(const uint4& v, float (&out)[linear_vec_elems(F)]) {
  if constexpr (F == LinearWeight::kF32) {
    out[0] = __uint_as_float(v.x), out[1] = __uint_as_float(v.y);
    out[2] = __uint_as_float(v.z), out[3] = __uint_as_float(v.w);
  } else if constexpr (F == LinearWeight::kBF16) {
    bf16x2_to_f32(v.x, out[0], out[1]);
    bf16x2_to_f32(v.y, out[2], out[3]);
    bf16x2_to_f32(v.z, out[4], out[5]);
    bf16x2_to_f32(v.w, out[6], out[7]);
  } else {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 lo = fp8x2_e4m3_to_f32(words[j]), hi = fp8x2_e4m3_to_f32(words[j] >> 16);
      out[4 * j] = lo.x, out[4 * j + 1] = lo.y, out[4 * j + 2] = hi.x, out[4 * j + 3] = hi.y;
    }
  }
}

// The two e4m3 block scales of NVFP4 chunk cc of a row (bytes 2cc, 2cc + 1 of its scale row;
// 2-byte aligned: rows hold k / 16 scales, even on the vector path) as exact f32.
__device__ __forceinline__ float2 nvfp4_chunk_scales(const uint8_t* srow, int64_t cc) {
  return fp8x2_e4m3_to_f32(__ldg(reinterpret_cast<const unsigned short*>(srow) + cc));
}

// The identity x map (nvfp4_chunk_dot's and the vector kernel's default: x as loaded).
struct LinearXAsLoaded {
  template <int kN>
  __device__ __forceinline__ void operator()(int /*row*/, int64_t /*k0*/, float (&/*x*/)[kN]) const {}
};

// acc[i][r] += the NVFP4 chunk wv[r] (32 elements: two 16-element blocks with scales sc[r]) · the
// chunk's 32 f32 of x row i, at x_at(i), for i < m_valid. Each block's products of (code * 2^-14)
// and x are summed in f32, then scaled once into the accumulator; the caller multiplies the row's
// total by scale_2 * 2^14. Unpacked one 32-bit word (8 elements) per row at a time, reused by every
// x row. x_map(i, j, x8) may rewrite the 8 values of row i from the chunk's element j on as they
// are loaded (linear_norm's RMSNorm). Shared with the MoE expert kernels (moe_experts/kernel.cu).
template <int kMTile, int kRows, typename XAt, typename XMap = LinearXAsLoaded>
__device__ __forceinline__ void nvfp4_chunk_dot(const uint4 (&wv)[kRows], const float2 (&sc)[kRows], XAt x_at,
                                                int m_valid, float (&acc)[kMTile][kRows], XMap x_map = {}) {
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
#pragma unroll
      for (int i = 0; i < kMTile; ++i) {
        if (i < m_valid) {
          const float* xp = x_at(i);
          const float4 xa = ld_act4(xp + 8 * q), xb = ld_act4(xp + 8 * q + 4);
          float xf[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
          x_map(i, 8 * q, xf);
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int j = 0; j < 8; ++j) d[i][r] = fmaf(wf[r][j], xf[j], d[i][r]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kMTile; ++i)
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[i][r] = fmaf(d[i][r], b == 0 ? sc[r].x : sc[r].y, acc[i][r]);
  }
}

// What a vector-path launch does around its GEMV. The plain linear does nothing; linear_norm
// (linear_norm/kernel.cuh) fuses an RMSNorm before or after it. begin(xb, m_valid): after
// pdl_wait, before x is read (xb: the m tile's first x row). x(i, k0, xf): rewrites the values of
// x row i from column k0 on as they are loaded. end(): after y is written, by every thread when
// kKeepAllWarps (end() may hold block barriers), so the k-split's other warps do not return early.
struct LinearNoFusion {
  static constexpr bool kKeepAllWarps = false;
  __device__ __forceinline__ void begin(const float* /*xb*/, int /*m_valid*/) {}
  template <int kN>
  __device__ __forceinline__ void x(int /*row*/, int64_t /*k0*/, float (&/*xf*/)[kN]) const {}
  __device__ __forceinline__ void end() {}
};

// Grid: x = row groups (kLinearWarps / k_split of them per block), y = m tiles.
// Warp w of a block: row group blockIdx.x * (warps / k_split) + w / k_split, K slice w % k_split.
template <LinearWeight F, int kMTile, int kRows, int kUnroll, typename Fusion>
__device__ __forceinline__ void linear_vec_body(const LinearParams& p, Fusion& fusion) {
  constexpr int kVec = linear_vec_elems(F);
  constexpr int kOut = kMTile * kRows;  // outputs of one warp; lane j < kOut writes output j
  static_assert(kOut <= kWarpSize, "one lane per output of the warp");
  constexpr bool kFp8 = F == LinearWeight::kFp8Block;
  constexpr bool kNvfp4 = F == LinearWeight::kNvfp4;

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
  const float* srow[kRows];      // fp8: this row's row of block scales
  const uint8_t* srow8[kRows];   // nvfp4: this row's e4m3 block scales
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

  // PDL: the weights depend on no kernel, so this warp's first loads go to L2 before waiting for
  // the kernel that writes x (and may still read y).
  pdl_trigger();
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t cc = c_begin + lane + int64_t(kWarpSize) * u;
      if (cc < c_end && rvalid[r]) prefetch_l2(wrow[r] + cc * kLinearVecBytes);
    }
  pdl_wait();
  fusion.begin(xb, m_valid);

  float acc[kMTile][kRows];
#pragma unroll
  for (int i = 0; i < kMTile; ++i)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[i][r] = 0.0f;

  for (int64_t c = c_begin + lane; c < c_end; c += int64_t(kWarpSize) * kUnroll) {
    // All loads of this step first: kRows x kUnroll independent 16-byte loads in flight.
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
          const int64_t k0 = cc * kVec;
          nvfp4_chunk_dot<kMTile, kRows>(
              wv[u], sc, [=](int i) { return xc + i * xs; }, m_valid, acc,
              [&](int i, int j, auto& x8) { fusion.x(i, k0 + j, x8); });
        }
      } else if (cc < c_end) {
        float wf[kRows][kVec];
        float sc[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          unpack_chunk<F>(wv[u][r], wf[r]);
          if constexpr (kFp8) sc[r] = __ldg(srow[r] + ((cc * kVec) >> p.log2_block_cols));
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
            fusion.x(i, cc * kVec, xf);
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              float d = 0.0f;  // one chunk's dot product, then added (fp8: scaled) into the row's sum
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
  if (k_split > 1) {  // uniform over the block: the barrier below is reached by every thread
    __shared__ float partial[kLinearWarps][kOut];
    if (lane < kOut) partial[warp][lane] = mine;
    __syncthreads();
    if (kpart != 0) {
      if constexpr (!Fusion::kKeepAllWarps) return;
    } else {
      for (int s = 1; s < k_split; ++s) mine += lane < kOut ? partial[warp + s][lane] : 0.0f;  // fixed order
    }
  }
  const int i = lane / kRows, r = lane % kRows;
  if ((!Fusion::kKeepAllWarps || kpart == 0) && lane < kOut && i < m_valid && row0 + r < p.n) {
    if constexpr (kNvfp4)  // the per-tensor (or per-row-group) scale_2 and the unpack's 2^14
      mine *= (p.scale_2_rows ? __ldg(p.scale_2_rows + (row0 + r) / p.scale_2_group_rows) : p.scale_2) * kE2m1F16Unscale;
    float* yp = p.y + (m0 + i) * p.y_stride + row0 + r;
    *yp = p.accumulate ? *yp + mine : mine;
  }
  fusion.end();
}

template <LinearWeight F, int kMTile, int kRows, int kUnroll>
__global__ void __launch_bounds__(kLinearThreads, kLinearMinBlocksPerSm)
    linear_vec_kernel(const __grid_constant__ LinearParams p) {
  LinearNoFusion none;
  linear_vec_body<F, kMTile, kRows, kUnroll>(p, none);
}

template <LinearWeight F, int kMTile, int kRows, int kUnroll>
cudaError_t launch_linear_vec(const LinearParams& p, dim3 grid, cudaStream_t stream) {
  if (cudaError_t e = launch_pdl(linear_vec_kernel<F, kMTile, kRows, kUnroll>, grid, dim3(kLinearThreads), 0, stream, p);
      e != cudaSuccess)
    return e;
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
