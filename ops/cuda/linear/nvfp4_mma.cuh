// NVFP4 weights on the f16 tensor cores at small M (decode): W rows are the mma's A (dequantized
// to f16 in registers, exactly), up to 8 tokens of x (rounded to f16) its B, f32 accumulation.
// The streaming core is shared with the MoE expert kernels (moe_experts/nvfp4_kernel.cu); the
// linear kernel below is instantiated in linear/instantiations/linear_nvfp4_mma.cu. The CPU
// definition is ops::cpu::linear with x rounded to f16 (LinearArgs::f16_activations).
//
// Why: the f32-x kernel (kernel.cuh, nvfp4_chunk_dot) converts every weight f16 -> f32 (16 per
// clock per SM on Hopper) and is ALU-bound at ~27% of HBM; here a weight costs ~1 integer op
// (e2m1x8_to_f16x2), half an f16x2 multiply (its block scale) and 1/256 of an mma per lane.
//
// Layout. A dot product is a sum over k, so any k permutation applied to A and B alike is free:
// lane (g = lane/4, t = lane%4) loads 16 bytes (32 codes) of row g and of row g + 8 at chunk
// 4s + t of k-step s (128 elements), and the same 32 elements of x for token g. Word q (codes
// 8q..8q+7) of the chunk feeds mmas 2q and 2q + 1: e2m1x8_to_f16x2 pairs element i with i + 4,
// so mma 2q takes a0/a2 = (e0, e4)/(e1, e5) and mma 2q + 1 (e2, e6)/(e3, e7), with B built in
// the same pairs. Every lane of a column t maps its fragment slots to the same physical k, as
// the mma requires.
//
// Exactness. A code's f16 placement is code * 2^-14 (vec.cuh); times its e4m3 block scale (an
// exact f16) in one f16 multiply it stays exact: the codes are multiples of 2^-15 with <= 2
// significant bits, the scales multiples of 2^-9 with <= 4, so the product is a multiple of 2^-24
// (f16's smallest subnormal) with <= 6 significant bits, at most 6 * 448 * 2^-14 < 0.17. The f32
// epilogue multiplies by scale_2 (or the row's scale_2_rows) * 2^14. So the only numeric changes
// against the f32 reference are x rounded to f16 (relative 2^-11, |x| > 65504 saturated) and the
// tensor core's f32 accumulation order.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/common/cp_async.cuh"
#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/smem_limit.cuh"
#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/linear/config.h"
#include "ops/cuda/linear/nvfp4_lane.h"
#include "ops/cuda/linear/params.h"

namespace pg::ops::cuda {

// The 32 f32 of x at xc (token g's elements of this lane's chunk) as B fragments: b[q][0..1] for
// mma 2q, b[q][2..3] for mma 2q + 1 (pairs (i, i + 4) of word q, as the weights). Zeros when !ok.
__device__ __forceinline__ void nvfp4_mma_x(const float* xc, bool ok, uint32_t (&b)[4][4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if (ok) {
      const float4 lo = ld_act4(xc + 8 * q), hi = ld_act4(xc + 8 * q + 4);
      b[q][0] = f32x2_to_f16x2_sat(lo.x, hi.x);
      b[q][1] = f32x2_to_f16x2_sat(lo.y, hi.y);
      b[q][2] = f32x2_to_f16x2_sat(lo.z, hi.z);
      b[q][3] = f32x2_to_f16x2_sat(lo.w, hi.w);
    } else {
      b[q][0] = b[q][1] = b[q][2] = b[q][3] = 0u;
    }
  }
}

// One k-step of one 16-row tile: w[0] / w[1] the 32 codes of rows g / g + 8, sc[0] / sc[1] their
// two e4m3 block scales (low byte: codes 0..15 = words 0, 1); acc += A · B. kDirectUnpack: the
// unpack with fewer live registers (vec.cuh; same bits).
// nvfp4_mma_tile_s: the same with the block scales given, s[h][j] scale block j of rows g + 8h in
// both f16 halves (the ring's stage work makes them with one byte permute fewer: nvfp4_lane_work).
template <bool kDirectUnpack>
__device__ __forceinline__ void nvfp4_mma_tile_s(const uint4 (&w)[2], const uint32_t (&s)[2][2],
                                                 const uint32_t (&b)[4][4], float (&acc)[4]);
template <bool kDirectUnpack>
__device__ __forceinline__ void nvfp4_mma_tile(const uint4 (&w)[2], const uint32_t (&sc)[2], const uint32_t (&b)[4][4],
                                               float (&acc)[4]) {
  uint32_t s[2][2];  // [row half][scale block] the block scale in both f16 halves
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t v = e4m3x2_to_f16x2_bits(sc[h]);
    s[h][0] = __byte_perm(v, v, 0x1010);
    s[h][1] = __byte_perm(v, v, 0x3232);
  }
  nvfp4_mma_tile_s<kDirectUnpack>(w, s, b, acc);
}
template <bool kDirectUnpack>
__device__ __forceinline__ void nvfp4_mma_tile_s(const uint4 (&w)[2], const uint32_t (&s)[2][2],
                                                 const uint32_t (&b)[4][4], float (&acc)[4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t lo[4], hi[4];  // rows g, g + 8
    const uint32_t wlo = q == 0 ? w[0].x : q == 1 ? w[0].y : q == 2 ? w[0].z : w[0].w;
    const uint32_t whi = q == 0 ? w[1].x : q == 1 ? w[1].y : q == 2 ? w[1].z : w[1].w;
    if constexpr (kDirectUnpack) {
      e2m1x8_to_f16x2_direct(wlo, lo);
      e2m1x8_to_f16x2_direct(whi, hi);
    } else {
      e2m1x8_to_f16x2(wlo, lo);
      e2m1x8_to_f16x2(whi, hi);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lo[i] = hmul2_bits(lo[i], s[0][q / 2]);
      hi[i] = hmul2_bits(hi[i], s[1][q / 2]);
    }
    mma_m16n8k16_f16(acc, lo[0], hi[0], lo[1], hi[1], b[q][0], b[q][1]);
    mma_m16n8k16_f16(acc, lo[2], hi[2], lo[3], hi[3], b[q][2], b[q][3]);
  }
}

// The weight registers of kUnroll k-steps of nvfp4_mma_stream.
template <int kTiles, int kUnroll>
struct Nvfp4MmaStage {
  uint4 w[kUnroll][kTiles][2];
  uint32_t sc[kUnroll][kTiles][2];
};

