// Pieces shared by the two mla_attention kernels (CUDA cores: mla_attention.cu; tensor cores:
// mla_attention_tc.cu): a block's place and rows, the end of a split (its (max, sum) published,
// the ticket, the fused combine of a (token, head group)'s splits), and for their launchers the
// PDL knob. cp.async and the shared-memory opt-in are common/cp_async.cuh and common/smem_limit.cuh.
#pragma once

#include <cmath>

#include "ops/cuda/common/cp_async.cuh"
#include "ops/cuda/common/env.h"
#include "ops/cuda/common/smem_limit.cuh"
#include "ops/cuda/common/sync.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/mla_attention_params.h"

namespace pg::ops::cuda::mla {

// The attention kernels are launched with PDL unless PEREGRINE_ATTENTION_PDL=0, behind mla_prep's
// late trigger (mla_prep_late_trigger, common/env.h): its blocks let the attention launch as they end.
// With mla_prep's trigger at the top (its blocks' start), PDL here lost: moonlight nvfp4 decode 6%
// slower on the H200 (2026-12-01, 354dca7: 456.4 vs 486.5 tok/s), and -0.4% / +1.8% on the k = 1
// verify step at 8e1a0d0 (2026-12-05). With the late trigger (H200, 2026-12-05, 8e1a0d0, one call
// alternating, 2 rounds, b = 1 after 1,024 tokens): moonlight bf16 473.6 -> 475.3 tok/s (+0.4%), fp8
// 582.5 -> 586.0 (+0.6%), nvfp4 627.7 -> 630.8 (+0.5%; in the call before 624.1 -> 627.6, verify k = 1
// 2.213 -> 2.208 ms), V3 4L bf16 / fp8 / nvfp4 +0.1% each; the goldens and 184 attention / mla_prep /
// head op tests pass under it. Both kernels call pdl_wait at their top and pdl_trigger after their
// chunk loop either way (no-ops without the attribute).
inline bool attention_pdl() {
  static const bool on = env_switch("PEREGRINE_ATTENTION_PDL", true);
  return on;
}

// A combiner waits at most this many polls (~64 ns apart: ~0.5 s) for its group's other splits,
// which run concurrently and take microseconds; past it (a workspace whose counters were not
// zeroed) it goes on with what it has instead of hanging the device.
constexpr int kMlaSpinLimit = 1 << 23;

// Where a block sits: blockIdx.x = ((m-1-t) x n_splits + s) x head_groups + g, so the longest
// contexts (the last tokens of a causal prefill) start first; heads h0 .. h0 + heads of token t,
// split s; item = (token, head group), the counter and workspace index.
struct MlaBlockPlace {
  int64_t t = 0, h0 = 0, item = 0;
  int s = 0;
};
// kLean: in 32-bit arithmetic (a grid's blocks fit an unsigned; no 64-bit division subroutine).
template <bool kLean = false>
__device__ __forceinline__ MlaBlockPlace mla_block_place(const MlaAttentionParams& p, int heads) {
  if constexpr (kLean) {
    const int b = int(blockIdx.x), g = b % p.head_groups, b2 = b / p.head_groups;
    MlaBlockPlace w;
    w.s = b2 % p.n_splits;
    w.t = p.m - 1 - b2 / p.n_splits;
    w.h0 = int64_t(g) * heads;
    w.item = w.t * p.head_groups + g;
    return w;
  }
  int64_t b = blockIdx.x;
  const int g = int(b % p.head_groups);
  b /= p.head_groups;
  MlaBlockPlace w;
  w.s = int(b % p.n_splits);
  w.t = p.m - 1 - b / p.n_splits;
  w.h0 = int64_t(g) * heads;
  w.item = w.t * p.head_groups + g;
  return w;
}

// The rows [begin, end) of a block's split, given its token's ctx_len, and how many splits hold
// rows of the token (n_act; 1: the block normalizes and writes o_lat itself). False when the split
// has none (past the token's context: grids are sized from a bound), or the context is empty
// (outside the contract, validate rejects it on the host: split 0 writes zeros, nothing is read).
struct MlaSplitRows {
  int begin = 0, end = 0, n_act = 0;
};
// The empty context's zeros (kLean: out of line and rolled, never taken inside the contract): the
// group's valid heads are hv x R contiguous floats of o_lat.
static __device__ __noinline__ void mla_zero_o_lat(float* o_lat, int64_t t, int64_t h0, int64_t H, int R, int heads) {
  const int hv = int(H - h0 < heads ? H - h0 : heads);
  float* o = o_lat + (t * H + h0) * R;
#pragma unroll 1
  for (int i = threadIdx.x; i < hv * R; i += kMlaThreads) o[i] = 0.0f;
}
// mla_split_rows in 32-bit arithmetic (positions are ints on the device: mla_attention_launch.cpp).
__device__ __forceinline__ int mla_split_rows32(int ctx, int n_splits, int chunk_rows) {
  const int per = (ctx + n_splits - 1) / n_splits;
  const int rows = (per + chunk_rows - 1) / chunk_rows * chunk_rows;
  return rows > chunk_rows ? rows : chunk_rows;
}
template <int kRows = kMlaChunkRows, bool kLean = false>  // kRows: the kernel's chunk rows (p.chunk_rows)
__device__ __forceinline__ bool mla_block_rows(const MlaAttentionParams& p, const MlaBlockPlace& w, int heads,
                                               int64_t ctx_len, MlaSplitRows& r) {
  const int ctx = int(ctx_len < p.max_rows ? ctx_len : p.max_rows);
  const int R = p.kv_lora_rank;
  const int64_t H = p.n_heads;
  if (ctx <= 0) {
    if constexpr (kLean) {
      if (w.s == 0) mla_zero_o_lat(p.o_lat, w.t, w.h0, H, R, heads);
    } else {
      if (w.s == 0)
        for (int64_t i = threadIdx.x; i < int64_t(heads) * R; i += kMlaThreads)
          if (w.h0 + i / R < H) p.o_lat[(w.t * H + w.h0 + i / R) * R + i % R] = 0.0f;
    }
    return false;
  }
  const int split_rows = kLean ? mla_split_rows32(ctx, p.n_splits, kRows) : int(mla_split_rows(ctx, p.n_splits, kRows));
  if (int64_t(w.s) * split_rows >= ctx) return false;
  r.begin = w.s * split_rows;
  r.end = r.begin + split_rows < ctx ? r.begin + split_rows : ctx;
  r.n_act = (ctx + split_rows - 1) / split_rows;
  return true;
}

// Logical block of cache position pos: a shift for the usual power-of-two block sizes (kLean: the
// launcher checked block_shift >= 0).
template <bool kLean = false>
__device__ __forceinline__ int block_of(const MlaAttentionParams& p, int pos) {
  if constexpr (kLean) return pos >> p.block_shift;
  return p.block_shift >= 0 ? pos >> p.block_shift : pos / p.block_size;
}

// The physical blocks of a chunk's rows [c0, min(c0 + kRows, end)): lane l gets the table entry
// of logical block c0 / block_size + l, for the blocks the chunk touches (<= 32: a chunk is at
// most 32 rows), 0 elsewhere. One load per chunk, issued a chunk ahead by the kernels (a load per
// staged row before: no measurable difference on the H200, 12.9 us either way at moonlight 1K).
template <int kRows = kMlaChunkRows, bool kLean = false>
__device__ __forceinline__ int32_t chunk_blocks(const MlaAttentionParams& p, const int32_t* table, int c0, int end) {
  static_assert(kRows <= kWarpSize, "a lane per touched block");
  const int lane = threadIdx.x % kWarpSize;
  const int last = (c0 + kRows < end ? c0 + kRows : end) - 1;
  const int b = block_of<kLean>(p, c0) + lane;
  return c0 < end && b <= block_of<kLean>(p, last) ? table[b] : 0;
}

// Stages cache rows [c0, c0 + kRows) of one sequence into dst ([kRows][dp]), columns [0, width)
// (a multiple of 4, >= D); rows at or past `end` and columns past D become zeros. `blocks`:
// chunk_blocks<kRows>(c0) of this lane. Warp w takes rows w, w + 8, ...; lanes walk the row.
// kVec: the caller knows p.vec_kv (no scalar fallback in the code).
template <int kRows = kMlaChunkRows, bool kVec = false, bool kLean = false>
__device__ __forceinline__ void load_chunk(const MlaAttentionParams& p, float* dst, int32_t blocks, int c0, int end,
                                           int width) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int first = block_of<kLean>(p, c0);
  for (int j = warp; j < kRows; j += kMlaWarps) {
    const int pos = c0 + j;
    const bool valid = pos < end;
    const int lb = block_of<kLean>(p, pos);
    const int32_t blk = __shfl_sync(kFullMask, blocks, valid ? lb - first : 0);
    const float* src = p.kv;
    if (valid) src = p.kv + (int64_t(blk) * p.block_size + (pos - lb * p.block_size)) * p.d;
    float* row = dst + j * p.dp;
    if (kVec || p.vec_kv) {
      for (int f = lane; f < width / 4; f += kWarpSize) {
        const bool ok = valid && f < p.d4;
        cp_async16(row + 4 * f, ok ? src + 4 * f : p.kv, ok);
      }
    } else {
      for (int e = lane; e < width; e += kWarpSize) {
        const bool ok = valid && e < p.d;
        cp_async4(row + e, ok ? src + e : p.kv, ok);
      }
    }
  }
}

