// mla_attention on the bf16 tensor cores: the decode and verify steps' attention. The same
// split-KV plan, workspace and fused combine as the CUDA-core kernel (mla_attention.cu, with 16
// heads per block), the scores and the weighted sum as m16n8k16 mmas with the block's 16 heads
// as M. Every f32 operand is split into a bf16 pair (split_bf16x2) and each product takes three
// mmas, so the result stays near f32 (mla_attention_params.h). Faster than the CUDA cores
// wherever both use 16-head blocks (V3, verify steps, batches); mla_cores_for picks (mla_attention.h).
#include <cmath>

#include "ops/cuda/common/bf16.cuh"
#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/mla_attention_common.cuh"
#include "ops/cuda/mla_attention_params.h"

namespace pg::ops::cuda {
namespace {

using namespace mla;

constexpr int kH = kMlaTcHeads;
constexpr int kMaxColTiles = kMlaMaxRank / 8 / kMlaWarps;  // P·V n tiles per warp (R <= 512: 8)

// The token's Q for heads h0 .. h0 + 16 as A fragments, split: sQh / sQl [dk / 16 k steps][32
// lanes] of 4 words (a0..a3 of vec.cuh's mma layout), so a warp reads a k step's fragment with
// one conflict-free 16-byte load per lane. Thread i takes words i, i + 256, ...: load_q issues
// all its loads at once (one round trip, while the cache rows are being located), store_q
// splits and stores them.
constexpr int kQWordsPerThread = kMlaTcMaxDk / 16 * 32 * 4 / kMlaThreads;
static_assert(kMlaTcMaxDk / 16 * 32 * 4 % kMlaThreads == 0, "whole words per thread");

__device__ __forceinline__ void load_q(const MlaAttentionParams& p, int64_t t, int64_t h0,
                                       float (&q)[kQWordsPerThread][2]) {
  // Word i = tid + 256 k is a0..a3 (i % 4) of lane (i / 4) % 32 at k step i / 128: the same head
  // for every k, columns c0 + 32 k and + 1.
  const int tid = threadIdx.x, r = tid % 4, lane = (tid / 4) % 32;
  const int64_t h = h0 + lane / 4 + (r & 1) * 8;
  const int c0 = 16 * (tid / 128) + 2 * (lane % 4) + (r >> 1) * 8;
  const bool head_ok = h < p.n_heads;
  const float* ql = p.q_lat + (head_ok ? t * p.q_lat_row_stride + h * p.q_lat_head_stride : 0);
  const float* qp = p.q_pe + (head_ok ? t * p.q_pe_row_stride + h * p.q_pe_head_stride : 0);
  const int R = p.kv_lora_rank;
#pragma unroll
  for (int k = 0; k < kQWordsPerThread; ++k) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int c = c0 + 32 * k + e;
      q[k][e] = !head_ok || c >= p.d ? 0.0f : c < R ? ql[c] : qp[c - R];
    }
  }
}

__device__ __forceinline__ void store_q(const MlaAttentionParams& p, const float (&q)[kQWordsPerThread][2],
                                        uint32_t* sQh, uint32_t* sQl) {
  const int n = p.dk / 16 * 32 * 4;
#pragma unroll
  for (int k = 0; k < kQWordsPerThread; ++k) {
    const int i = threadIdx.x + k * kMlaThreads;
    if (i < n) split_bf16x2(q[k][0], q[k][1], sQh[i], sQl[i]);
  }
}