// A whole stage's loads through the lane's pointers (nvfp4_lane.h; each chunk's own 2 scale bytes, 2 c
// bytes into its row's scales), and the warp's last stage when it is not whole (zeros for steps at or
// past s1 and for chunks past k_chunks).
template <int kTiles, int kUnroll>
__device__ __forceinline__ void nvfp4_lane_load(const Nvfp4LaneSrc<kTiles>& src, Nvfp4MmaStage<kTiles, kUnroll>& st) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        st.w[u][i][h] = ld_stream(src.codes(i, h) + u * kNvfp4LaneStepBytes);
        const auto* sc2 = reinterpret_cast<const unsigned short*>(src.scales(i, h) + u * kNvfp4LaneStepScaleBytes);
        st.sc[u][i][h] = uint32_t(__ldg(sc2));
      }
}
// src at the stage's k-step s.
template <int kTiles, int kUnroll>
__device__ __forceinline__ void nvfp4_lane_load_tail(const Nvfp4LaneSrc<kTiles>& src, Nvfp4MmaStage<kTiles, kUnroll>& st,
                                                     int s, int s1, int k_chunks, int t) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const Nvfp4TailCopy c = nvfp4_lane_tail_copy(s, u, s1, k_chunks, t, /*pair_word=*/false);
    const bool ok = c.copy && c.ok;
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        st.w[u][i][h] = ok ? ld_stream(src.codes(i, h) + c.codes) : make_uint4(0, 0, 0, 0);
        st.sc[u][i][h] = ok ? uint32_t(__ldg(reinterpret_cast<const unsigned short*>(src.scales(i, h) + c.scales))) : 0u;
      }
  }
}
// A warp's k-steps [s0, s1) over kTiles tiles of 16 rows: wrow[i][h] / srow[i][h] the codes and
// e4m3 scales of row g + 8h of tile i (k_chunks 16-byte chunks per row; chunks past it read as
// zero), xrow this lane's token row (null: a zero column). acc[i] is tile i's d fragment (f32,
// the block-scaled sum times 2^-14: the caller applies scale_2 * 2^14). All kUnroll x kTiles x 2
// loads of a step are issued before its first mma. kWaitAfterFirstLoads: pdl_wait() after the
// first step's weight loads, before x is read (a warp without steps does not wait: its caller must).
template <int kTiles, int kUnroll, bool kWaitAfterFirstLoads>
__device__ __forceinline__ void nvfp4_mma_stream(const uint8_t* const (&wrow)[kTiles][2],
                                                 const uint8_t* const (&srow)[kTiles][2], const float* xrow,
                                                 int64_t k_chunks, int64_t s0, int64_t s1, float (&acc)[kTiles][4]) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  // Whole stages (every step below s1 and inside K: all but at most the last) load through the
  // lane's pointers and read x at a moving offset; the last one, when not whole, with zeros past s1
  // and K (nvfp4_lane_load_tail, nvfp4_mma_x's zeros). Chunk 4 s + t of each row and its own scale
  // bytes, the same mmas in the same order as the chunk-indexed loads before (the same bits).
  const int is0 = int(s0), is1 = int(s1), ikc = int(k_chunks);  // 32-bit indices: K / 32 < 2^31
  const int n = is1 > is0 ? (is1 - is0 + kUnroll - 1) / kUnroll : 0;
  const int nw = nvfp4_lane_whole_stages(is0, is1, ikc, kUnroll, false);
  Nvfp4LaneSrc<kTiles> src;
  src.at(wrow, srow, s0, t, /*pair_word=*/false);
  const bool has_x = xrow != nullptr;  // lanes past the tile's tokens multiply zeros
  int xo = (is0 * 4 + t) * 32;          // x's offset (floats) of this lane's chunk of the stage's first step
  for (int j = 0; j < n; ++j, xo += kUnroll * 128) {
    Nvfp4MmaStage<kTiles, kUnroll> st;
    const bool whole = j < nw;
    if (whole) {
      nvfp4_lane_load(src, st);
      src.step(kUnroll);
    } else {
      nvfp4_lane_load_tail(src, st, is0 + j * kUnroll, is1, ikc, t);
    }
    if constexpr (kWaitAfterFirstLoads) {
      if (j == 0) pdl_wait();
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int s = is0 + j * kUnroll + u;
      const bool ok = whole || (s < is1 && s * 4 + t < ikc);
      uint32_t b[4][4];
      nvfp4_mma_x(has_x ? xrow + xo + u * 128 : nullptr, ok && has_x, b);
#pragma unroll
      for (int i = 0; i < kTiles; ++i) nvfp4_mma_tile<true>(st.w[u][i], st.sc[u][i], b, acc[i]);
    }
  }
}

// m = 1 (decode): token 0's x staged once per block, for the whole K, as f16 B fragments in
// shared memory. Lanes g > 0 of the per-lane path above load nothing but still issue its ~24
// instructions per k-step (8 x 16-byte loads, 16 conversions, the zero selects), and its x loads
// (L2 hits, ~600 cycles) sit between a step's weight loads and its mmas; here every lane reads a
// step's B fragments with 4 16-byte shared loads. The f16 values and their slots are those of
// nvfp4_mma_x (same pairs, same rounding). Columns g > 0 get token 0's values instead of zeros:
// their sums are never written (m = 1), and an mma's output columns do not interact.
//
// Buffer: k-step s at xs[16 s .. 16 s + 15], [word q][chunk t] (lane (g, t) reads q = 0..3 at
// 64 q + 16 t: the 4 chunks of a read are 64 contiguous bytes, no bank conflict; every g reads the
// same). config.h's kNvfp4X1MaxK bounds K (36 KB of f16): larger K takes the per-lane path.
constexpr int kNvfp4MmaXStepVecs = int(kNvfp4X1StepBytes / sizeof(uint4));
static_assert(kNvfp4MmaXStepVecs == 16, "a k-step of 128 elements is 16 uint4 of f16 pairs");

// o = the f16 B-fragment words of x elements (8q + j, 8q + j + 4), j = 0..3 (lo: 8q .. 8q + 3, hi: 8q + 4 ..).
__device__ __forceinline__ void nvfp4_mma_x_vec(float4 lo, float4 hi, uint4& o) {
  o.x = f32x2_to_f16x2_sat(lo.x, hi.x);
  o.y = f32x2_to_f16x2_sat(lo.y, hi.y);
  o.z = f32x2_to_f16x2_sat(lo.z, hi.z);
  o.w = f32x2_to_f16x2_sat(lo.w, hi.w);
}

// The x elements of item (row r, vector j of the row) of nvfp4_mma_stage_x_rows (below), normed where
// norm_w is given; zeros where !valid or past k_chunks.
__device__ __forceinline__ void nvfp4_mma_x_item(const float* x, int64_t x_stride, int64_t k_chunks, int r, int j,
                                                 bool valid, const float* norm_w, float inv, float4& lo, float4& hi) {
  const int v = j % kNvfp4MmaXStepVecs, q = v / 4, t = v % 4;
  const int64_t c = int64_t(j / kNvfp4MmaXStepVecs) * 4 + t;
  lo = hi = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (valid && c < k_chunks) {
    const float* xc = x + r * x_stride + c * 32 + 8 * q;
    lo = ld_act4(xc), hi = ld_act4(xc + 4);
    if (norm_w) {
      const float4 wl = ld_f4(norm_w + c * 32 + 8 * q), wh = ld_f4(norm_w + c * 32 + 8 * q + 4);
      lo = make_float4(wl.x * (lo.x * inv), wl.y * (lo.y * inv), wl.z * (lo.z * inv), wl.w * (lo.w * inv));
      hi = make_float4(wh.x * (hi.x * inv), wh.y * (hi.y * inv), wh.z * (hi.z * inv), wh.w * (hi.w * inv));
    }
  }
}

// Converts `rows` rows of x (row r at x + r * x_stride, k_chunks chunks of 32 each) into xs, row r
// at xs + r * k_steps * kNvfp4MmaXStepVecs, every thread of the block a share: uint4 v of step s
// holds chunk t = v % 4's word q = v / 4 pairs (8q + j, 8q + j + 4), j = 0..3; zeros past
// k_chunks. norm_w (linear_norm's in_norm, one row): x' = norm_w[k] * (x[k] * inv) is staged
// instead, ops::cpu::rmsnorm's expression. Reads x: after pdl_wait.
//
// A thread issues the loads of kBatch of its items before it converts any, so its share costs one
// L2 round trip per kBatch items (one item a round trip took V3's o_proj, K = 16384 over 256
// threads, 8 serial round trips before its first mma; the MoE down's 9 h rows 9). In two halves, so
// that a caller can issue the first batch's loads early, beside its own (load()), and convert and
// store them later (finish(): the loaded batch, then the remaining batches). Item i = (row r, vector
// j of the row); (r, j) advance by the block's stride with no division (a 64-bit division per item
// took ~60 instructions, ncu 2026-12-01). 32-bit item indices: rows x K / 8 < 2^31.
template <int kBatch>
struct Nvfp4XStager {
  const float* x;
  const float* norm_w;
  float inv;
  int64_t x_stride, k_chunks;
  int per_row, total, stride, dr, dj, r, j, i0;
  float4 lo[kBatch], hi[kBatch];

