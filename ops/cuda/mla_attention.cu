// mla_attention on the GPU: flash-decoding split-KV over the paged latent cache with the combine
// of the splits fused in (the last blocks of a group to finish do it). Mirrors
// ops::cpu::mla_attention (same scores, a max-subtracted softmax, the same weighted sum of c_kv
// rows); the order of the sums and the online rescaling differ (see
// tests/ops/mla_attention_test.cpp for the tolerance this implies). Tiles and plan: mla_attention_params.h.
#include <cmath>

#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/mla_attention_common.cuh"
#include "ops/cuda/mla_attention_params.h"

namespace pg::ops::cuda {
namespace {

using namespace mla;

// One block = (token t, head group g, split s), placed by mla_block_place (mla_attention_common.cuh).
// kVec: p.vec_kv, p.vec_q and p.vec_out all hold (attention_vec_kernel). kRows: p.chunk_rows.
// kLean (with kVec): p.block_shift >= 0 (attention_lean_kernel). kRelease (with kLean): the combine's
// arrival by one release atomic (release_arrive). kDefer (with kLean, p.defer): no combine here;
// every split, the only one too, leaves its partial (ws_o, ws_ml) for W_UV's kernel to combine
// (head_linear_combine, mla_ops.cu): no fence, ticket or waiting combiners on the critical path.
// kBf16: the pool is bf16 (p.kv16), staged through registers (KvBf16Stage); no early chunk.
template <int kHeads, bool kVec, int kRows, bool kLean = false, bool kRelease = false, bool kDefer = false,
          bool kBf16 = false>
__global__ void __launch_bounds__(kMlaThreads, 1) mla_attention_kernel(const __grid_constant__ MlaAttentionParams p) {
  using Tile = MlaTile<kHeads, kRows>;
  extern __shared__ float4 smem4[];
  float* sQ = reinterpret_cast<float*>(smem4);
  float* sK = sQ + kHeads * p.dp;  // the work region (see mla_smem_floats)
  float* sRed = sK + mla_work_floats(kHeads, p.dp, p.n_splits, kRows);
  float* sP = sRed + kMlaWarps * kHeads * kRows;
  float* sAlpha = sP + kRows * Tile::kPStride;
  float* sM = sAlpha + kHeads;
  float* sL = sM + kHeads;
  int* sTicket = reinterpret_cast<int*>(sL + kHeads);  // the combine's ticket (dynamic: no static smem)

  const int n_splits = p.n_splits, R = p.kv_lora_rank;
  const int64_t H = p.n_heads;
  const MlaBlockPlace place = mla_block_place<kLean>(p, kHeads);
  const int s = place.s;
  const int64_t t = place.t, h0 = place.h0, item = place.item;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;

  pg_tl_mark(TimelineKernel::kAttention, 0);
  // p.early_chunk (PEREGRINE_ATTENTION_EARLY_CHUNK): before the wait (launched under PDL:
  // attention_pdl), what no kernel of this step writes. ctx_len, token_seq and the block tables are
  // the step's inputs, copied before its first kernel; cache rows before the last m of a context (m:
  // the step's tokens) were written by earlier steps or (a draft chain's depths) by kernels before
  // the previous attention launch, which triggers only after its chunk loop. So a block whose first
  // chunk ends before those rows loads it now, while the kernel before (mla_prep: this step's rows,
  // q) finishes: the same rows into the same place. Off: the loads after the wait, as before.
  int64_t ctx_len = 0;
  int32_t seq = 0;
  bool early_chunk = false;
  if (!kBf16 && p.early_chunk) {
    ctx_len = ld_now(p.ctx_len + t), seq = ld_now(p.token_seq + t);
    MlaSplitRows early;  // ctx_len > 0: mla_block_rows has no side effect
    early_chunk = ctx_len > 0 && mla_block_rows<kRows, kLean>(p, place, kHeads, ctx_len, early) &&
                  min(early.begin + kRows, early.end) <= ctx_len - p.m;
    if (early_chunk) {
      const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks_per_seq;
      load_chunk<kRows, kVec, kLean>(p, sK, chunk_blocks<kRows, kLean>(p, table, early.begin, early.end),
                                     early.begin, early.end, 4 * p.d4);
      cp_async_commit();
    }
  }
  pdl_wait();  // q, ctx_len and the step's cache rows come from the kernels before
  pg_tl_mark(TimelineKernel::kAttention, 1);
  // ctx_len and token_seq in one round trip (an ordinary token_seq load was issued only after
  // mla_block_rows' branch: a second one before the table's).
  if (!p.early_chunk) ctx_len = ld_now(p.ctx_len + t), seq = ld_now(p.token_seq + t);
  load_q<kHeads, kVec, kLean>(p, sQ, t, h0);  // independent of the context: in flight while ctx_len is read
  cp_async_commit();

  MlaSplitRows rows_of;
  if (!mla_block_rows<kRows, kLean>(p, place, kHeads, ctx_len, rows_of)) {
    cp_async_wait_all();
    return;
  }
  const int begin = rows_of.begin, end = rows_of.end, n_act = rows_of.n_act;
  const bool direct = !kDefer && n_act == 1;  // the only split: normalize and write o_lat here
  const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks_per_seq;

  [[maybe_unused]] KvBf16Stage<kRows> stage;
  if constexpr (kBf16) {
    stage.template load<kVec, kLean>(p, chunk_blocks<kRows, kLean>(p, table, begin, end), begin, end);
  } else if (!early_chunk) {
    load_chunk<kRows, kVec, kLean>(p, sK, chunk_blocks<kRows, kLean>(p, table, begin, end), begin, end, 4 * p.d4);
    cp_async_commit();
  }
  int32_t next_blocks = chunk_blocks<kRows, kLean>(p, table, begin + kRows, end);  // used a chunk later
  // bf16: the first chunk's rows widened into sK once they land (the table's load above is issued
  // first, so its round trip overlaps the chunk's).
  if constexpr (kBf16) stage.store(sK, p.dp, 4 * p.d4);

  // Softmax state of this warp's heads, identical in every lane.
  float m_run[Tile::kHeadsPerWarp], l_run[Tile::kHeadsPerWarp];
#pragma unroll
  for (int k = 0; k < Tile::kHeadsPerWarp; ++k) m_run[k] = -INFINITY, l_run[k] = 0.0f;
  // P·V tile: heads ho*8 .. +8, columns 4cq .. +4, rows phase, phase + kPhases, ... (threads with
  // 4cq >= R idle there).
  const int cq = tid % kMlaColQuads, ho = (tid / kMlaColQuads) % Tile::kOctets;
  const int phase = tid / (kMlaColQuads * Tile::kOctets);
  const bool pv_active = 4 * cq < R;
  float acc[kMlaOutHeads][4] = {};
  // Score tile: rows r0 + kRowLanes x i (i < kRowsPerLane), float4 columns f = warp x kColGroups
  // + q (mod kSlices).
  const int r0 = lane % Tile::kRowLanes, q = lane / Tile::kRowLanes;

  const int n_chunks = (end - begin + kRows - 1) / kRows;
  for (int c = 0; c < n_chunks; ++c) {
    cp_async_wait_all();
    __syncthreads();  // chunk c (and Q) visible; chunk c - 1 (the other buffer) no longer read
    const int c0 = begin + c * kRows;
    if (c + 1 < n_chunks) {
      if constexpr (kBf16) stage.template load<kVec, kLean>(p, next_blocks, c0 + kRows, end);
      else load_chunk<kRows, kVec, kLean>(p, sK + ((c + 1) & 1) * kRows * p.dp, next_blocks, c0 + kRows, end, 4 * p.d4);
      next_blocks = chunk_blocks<kRows, kLean>(p, table, c0 + 2 * kRows, end);
    }
    cp_async_commit();
    const float* K = sK + (c & 1) * kRows * p.dp;
    const int rows = end - c0 < kRows ? end - c0 : kRows;

    // Partial scores over this lane's slice of D.
    float sc[kHeads][Tile::kRowsPerLane];
#pragma unroll
    for (int h = 0; h < kHeads; ++h)
#pragma unroll
      for (int i = 0; i < Tile::kRowsPerLane; ++i) sc[h][i] = 0.0f;
    for (int f = warp * Tile::kColGroups + q; f < p.d4; f += Tile::kSlices) {
      float4 k4[Tile::kRowsPerLane];
#pragma unroll
      for (int i = 0; i < Tile::kRowsPerLane; ++i) k4[i] = lds4(K + (r0 + Tile::kRowLanes * i) * p.dp + 4 * f);
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        const float4 qv = lds4(sQ + h * p.dp + 4 * f);
#pragma unroll
        for (int i = 0; i < Tile::kRowsPerLane; ++i) sc[h][i] = dot4(qv, k4[i], sc[h][i]);
      }
    }
    // Sum the warp's slices (lanes r0 + kRowLanes x q, q < kColGroups); lane q < kRowsPerLane keeps
    // row r0 + kRowLanes x q.
    float* red = sRed + warp * kHeads * kRows;
    // kLean: the lanes' column loops above end apart; reconverged here, ptxas drops the divergent
    // fallback it otherwise emits around each of the shuffles below (WARPSYNC.COLLECTIVE).
    if constexpr (kLean) __syncwarp();
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      float mine = 0.0f;
#pragma unroll
      for (int i = 0; i < Tile::kRowsPerLane; ++i) {
        float v = sc[h][i];
#pragma unroll
        for (int o = Tile::kRowLanes; o < kWarpSize; o *= 2) v += __shfl_xor_sync(kFullMask, v, o);
        mine = q == i ? v : mine;
      }
      if (Tile::kColGroups == Tile::kRowsPerLane || q < Tile::kRowsPerLane) red[h * kRows + r0 + Tile::kRowLanes * q] = mine;
    }
    __syncthreads();

