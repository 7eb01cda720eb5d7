// mla_attention in two passes (mla_attention_params.h says when and why): pass 1 writes the
// scaled scores of every (row, head), pass 2 turns them into the softmax-weighted sum of the
// latent rows, one column slice per cluster of blocks that merge their row ranges through
// distributed shared memory. f32 FMAs throughout: the CUDA-core kernel's tolerance class
// (tests/ops/mla_attention_test.cpp).
#include <cooperative_groups.h>

#include <cmath>

#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/mla_attention_common.cuh"
#include "ops/cuda/mla_attention_params.h"

namespace pg::ops::cuda {
namespace {

using namespace mla;
namespace cg = cooperative_groups;

constexpr int kH = kMlaTpHeads, kTile = kMlaTpTileRows, kCs = kMlaTpColSlices;
constexpr int kChunk = kMlaTpChunkRows, kSStride = kMlaTpSStride, kVStride = kMlaTpVStride;
constexpr int kPhases = 8;  // pass 2: row phases (a thread's rows j = phase + 8 i)
static_assert(kMlaThreads == kCs * (kH / 4) * (kTile / 4), "pass 1: a thread per (column slice, head quad, row quad)");
static_assert(kCs == 16 && kH * kTile / 16 == kCs, "pass 1: the reduce-scatter leaves one element per lane of 16");
static_assert(kMlaThreads == kPhases * (kMlaTpCols / 4) * (kH / 4), "pass 2: a thread per (row phase, column quad, head quad)");
static_assert(kMlaThreads * 8 == kChunk * kH, "pass 2's max: a thread per (row, 8 heads)");
static_assert(kMlaThreads % kMlaTpRanks == 0 && kH * kMlaTpCols % kMlaTpRanks == 0, "the merge splits evenly");

// A token's rows as both passes see them: ctx_len clamped to the workspace's rows (the host bound).
__device__ __forceinline__ int tp_context(const MlaAttentionParams& p, int64_t t) {
  const int64_t c = __ldcg(p.ctx_len + t);
  return int(c <= 0 ? 0 : c < p.s_rows ? c : p.s_rows);
}

// One step of a reduce-scatter over lanes: lanes l and l ^ kO exchange halves of acc[0 .. 2 kO);
// the lane with bit kO set keeps (and sums) the upper half, moved down to acc[0 .. kO).
template <int kO>
__device__ __forceinline__ void reduce_scatter_step(float (&acc)[16], int lane) {
  const bool upper = (lane & kO) != 0;
#pragma unroll
  for (int k = 0; k < kO; ++k) {
    const float send = upper ? acc[k] : acc[k + kO];
    const float keep = upper ? acc[k + kO] : acc[k];
    acc[k] = keep + __shfl_xor_sync(kFullMask, send, kO);
  }
}

// ---- Pass 1: scores --------------------------------------------------------------------------
// Block (token t, b < tp_blocks) scores rows [b per, (b + 1) per) of t's context for every head:
// S[t][row][h] = scale_log2 x q_h · c_kv[row] over all D columns. Thread roles per 16-row tile:
// column slice cs = lane % 16 (float4 columns cs, cs + 16, ...), head quad hq and row quad rq
// from the half-warp index: 16 partial dots each, then a reduce-scatter over the half-warp
// leaves lane cs with element cs (head 4 hq + cs / 4, row 4 rq + cs % 4).
__global__ void __launch_bounds__(kMlaThreads) mla_scores_kernel(const __grid_constant__ MlaAttentionParams p) {
  extern __shared__ float4 smem4[];
  float* sQ = reinterpret_cast<float*>(smem4);  // [16 heads][dp]
  float* sK = sQ + kH * p.dp;                   // [2 tiles][16 rows][dp]
  const int64_t t = p.m - 1 - int64_t(blockIdx.x) / p.tp_blocks;  // the latest tokens first
  const int b = int(blockIdx.x % unsigned(p.tp_blocks));

  pdl_wait();     // q, ctx_len and the step's cache rows come from the kernels before
  pdl_trigger();  // pass 2 may launch now: it stages its first rows of V while these score
  const int ctx = tp_context(p, t);
  const int per = (ctx + p.tp_blocks - 1) / p.tp_blocks;
  const int r0 = b * per, r1 = r0 + per < ctx ? r0 + per : ctx;
  if (r0 >= r1) return;

  load_q<kH>(p, sQ, t, 0);
  const int32_t* table = p.block_tables + int64_t(p.token_seq[t]) * p.max_blocks_per_seq;
  load_chunk<kTile>(p, sK, chunk_blocks<kTile>(p, table, r0, r1), r0, r1, 4 * p.d4);
  cp_async_commit();
  int32_t next_blocks = chunk_blocks<kTile>(p, table, r0 + kTile, r1);  // used a tile later

  const int lane = threadIdx.x % kWarpSize, cs = lane % kCs, half = threadIdx.x / kCs;
  const int hq = half % (kH / 4), rq = half / (kH / 4);
  float* S = p.ws_s + t * int64_t(p.s_rows) * kH;
  const int n_tiles = (r1 - r0 + kTile - 1) / kTile;
  for (int c = 0; c < n_tiles; ++c) {
    cp_async_wait_all();
    __syncthreads();  // tile c (and Q) visible; tile c - 1's buffer no longer read
    const int c0 = r0 + c * kTile;
    if (c + 1 < n_tiles) {
      load_chunk<kTile>(p, sK + ((c + 1) & 1) * kTile * p.dp, next_blocks, c0 + kTile, r1, 4 * p.d4);
      next_blocks = chunk_blocks<kTile>(p, table, c0 + 2 * kTile, r1);
    }
    cp_async_commit();
    const float* K = sK + (c & 1) * kTile * p.dp;

    float acc[16] = {};  // element 4 i + j: head 4 hq + i, row 4 rq + j
    for (int f = cs; f < p.d4; f += kCs) {
      float4 k4[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) k4[j] = lds4(K + (4 * rq + j) * p.dp + 4 * f);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 q4 = lds4(sQ + (4 * hq + i) * p.dp + 4 * f);
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[4 * i + j] = dot4(q4, k4[j], acc[4 * i + j]);
      }
    }
    // Reduce-scatter over the 16 slices: at step o a lane keeps the half of its elements on its
    // side of bit o and adds its partner's copy of them; 15 shuffles instead of 64.
    reduce_scatter_step<8>(acc, cs);
    reduce_scatter_step<4>(acc, cs);
    reduce_scatter_step<2>(acc, cs);
    reduce_scatter_step<1>(acc, cs);
    const int h = 4 * hq + cs / 4, row = c0 + 4 * rq + cs % 4;
    if (h < p.n_heads && row < r1) S[int64_t(row) * kH + h] = acc[0] * p.scale_log2;
  }
}

// ---- Pass 2: softmax · V ---------------------------------------------------------------------
// Stages S rows [j0, j0 + 128) of token t (zeros past `end`) into dst [128][kSStride].
__device__ __forceinline__ void stage_s(const MlaAttentionParams& p, float* dst, int64_t t, int j0, int end) {
  const float* S = p.ws_s + t * int64_t(p.s_rows) * kH;
#pragma unroll
  for (int k = 0; k < kChunk * kH / 4 / kMlaThreads; ++k) {
    const int i = threadIdx.x + k * kMlaThreads, row = i / (kH / 4), q = i % (kH / 4);
    const bool valid = j0 + row < end;
    cp_async16(dst + row * kSStride + 4 * q, valid ? S + int64_t(j0 + row) * kH + 4 * q : S, valid);
  }
}

// Stages the latent columns [c0, c0 + 32) of cache rows [j0, j0 + 128) of one sequence (zeros past
// `end` and past R) into dst [128][kVStride]. The table is read through L2: this runs before
// pass 2's pdl_wait (see the kernel).
__device__ __forceinline__ void stage_v(const MlaAttentionParams& p, float* dst, const int32_t* table, int j0, int end,
                                        int c0) {
  const int R = p.kv_lora_rank;
  if (p.vec_kv) {
    constexpr int kQuads = kMlaTpCols / 4;
#pragma unroll
    for (int k = 0; k < kChunk * kQuads / kMlaThreads; ++k) {
      const int i = threadIdx.x + k * kMlaThreads, row = i / kQuads, f = i % kQuads, pos = j0 + row;
      const bool valid = pos < end && c0 + 4 * f < R;
      const float* src = p.kv;
      if (valid) {
        const int lb = block_of(p, pos);
        src = p.kv + (int64_t(__ldcg(table + lb)) * p.block_size + (pos - lb * p.block_size)) * p.d + c0 + 4 * f;
      }
      cp_async16(dst + row * kVStride + 4 * f, src, valid);
    }
  } else {
    for (int i = threadIdx.x; i < kChunk * kMlaTpCols; i += kMlaThreads) {
      const int row = i / kMlaTpCols, c = i % kMlaTpCols, pos = j0 + row;
      const bool valid = pos < end && c0 + c < R;
      const float* src = p.kv;
      if (valid) {
        const int lb = block_of(p, pos);
        src = p.kv + (int64_t(__ldcg(table + lb)) * p.block_size + (pos - lb * p.block_size)) * p.d + c0 + c;
      }
      cp_async4(dst + row * kVStride + c, src, valid);
    }
  }
}

// Cluster (token t, column slice y) of kMlaTpRanks blocks; rank r takes rows [r per, (r + 1) per)
// of the context in chunks of 128, each thread rows phase, phase + 8, ... of a chunk for 4 heads
// (head quad hq) x 4 columns (column quad cq), under an online softmax per head (running max in
// sM, shared by the block). The ranks then merge: rank r finishes outputs [64 r, 64 r + 64) of
// the slice's 16 heads x 32 columns from every rank's (max, sum, o) in shared memory.
__global__ void __cluster_dims__(kMlaTpRanks, 1, 1) __launch_bounds__(kMlaThreads)
    mla_pv_kernel(const __grid_constant__ MlaAttentionParams p) {
  extern __shared__ float4 smem4[];
  float* sS = reinterpret_cast<float*>(smem4);   // [2][128][kSStride]: S, then P in place
  float* sV = sS + 2 * kChunk * kSStride;        // [2][128][kVStride]
  float* sRed = sV + 2 * kChunk * kVStride;      // [8 warps][16]: the chunk's max per warp
  float* sM = sRed + kMlaWarps * kH;             // [16] running max (log2 units)
  float* sAlpha = sM + kH;                       // [16] this chunk's rescale
  float* sO = sAlpha + kH;                       // [16][32] the rank's unnormalized output
  float* sL = sO + kH * kMlaTpCols;              // [16] the rank's sum of weights
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank());
  const int64_t t = p.m - 1 - blockIdx.z;
  const int c0 = int(blockIdx.y) * kMlaTpCols;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int64_t H = p.n_heads;