// One block = (token t, head group g, split s), numbered as the CUDA-core kernel's. kVec: p.vec_kv
// and p.vec_out hold (attention_vec_kernel). kDefer (p.defer, PEREGRINE_ATTENTION_DEFER_TC): as the
// lean CUDA-core kernel's deferred form, every split leaves its partial (the only split too) and its
// heads' (max, sum) in ws_ml and exits; W_UV's kernel combines (head_linear_combine).
// kBf16: the pool is bf16 (p.kv16), staged through registers (KvBf16Stage); its values are their own
// bf16 hi parts, so the mmas of their lo parts (zeros) are left out: two mmas a product, same bits.
template <bool kVec, bool kDefer = false, bool kBf16 = false>
__global__ void __launch_bounds__(kMlaThreads, 1) mla_attention_tc_kernel(const __grid_constant__ MlaAttentionParams p) {
  extern __shared__ float4 smem4[];
  const int ksteps = p.dk / 16;
  uint32_t* sQh = reinterpret_cast<uint32_t*>(smem4);
  uint32_t* sQl = sQh + ksteps * 32 * 4;
  float* sK = reinterpret_cast<float*>(sQl + ksteps * 32 * 4);  // the work region
  float* sX = sK + mla_tc_work_floats(p.dp, p.n_splits);        // [4 warps][32 lanes][4]
  float* sS = sX + kMlaTcHalfScores;                            // [16 heads][kMlaTcSStride]
  float* sAlpha = sS + kH * kMlaTcSStride;
  float* sM = sAlpha + kH;
  float* sL = sM + kH;
  int* sTicket = reinterpret_cast<int*>(sL + kH);

  const int n_splits = p.n_splits, R = p.kv_lora_rank;
  const int64_t H = p.n_heads;
  const MlaBlockPlace place = mla_block_place(p, kH);
  const int s = place.s;
  const int64_t t = place.t, h0 = place.h0, item = place.item;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int fg = lane / 4, ft = lane % 4;  // the mma fragments' row group and thread in group

  pdl_wait();  // q, ctx_len and the step's cache rows come from the kernels before
  // The context's round trip first (the table's and the cache rows' hang on it), both loads
  // together: ordinary loads were issued after load_q's ~370 instructions, and token_seq's only
  // after mla_block_rows' branch (a second round trip).
  const int64_t ctx_len = ld_now(p.ctx_len + t);
  const int32_t seq = ld_now(p.token_seq + t);
  float q[kQWordsPerThread][2];
  load_q(p, t, h0, q);  // in flight while the context and the cache rows are looked up

  MlaSplitRows rows_of;
  if (!mla_block_rows(p, place, kH, ctx_len, rows_of)) return;
  const int begin = rows_of.begin, end = rows_of.end, n_act = rows_of.n_act;
  const bool direct = !kDefer && n_act == 1;  // the only split: normalize and write o_lat here
  const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks_per_seq;

  [[maybe_unused]] KvBf16Stage<kMlaChunkRows> stage;
  if constexpr (kBf16)
    stage.template load<kVec>(p, chunk_blocks(p, table, begin, end), begin, end);
  else
    load_chunk<kMlaChunkRows, kVec>(p, sK, chunk_blocks(p, table, begin, end), begin, end, p.dk);
  cp_async_commit();
  int32_t next_blocks = chunk_blocks(p, table, begin + kMlaChunkRows, end);  // used a chunk later
  store_q(p, q, sQh, sQl);  // while the first chunk is in flight
  // bf16: the first chunk's rows widened into sK once they land (after the table's load and Q's
  // stores are issued, so their round trips overlap the chunk's).
  if constexpr (kBf16) stage.store(sK, p.dp, p.dk);

  // Softmax state of this warp's 2 heads (2w, 2w + 1), identical in every lane.
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  // O fragments: n tile i of this warp covers columns 8 (warp + 8 i) .. +8; rows fg and fg + 8.
  const int col_tiles = (R + 7) / 8;
  float acc[kMaxColTiles][4] = {};
  // Scores: this warp's n tile (rows 8 nt .. +8 of a chunk) over k steps [k0, k1).
  const int nt = warp % 4, half = warp / 4;
  const int k_mid = (ksteps + 1) / 2;
  const int k0 = half ? k_mid : 0, k1 = half ? ksteps : k_mid;

  const int n_chunks = (end - begin + kMlaChunkRows - 1) / kMlaChunkRows;
  for (int c = 0; c < n_chunks; ++c) {
    cp_async_wait_all();
    __syncthreads();  // chunk c (and Q) visible; chunk c - 1 (the other buffer) no longer read
    const int c0 = begin + c * kMlaChunkRows;
    if (c + 1 < n_chunks) {
      if constexpr (kBf16)
        stage.template load<kVec>(p, next_blocks, c0 + kMlaChunkRows, end);
      else
        load_chunk<kMlaChunkRows, kVec>(p, sK + ((c + 1) & 1) * kMlaChunkRows * p.dp, next_blocks, c0 + kMlaChunkRows,
                                        end, p.dk);
      next_blocks = chunk_blocks(p, table, c0 + 2 * kMlaChunkRows, end);
    }
    cp_async_commit();
    const float* K = sK + (c & 1) * kMlaChunkRows * p.dp;
    const int rows = end - c0 < kMlaChunkRows ? end - c0 : kMlaChunkRows;

    // S = Q·Kᵀ: B fragment b0 = K[row fg][k 2ft, 2ft + 1], b1 = columns + 8. Four accumulators
    // (hi·hi and the two lo products, of even and odd k steps) keep four mma chains in flight
    // instead of one chain of 3 (k1 - k0) dependent mmas.
    float sc[4][4] = {};
    const float* krow = K + (8 * nt + fg) * p.dp + 2 * ft;
    for (int ks = k0; ks < k1; ks += 2) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if (ks + u >= k1) break;
        const uint4 qh = reinterpret_cast<const uint4*>(sQh)[(ks + u) * 32 + lane];
        const uint4 ql = reinterpret_cast<const uint4*>(sQl)[(ks + u) * 32 + lane];
        const float2 x0 = *reinterpret_cast<const float2*>(krow + 16 * (ks + u));
        const float2 x1 = *reinterpret_cast<const float2*>(krow + 16 * (ks + u) + 8);
        uint32_t bh0, bl0, bh1, bl1;
        split_bf16x2(x0.x, x0.y, bh0, bl0);
        split_bf16x2(x1.x, x1.y, bh1, bl1);
        mma_m16n8k16_bf16(sc[2 * u], ql.x, ql.y, ql.z, ql.w, bh0, bh1);
        // A bf16 pool's K is its own bf16 hi part: lo is 0, its product adds exactly nothing.
        if constexpr (!kBf16) mma_m16n8k16_bf16(sc[2 * u], qh.x, qh.y, qh.z, qh.w, bl0, bl1);
        mma_m16n8k16_bf16(sc[2 * u + 1], qh.x, qh.y, qh.z, qh.w, bh0, bh1);
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) sc[0][e] = (sc[0][e] + sc[2][e]) + (sc[1][e] + sc[3][e]);  // the small terms first
    if (half) *reinterpret_cast<float4*>(sX + ((warp - 4) * 32 + lane) * 4) = make_float4(sc[0][0], sc[0][1], sc[0][2], sc[0][3]);
    __syncthreads();
    if (!half) {
      const float4 o = *reinterpret_cast<const float4*>(sX + (warp * 32 + lane) * 4);
      const int col = 8 * nt + 2 * ft;
      sS[fg * kMlaTcSStride + col] = (sc[0][0] + o.x) * p.scale_log2;
      sS[fg * kMlaTcSStride + col + 1] = (sc[0][1] + o.y) * p.scale_log2;
      sS[(fg + 8) * kMlaTcSStride + col] = (sc[0][2] + o.z) * p.scale_log2;
      sS[(fg + 8) * kMlaTcSStride + col + 1] = (sc[0][3] + o.w) * p.scale_log2;
    }
    __syncthreads();

    // Online softmax: warp w, heads 2w and 2w + 1, lane = row of the chunk; P replaces S.
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int hh = 2 * warp + k;
      const float v = lane < rows ? sS[hh * kMlaTcSStride + lane] : -INFINITY;
      const float m_new = fmaxf(m_run[k], warp_max(v));  // finite: row 0 of a chunk is always valid
      const float pr = exp2f(v - m_new);
      const float alpha = exp2f(m_run[k] - m_new);  // 0 on the first chunk (m_run = -inf)
      l_run[k] = l_run[k] * alpha + warp_sum(pr);
      m_run[k] = m_new;
      sS[hh * kMlaTcSStride + lane] = pr;
      if (lane == 0) sAlpha[hh] = alpha;
    }
    __syncthreads();

    // O = alpha O + P·V: A fragment from P (rows fg, fg + 8 = heads; k = chunk rows), B fragment
    // b0 = V[rows 2ft, 2ft + 1][column fg of the tile], b1 = rows + 8.
    const float al0 = sAlpha[fg], al1 = sAlpha[fg + 8];