    // Online softmax: warp w, its kHeadsPerWarp heads, lane = row of the chunk.
#pragma unroll
    for (int k = 0; k < Tile::kHeadsPerWarp; ++k) {
      const int hh = warp * Tile::kHeadsPerWarp + k;
      float v = 0.0f;
      if (kRows == kWarpSize || lane < kRows)
#pragma unroll
        for (int w = 0; w < kMlaWarps; ++w) v += sRed[(w * kHeads + hh) * kRows + lane];
      v = lane < rows ? v * p.scale_log2 : -INFINITY;
      const float m_new = fmaxf(m_run[k], warp_max(v));  // finite: row 0 of a chunk is always valid
      const float pr = exp2f(v - m_new);
      const float alpha = exp2f(m_run[k] - m_new);  // 0 on the first chunk (m_run = -inf)
      l_run[k] = l_run[k] * alpha + warp_sum(pr);
      m_run[k] = m_new;
      if (kRows == kWarpSize || lane < kRows) sP[lane * Tile::kPStride + hh] = pr;
      if (lane == 0) sAlpha[hh] = alpha;
    }
    __syncthreads();

    // o += P·V over the chunk's valid rows (V = the c_kv part of the staged rows).
    if (pv_active) {
      const float4 a0 = lds4(sAlpha + ho * kMlaOutHeads), a1 = lds4(sAlpha + ho * kMlaOutHeads + 4);
      const float al[kMlaOutHeads] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
#pragma unroll
      for (int i = 0; i < kMlaOutHeads; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][e] *= al[i];
      for (int j = phase; j < rows; j += Tile::kPhases) {
        const float4 v = lds4(K + j * p.dp + 4 * cq);
        const float4 p0 = lds4(sP + j * Tile::kPStride + ho * kMlaOutHeads);
        const float4 p1 = lds4(sP + j * Tile::kPStride + ho * kMlaOutHeads + 4);
        const float pj[kMlaOutHeads] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
        for (int i = 0; i < kMlaOutHeads; ++i) {
          acc[i][0] = fmaf(pj[i], v.x, acc[i][0]);
          acc[i][1] = fmaf(pj[i], v.y, acc[i][1]);
          acc[i][2] = fmaf(pj[i], v.z, acc[i][2]);
          acc[i][3] = fmaf(pj[i], v.w, acc[i][3]);
        }
      }
    }
    // bf16: chunk c + 1 into the other buffer (left by every thread at this iteration's barrier).
    if constexpr (kBf16)
      if (c + 1 < n_chunks) stage.store(sK + ((c + 1) & 1) * kRows * p.dp, p.dp, 4 * p.d4);
  }