  __device__ __forceinline__ Nvfp4XStager(const float* x_, int64_t x_stride_, int rows, int64_t k_chunks_,
                                          int64_t k_steps, const float* norm_w_ = nullptr, float inv_ = 1.0f)
      : x(x_), norm_w(norm_w_), inv(inv_), x_stride(x_stride_), k_chunks(k_chunks_) {
    per_row = int(k_steps) * kNvfp4MmaXStepVecs, total = rows * per_row, stride = int(blockDim.x);
    // A block no wider than a row (x at one token: rows of >= 16 items a k-step): no division.
    const bool narrow = stride <= per_row;
    dr = narrow ? 0 : stride / per_row, dj = narrow ? stride : stride % per_row;
    r = narrow ? 0 : int(threadIdx.x) / per_row, j = narrow ? int(threadIdx.x) : int(threadIdx.x) % per_row;
    i0 = int(threadIdx.x);
  }
  // The loads of the batch at i0 (zeros past k_chunks or past the rows).
  __device__ __forceinline__ void load() {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      nvfp4_mma_x_item(x, x_stride, k_chunks, r, j, i0 + b * stride < total, norm_w, inv, lo[b], hi[b]);
      r += dr, j += dj;
      if (j >= per_row) j -= per_row, ++r;
    }
  }
  // The loaded batch's conversions and stores; whether a batch remains (i0 moves on to it).
  __device__ __forceinline__ bool store(uint4* xs) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * stride;
      if (i < total) {
        uint4 o;
        nvfp4_mma_x_vec(lo[b], hi[b], o);
        xs[i] = o;
      }
    }
    i0 += kBatch * stride;
    return i0 < total;
  }
  // The loaded batch's conversions and stores, then the remaining batches' (one copy of each in
  // the code: the batched walk written out twice was +300 SASS instructions a linear kernel).
  __device__ __forceinline__ void finish(uint4* xs) {
    while (store(xs)) load();
  }
};

// kWalk = false: the caller's shapes never give a thread more than one item (kNvfp4OneItemMaxK), and
// its kernel carries no walk in its code.
template <bool kWalk = true>
__device__ __forceinline__ void nvfp4_mma_stage_x_rows(const float* x, int64_t x_stride, int rows, int64_t k_chunks,
                                                       int64_t k_steps, uint4* xs, const float* norm_w = nullptr,
                                                       float inv = 1.0f) {
  const int per_row = int(k_steps) * kNvfp4MmaXStepVecs, total = rows * per_row, i = int(threadIdx.x);
  if (!kWalk || total <= int(blockDim.x)) {
    // At most one item a thread (x at one token up to K = 2048 over 256 threads: moonlight's every
    // linear): no batch to overlap. The batched walk there cost moonlight nvfp4 1.2% against this
    // path (H200, 2026-12-03, alternating in one call: 615.3 vs 622.8 tok/s; V3 4L 863.4 vs 862.0).
    if (i < total) {
      const int r = rows == 1 ? 0 : i / per_row;
      float4 lo, hi;
      uint4 o;
      nvfp4_mma_x_item(x, x_stride, k_chunks, r, i - r * per_row, true, norm_w, inv, lo, hi);
      nvfp4_mma_x_vec(lo, hi, o);
      xs[i] = o;
    }
    return;
  }
  Nvfp4XStager<4> st(x, x_stride, rows, k_chunks, k_steps, norm_w, inv);
  do st.load();
  while (st.store(xs));
}
// One token's x: at K <= kNvfp4OneItemMaxK a thread of a kLinearThreads block stages at most one item.
constexpr int64_t kNvfp4OneItemMaxK = int64_t(kLinearThreads) / kNvfp4MmaXStepVecs * 128;
template <bool kWalk = true>
__device__ __forceinline__ void nvfp4_mma_stage_x_block(const float* x, int64_t k_chunks, int64_t k_steps, uint4* xs) {
  nvfp4_mma_stage_x_rows<kWalk>(x, 0, 1, k_chunks, k_steps, xs);
}

// The staged-x m = 1 path with the weights in registers instead (linear_nvfp4_mma_kernel's kX1:
// the shapes where the ring measured slower, config.h's linear_nvfp4_x1_persistent; the NVFP4 MoE
// down at m = 1). Every thread of the block must call it: pdl_wait() comes after this warp's first
// weight loads, then stage_x() (every thread a share of the block's staged x), then a barrier; xs
// is this warp's staged row. Steps past s1 add zero products (zero weights and zero B).
//
// Whole stages (every step below s1 and inside K: all but at most the warp's last) load through
// the lane's pointers (nvfp4_lane.h, one offset a stage: no chunk index, predicate or zero fill) and
// their mmas read x at fixed offsets from the lane's pointer; the last stage, when it is not whole,
// takes nvfp4_lane_load_tail (zeros at or past s1 and past K). The same loads into the same
// registers as the chunk-indexed loads before, the same mmas on the same operands in the same order:
// the same bits. A pass of the double-buffered loop (1 x 2, m = 1),
// in SASS instructions a KB of codes (scripts/sass_loops.py): 167.8 -> 143.5 (2 x 2: 152 -> 136).
//
// nvfp4_lane_work_regs: the mmas of a stage's kUnroll steps, x at xl = xs + s * kNvfp4MmaXStepVecs + t; steps >= `steps`
// take zero B (their weights were loaded as zeros).
template <int kTiles, int kUnroll>
__device__ __forceinline__ void nvfp4_lane_work_regs(const Nvfp4MmaStage<kTiles, kUnroll>& st, const uint4* xl,
                                                     int steps, float (&acc)[kTiles][4]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    uint32_t b[4][4];
    if (u == 0 || u < steps) {  // warp-uniform
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint4 v = xl[u * kNvfp4MmaXStepVecs + 4 * q];
        b[q][0] = v.x, b[q][1] = v.y, b[q][2] = v.z, b[q][3] = v.w;
      }
    } else {
#pragma unroll
      for (int q = 0; q < 4; ++q) b[q][0] = b[q][1] = b[q][2] = b[q][3] = 0u;
    }