// A bf16 pool (p.kv16): a chunk's rows pass through registers, widened to f32 on their way into the
// same shared rows load_chunk fills, so everything after the staging is the f32 pool's code on the
// widened values (the same bits as an f32 pool holding them). load() issues every load of the lane at
// once (rows of warp w: w, w + 8, ...; 4-value groups f = lane, lane + 32, ... of a row); store()
// widens and writes them. The kernels call load() for chunk c + 1 right after chunk c's barrier and
// store() after chunk c's work, so the loads are in flight while chunk c is worked on (store() writes
// the buffer chunk c - 1 used, which every thread left before that barrier).
// kMlaBf16MaxWidth bounds the staged columns (the launcher refuses wider rows).
template <int kRows>
struct KvBf16Stage {
  static constexpr int kRowsPerWarp = (kRows + kMlaWarps - 1) / kMlaWarps;
  static constexpr int kGroups = (kMlaBf16MaxWidth / 4 + kWarpSize - 1) / kWarpSize;  // 4-value groups a lane
  uint2 v[kRowsPerWarp][kGroups];

  // Rows [c0, c0 + kRows) (zeros at or past end), their D values (groups past D: zeros; store() takes
  // the width). kVec: p.vec_kv (D % 4 == 0, an 8-byte aligned pool): 8-byte loads, else a value at a time.
  template <bool kVec, bool kLean = false>
  __device__ __forceinline__ void load(const MlaAttentionParams& p, int32_t blocks, int c0, int end) {
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const int first = block_of<kLean>(p, c0);
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int j = warp + kMlaWarps * i, pos = c0 + j;
      const bool valid = j < kRows && pos < end;
      const int lb = block_of<kLean>(p, pos);
      const int32_t blk = __shfl_sync(kFullMask, blocks, valid ? lb - first : 0);
      const uint16_t* src = p.kv16 + (valid ? (int64_t(blk) * p.block_size + (pos - lb * p.block_size)) * p.d : 0);
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const int f = lane + kWarpSize * g;
        uint2 w = make_uint2(0u, 0u);
        if (valid && 4 * f < p.d) {
          if (kVec || p.vec_kv) {
            w = __ldg(reinterpret_cast<const uint2*>(src) + f);
          } else {
            uint16_t h[4] = {0, 0, 0, 0};
            for (int e = 0; e < 4 && 4 * f + e < p.d; ++e) h[e] = __ldg(src + 4 * f + e);
            w = make_uint2(uint32_t(h[0]) | uint32_t(h[1]) << 16, uint32_t(h[2]) | uint32_t(h[3]) << 16);
          }
        }
        v[i][g] = w;
      }
    }
  }
  __device__ __forceinline__ void store(float* dst, int dp, int width) const {
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int j = warp + kMlaWarps * i;
      if (j >= kRows) break;
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const int f = lane + kWarpSize * g;
        if (4 * f >= width) break;
        const uint2 w = v[i][g];
        *reinterpret_cast<float4*>(dst + j * dp + 4 * f) =
            make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u), __uint_as_float(w.y << 16),
                        __uint_as_float(w.y & 0xffff0000u));
      }
    }
  }
};

