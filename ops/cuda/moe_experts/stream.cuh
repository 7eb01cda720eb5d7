// Device helpers of the MoE expert kernels (kernel.cu, decode.cuh): chunk loads and unpacking
// (16-byte chunks as in linear/kernel.cuh; one element per "chunk" on the scalar path), the
// register-tiled dot products, and the PDL / L2-prefetch instructions. Included by kernel.cu only.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/linear/kernel.cuh"  // unpack_chunk
#include "ops/cuda/moe_experts/params.h"

namespace pg::ops::cuda::moe_detail {

// Elements of one streamed chunk: 16 bytes on the vector path, one element on the scalar path.
template <LinearWeight F, bool kVec>
constexpr int chunk_elems() {
  return kVec ? linear_vec_elems(F) : 1;
}

// Chunk c of a weight row (scalar path: element c, its raw bits in .x).
template <LinearWeight F, bool kVec>
__device__ __forceinline__ uint4 load_chunk(const uint8_t* row, int64_t c) {
  if constexpr (kVec) {
    return ld_stream(row + c * kLinearVecBytes);
  } else if constexpr (F == LinearWeight::kF32) {
    return make_uint4(__ldg(reinterpret_cast<const unsigned int*>(row) + c), 0, 0, 0);
  } else if constexpr (F == LinearWeight::kBF16) {
    return make_uint4(__ldg(reinterpret_cast<const unsigned short*>(row) + c), 0, 0, 0);
  } else {
    return make_uint4(__ldg(row + c), 0, 0, 0);
  }
}

template <LinearWeight F, bool kVec>
__device__ __forceinline__ void unpack(const uint4& v, float (&out)[chunk_elems<F, kVec>()]) {
  if constexpr (kVec) {
    unpack_chunk<F>(v, out);
  } else if constexpr (F == LinearWeight::kF32) {
    out[0] = __uint_as_float(v.x);
  } else if constexpr (F == LinearWeight::kBF16) {
    out[0] = __uint_as_float(v.x << 16);
  } else {
    out[0] = fp8_e4m3_to_f32(uint8_t(v.x));
  }
}

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

// First index in [lo, hi) of the ascending a[] with a[i] >= v.
__device__ __forceinline__ int lower_bound(const int32_t* a, int lo, int hi, int v) {
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (a[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// acc[i][r] = this lane's part of row r · x row i, for i < m_valid (the warp sums the lanes).
// All kR x kU loads of a step are issued before the first multiply; fp8 scales each chunk's dot
// once (a chunk lies in one scale block on the vector path).
template <LinearWeight F, bool kVec, int kM, int kR, int kU>
__device__ __forceinline__ void stream_dot(const uint8_t* const (&wrow)[kR], const float* const (&srow)[kR],
                                           const float* const (&xrow)[kM], int m_valid, int64_t n_chunks,
                                           const MoeWeightParams& w, float (&acc)[kM][kR]) {
  constexpr int kE = chunk_elems<F, kVec>();
  constexpr bool kFp8 = F == LinearWeight::kFp8Block;
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int i = 0; i < kM; ++i)
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[i][r] = 0.0f;

  for (int64_t c = lane; c < n_chunks; c += int64_t(kWarpSize) * kU) {
    uint4 wv[kU][kR];
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const int64_t cc = c + int64_t(kWarpSize) * u;
        wv[u][r] = cc < n_chunks ? load_chunk<F, kVec>(wrow[r], cc) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t cc = c + int64_t(kWarpSize) * u;
      if (cc < n_chunks) {
        float wf[kR][kE];
        float sc[kR];
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          unpack<F, kVec>(wv[u][r], wf[r]);
          if constexpr (kFp8)
            sc[r] = __ldg(srow[r] + (kVec ? (cc * kE) >> w.log2_block_cols : cc / w.block_cols));
        }
#pragma unroll
        for (int i = 0; i < kM; ++i) {
          if (i < m_valid) {
            float xf[kE];
            if constexpr (kVec) {
#pragma unroll
              for (int q = 0; q < kE / 4; ++q) {
                const float4 t = ld_f4(xrow[i] + cc * kE + 4 * q);
                xf[4 * q] = t.x, xf[4 * q + 1] = t.y, xf[4 * q + 2] = t.z, xf[4 * q + 3] = t.w;
              }
            } else {
              xf[0] = __ldg(xrow[i] + cc);
            }
#pragma unroll
            for (int r = 0; r < kR; ++r) {
              float d = 0.0f;
#pragma unroll
              for (int e = 0; e < kE; ++e) d = fmaf(wf[r][e], xf[e], d);
              acc[i][r] = kFp8 ? fmaf(d, sc[r], acc[i][r]) : acc[i][r] + d;
            }
          }
        }
      }
    }
  }
}

template <LinearWeight F>
__device__ __forceinline__ const float* scale_row(const MoeWeightParams& w, int64_t row) {
  return F == LinearWeight::kFp8Block ? w.scale_inv + (row / w.block_rows) * w.scale_cols : nullptr;
}


// acc[s][r] = this lane's part of row wrow[s][r] · xrow[s] (kS independent terms, each with its
// own weight rows and its own activation row; the warp sums the lanes), for s < s_valid. The
// decode down kernel at m = 1 uses it to keep kS experts' loads in flight at once.
template <LinearWeight F, bool kVec, int kS, int kR, int kU>
__device__ __forceinline__ void stream_dot_terms(const uint8_t* const (&wrow)[kS][kR],
                                                 const float* const (&srow)[kS][kR], const float* const (&xrow)[kS],
                                                 int s_valid, int64_t n_chunks, const MoeWeightParams& w,
                                                 float (&acc)[kS][kR]) {
  constexpr int kE = chunk_elems<F, kVec>();
  constexpr bool kFp8 = F == LinearWeight::kFp8Block;
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int s = 0; s < kS; ++s)
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[s][r] = 0.0f;