#pragma unroll
    for (int i = 0; i < kTiles; ++i) nvfp4_mma_tile<false>(st.w[u][i], st.sc[u][i], b, acc[i]);
  }
}
template <int kTiles, int kUnroll, class StageX>
__device__ __forceinline__ void nvfp4_mma_stream_staged_regs(const uint8_t* const (&wrow)[kTiles][2],
                                                             const uint8_t* const (&srow)[kTiles][2],
                                                             StageX&& stage_x, const uint4* xs, int64_t k_chunks,
                                                             int64_t s0, int64_t s1, float (&acc)[kTiles][4]) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  const int is0 = int(s0), is1 = int(s1), ikc = int(k_chunks);  // 32-bit step indices: K / 128 < 2^31
  const int n = is1 > is0 ? (is1 - is0 + kUnroll - 1) / kUnroll : 0;  // stages of this warp
  const int nw = nvfp4_lane_whole_stages(is0, is1, ikc, kUnroll, false);
  const int t = int(threadIdx.x % 4);
  Nvfp4LaneSrc<kTiles> src;
  src.at(wrow, srow, s0, t, /*pair_word=*/false);
  auto load = [&](int j, Nvfp4MmaStage<kTiles, kUnroll>& st) {  // stage j (< n)
    if (j < nw) {
      nvfp4_lane_load(src, st);
      src.step(kUnroll);
    } else {
      nvfp4_lane_load_tail(src, st, is0 + j * kUnroll, is1, ikc, t);
    }
  };
  const uint4* xl = xs + is0 * kNvfp4MmaXStepVecs + t;
  auto work = [&](int j, const Nvfp4MmaStage<kTiles, kUnroll>& st) {
    nvfp4_lane_work_regs(st, xl + j * (kUnroll * kNvfp4MmaXStepVecs), is1 - is0 - j * kUnroll, acc);
  };
  Nvfp4MmaStage<kTiles, kUnroll> a, b;
  if (n > 0) load(0, a);
  pdl_wait();
  stage_x();
  __syncthreads();
  if constexpr (kTiles * kUnroll <= 2) {
    // Two named buffers, no register copies: b loads while a's mmas run, then the other way round.
    for (int j = 0; j < n; j += 2) {
      if (j + 1 < n) load(j + 1, b);
      work(j, a);
      if (j + 1 >= n) break;
      if (j + 2 < n) load(j + 2, a);
      work(j + 1, b);
    }
  } else {  // 4 KB per warp in one buffer: two spill at the 128-register cap (ptxas, 2026-12-01)
    for (int j = 0; j < n; ++j) {
      if (j != 0) load(j, a);
      work(j, a);
    }
  }
}

// The weights of the m = 1 path stream through a per-warp ring of shared-memory stages filled by
// cp.async: a stage is kUnroll k-steps of the warp's tiles, kStages - 1 stages are in flight while
// one is multiplied, so the bytes in flight per warp are set by shared memory, not by registers
// (nvfp4_mma_stream_staged_regs keeps ~2 KB per warp in flight at ~120 registers). A
// lane copies exactly the bytes it later reads (its 16 bytes of rows g and g + 8 per tile and
// step, and the 4 bytes holding its chunk's two e4m3 scales), so its own cp.async.wait_group is
// the only synchronisation: no barrier, no mbarrier.
template <int kTiles, int kUnroll>
struct Nvfp4RingStage {
  uint4 w[kUnroll][kTiles][2][kWarpSize];      // lane's 16 bytes (32 codes) of row g + 8h
  uint32_t sc[kUnroll][kTiles][2][kWarpSize];  // scale bytes 4 (t / 2) .. +3 of the step's 8 for row g + 8h
};

// Stages per ring (kNvfp4RingStages in config.h): 40 KB of ring per 8-warp block at one tile
// (three blocks per SM fit with x staged at K <= 7168).
template <int kTiles, int kUnroll>
__host__ __device__ constexpr int nvfp4_ring_stages() {
  return kNvfp4RingStages(kTiles, kUnroll);
}

static_assert(sizeof(Nvfp4RingStage<1, 1>) == kNvfp4RingStageBytes && sizeof(Nvfp4RingStage<2, 2>) == 4 * kNvfp4RingStageBytes,
              "config.h's shared-memory arithmetic (nvfp4_x1_smem_bytes) is this layout's");

// ---- The ring's stages in the loop: each lane's own sources and slots ----
// The stage loops below (nvfp4_mma_stream_ring, linear_nvfp4_x1_kernel) and the MoE downs' keep, per lane, one pointer and the rows'
// distances for its copy sources (nvfp4_lane.h's Nvfp4LaneSrc: one offset moves a stage at a time) and its words of the
// ring's slot 0 (Nvfp4LaneRing), so a whole stage costs its copies, the offset's step and the slot's offset, and its
// mmas read the slot and x at fixed offsets: no chunk index, clamp or 64-bit address is rebuilt per stage, and only a
// warp's last stage, when it is not whole, takes the clamped path (nvfp4_lane_issue_tail). The slots, the bytes copied
// into them, the mmas and their order are those of the chunk-indexed ring they replaced (Nvfp4Ring / nvfp4_ring_issue,
// removed): the same bits (tests/unit/ops/nvfp4_lane_test.cpp runs the arithmetic on the host against each copy's chunk
// 4 s + t, clamped and zero past K). A pass of the stage loop, in SASS instructions a KB of codes
// (scripts/sass_loops.py, the steady-state path: every mma and copy, no setup or tail), before -> after: the persistent
// linear 1 x 2 225 -> 156.5 (the V3 / 7168 -> 18432 shapes' kernel), 2 x 2 185 -> 144, 1 x 1 288 -> 178; the MoE
// gate_up at one token 168 -> 151; its prefetching down 145.5 -> 133; the 2..8-token down's ring 180 -> 156.5. The
// unpack, the block-scale multiplies and the mmas are ~128 of them.

// A lane's words of slot 0 of its warp's ring; a slot is kBytes further on.
template <int kTiles, int kUnroll>
struct Nvfp4LaneRing {
  using Stage = Nvfp4RingStage<kTiles, kUnroll>;
  static constexpr int kBytes = int(sizeof(Stage));
  uint4* w;
  uint32_t* sc;
  __device__ __forceinline__ Nvfp4LaneRing(Stage* ring, int lane) : w(&ring->w[0][0][0][lane]), sc(&ring->sc[0][0][0][lane]) {}
  __device__ __forceinline__ uint4* w_at(int slot_off) const {
    return reinterpret_cast<uint4*>(reinterpret_cast<char*>(w) + slot_off);
  }
  __device__ __forceinline__ uint32_t* sc_at(int slot_off) const {
    return reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(sc) + slot_off);
  }
};

// Copies a whole stage (its kUnroll k-steps all below the warp's s1 and inside K) from src into this
// lane's words w / sc of a slot, commits the group and moves src on by a stage.
// kHint: the codes' copies under `policy` (L2 evict-first); false where the slot offsets are uniform to the
// compiler (the ring probe: cp_async.cuh's hazard of the hinted copy).
template <int kTiles, int kUnroll, bool kHint = true>
__device__ __forceinline__ void nvfp4_lane_issue(Nvfp4LaneSrc<kTiles>& src, uint4* w, uint32_t* sc, uint64_t policy) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t* cw = src.codes(i, h);
      const uint8_t* cs = src.scales(i, h);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        cp_async16_hint<kHint>(w + nvfp4_slot_word<kTiles>(u, i, h), cw + u * kNvfp4LaneStepBytes, true, policy);
        cp_async4(sc + nvfp4_slot_word<kTiles>(u, i, h), cs + u * kNvfp4LaneStepScaleBytes, true);
      }
    }
  cp_async_commit();
  src.step(kUnroll);
}