  // Before the wait: what pass 1 does not write. Pass 1 starts only after the kernels before it
  // (the cache rows, ctx_len) and triggers this launch after its own wait, so those are complete;
  // they are read through L2 (cp.async.cg, __ldcg), never a stale L1 line.
  const int ctx = tp_context(p, t);
  const int per = (ctx + kMlaTpRanks - 1) / kMlaTpRanks;
  const int begin = rank * per < ctx ? rank * per : ctx, end = begin + per < ctx ? begin + per : ctx;
  const int n_chunks = (end - begin + kChunk - 1) / kChunk;
  const int32_t* table = p.block_tables + int64_t(__ldcg(p.token_seq + t)) * p.max_blocks_per_seq;
  if (tid < kH) sM[tid] = -INFINITY;
  if (n_chunks > 0) stage_v(p, sV, table, begin, end, c0);
  pdl_wait();  // S from pass 1
  if (n_chunks > 0) stage_s(p, sS, t, begin, end);
  cp_async_commit();

  const int phase = tid % kPhases, cq = (tid / kPhases) % (kMlaTpCols / 4), hq = tid / (kPhases * kMlaTpCols / 4);
  const int jr = tid / 2, hb = 8 * (tid % 2);  // the max pass: row jr, heads hb .. hb + 8
  float o[4][4] = {}, l[4] = {};
  for (int c = 0; c < n_chunks; ++c) {
    cp_async_wait_all();
    __syncthreads();  // chunk c visible; chunk c - 1's buffers no longer read
    const int j0 = begin + c * kChunk;
    if (c + 1 < n_chunks) {
      stage_v(p, sV + ((c + 1) & 1) * kChunk * kVStride, table, j0 + kChunk, end, c0);
      stage_s(p, sS + ((c + 1) & 1) * kChunk * kSStride, t, j0 + kChunk, end);
    }
    cp_async_commit();
    float* Sc = sS + (c & 1) * kChunk * kSStride;
    const float* Vc = sV + (c & 1) * kChunk * kVStride;
    const int rows = end - j0 < kChunk ? end - j0 : kChunk;

    // The chunk's max per head (rows past the chunk and heads past H: -inf), then the new
    // running max and the rescale of what came before.
    float s8[8];
    {
      const float4 a = lds4(Sc + jr * kSStride + hb), b = lds4(Sc + jr * kSStride + hb + 4);
      s8[0] = a.x, s8[1] = a.y, s8[2] = a.z, s8[3] = a.w, s8[4] = b.x, s8[5] = b.y, s8[6] = b.z, s8[7] = b.w;
    }
    float mx[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (jr >= rows || hb + k >= H) s8[k] = -INFINITY;
      mx[k] = s8[k];
    }
#pragma unroll
    for (int off = 2; off < kWarpSize; off *= 2)
#pragma unroll
      for (int k = 0; k < 8; ++k) mx[k] = fmaxf(mx[k], __shfl_xor_sync(kFullMask, mx[k], off));
    if (lane < 2)
#pragma unroll
      for (int k = 0; k < 8; ++k) sRed[warp * kH + hb + k] = mx[k];
    __syncthreads();
    if (tid < kH) {
      float m = sRed[tid];
#pragma unroll
      for (int w = 1; w < kMlaWarps; ++w) m = fmaxf(m, sRed[w * kH + tid]);
      const float m_old = sM[tid], m_new = fmaxf(m_old, m);
      sAlpha[tid] = m_new == -INFINITY ? 1.0f : exp2f(m_old - m_new);  // 0 after an empty past
      sM[tid] = m_new;
    }
    __syncthreads();
    // P = 2^(S - max) in place (0 where S is -inf: past the rows, past the heads).
#pragma unroll
    for (int k = 0; k < 8; ++k) s8[k] = s8[k] == -INFINITY ? 0.0f : exp2f(s8[k] - sM[hb + k]);
    *reinterpret_cast<float4*>(Sc + jr * kSStride + hb) = make_float4(s8[0], s8[1], s8[2], s8[3]);
    *reinterpret_cast<float4*>(Sc + jr * kSStride + hb + 4) = make_float4(s8[4], s8[5], s8[6], s8[7]);
    __syncthreads();

    const float4 a4 = lds4(sAlpha + 4 * hq);
    const float al[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      l[i] *= al[i];
#pragma unroll
      for (int k = 0; k < 4; ++k) o[i][k] *= al[i];
    }
    for (int j = phase; j < rows; j += kPhases) {
      const float4 p4 = lds4(Sc + j * kSStride + 4 * hq), v = lds4(Vc + j * kVStride + 4 * cq);
      const float pj[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        l[i] += pj[i];
        o[i][0] = fmaf(pj[i], v.x, o[i][0]);
        o[i][1] = fmaf(pj[i], v.y, o[i][1]);
        o[i][2] = fmaf(pj[i], v.z, o[i][2]);
        o[i][3] = fmaf(pj[i], v.w, o[i][3]);
      }
    }
  }
  pdl_trigger();  // late, as the split-KV kernels