  for (int64_t c = lane; c < n_chunks; c += int64_t(kWarpSize) * kU) {
    uint4 wv[kU][kS][kR];
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int s = 0; s < kS; ++s)
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          const int64_t cc = c + int64_t(kWarpSize) * u;
          wv[u][s][r] = cc < n_chunks && s < s_valid ? load_chunk<F, kVec>(wrow[s][r], cc) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t cc = c + int64_t(kWarpSize) * u;
      if (cc < n_chunks) {
#pragma unroll
        for (int s = 0; s < kS; ++s) {
          if (s < s_valid) {
            float xf[kE];
            if constexpr (kVec) {
#pragma unroll
              for (int q = 0; q < kE / 4; ++q) {
                const float4 t = ld_f4(xrow[s] + cc * kE + 4 * q);
                xf[4 * q] = t.x, xf[4 * q + 1] = t.y, xf[4 * q + 2] = t.z, xf[4 * q + 3] = t.w;
              }
            } else {
              xf[0] = __ldg(xrow[s] + cc);
            }
#pragma unroll
            for (int r = 0; r < kR; ++r) {
              float wf[kE];
              unpack<F, kVec>(wv[u][s][r], wf);
              float d = 0.0f;
#pragma unroll
              for (int e = 0; e < kE; ++e) d = fmaf(wf[e], xf[e], d);
              if constexpr (kFp8) {
                const float sc = __ldg(srow[s][r] + (kVec ? (cc * kE) >> w.log2_block_cols : cc / w.block_cols));
                acc[s][r] = fmaf(d, sc, acc[s][r]);
              } else {
                acc[s][r] += d;
              }
            }
          }
        }
      }
    }
  }
}

// Programmatic Dependent Launch (sm_90). The gate_up kernel lets the down kernel be scheduled
// once each of its warps has no item left (launch_dependents); the down kernel does its
// routing-only prologue, then waits for gate_up's completion and memory flush (wait). Both are
// no-ops when the kernel was launched without the PDL attribute.
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Asynchronous prefetch of [p, p + bytes) into L2 (sm_90 bulk prefetch); p 16-byte aligned, bytes
// a multiple of 16. A hint: nothing waits for it.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

}  // namespace pg::ops::cuda::moe_detail