// The warp's last stage when it is not whole, src at its k-step s (nvfp4_lane_tail_copy: steps at
// or past s1 are not copied, chunks past k_chunks read as zero, from the row's last chunk's address).
template <int kTiles, int kUnroll, bool kHint = true>  // kHint: nvfp4_lane_issue's
__device__ __forceinline__ void nvfp4_lane_issue_tail(const Nvfp4LaneSrc<kTiles>& src, uint4* w, uint32_t* sc,
                                                      uint64_t policy, int s, int s1, int k_chunks, int t) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const Nvfp4TailCopy c = nvfp4_lane_tail_copy(s, u, s1, k_chunks, t);
    if (!c.copy) break;  // warp-uniform
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        cp_async16_hint<kHint>(w + nvfp4_slot_word<kTiles>(u, i, h), src.codes(i, h) + c.codes, c.ok, policy);
        cp_async4(sc + nvfp4_slot_word<kTiles>(u, i, h), src.scales(i, h) + c.scales, c.ok);
      }
  }
  cp_async_commit();
}

// The mmas of a slot's first `steps` k-steps (<= kUnroll; the rest were not copied): w / sc this lane's words of the
// slot, xl = xs + s * kNvfp4MmaXStepVecs + t (the lane's B fragments of the slot's first k-step s), sel =
// nvfp4_lane_scale_sel(lane). Each step's tiles in order, steps in order. The lane's two scale bytes of the copied word
// (bytes 2 (t % 2) and + 1) become the four bytes (b0, b0, b1, b1) in one byte permute, and each f16 pair converts
// straight from its half (F2FP reads the high half as an operand): 4 instructions a row and step where the shift, the
// conversion and the two broadcasts took 5. The same f16 scales (the conversions are exact).
__device__ __forceinline__ uint32_t nvfp4_lane_scale_sel(int lane) { return (lane & 1) ? 0x3322u : 0x1100u; }
template <int kTiles, int kUnroll>
__device__ __forceinline__ void nvfp4_lane_work(const uint4* w, const uint32_t* sc, const uint4* xl, int steps,
                                                uint32_t sel, float (&acc)[kTiles][4]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    if (u > 0 && u >= steps) break;  // warp-uniform
    uint32_t b[4][4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint4 v = xl[u * kNvfp4MmaXStepVecs + 4 * q];
      b[q][0] = v.x, b[q][1] = v.y, b[q][2] = v.z, b[q][3] = v.w;
    }
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      const uint4 wv[2] = {w[nvfp4_slot_word<kTiles>(u, i, 0)], w[nvfp4_slot_word<kTiles>(u, i, 1)]};
      uint32_t sv[2][2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t pair = __byte_perm(sc[nvfp4_slot_word<kTiles>(u, i, h)], 0u, sel);
        sv[h][0] = e4m3x2_to_f16x2_bits(pair);
        sv[h][1] = e4m3x2_hi_to_f16x2_bits(pair);
      }
      nvfp4_mma_tile_s<false>(wv, sv, b, acc[i]);
    }
  }
}

// The column form of nvfp4_lane_work (the persistent kernel's experiment, PEREGRINE_LINEAR_NVFP4_X1_COLUMNS=1;
// m = 1 only): a k-step's 8 scale blocks are the mma's 8 columns. Lane t's words q of its chunk are the
// k positions of block 2t + q / 2 in mmas 2q and 2q + 1, so column n of B holds x only at the positions of
// block n (lane (g, t) keeps its staged x where g == 2t + q / 2: words 0, 1 at g = 2t, words 2, 3 at
// g = 2t + 1; every other B register stays zero from the caller's start), and D's column n is row r's
// sum over block n unscaled. After a k-step's mmas each lane multiplies its two columns (blocks 2t,
// 2t + 1, its own chunk's) by their f32 block scales into acc[i][0] (row g) / acc[i][2] (row g + 8):
// 4 FFMAs a k-step and tile where the f16 block-scale multiplies took 32 HMUL2. The caller sums the
// four t lanes (acc[i][1], [3] stay 0). Its sums differ from the per-block kernel's (the 2..8-token
// rows): a verify step's rows would not equal the plain step's while it is on.
// sel2: the lane's two scale bytes into the low half, (t % 2) ? 0x32 : 0x10. kWhole: steps == kUnroll
// (no branch between the steps, so the FFMAs of one wait on its last mma while the next step's issue).
template <int kTiles, int kUnroll, bool kWhole>
__device__ __forceinline__ void nvfp4_lane_work_cols(const uint4* w, const uint32_t* sc, const uint4* xl, int steps,
                                                     uint32_t sel2, bool act0, bool act1, uint32_t (&b)[4][4],
                                                     float (&acc)[kTiles][4]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    if (!kWhole && u > 0 && u >= steps) break;  // warp-uniform
#pragma unroll
    for (int q = 0; q < 4; ++q)
      if (q < 2 ? act0 : act1) {
        const uint4 v = xl[u * kNvfp4MmaXStepVecs + 4 * q];
        b[q][0] = v.x, b[q][1] = v.y, b[q][2] = v.z, b[q][3] = v.w;
      }
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      const uint4 wv[2] = {w[nvfp4_slot_word<kTiles>(u, i, 0)], w[nvfp4_slot_word<kTiles>(u, i, 1)]};
      float2 s[2];
#pragma unroll
      for (int h = 0; h < 2; ++h)
        s[h] = f16x2_bits_to_f32(e4m3x2_to_f16x2_bits(__byte_perm(sc[nvfp4_slot_word<kTiles>(u, i, h)], 0u, sel2)));
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t lo[4], hi[4];  // rows g, g + 8
        const uint32_t wlo = q == 0 ? wv[0].x : q == 1 ? wv[0].y : q == 2 ? wv[0].z : wv[0].w;
        const uint32_t whi = q == 0 ? wv[1].x : q == 1 ? wv[1].y : q == 2 ? wv[1].z : wv[1].w;
        e2m1x8_to_f16x2(wlo, lo);
        e2m1x8_to_f16x2(whi, hi);
        mma_m16n8k16_f16(d, lo[0], hi[0], lo[1], hi[1], b[q][0], b[q][1]);
        mma_m16n8k16_f16(d, lo[2], hi[2], lo[3], hi[3], b[q][2], b[q][3]);
      }
      acc[i][0] = fmaf(s[0].y, d[1], fmaf(s[0].x, d[0], acc[i][0]));
      acc[i][2] = fmaf(s[1].y, d[3], fmaf(s[1].x, d[2], acc[i][2]));
    }
  }
}