  // The 8 row phases (adjacent lanes) summed; phase 0 publishes the rank's o and l.
#pragma unroll
  for (int off = 1; off < kPhases; off *= 2)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      l[i] += __shfl_xor_sync(kFullMask, l[i], off);
#pragma unroll
      for (int k = 0; k < 4; ++k) o[i][k] += __shfl_xor_sync(kFullMask, o[i][k], off);
    }
  if (phase == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      *reinterpret_cast<float4*>(sO + (4 * hq + i) * kMlaTpCols + 4 * cq) = make_float4(o[i][0], o[i][1], o[i][2], o[i][3]);
      if (cq == 0) sL[4 * hq + i] = l[i];
    }
  }
  cluster.sync();  // every rank's sM, sL, sO complete and visible to the cluster

  // The merge, in rank order: o = Σ_r 2^(m_r - M) o_r / Σ_r 2^(m_r - M) l_r.
  constexpr int kPerRank = kH * kMlaTpCols / kMlaTpRanks;
  if (tid < kPerRank) {
    const int idx = rank * kPerRank + tid, h = idx / kMlaTpCols, c = idx % kMlaTpCols;
    float mr[kMlaTpRanks], M = -INFINITY;
#pragma unroll
    for (int r = 0; r < kMlaTpRanks; ++r) M = fmaxf(M, mr[r] = cluster.map_shared_rank(sM, r)[h]);
    float L = 0.0f, O = 0.0f;
#pragma unroll
    for (int r = 0; r < kMlaTpRanks; ++r) {
      const float w = mr[r] == -INFINITY ? 0.0f : exp2f(mr[r] - M);
      L = fmaf(w, cluster.map_shared_rank(sL, r)[h], L);
      O = fmaf(w, cluster.map_shared_rank(sO, r)[h * kMlaTpCols + c], O);
    }
    if (h < H && c0 + c < p.kv_lora_rank)  // an empty context: zeros, as the contract says
      p.o_lat[(t * H + h) * p.kv_lora_rank + c0 + c] = L > 0.0f ? O * (1.0f / L) : 0.0f;
  }
  cluster.sync();  // no block leaves while another still reads its shared memory
}

}  // namespace

cudaError_t launch_mla_attention_two_pass(const MlaAttentionParams& p, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  if (cudaError_t e = raise_smem_limit_once<mla_scores_kernel>(); e != cudaSuccess) return e;
  if (cudaError_t e = raise_smem_limit_once<mla_pv_kernel>(); e != cudaSuccess) return e;
  const size_t smem1 = mla_tp_scores_smem_floats(p.dp) * sizeof(float), smem2 = kMlaTpPvSmemFloats * sizeof(float);
  if (cudaError_t e = launch_pdl_if(attention_pdl(), mla_scores_kernel, dim3(unsigned(p.m * p.tp_blocks)),
                                    dim3(kMlaThreads), smem1, stream, p);
      e != cudaSuccess)
    return e;
  return launch_pdl(mla_pv_kernel, dim3(kMlaTpRanks, unsigned(p.tp_slices), unsigned(p.m)), dim3(kMlaThreads), smem2,
                    stream, p);
}

}  // namespace pg::ops::cuda