__device__ __forceinline__ float4 lds4(const float* p) { return *reinterpret_cast<const float4*>(p); }

__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

// Stages Q rows [q_lat | q_pe | 0 ...] of heads h0 .. h0 + kHeads (zeros past n_heads) into
// sQ [kHeads][dp] with cp.async; only the 4 x d4 columns the score loop reads are written.
// kVec: the caller knows p.vec_q. kLean (with kVec): thread f stages float4 column f of every head
// (one pass at d4 = 144 <= kMlaThreads), no division per item.
template <int kHeads, bool kVec = false, bool kLean = false>
__device__ __forceinline__ void load_q(const MlaAttentionParams& p, float* sQ, int64_t t, int64_t h0) {
  const int R = p.kv_lora_rank;
  if constexpr (kLean) {
    static_assert(kVec, "the lean staging is the vector path's");
    const int r4 = R / 4;
    for (int f = threadIdx.x; f < p.d4; f += kMlaThreads) {
      const bool lat = f < r4;
      const float* base = lat ? p.q_lat + t * p.q_lat_row_stride + 4 * f : p.q_pe + t * p.q_pe_row_stride + 4 * (f - r4);
      const int64_t hs = lat ? p.q_lat_head_stride : p.q_pe_head_stride;
#pragma unroll
      for (int hh = 0; hh < kHeads; ++hh) {
        const int64_t h = h0 + hh;
        const bool valid = h < p.n_heads;
        cp_async16(sQ + hh * p.dp + 4 * f, valid ? base + h * hs : p.q_lat, valid);
      }
    }
    return;
  }
  if (kVec || p.vec_q) {  // R, P multiples of 4: a float4 is all q_lat or all q_pe
    const int r4 = R / 4, n = kHeads * p.d4;
    for (int i = threadIdx.x; i < n; i += kMlaThreads) {
      const int hh = i / p.d4, f = i % p.d4;
      const int64_t h = h0 + hh;
      const bool valid = h < p.n_heads;
      const float* src = p.q_lat;
      if (valid)
        src = f < r4 ? p.q_lat + t * p.q_lat_row_stride + h * p.q_lat_head_stride + 4 * f
                     : p.q_pe + t * p.q_pe_row_stride + h * p.q_pe_head_stride + 4 * (f - r4);
      cp_async16(sQ + hh * p.dp + 4 * f, src, valid);
    }
  } else {
    const int w = 4 * p.d4, n = kHeads * w;
    for (int i = threadIdx.x; i < n; i += kMlaThreads) {
      const int hh = i / w, c = i % w;
      const int64_t h = h0 + hh;
      const bool valid = h < p.n_heads && c < p.d;
      const float* src = p.q_lat;
      if (valid)
        src = c < R ? p.q_lat + t * p.q_lat_row_stride + h * p.q_lat_head_stride + c
                    : p.q_pe + t * p.q_pe_row_stride + h * p.q_pe_head_stride + (c - R);
      cp_async4(sQ + hh * p.dp + c, src, valid);
    }
  }
}

