// The small kernels around moe_experts_gemm's cuBLASLt GEMMs: the routing plan (pairs grouped by
// expert, deterministic: flat order within an expert), the bf16 row gather, SiLU * mul to bf16,
// and the combine that sums each token's expert outputs in ops::cpu::moe_experts' order.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "ops/cuda/common/bf16.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/prefill_gemm_params.h"

namespace pg::ops::cuda {
namespace {

constexpr int kPlanWarps = kMoeGemmPlanTile / kWarpSize;
constexpr int kChunk = 8;  // bf16 elements per 16-byte store
constexpr int kStageThreads = 256;
constexpr int kCombineThreads = 256;
constexpr int64_t kMaxGridY = 65535;

__device__ __forceinline__ int64_t round_rows(int64_t n) { return (n + kMoeGemmRowPad - 1) / kMoeGemmRowPad * kMoeGemmRowPad; }

// grid n_tiles, block kMoeGemmPlanTile: tile_hist[b][e] = pairs of tile b on expert e.
__global__ void __launch_bounds__(kMoeGemmPlanTile) moe_gemm_hist_kernel(const __grid_constant__ MoeGemmPlanParams p) {
  extern __shared__ int32_t s_hist[];  // [n_experts]
  for (int e = threadIdx.x; e < p.n_experts; e += blockDim.x) s_hist[e] = 0;
  __syncthreads();
  const int i = blockIdx.x * kMoeGemmPlanTile + threadIdx.x;
  if (i < p.n_pairs) {
    const int e = p.expert_idx[i];
    if (e >= 0 && e < p.n_experts) atomicAdd(&s_hist[e], 1);  // integer counts: order-free
  }
  __syncthreads();
  for (int e = threadIdx.x; e < p.n_experts; e += blockDim.x) p.tile_hist[int64_t(blockIdx.x) * p.n_experts + e] = s_hist[e];
}

// grid ceil(n_experts / kPlanWarps), block kMoeGemmPlanTile: warp = one expert; tile_hist[.][e]
// becomes its exclusive prefix over tiles (32 tiles per shuffle scan), count[e] the total.
__global__ void __launch_bounds__(kMoeGemmPlanTile) moe_gemm_scan_kernel(const __grid_constant__ MoeGemmPlanParams p) {
  const int e = blockIdx.x * kPlanWarps + threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  if (e >= p.n_experts) return;  // whole warps leave together
  const int n_tiles = (p.n_pairs + kMoeGemmPlanTile - 1) / kMoeGemmPlanTile;
  int carry = 0;
  for (int b0 = 0; b0 < n_tiles; b0 += kWarpSize) {
    const int b = b0 + lane;
    int32_t* cell = p.tile_hist + int64_t(b) * p.n_experts + e;
    const int c = b < n_tiles ? *cell : 0;
    int incl = c;
#pragma unroll
    for (int o = 1; o < kWarpSize; o *= 2) {
      const int v = __shfl_up_sync(kFullMask, incl, o);
      if (lane >= o) incl += v;
    }
    if (b < n_tiles) *cell = carry + incl - c;
    carry += __shfl_sync(kFullMask, incl, kWarpSize - 1);
  }
  if (lane == 0) p.count[e] = carry;
}

// grid n_tiles, block kMoeGemmPlanTile. Every block first derives the segments (exclusive scan of
// the padded counts, warp 0; block 0 publishes them), then places its tile's pairs: rank within
// the expert = earlier tiles (tile_hist prefix) + earlier warps of this tile + earlier lanes.
__global__ void __launch_bounds__(kMoeGemmPlanTile) moe_gemm_place_kernel(const __grid_constant__ MoeGemmPlanParams p) {
  extern __shared__ int32_t s_place[];
  int32_t* seg = s_place;                    // [n_experts] first pair row of each segment
  int32_t* warp_hist = s_place + p.n_experts;  // [kPlanWarps][n_experts]
  const int E = p.n_experts;
  for (int i = threadIdx.x; i < kPlanWarps * E; i += blockDim.x) warp_hist[i] = 0;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  if (warp == 0) {
    int64_t row = p.routed_base;
    for (int e0 = 0; e0 < E; e0 += kWarpSize) {
      const int e = e0 + lane;
      const int64_t c = e < E ? round_rows(p.count[e]) : 0;
      int64_t incl = c;
#pragma unroll
      for (int o = 1; o < kWarpSize; o *= 2) {
        const int64_t v = __shfl_up_sync(kFullMask, incl, o);
        if (lane >= o) incl += v;
      }
      if (e < E) {
        seg[e] = int32_t(row + incl - c);
        if (blockIdx.x == 0) p.seg_begin[e] = int32_t(row + incl - c);
      }
      row += __shfl_sync(kFullMask, incl, kWarpSize - 1);
    }
    if (blockIdx.x == 0 && lane == 0) *p.total_rows = int32_t(row);
  }
  __syncthreads();

  const int i = blockIdx.x * kMoeGemmPlanTile + threadIdx.x;
  int e = -1;
  if (i < p.n_pairs) {
    e = p.expert_idx[i];
    if (e < 0 || e >= E) e = -1;
  }
  const unsigned peers = __match_any_sync(kFullMask, e);
  const int rank = __popc(peers & ((1u << lane) - 1u));
  if (e >= 0 && rank == 0) warp_hist[warp * E + e] = __popc(peers);
  __syncthreads();
  if (i >= p.n_pairs) return;
  if (e < 0) {
    p.pair_row[i] = -1;
    return;
  }
  int before = rank;
  for (int w = 0; w < warp; ++w) before += warp_hist[w * E + e];
  const int row = seg[e] + p.tile_hist[int64_t(blockIdx.x) * E + e] + before;
  p.pair_row[i] = row;
  p.row_token[row - p.routed_base] = i / p.top_k;
}

// grid (ceil(ld / 8 / threads), min(max_rows, 65535)): thread = one 8-column chunk of a row.
__global__ void __launch_bounds__(kStageThreads) moe_gemm_gather_kernel(const __grid_constant__ MoeGemmGatherParams p) {
  const int64_t c0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kChunk;
  if (c0 >= p.ld) return;
  const int64_t rows = p.total_rows ? int64_t(*p.total_rows) : p.max_rows;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    int64_t t;
    if (r < p.routed_base) {
      t = r % p.m_pad;
      if (t >= p.m) t = -1;
    } else {
      t = p.row_token[r - p.routed_base];
    }
    uint32_t w[4] = {0, 0, 0, 0};  // padding rows and columns >= hidden are zero
    if (t >= 0 && c0 < p.hidden) {
      const float* src = p.x + t * p.hidden + c0;
      if (p.vec && c0 + kChunk <= p.hidden) {
        const float4 a = __ldg(reinterpret_cast<const float4*>(src)), b = __ldg(reinterpret_cast<const float4*>(src + 4));
        w[0] = pack_bf16x2(a.x, a.y), w[1] = pack_bf16x2(a.z, a.w);
        w[2] = pack_bf16x2(b.x, b.y), w[3] = pack_bf16x2(b.z, b.w);
      } else {
#pragma unroll
        for (int j = 0; j < kChunk; ++j)
          if (c0 + j < p.hidden) w[j / 2] |= uint32_t(to_bf16_bits(__ldg(src + j))) << (16 * (j % 2));
      }
    }
    *reinterpret_cast<uint4*>(p.xg + r * p.ld + c0) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// grid (ceil(ld_h / 8 / threads), min(rows, 65535)): thread = one 8-column chunk of h.
__global__ void __launch_bounds__(kStageThreads) moe_gemm_silu_kernel(const __grid_constant__ MoeGemmSiluParams p) {
  const int64_t c0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kChunk;
  if (c0 >= p.ld_h) return;
  // Whole float4 loads of gate and up: gu rows are 32-byte aligned (ld_gu % 8 == 0) and the up
  // half starts on a float4 boundary when inter % 8 == 0 (then a chunk never straddles inter).
  const bool vec = p.inter % kChunk == 0;
  for (int64_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
    const float* g = p.gu + r * p.ld_gu + c0;
    const float* u = g + p.inter;
    uint32_t w[4] = {0, 0, 0, 0};
    if (vec && c0 + kChunk <= p.inter) {
      const float4 g0 = *reinterpret_cast<const float4*>(g), g1 = *reinterpret_cast<const float4*>(g + 4);
      const float4 u0 = *reinterpret_cast<const float4*>(u), u1 = *reinterpret_cast<const float4*>(u + 4);
      w[0] = pack_bf16x2(silu_mul(g0.x, u0.x), silu_mul(g0.y, u0.y));
      w[1] = pack_bf16x2(silu_mul(g0.z, u0.z), silu_mul(g0.w, u0.w));
      w[2] = pack_bf16x2(silu_mul(g1.x, u1.x), silu_mul(g1.y, u1.y));
      w[3] = pack_bf16x2(silu_mul(g1.z, u1.z), silu_mul(g1.w, u1.w));
    } else {
      for (int j = 0; j < kChunk; ++j)
        if (c0 + j < p.inter) w[j / 2] |= uint32_t(to_bf16_bits(silu_mul(g[j], u[j]))) << (16 * (j % 2));
    }
    *reinterpret_cast<uint4*>(p.h + r * p.ld_h + c0) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// grid m, block kCombineThreads: one token per block. Thread 0 orders the token's terms (routed
// pairs by expert id, equal ids by slot: an insertion sort that keeps equal keys in slot order;
// then the shared experts); every thread sums them for its columns in that order.
__global__ void __launch_bounds__(kCombineThreads) moe_gemm_combine_kernel(const __grid_constant__ MoeGemmCombineParams p) {
  __shared__ int64_t s_row[kMoeGemmMaxTopK + kMoeGemmMaxShared];
  __shared__ float s_w[kMoeGemmMaxTopK + kMoeGemmMaxShared];
  __shared__ int s_key[kMoeGemmMaxTopK];
  __shared__ int s_n;
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    int n = 0;
    for (int k = 0; k < p.top_k; ++k) {
      const int64_t pi = t * p.top_k + k;
      const int row = p.pair_row[pi];
      if (row < 0) continue;  // an id outside [0, n_experts): skipped
      const int e = p.expert_idx[pi];
      const float w = p.expert_weight[pi];
      int q = n;
      while (q > 0 && s_key[q - 1] > e) {
        s_key[q] = s_key[q - 1], s_row[q] = s_row[q - 1], s_w[q] = s_w[q - 1];
        --q;
      }
      s_key[q] = e, s_row[q] = row, s_w[q] = w;
      ++n;
    }
    for (int s = 0; s < p.n_shared; ++s) s_row[n] = int64_t(s) * p.m_pad + t, s_w[n] = 1.0f, ++n;
    s_n = n;
  }
  __syncthreads();
  const int n = s_n;
  float* yt = p.y + t * p.y_stride;
  for (int o = threadIdx.x; o < p.hidden; o += blockDim.x) {
    float acc = 0.0f;
    for (int q = 0; q < n; ++q) acc += s_w[q] * p.z[s_row[q] * p.ld_z + o];
    yt[o] = p.accumulate ? yt[o] + acc : acc;
  }
}

dim3 chunk_grid(int64_t ld, int64_t rows, int threads) {
  const int64_t chunks = (ld + kChunk - 1) / kChunk;
  return dim3(unsigned((chunks + threads - 1) / threads), unsigned(std::min(std::max<int64_t>(rows, 1), kMaxGridY)));
}

}  // namespace

cudaError_t launch_moe_gemm_plan(const MoeGemmPlanParams& p, cudaStream_t stream) {
  if (p.n_pairs <= 0 || p.n_experts <= 0) return cudaSuccess;
  const unsigned tiles = unsigned((p.n_pairs + kMoeGemmPlanTile - 1) / kMoeGemmPlanTile);
  const size_t hist_smem = size_t(p.n_experts) * sizeof(int32_t);
  moe_gemm_hist_kernel<<<tiles, kMoeGemmPlanTile, hist_smem, stream>>>(p);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  moe_gemm_scan_kernel<<<unsigned((p.n_experts + kPlanWarps - 1) / kPlanWarps), kMoeGemmPlanTile, 0, stream>>>(p);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const size_t place_smem = size_t(1 + kPlanWarps) * size_t(p.n_experts) * sizeof(int32_t);
  moe_gemm_place_kernel<<<tiles, kMoeGemmPlanTile, place_smem, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_moe_gemm_gather(const MoeGemmGatherParams& p, cudaStream_t stream) {
  if (p.max_rows <= 0) return cudaSuccess;
  moe_gemm_gather_kernel<<<chunk_grid(p.ld, p.max_rows, kStageThreads), kStageThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_moe_gemm_silu(const MoeGemmSiluParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  moe_gemm_silu_kernel<<<chunk_grid(p.ld_h, p.rows, kStageThreads), kStageThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_moe_gemm_combine(const MoeGemmCombineParams& p, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  moe_gemm_combine_kernel<<<unsigned(p.m), kCombineThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