  pdl_trigger();  // late, as the tensor-core kernel (mla_attention_tc.cu)
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < Tile::kHeadsPerWarp; ++k)
      sM[warp * Tile::kHeadsPerWarp + k] = m_run[k], sL[warp * Tile::kHeadsPerWarp + k] = l_run[k];
  __syncthreads();  // also: every P·V read of sK is done, the work region is free

  if constexpr (Tile::kPhases > 1) {  // 8 heads: phase 1 hands its partial sums to phase 0
    static_assert(Tile::kPhases == 2, "two row phases");
    float* sX = sK;  // [8 heads][128 quads] float4
    if (phase == 1 && pv_active)
#pragma unroll
      for (int i = 0; i < kMlaOutHeads; ++i)
        *reinterpret_cast<float4*>(sX + (i * kMlaColQuads + cq) * 4) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    __syncthreads();
    if (phase == 0 && pv_active)
#pragma unroll
      for (int i = 0; i < kMlaOutHeads; ++i) {
        const float4 x = lds4(sX + (i * kMlaColQuads + cq) * 4);
        acc[i][0] += x.x, acc[i][1] += x.y, acc[i][2] += x.z, acc[i][3] += x.w;
      }
  }

  if (phase == 0 && pv_active) {
    const int c = 4 * cq;
#pragma unroll
    for (int i = 0; i < kMlaOutHeads; ++i) {
      const int hh = ho * kMlaOutHeads + i;
      const int64_t h = h0 + hh;
      if (h >= H) continue;
      float4 v = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
      float* dst;
      if (direct) {
        const float inv = 1.0f / sL[hh];  // as the CPU: one reciprocal, then products
        v.x *= inv, v.y *= inv, v.z *= inv, v.w *= inv;
        dst = p.o_lat + (t * H + h) * R;
      } else {
        dst = p.ws_o + ((item * n_splits + s) * kHeads + hh) * R;
      }
      if (kVec || p.vec_out) {
        *reinterpret_cast<float4*>(dst + c) = v;
      } else {
        const float e[4] = {v.x, v.y, v.z, v.w};
        for (int k = 0; k < 4 && c + k < R; ++k) dst[c + k] = e[k];
      }
    }
  }
  if constexpr (kDefer) {  // the (max, sum) per head beside the partial; W_UV's kernel combines
    if (tid < kHeads && h0 + tid < H) {
      float* ml = p.ws_ml + ((item * n_splits + s) * kHeads + tid) * 2;
      ml[0] = sM[tid];
      ml[1] = sL[tid];
    }
    pg_tl_mark(TimelineKernel::kAttention, 2);  // the split's partial written
  } else {
    if (direct) return;
    finish_split<kHeads, kVec, kLean, kRelease>(p, sM, sL, sTicket, sK, item, t, h0, s, n_act);
  }
}