// The combine of one (token t, head group at h0) by combiner k of n_comb: o = Σ_s 2^(m_s - M) o_s /
// Σ_s 2^(m_s - M) l_s over the n_act splits, for the k-th slice of the group's outputs. Every
// split's partial is complete (the caller waited); they are read through L2 (ld.cg), since L1 is
// not coherent with the other SMs' writes. sW: [n_act][kHeads] weights then [kHeads] 1 / L.
template <int kHeads, bool kVec = false, bool kLean = false>  // kVec: the caller knows p.vec_out
__device__ void combine(const MlaAttentionParams& p, float* sW, int64_t item, int64_t t, int64_t h0, int n_act,
                        int k, int n_comb) {
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize, R = p.kv_lora_rank;
  const int64_t H = p.n_heads;
  const int hv = int(H - h0 < kHeads ? H - h0 : kHeads);  // valid heads of the group
  const float* ml = p.ws_ml + item * p.n_splits * kHeads * 2;
  const float* o = p.ws_o + item * p.n_splits * kHeads * R;
  float* sInv = sW + n_act * kHeads;
  // Weights: a warp per head, lanes over the splits; a lane's (max, sum) pairs are loaded once,
  // together (one round trip), and kept in registers for both passes.
  constexpr int kPerLane = kMlaMaxSplits / kWarpSize;
  for (int hh = warp; hh < hv; hh += kMlaWarps) {
    float2 e[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int s = lane + kWarpSize * i;
      if (s < n_act) e[i] = __ldcg(reinterpret_cast<const float2*>(ml + 2 * (s * kHeads + hh)));
    }
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + kWarpSize * i < n_act) mx = fmaxf(mx, e[i].x);
    mx = warp_max(mx);
    float l = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int s = lane + kWarpSize * i;
      if (s < n_act) {
        const float w = exp2f(e[i].x - mx);
        sW[s * kHeads + hh] = w;
        l = fmaf(w, e[i].y, l);
      }
    }
    l = warp_sum(l);
    if (lane == 0) sInv[hh] = 1.0f / l;  // as the CPU: one reciprocal, then products
  }
  __syncthreads();
  const int64_t split_stride = int64_t(kHeads) * R;  // floats between two splits' partials
  if (kVec || p.vec_out) {
    // The slice's float4 outputs [q0, q1); tpq consecutive lanes share one output, each summing
    // every tpq-th split, then a shuffle sum (more loads in flight when the slice is small).
    const int r4 = R / 4, n = hv * r4;
    // kLean: n x n_comb <= 16 heads x 128 x 32 combiners fits an int.
    const int q0 = kLean ? n * k / n_comb : int(int64_t(n) * k / n_comb);
    const int q1 = kLean ? n * (k + 1) / n_comb : int(int64_t(n) * (k + 1) / n_comb);
    int tpq = 1;
    while (tpq < kWarpSize && (q1 - q0) * tpq * 2 <= kMlaThreads && tpq * 2 <= n_act) tpq *= 2;
    const int sub = tid % tpq, per_pass = kMlaThreads / tpq;
    for (int base = q0; base < q1; base += per_pass) {  // uniform trip count: all lanes shuffle
      const int qi = base + tid / tpq;
      const bool valid = qi < q1;
      const int hh = valid ? qi / r4 : 0, c = valid ? 4 * (qi % r4) : 0;
      const float* src = o + hh * R + c;
      float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (valid) {
        // kMlaCombineBatch splits' loads issued before their sums (one round trip a batch: written
        // as one `#pragma unroll` loop, ptxas issued each ld.cg after the previous one's FMAs),
        // summed in the same order, s = sub, sub + tpq, ...
        for (int s0 = sub; s0 < n_act; s0 += kMlaCombineBatch * tpq) {
          float4 v[kMlaCombineBatch];
#pragma unroll
          for (int b = 0; b < kMlaCombineBatch; ++b) {
            const int s = s0 + b * tpq;
            if (s < n_act) v[b] = __ldcg(reinterpret_cast<const float4*>(src + s * split_stride));
          }
#pragma unroll
          for (int b = 0; b < kMlaCombineBatch; ++b) {
            const int s = s0 + b * tpq;
            if (s < n_act) {
              const float w = sW[s * kHeads + hh];
              a.x = fmaf(w, v[b].x, a.x), a.y = fmaf(w, v[b].y, a.y), a.z = fmaf(w, v[b].z, a.z), a.w = fmaf(w, v[b].w, a.w);
            }
          }
        }
      }
      for (int off = 1; off < tpq; off *= 2) {
        a.x += __shfl_xor_sync(kFullMask, a.x, off);
        a.y += __shfl_xor_sync(kFullMask, a.y, off);
        a.z += __shfl_xor_sync(kFullMask, a.z, off);
        a.w += __shfl_xor_sync(kFullMask, a.w, off);
      }
      if (valid && sub == 0) {
        const float inv = sInv[hh];
        a.x *= inv, a.y *= inv, a.z *= inv, a.w *= inv;
        *reinterpret_cast<float4*>(p.o_lat + (t * H + h0 + hh) * R + c) = a;
      }
    }
  } else {
    const int n = hv * R;
    const int e0 = int(int64_t(n) * k / n_comb), e1 = int(int64_t(n) * (k + 1) / n_comb);
    for (int e = e0 + tid; e < e1; e += kMlaThreads) {
      const int hh = e / R, c = e % R;
      const float* src = o + hh * R + c;
      float a = 0.0f;
#pragma unroll 4
      for (int s = 0; s < n_act; ++s) a = fmaf(sW[s * kHeads + hh], __ldcg(src + s * split_stride), a);
      p.o_lat[(t * H + h0 + hh) * R + c] = a * sInv[hh];
    }
  }
}