// nvfp4_mma_stream with x staged per block and the weights through the warp's ring (above).
// Every thread of the block must call it: the first kStages - 1 stages' copies go out before
// pdl_wait() (weights depend on no kernel), then stage_x() (every thread a share of the block's
// staged rows), a barrier, and the mmas, whose B fragments this lane reads from xs, its column's
// staged row (m = 1: the block's one row; the MoE gate_up at 2..8 tokens: its pair's token). Steps
// past s1 are skipped rather than multiplied by zero: the same sums as nvfp4_mma_stream's (adding +0
// changes no f32 sum but a -0's sign). wait = false (block-uniform): x is known complete without
// waiting for the kernel before (the MoE gate_up's shared experts under PDL). kWholeSteps: the
// caller guarantees k_chunks % 4 == 0 (nvfp4_lane_whole_stages). ring: from nvfp4_x1_ring with the
// caller's pinned warp index (as this lane's: ptxas re-read threadIdx.x at every stage otherwise).
template <int kTiles, int kUnroll, bool kWholeSteps = false, class StageX>
__device__ __forceinline__ void nvfp4_mma_stream_ring(const uint8_t* const (&wrow)[kTiles][2],
                                                      const uint8_t* const (&srow)[kTiles][2], StageX&& stage_x,
                                                      const uint4* xs, Nvfp4RingStage<kTiles, kUnroll>* ring,
                                                      int64_t k_chunks, int64_t s0, int64_t s1,
                                                      float (&acc)[kTiles][4], bool wait = true) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  constexpr int kStages = nvfp4_ring_stages<kTiles, kUnroll>();
  // 32-bit step indices (a row's k-steps: K / 128 < 2^31).
  const int is0 = int(s0), is1 = int(s1), ikc = int(k_chunks);
  const int n = is1 > is0 ? (is1 - is0 + kUnroll - 1) / kUnroll : 0;  // stages of this warp
  const int nw = nvfp4_lane_whole_stages(is0, is1, ikc, kUnroll, kWholeSteps);
  const int lane = pinned_lane(), t = lane % 4;
  const uint64_t policy = l2_evict_first_policy();  // made once: uniform registers, not a lane's
  Nvfp4LaneSrc<kTiles> src;
  src.at(wrow, srow, s0, t);
  const Nvfp4LaneRing<kTiles, kUnroll> r(ring, lane);
  constexpr int kSlot = Nvfp4LaneRing<kTiles, kUnroll>::kBytes;
  auto issue = [&](int j, int slot_off) {  // stage j into a slot (an empty group past the last stage)
    if (j < nw) nvfp4_lane_issue<kTiles, kUnroll>(src, r.w_at(slot_off), r.sc_at(slot_off), policy);
    else if (j < n)
      nvfp4_lane_issue_tail<kTiles, kUnroll>(src, r.w_at(slot_off), r.sc_at(slot_off), policy, is0 + j * kUnroll, is1,
                                             ikc, t);
    else cp_async_commit();
  };
#pragma unroll
  for (int j = 0; j < kStages - 1; ++j) issue(j, j * kSlot);
  if (wait) pdl_wait();
  stage_x();
  __syncthreads();
  const uint4* xl = xs + is0 * kNvfp4MmaXStepVecs + t;
  Nvfp4SlotCursor<kStages, kSlot> cur;
  for (int j = 0; j < n; ++j) {
    issue(j + kStages - 1, cur.wr);
    cp_async_wait<kStages - 1>();  // stage j's group has landed
    nvfp4_lane_work<kTiles, kUnroll>(r.w_at(cur.rd), r.sc_at(cur.rd), xl, j < nw ? kUnroll : is1 - is0 - j * kUnroll,
                                     nvfp4_lane_scale_sel(int(threadIdx.x)), acc);
    xl += kUnroll * kNvfp4MmaXStepVecs;
    cur.next();
  }
}

// The staged-x path's dynamic shared memory of a block: `rows` staged rows of K at the front
// (nvfp4_x1_smem_bytes: one), then warp w's ring (w: the caller's warp index in the block).
template <int kTiles, int kUnroll>
__device__ __forceinline__ Nvfp4RingStage<kTiles, kUnroll>* nvfp4_x1_ring(uint4* smem, int64_t k, int rows, int w) {
  return reinterpret_cast<Nvfp4RingStage<kTiles, kUnroll>*>(smem + rows * ((k / 32 + 3) / 4 * kNvfp4MmaXStepVecs)) +
         w * nvfp4_ring_stages<kTiles, kUnroll>();
}

// The d fragments' output: row g + 8 (j / 2) of tile i, token 2t + j % 2 (m = 1: token 0 only,
// lanes t = 0), times scale_2 (or the row's) x 2^14, stored or added to y.
template <int kTiles>
__device__ __forceinline__ void linear_nvfp4_store(const LinearParams& p, int64_t row0, int64_t m0, int m_valid,
                                                   const float (&acc)[kTiles][4]) {
  const int lane = threadIdx.x % kWarpSize, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t row = row0 + kMmaRows * i + g + 8 * (j / 2);
      const int tok = 2 * t + j % 2;
      if (tok < m_valid && row < p.n) {
        const float s2 = p.scale_2_rows ? __ldg(p.scale_2_rows + row / p.scale_2_group_rows) : p.scale_2;
        const float v = acc[i][j] * (s2 * kE2m1F16Unscale);
        float* yp = p.y + (m0 + tok) * p.y_stride + row;
        *yp = p.accumulate ? *yp + v : v;
      }
    }
}

// The k_split > 1 sums: every warp leaves its fragments in `partial`, the slice-0 warp of each row
// group adds the others in slice order. Uniform over the block (a barrier); false for the warps
// whose sums were taken.
template <int kTiles>
__device__ __forceinline__ bool linear_mma_split_sum(float (&partial)[kLinearWarps][kTiles][4][kWarpSize],
                                                       int k_split, float (&acc)[kTiles][4]) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) partial[warp][i][j][lane] = acc[i][j];
  __syncthreads();
  if (warp % k_split != 0) return false;
  for (int sp = 1; sp < k_split; ++sp)  // fixed order
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] += partial[warp + sp][i][j][lane];
  return true;
}

// Where a block's lanes take x from (linear_nvfp4_mma_body's kX): per lane from L2 at every k-step;
// token 0's row staged in static shared memory (m = 1, nvfp4_x1_ok); or the 8-token tile's rows
// staged in dynamic shared memory (2..8 tokens, nvfp4_mma_staged_rows_bytes > 0), lane g reading
// token g's row (lanes past the tile's tokens read row 0: their columns are never written, and an
// mma's columns do not interact). The staged paths run the same mmas on the same f16 values.
// kNvfp4XOneShort: kNvfp4XOne at K <= kNvfp4OneItemMaxK, whose code has no staging walk (moonlight's
// one-token linears; x1 kernel 1,648 -> 1,472 SASS instructions). H200, 2026-12-03, alternating in
// one call (3 rounds): moonlight nvfp4 623.2 -> 624.7 tok/s (+0.2%) against the same file with the
// walk in every kernel, V3 4L nvfp4 855.8 both.
constexpr int kNvfp4XPerLane = 0, kNvfp4XOne = 1, kNvfp4XRows = 2, kNvfp4XOneShort = 3;

