// mla_attention on the GPU: flash-decoding split-KV over the paged latent cache, then a combine
// of the splits. Mirrors ops::cpu::mla_attention (same scores, a max-subtracted softmax, the same
// weighted sum of c_kv rows); the order of the sums and the online rescaling differ (see
// tests/ops/mla_attention_test.cpp for the tolerance this implies). Tiles and plan: mla_attention_params.h.
#include <cmath>

#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/mla_attention_params.h"

namespace pg::ops::cuda {
namespace {

// cp.async: global -> shared without a register round trip; src_bytes 0 writes zeros (rows past
// the split's end, the columns between D and the float4 padding) and reads nothing.
__device__ __forceinline__ void cp_async16(float* dst, const float* src, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ float4 lds4(const float* p) { return *reinterpret_cast<const float4*>(p); }

__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

// Stages cache rows [c0, c0 + kMlaChunkRows) of one sequence into dst ([kMlaChunkRows][dp]);
// rows at or past `end` become zeros. Warp w takes rows w, w + 8, ...; lanes walk the row.
__device__ __forceinline__ void load_chunk(const MlaAttentionParams& p, float* dst, const int32_t* table, int64_t c0,
                                           int64_t end) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  for (int j = warp; j < kMlaChunkRows; j += kMlaWarps) {
    const int64_t pos = c0 + j;
    const bool valid = pos < end;
    const float* src = p.kv;
    if (valid) src = p.kv + (int64_t(table[pos / p.block_size]) * p.block_size + pos % p.block_size) * p.d;
    float* row = dst + j * p.dp;
    if (p.vec_kv) {
      for (int f = lane; f < p.d4; f += kWarpSize) cp_async16(row + 4 * f, valid ? src + 4 * f : p.kv, valid);
    } else {
      for (int e = lane; e < 4 * p.d4; e += kWarpSize) {
        const bool ok = valid && e < p.d;
        cp_async4(row + e, ok ? src + e : p.kv, ok);
      }
    }
  }
}

// One block = (token t, head group g, split s); blockIdx.x = ((m-1-t) x n_splits + s) x head_groups + g,
// so the longest contexts (the last tokens of a causal prefill) start first.
// Shared memory (floats): sQ [16][dp] | sK [2][32][dp] | sRed [8 warps][16][32] | sP [32][20] |
// sAlpha, sM, sL [16].
__global__ void __launch_bounds__(kMlaThreads, 1) mla_attention_kernel(const __grid_constant__ MlaAttentionParams p) {
  extern __shared__ float4 smem4[];
  float* sQ = reinterpret_cast<float*>(smem4);
  float* sK = sQ + kMlaHeads * p.dp;
  float* sRed = sK + 2 * kMlaChunkRows * p.dp;
  float* sP = sRed + kMlaWarps * kMlaHeads * kMlaChunkRows;
  float* sAlpha = sP + kMlaChunkRows * kMlaPStride;
  float* sM = sAlpha + kMlaHeads;
  float* sL = sM + kMlaHeads;

  const int64_t n_splits = p.n_splits, H = p.n_heads, R = p.kv_lora_rank;
  int64_t b = blockIdx.x;
  const int g = int(b % p.head_groups);
  b /= p.head_groups;
  const int64_t s = b % n_splits;
  const int64_t t = p.m - 1 - b / n_splits;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int64_t h0 = int64_t(g) * kMlaHeads;

  int64_t ctx = p.ctx_len[t];
  ctx = ctx < p.max_rows ? ctx : p.max_rows;
  if (ctx <= 0) {  // outside the contract (validate rejects it on the host): zeros, no reads
    if (s == 0)
      for (int64_t i = tid; i < kMlaHeads * R; i += kMlaThreads)
        if (h0 + i / R < H) p.o_lat[(t * H + h0 + i / R) * R + i % R] = 0.0f;
    return;
  }
  const int64_t split_rows = mla_split_rows(ctx, n_splits);
  const int64_t begin = s * split_rows;
  if (begin >= ctx) return;  // past this token's context (grids are sized from a bound)
  const int64_t end = begin + split_rows < ctx ? begin + split_rows : ctx;
  const bool direct = split_rows >= ctx;  // the only split: normalize and write o_lat here
  const int32_t* table = p.block_tables + int64_t(p.token_seq[t]) * p.max_blocks_per_seq;

  // Q rows [q_lat | q_pe | 0 ...] of the group's heads; heads past n_heads are zeros.
  for (int i = tid; i < kMlaHeads * p.dp; i += kMlaThreads) {
    const int hh = i / p.dp, c = i % p.dp;
    const int64_t h = h0 + hh;
    float v = 0.0f;
    if (h < H) {
      if (c < p.kv_lora_rank) v = p.q_lat[(t * H + h) * R + c];
      else if (c < p.d) v = p.q_pe[(t * H + h) * p.rope_dim + (c - p.kv_lora_rank)];
    }
    sQ[i] = v;
  }
  load_chunk(p, sK, table, begin, end);
  cp_async_commit();

  // Softmax state of this warp's two heads (2w, 2w + 1), identical in every lane.
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  // P·V tile: heads ho*8 .. +8, columns 4cq .. +4 (threads with 4cq >= R idle there).
  const int ho = tid / kMlaColQuads, cq = tid % kMlaColQuads;
  const bool pv_active = 4 * cq < p.kv_lora_rank;
  float acc[kMlaOutHeads][4] = {};
  // Score tile: rows r0 and r0 + 16, float4 columns f = 2w + half (mod 16).
  const int half = lane / 16, r0 = lane % 16;

  const int64_t n_chunks = (end - begin + kMlaChunkRows - 1) / kMlaChunkRows;
  for (int64_t c = 0; c < n_chunks; ++c) {
    cp_async_wait_all();
    __syncthreads();  // chunk c visible; chunk c - 1 (the other buffer) no longer read
    const int64_t c0 = begin + c * kMlaChunkRows;
    if (c + 1 < n_chunks) load_chunk(p, sK + ((c + 1) & 1) * kMlaChunkRows * p.dp, table, c0 + kMlaChunkRows, end);
    cp_async_commit();
    const float* K = sK + (c & 1) * kMlaChunkRows * p.dp;
    const int rows = int(end - c0 < kMlaChunkRows ? end - c0 : kMlaChunkRows);

    // Partial scores over this warp's slice of D.
    float sc[kMlaHeads][2];
#pragma unroll
    for (int h = 0; h < kMlaHeads; ++h) sc[h][0] = sc[h][1] = 0.0f;
    for (int f = 2 * warp + half; f < p.d4; f += kMlaScoreSlices) {
      const float4 k0 = lds4(K + r0 * p.dp + 4 * f), k1 = lds4(K + (r0 + 16) * p.dp + 4 * f);
#pragma unroll
      for (int h = 0; h < kMlaHeads; ++h) {
        const float4 q = lds4(sQ + h * p.dp + 4 * f);
        sc[h][0] = dot4(q, k0, sc[h][0]);
        sc[h][1] = dot4(q, k1, sc[h][1]);
      }
    }
    float* red = sRed + warp * kMlaHeads * kMlaChunkRows;
#pragma unroll
    for (int h = 0; h < kMlaHeads; ++h) {
      const float a = sc[h][0] + __shfl_xor_sync(kFullMask, sc[h][0], 16);
      const float e = sc[h][1] + __shfl_xor_sync(kFullMask, sc[h][1], 16);
      red[h * kMlaChunkRows + r0 + 16 * half] = half ? e : a;  // lower half row r0, upper half row r0 + 16
    }
    __syncthreads();

    // Online softmax: warp w, heads 2w and 2w + 1, lane = row of the chunk.
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int hh = 2 * warp + k;
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < kMlaWarps; ++w) v += sRed[(w * kMlaHeads + hh) * kMlaChunkRows + lane];
      v = lane < rows ? v * p.scale_log2 : -INFINITY;
      const float m_new = fmaxf(m_run[k], warp_max(v));  // finite: row 0 of a chunk is always valid
      const float pr = exp2f(v - m_new);
      const float alpha = exp2f(m_run[k] - m_new);  // 0 on the first chunk (m_run = -inf)
      l_run[k] = l_run[k] * alpha + warp_sum(pr);
      m_run[k] = m_new;
      sP[lane * kMlaPStride + hh] = pr;
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
      for (int j = 0; j < rows; ++j) {
        const float4 v = lds4(K + j * p.dp + 4 * cq);
        const float4 p0 = lds4(sP + j * kMlaPStride + ho * kMlaOutHeads);
        const float4 p1 = lds4(sP + j * kMlaPStride + ho * kMlaOutHeads + 4);
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
  }

  if (lane == 0)
    for (int k = 0; k < 2; ++k) sM[2 * warp + k] = m_run[k], sL[2 * warp + k] = l_run[k];
  __syncthreads();

  if (pv_active) {
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
        dst = p.ws_o + ((t * H + h) * n_splits + s) * R;
      }
      if (p.vec_out) {
        *reinterpret_cast<float4*>(dst + c) = v;
      } else {
        const float e[4] = {v.x, v.y, v.z, v.w};
        for (int k = 0; k < 4 && c + k < p.kv_lora_rank; ++k) dst[c + k] = e[k];
      }
    }
  }
  if (!direct && tid < kMlaHeads && h0 + tid < H) {
    float* ml = p.ws_ml + ((t * H + h0 + tid) * n_splits + s) * 2;
    ml[0] = sM[tid];
    ml[1] = sL[tid];
  }
}