// The end of split s of item (token t, head group at h0) of n_act active splits, whose partial
// outputs are already stored in ws_o: its (max, sum) per head (sM, sL, in shared memory) go to
// ws_ml, then the counter protocol below picks the combiners, which combine the group's splits
// (sWork: shared memory for the combine's weights, free by now). Called by every thread.
template <int kHeads, bool kVec = false, bool kLean = false, bool kRelease = false>  // kRelease: grid_arrive's
__device__ void finish_split(const MlaAttentionParams& p, const float* sM, const float* sL, int* sTicket, float* sWork,
                             int64_t item, int64_t t, int64_t h0, int s, int n_act) {
  const int tid = threadIdx.x, n_splits = p.n_splits;
  const int64_t H = p.n_heads;
  if (tid < kHeads && h0 + tid < H) {
    float* ml = p.ws_ml + ((item * n_splits + s) * kHeads + tid) * 2;
    ml[0] = sM[tid];
    ml[1] = sL[tid];
  }

  // Fused combine. Counter protocol per item, starting at 0: each of the n_act splits adds 1 on
  // arrival (after a fence that publishes its partial); the last n_comb arrivals (tickets
  // >= n_act - n_comb) are the combiners: each waits for the count to reach n_act, adds 1 again
  // and combines its slice; the one whose second add completes n_act + n_comb resets the counter
  // to 0 (every combiner has stopped polling by then).
  const int n_comb = p.n_combiners < n_act ? p.n_combiners : n_act;
  unsigned* cnt = p.counters + item;
  const unsigned ticket = grid_arrive<kRelease>(cnt);
  if (tid == 0) *sTicket = ticket >= unsigned(n_act - n_comb) ? int(ticket - unsigned(n_act - n_comb)) : -1;
  __syncthreads();
  const int k = *sTicket;
  if (k < 0) return;
  if (tid == 0) {
    for (int it = 0; it < kMlaSpinLimit && ld_acquire(cnt) < unsigned(n_act); ++it) __nanosleep(64);
    if constexpr (!kRelease) __threadfence();  // (kRelease: the acquire load above suffices)
    if (atomicAdd(cnt, 1u) == unsigned(n_act + n_comb - 1)) atomicExch(cnt, 0u);
  }
  __syncthreads();
  combine<kHeads, kVec, kLean>(p, sWork, item, t, h0, n_act, k, n_comb);
}

}  // namespace pg::ops::cuda::mla