// Grid: x = row groups (kLinearWarps / k_split per block), y = 8-token tiles of x. Warp w of a
// block: row group blockIdx.x * (warps / k_split) + w / k_split (16 * kTiles rows), K slice
// w % k_split (whole k-steps of 128). Vector path only: k % 32 == 0, aligned W and x; m = 1 with
// nvfp4_x1_ok takes this kernel with kNvfp4XOne (x staged, nvfp4_mma_stream_staged_regs) or, for
// the shapes of linear_nvfp4_x1_persistent, linear_nvfp4_x1_kernel below. The body is shared with
// linear_norm's NVFP4 kernels: a staged kX's stage_x(xs, k_chunks, k_steps) fills the block's
// staged x (every thread, after pdl_wait; in_norm normalizes x there), end() runs on every thread
// after the block's stores (out_norm's epilogue).
template <int kTiles, int kUnroll, int kX, class StageX, class End>
__device__ __forceinline__ void linear_nvfp4_mma_body(const LinearParams& p, StageX&& stage_x, End&& end) {
  constexpr int kRowsW = kMmaRows * kTiles;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, g = lane / 4;
  const int k_split = p.k_split, kpart = warp % k_split;
  const int64_t row0 = (int64_t(blockIdx.x) * (kLinearWarps / k_split) + warp / k_split) * kRowsW;
  const int64_t m0 = int64_t(blockIdx.y) * kMmaTokens;
  const int m_valid = int(min(int64_t(kMmaTokens), p.m - m0));
  const int64_t k_chunks = p.k / 32, k_steps = (k_chunks + 3) / 4;
  const int64_t per_part = (k_steps + k_split - 1) / k_split;
  const int64_t s0 = min(k_steps, kpart * per_part), s1 = min(k_steps, s0 + per_part);

  const uint8_t* wrow[kTiles][2];
  const uint8_t* srow[kTiles][2];
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = min(row0 + kMmaRows * i + g + 8 * h, p.n - 1);  // past n: re-read, never written
      wrow[i][h] = static_cast<const uint8_t*>(p.w) + row * (p.k / 2);
      srow[i][h] = p.scale_fp8 + row * (p.k / kNvfp4Block);
    }
  const float* xrow = g < m_valid ? p.x + (m0 + g) * p.x_stride : nullptr;

  pg_tl_mark(TimelineKernel::kLinearNvfp4Mma, 0);
  pdl_trigger();  // weights depend on no kernel: the first loads go out before the wait (in the stream)
  float acc[kTiles][4];
  if constexpr (kX == kNvfp4XOne || kX == kNvfp4XOneShort) {
    __shared__ uint4 xs[kNvfp4X1MaxK / 128 * kNvfp4MmaXStepVecs];
    nvfp4_mma_stream_staged_regs<kTiles, kUnroll>(
        wrow, srow, [&] { stage_x(xs, k_chunks, k_steps); }, xs, k_chunks, s0, s1, acc);
  } else if constexpr (kX == kNvfp4XRows) {
    extern __shared__ uint4 linear_nvfp4_smem[];  // nvfp4_mma_staged_rows_bytes: the tile's rows
    const uint4* xs = linear_nvfp4_smem + (g < m_valid ? g : 0) * k_steps * kNvfp4MmaXStepVecs;
    nvfp4_mma_stream_staged_regs<kTiles, kUnroll>(
        wrow, srow, [&] { stage_x(linear_nvfp4_smem, k_chunks, k_steps); }, xs, k_chunks, s0, s1, acc);
  } else {
    nvfp4_mma_stream<kTiles, kUnroll, true>(wrow, srow, xrow, k_chunks, s0, s1, acc);
  }
  pdl_wait();  // warps without k-steps; y is written below

  bool mine = true;
  if (k_split > 1) {  // uniform over the block: every thread reaches the barrier
    __shared__ float partial[kLinearWarps][kTiles][4][kWarpSize];
    mine = linear_mma_split_sum(partial, k_split, acc);
  }
  if (mine) linear_nvfp4_store(p, row0, m0, m_valid, acc);
  end();
  pg_tl_mark(TimelineKernel::kLinearNvfp4Mma, 2);  // the block's outputs written
}
template <int kTiles, int kUnroll, int kX>
__global__ void __launch_bounds__(kLinearThreads, kLinearMinBlocksPerSm)
    linear_nvfp4_mma_kernel(const __grid_constant__ LinearParams p) {
  linear_nvfp4_mma_body<kTiles, kUnroll, kX>(
      p,
      [&](uint4* xs, int64_t k_chunks, int64_t k_steps) {
        if constexpr (kX == kNvfp4XRows) {
          const int64_t m0 = int64_t(blockIdx.y) * kMmaTokens;
          nvfp4_mma_stage_x_rows(p.x + m0 * p.x_stride, p.x_stride, int(min(int64_t(kMmaTokens), p.m - m0)), k_chunks,
                                 k_steps, xs);
        } else {
          nvfp4_mma_stage_x_block<kX != kNvfp4XOneShort>(p.x, k_chunks, k_steps, xs);
        }
      },
      [] {});
}

// m = 1 with nvfp4_x1_ok: a persistent grid (at most the blocks the SMs hold at once) whose
// blocks take units of kLinearWarps / k_split row groups in turn (unit blockIdx.x, then + gridDim.x,
// ...), so the work is cut finer than whole blocks and no block pays the ring's start twice: a
// warp's K slice is the same in every unit, and its ring runs on from one unit's last stage into
// the next unit's first (the copies of the next unit are in flight while this one's sums are
// taken). Token 0's x is staged once per block. The same sums, in the same order, as the
// per-block kernel. kCols: nvfp4_lane_work_cols instead of nvfp4_lane_work (an experiment: other sums
// than the per-block kernel's).
template <int kTiles, int kUnroll, bool kWalk, bool kCols = false>
__global__ void __launch_bounds__(kLinearThreads, kTiles == 1 ? 3 : 2)
    linear_nvfp4_x1_kernel(const __grid_constant__ LinearParams p) {
  constexpr int kRowsW = kMmaRows * kTiles;
  using Stage = Nvfp4RingStage<kTiles, kUnroll>;
  extern __shared__ uint4 linear_nvfp4_smem[];  // nvfp4_x1_smem_bytes: x, then the rings
  __shared__ float partial[kLinearWarps][kTiles][4][kWarpSize];
  uint4* xs = linear_nvfp4_smem;
  const unsigned tid = pinned_thread_idx();
  const int warp = tid / kWarpSize, lane = tid % kWarpSize, g = lane / 4;
  Stage* ring = nvfp4_x1_ring<kTiles, kUnroll>(linear_nvfp4_smem, p.k, 1, warp);
  const int k_split = p.k_split, kpart = warp % k_split, per_unit = kLinearWarps / k_split;
  const int64_t groups = (p.n + kRowsW - 1) / kRowsW, units = (groups + per_unit - 1) / per_unit;
  const int64_t k_chunks = p.k / 32, k_steps = (k_chunks + 3) / 4;
  const int64_t per_part = (k_steps + k_split - 1) / k_split;
  const int64_t s0 = min(k_steps, kpart * per_part), s1 = min(k_steps, s0 + per_part);
  const int n = s1 > s0 ? int((s1 - s0 + kUnroll - 1) / kUnroll) : 0;  // stages per unit
  // Whole stages of a unit first (every step below s1 and inside K); at most its last one is not.
  const int nw = nvfp4_lane_whole_stages(int(s0), int(s1), int(k_chunks), kUnroll, false);
  const int my_units = int64_t(blockIdx.x) < units ? int((units - 1 - blockIdx.x) / gridDim.x + 1) : 0;
  auto row0_of = [&](int u) { return ((int64_t(blockIdx.x) + int64_t(u) * gridDim.x) * per_unit + warp / k_split) * kRowsW; };
  const int t = lane % 4;
  const uint64_t policy = l2_evict_first_policy();
  const Nvfp4LaneRing<kTiles, kUnroll> lr(ring, lane);
  constexpr int kStages = nvfp4_ring_stages<kTiles, kUnroll>();
  constexpr int kSlot = Nvfp4LaneRing<kTiles, kUnroll>::kBytes;
  // The issuing side runs kStages - 1 stages ahead: stage ij of unit iu next; the rows' sources are
  // set at each unit's first stage.
  int iu = 0, ij = 0;
  Nvfp4LaneSrc<kTiles> src;
  auto issue = [&](int slot_off) {  // the next stage in order (an empty group past the last)
    if (iu >= my_units || n == 0) {
      cp_async_commit();
      return;
    }
    if (ij == 0) {
      const int64_t row0 = row0_of(iu);
      const uint8_t* wrow[kTiles][2];
      const uint8_t* srow[kTiles][2];
#pragma unroll
      for (int i = 0; i < kTiles; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t row = min(row0 + kMmaRows * i + g + 8 * h, p.n - 1);  // past n: re-read, never written
          wrow[i][h] = static_cast<const uint8_t*>(p.w) + row * (p.k / 2);
          srow[i][h] = p.scale_fp8 + row * (p.k / kNvfp4Block);
        }
      src.at(wrow, srow, s0, t);
    }
    if (ij < nw) nvfp4_lane_issue<kTiles, kUnroll>(src, lr.w_at(slot_off), lr.sc_at(slot_off), policy);
    else
      nvfp4_lane_issue_tail<kTiles, kUnroll>(src, lr.w_at(slot_off), lr.sc_at(slot_off), policy, int(s0) + ij * kUnroll,
                                             int(s1), int(k_chunks), t);
    if (++ij == n) ij = 0, ++iu;
  };

  pg_tl_mark(TimelineKernel::kLinearNvfp4X1, 0);
  pdl_trigger();
#pragma unroll
  for (int j = 0; j < kStages - 1; ++j) issue(j * kSlot);  // weights depend on no kernel: before the wait
  pdl_wait();
  pg_tl_mark(TimelineKernel::kLinearNvfp4X1, 1);
  nvfp4_mma_stage_x_block<kWalk>(p.x, k_chunks, k_steps, xs);
  __syncthreads();
  const uint32_t sel = kCols ? ((lane & 1) ? 0x32u : 0x10u) : nvfp4_lane_scale_sel(lane);
  const bool act0 = g == 2 * t, act1 = g == 2 * t + 1;  // kCols: the lane's B column holds x of words 0, 1 / 2, 3
  uint32_t bcol[4][4] = {};
  Nvfp4SlotCursor<kStages, kSlot> cur;
  for (int u = 0; u < my_units; ++u) {  // uniform over the block
    float acc[kTiles][4];
#pragma unroll
    for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    const uint4* xl = xs + s0 * kNvfp4MmaXStepVecs + t;
    for (int j = 0; j < n; ++j) {
      issue(cur.wr);
      cp_async_wait<kStages - 1>();  // this stage's group has landed
      const int steps = j < nw ? kUnroll : int(s1 - s0) - j * kUnroll;
      if constexpr (kCols) {
        if (j < nw)
          nvfp4_lane_work_cols<kTiles, kUnroll, true>(lr.w_at(cur.rd), lr.sc_at(cur.rd), xl, steps, sel, act0, act1, bcol, acc);
        else
          nvfp4_lane_work_cols<kTiles, kUnroll, false>(lr.w_at(cur.rd), lr.sc_at(cur.rd), xl, steps, sel, act0, act1, bcol,
                                                       acc);
      } else
        nvfp4_lane_work<kTiles, kUnroll>(lr.w_at(cur.rd), lr.sc_at(cur.rd), xl, steps, sel, acc);
      xl += kUnroll * kNvfp4MmaXStepVecs;
      cur.next();
    }
    if constexpr (kCols) {  // the four t lanes' blocks of each row: every lane ends with the row's sum
#pragma unroll
      for (int i = 0; i < kTiles; ++i)
#pragma unroll
        for (int r = 0; r < 4; r += 2) {
          acc[i][r] += __shfl_xor_sync(kFullMask, acc[i][r], 1);
          acc[i][r] += __shfl_xor_sync(kFullMask, acc[i][r], 2);
        }
    }
    bool mine = true;
    if (k_split > 1) {
      mine = linear_mma_split_sum(partial, k_split, acc);
      __syncthreads();  // partial is the next unit's
    }
    if (mine) linear_nvfp4_store(p, row0_of(u), 0, 1, acc);
  }
}