#pragma unroll
    for (int i = 0; i < kMaxColTiles; ++i) acc[i][0] *= al0, acc[i][1] *= al0, acc[i][2] *= al1, acc[i][3] *= al1;
#pragma unroll
    for (int kr = 0; kr < kMlaChunkRows / 16; ++kr) {
      if (16 * kr >= rows) break;
      const float* p0 = sS + fg * kMlaTcSStride + 16 * kr + 2 * ft;
      const float* p1 = p0 + 8 * kMlaTcSStride;
      const float2 e0 = *reinterpret_cast<const float2*>(p0), e1 = *reinterpret_cast<const float2*>(p1);
      const float2 e2 = *reinterpret_cast<const float2*>(p0 + 8), e3 = *reinterpret_cast<const float2*>(p1 + 8);
      uint32_t ah0, al0_, ah1, al1_, ah2, al2, ah3, al3;
      split_bf16x2(e0.x, e0.y, ah0, al0_);
      split_bf16x2(e1.x, e1.y, ah1, al1_);
      split_bf16x2(e2.x, e2.y, ah2, al2);
      split_bf16x2(e3.x, e3.y, ah3, al3);
      const float* vrow = K + (16 * kr + 2 * ft) * p.dp + fg;
#pragma unroll
      for (int i = 0; i < kMaxColTiles; ++i) {
        const int j = warp + kMlaWarps * i;
        if (j >= col_tiles) break;
        const float* v = vrow + 8 * j;
        uint32_t bh0, bl0, bh1, bl1;
        split_bf16x2(v[0], v[p.dp], bh0, bl0);
        split_bf16x2(v[8 * p.dp], v[9 * p.dp], bh1, bl1);
        mma_m16n8k16_bf16(acc[i], al0_, al1_, al2, al3, bh0, bh1);
        if constexpr (!kBf16) mma_m16n8k16_bf16(acc[i], ah0, ah1, ah2, ah3, bl0, bl1);  // 0 for a bf16 pool
        mma_m16n8k16_bf16(acc[i], ah0, ah1, ah2, ah3, bh0, bh1);
      }
    }
    // bf16: chunk c + 1 into the other buffer (left by every thread at this iteration's barrier).
    if constexpr (kBf16)
      if (c + 1 < n_chunks) stage.store(sK + ((c + 1) & 1) * kMlaChunkRows * p.dp, p.dp, p.dk);
  }

  // The next kernel may launch (its blocks wait at their pdl_wait for this grid to finish): late,
  // so that its waiting blocks take no SM room this grid's blocks could still need.
  pdl_trigger();
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < 2; ++k) sM[2 * warp + k] = m_run[k], sL[2 * warp + k] = l_run[k];
  __syncthreads();  // also: every read of sK is done, the work region is free for the combine

  // The partial (or, as the only split, the normalized output): heads fg and fg + 8, columns
  // 8j + 2ft and + 1 of each tile.