// One block per (token, head): o = Σ_s 2^(m_s - M) o_s / Σ_s 2^(m_s - M) l_s over the token's
// active splits. Tokens with one split were written by the split kernel.
__global__ void __launch_bounds__(kMlaCombineThreads) mla_combine_kernel(const __grid_constant__ MlaAttentionParams p) {
  __shared__ float sw[kMlaMaxSplits], sl[kMlaMaxSplits];
  const int64_t H = p.n_heads, R = p.kv_lora_rank, n_splits = p.n_splits;
  const int64_t t = blockIdx.x / H, h = blockIdx.x % H;
  int64_t ctx = p.ctx_len[t];
  ctx = ctx < p.max_rows ? ctx : p.max_rows;
  if (ctx <= 0) return;
  const int64_t split_rows = mla_split_rows(ctx, n_splits);
  const int n_active = int((ctx + split_rows - 1) / split_rows);
  if (n_active <= 1) return;
  const float* ml = p.ws_ml + (t * H + h) * n_splits * 2;
  float mx = -INFINITY;
  for (int s = 0; s < n_active; ++s) mx = fmaxf(mx, ml[2 * s]);
  for (int s = threadIdx.x; s < n_active; s += kMlaCombineThreads) {
    sw[s] = exp2f(ml[2 * s] - mx);
    sl[s] = ml[2 * s + 1];
  }
  __syncthreads();
  float l = 0.0f;
  for (int s = 0; s < n_active; ++s) l = fmaf(sw[s], sl[s], l);
  const float inv = 1.0f / l;
  const float* o = p.ws_o + (t * H + h) * n_splits * R;
  float* out = p.o_lat + (t * H + h) * R;
  for (int64_t c = threadIdx.x; c < R; c += kMlaCombineThreads) {
    float a = 0.0f;
    for (int s = 0; s < n_active; ++s) a = fmaf(sw[s], o[s * R + c], a);
    out[c] = a * inv;
  }
}

}  // namespace

cudaError_t launch_mla_attention(const MlaAttentionParams& p, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  const size_t smem = mla_smem_floats(p.dp) * sizeof(float);
  cudaError_t e = cudaFuncSetAttribute(mla_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess) return e;
  const int64_t blocks = p.m * p.head_groups * p.n_splits;
  mla_attention_kernel<<<unsigned(blocks), kMlaThreads, smem, stream>>>(p);
  e = cudaGetLastError();
  if (e != cudaSuccess || p.n_splits <= 1) return e;
  mla_combine_kernel<<<unsigned(p.m * p.n_heads), kMlaCombineThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