// A kernel as a type, so a generic lambda can name it as a template argument (raise_smem_limit_once).
template <auto kKernel>
struct Nvfp4X1KernelTag {
  static constexpr auto kernel = kKernel;
};

// f(Nvfp4X1KernelTag<kernel>) for the persistent kernel of kTiles x kUnroll, kWalk: at 1 x 2 the column
// form where linear_nvfp4_x1_columns() says so.
template <int kTiles, int kUnroll, bool kWalk, class F>
auto with_nvfp4_x1_kernel(F&& f) {
  if constexpr (kTiles == 1 && kUnroll == 2)
    if (linear_nvfp4_x1_columns()) return f(Nvfp4X1KernelTag<linear_nvfp4_x1_kernel<kTiles, kUnroll, kWalk, true>>{});
  return f(Nvfp4X1KernelTag<linear_nvfp4_x1_kernel<kTiles, kUnroll, kWalk>>{});
}

// Blocks of linear_nvfp4_x1_kernel<kTiles, kUnroll, *> one SM holds at K = k (0 on error).
template <int kTiles, int kUnroll>
int linear_nvfp4_x1_blocks_per_sm(int64_t k) {
  auto per_sm = [&](auto tag) {
    constexpr auto kKernel = decltype(tag)::kernel;
    int b = 0;
    if (raise_smem_limit_once<kKernel>() != cudaSuccess) return 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kKernel, kLinearThreads,
                                                      nvfp4_x1_smem_bytes(kTiles, kUnroll, kLinearWarps, k)) != cudaSuccess)
      return 0;
    return b;
  };
  return k <= kNvfp4OneItemMaxK ? with_nvfp4_x1_kernel<kTiles, kUnroll, false>(per_sm)
                                : with_nvfp4_x1_kernel<kTiles, kUnroll, true>(per_sm);
}

// grid.x: the units (m = 1 with nvfp4_x1_ok: the persistent kernel takes min(units, the blocks
// the SMs hold) of it), grid.y the 8-token tiles.
template <int kTiles, int kUnroll>
cudaError_t launch_linear_nvfp4_mma(const LinearParams& p, dim3 grid, cudaStream_t stream) {
  const bool staged = nvfp4_x1_ok(p.k, p.scale_fp8);
  const bool x1 = p.m == 1 && staged;
  const bool persistent = x1 && linear_nvfp4_x1_persistent(kTiles, p.n, p.k);
  const bool one_item = p.k <= kNvfp4OneItemMaxK;  // x staged one item a thread: kernels without the walk
  if (persistent) {
    auto go = [&](auto tag) -> cudaError_t {
      constexpr auto kKernel = decltype(tag)::kernel;
      if (const cudaError_t e = raise_smem_limit_once<kKernel>(); e != cudaSuccess) return e;
      const size_t smem = nvfp4_x1_smem_bytes(kTiles, kUnroll, kLinearWarps, p.k);
      if (const cudaError_t e = launch_pdl(kKernel, grid, dim3(kLinearThreads), smem, stream, p); e != cudaSuccess) return e;
      return cudaGetLastError();
    };
    return one_item ? with_nvfp4_x1_kernel<kTiles, kUnroll, false>(go) : with_nvfp4_x1_kernel<kTiles, kUnroll, true>(go);
  }
  const size_t rows_smem = p.m > 1 && staged ? nvfp4_mma_staged_rows_bytes(p.m, p.k) : 0;
  auto kernel = x1 && one_item ? linear_nvfp4_mma_kernel<kTiles, kUnroll, kNvfp4XOneShort>
                : x1           ? linear_nvfp4_mma_kernel<kTiles, kUnroll, kNvfp4XOne>
                : rows_smem    ? linear_nvfp4_mma_kernel<kTiles, kUnroll, kNvfp4XRows>
                               : linear_nvfp4_mma_kernel<kTiles, kUnroll, kNvfp4XPerLane>;
  size_t smem = 0;
  if (rows_smem) {
    if (cudaError_t e = raise_smem_limit_once<linear_nvfp4_mma_kernel<kTiles, kUnroll, kNvfp4XRows>>(); e != cudaSuccess)
      return e;
    smem = rows_smem;
  }
  if (cudaError_t e = launch_pdl(kernel, grid, dim3(kLinearThreads), smem, stream, p); e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