template <auto kKernel, int kHeads, int kRows>
cudaError_t launch_kernel(const MlaAttentionParams& p, cudaStream_t stream) {
  const size_t smem = mla_smem_floats(kHeads, p.dp, p.n_splits, kRows) * sizeof(float);
  cudaError_t e = raise_smem_limit_once<kKernel>();
  if (e != cudaSuccess) return e;
  const int64_t blocks = p.m * p.head_groups * p.n_splits;
  return launch_pdl_if(attention_pdl(), kKernel, dim3(unsigned(blocks)), dim3(kMlaThreads), smem, stream, p);
}

template <int kHeads, bool kVec, int kRows, bool kLean = false, bool kRelease = false, bool kDefer = false>
cudaError_t launch(const MlaAttentionParams& p, cudaStream_t stream) {
  if (p.kv16)
    return launch_kernel<mla_attention_kernel<kHeads, kVec, kRows, kLean, kRelease, kDefer, true>, kHeads, kRows>(p,
                                                                                                               stream);
  return launch_kernel<mla_attention_kernel<kHeads, kVec, kRows, kLean, kRelease, kDefer>, kHeads, kRows>(p, stream);
}

// The vector instantiations apply (attention_vec_kernel); the lean ones too where the cache's block
// size is a power of two (attention_lean_kernel).
bool vec_applies(const MlaAttentionParams& p) { return p.vec_kv && p.vec_q && p.vec_out && attention_vec_kernel(); }
bool lean_applies(const MlaAttentionParams& p) { return vec_applies(p) && p.block_shift >= 0 && attention_lean_kernel(); }

template <int kHeads>
cudaError_t launch(const MlaAttentionParams& p, cudaStream_t stream) {
  const bool vec = vec_applies(p);
  if (p.defer) {  // no combine in the kernel: kRelease plays no part
    if (!mla_attention_defer_ok(p)) return cudaErrorInvalidValue;
    return launch<kHeads, true, kMlaChunkRows, true, false, true>(p, stream);
  }
  if (lean_applies(p)) {
    return release_arrive() ? launch<kHeads, true, kMlaChunkRows, true, true>(p, stream)
                            : launch<kHeads, true, kMlaChunkRows, true>(p, stream);
  }
  return vec ? launch<kHeads, true, kMlaChunkRows>(p, stream) : launch<kHeads, false, kMlaChunkRows>(p, stream);
}

}  // namespace

bool mla_attention_defer_ok(const MlaAttentionParams& p) {
  return lean_applies(p) && p.chunk_rows == kMlaChunkRows && p.n_splits > 1 && p.ws_o && p.ws_ml;
}

cudaError_t launch_mla_attention(const MlaAttentionParams& p, int heads, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  return heads == 8 ? launch<8>(p, stream) : launch<16>(p, stream);
}

}  // namespace pg::ops::cuda