#pragma unroll
  for (int i = 0; i < kMaxColTiles; ++i) {
    const int j = warp + kMlaWarps * i;
    if (j >= col_tiles) break;
    const int col = 8 * j + 2 * ft;
#pragma unroll
    for (int half_row = 0; half_row < 2; ++half_row) {
      const int hh = fg + 8 * half_row;
      const int64_t h = h0 + hh;
      if (h >= H || col >= R) continue;
      float v0 = acc[i][2 * half_row], v1 = acc[i][2 * half_row + 1];
      float* dst;
      if (direct) {
        const float inv = 1.0f / sL[hh];  // as the CPU: one reciprocal, then products
        v0 *= inv, v1 *= inv;
        dst = p.o_lat + (t * H + h) * R + col;
      } else {
        dst = p.ws_o + ((item * n_splits + s) * kH + hh) * R + col;
      }
      if (kVec || p.vec_out) {  // R % 4 == 0, 16-byte aligned bases: col even -> an aligned float2
        *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
      } else {
        dst[0] = v0;
        if (col + 1 < R) dst[1] = v1;
      }
    }
  }
  if constexpr (kDefer) {  // the (max, sum) per head beside the partial; W_UV's kernel combines
    if (tid < kH && h0 + tid < H) {
      float* ml = p.ws_ml + ((item * n_splits + s) * kH + tid) * 2;
      ml[0] = sM[tid];
      ml[1] = sL[tid];
    }
  } else {
    if (direct) return;
    finish_split<kH, kVec>(p, sM, sL, sTicket, sK, item, t, h0, s, n_act);
  }
}

template <bool kVec, bool kDefer = false, bool kBf16 = false>
cudaError_t launch_tc(const MlaAttentionParams& p, cudaStream_t stream) {
  if constexpr (!kBf16)
    if (p.kv16) return launch_tc<kVec, kDefer, true>(p, stream);
  constexpr auto kKernel = mla_attention_tc_kernel<kVec, kDefer, kBf16>;
  if (cudaError_t e = raise_smem_limit_once<kKernel>(); e != cudaSuccess) return e;
  const size_t smem = mla_tc_smem_floats(p.dk, p.dp, p.n_splits) * sizeof(float);
  const int64_t blocks = p.m * p.head_groups * p.n_splits;
  return launch_pdl_if(attention_pdl(), kKernel, dim3(unsigned(blocks)), dim3(kMlaThreads), smem, stream, p);
}

bool tc_vec_applies(const MlaAttentionParams& p) { return p.vec_kv && p.vec_out && attention_vec_kernel(); }

}  // namespace

bool mla_attention_tc_defer_ok(const MlaAttentionParams& p) {
  return tc_vec_applies(p) && p.n_splits > 1 && p.ws_o && p.ws_ml;
}

cudaError_t launch_mla_attention_tc(const MlaAttentionParams& p, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  if (p.defer) {
    if (!mla_attention_tc_defer_ok(p)) return cudaErrorInvalidValue;
    return launch_tc<true, true>(p, stream);
  }
  return tc_vec_applies(p) ? launch_tc<true>(p, stream) : launch_tc<false>(p, stream);
}

}  // namespace pg::ops::cuda
