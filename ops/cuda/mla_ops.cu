// The MLA helper ops on the GPU: embedding, rope, mla_kv_write, head_linear, and mla_prep (the
// last three in one launch). Each mirrors its
// CPU definition (ops/cpu/mla_ops.cpp, ops::cpu::rope): embedding and RoPE give the same bits
// (exact dequantization; cos/sin in double, rotations without FMA contraction); rmsnorm and
// head_linear differ only in summation order (tests/ops/mla_ops_test.cpp derives the tolerance).
#include "ops/cuda/common/pdl.cuh"
#include <cuda_runtime.h>

#include <cstddef>
#include <type_traits>

#include "ops/cuda/common/bf16.cuh"
#include "ops/cuda/common/sync.cuh"
#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/linear/kernel.cuh"  // unpack_chunk: one 16-byte chunk of W -> f32
#include "ops/cuda/mla_ops_params.h"

namespace pg::ops::cuda {
namespace {

// One element of a weight row (fp8: without its block scale).
template <LinearWeight F>
__device__ __forceinline__ float load_elem(const void* row, int64_t j) {
  if constexpr (F == LinearWeight::kF32) return __ldg(static_cast<const float*>(row) + j);
  else if constexpr (F == LinearWeight::kBF16) return __uint_as_float(uint32_t(__ldg(static_cast<const unsigned short*>(row) + j)) << 16);
  else return fp8_e4m3_to_f32(__ldg(static_cast<const unsigned char*>(row) + j));
}

// ---------------------------------------------------------------------------------------------
// embedding: thread u of the grid's x dimension owns chunk (vec) or element u of every row.
template <LinearWeight F, bool kVec>
__global__ void __launch_bounds__(kEmbeddingThreads) embedding_kernel(const __grid_constant__ EmbeddingParams p) {
  pdl_trigger();
  pdl_wait();  // inputs come from the kernel before (PDL: ops/cuda/common/pdl.cuh)
  constexpr int kE = linear_vec_elems(F), kB = linear_elem_bytes(F);
  const int64_t units = kVec ? p.hidden / kE : p.hidden;
  const int64_t u = int64_t(blockIdx.x) * kEmbeddingThreads + threadIdx.x;
  if (u >= units) return;
  const int64_t col = kVec ? u * kE : u;
  for (int64_t t = blockIdx.y; t < p.m; t += gridDim.y) {
    const int32_t tok = p.tokens[t];
    if (tok < 0 || tok >= p.vocab) continue;  // the caller validates ids; never read outside the table
    const uint8_t* row = static_cast<const uint8_t*>(p.table) + int64_t(tok) * p.hidden * kB;
    float* y = p.y + t * p.y_stride + col;
    float scale = 1.0f;
    if constexpr (F == LinearWeight::kFp8Block)
      scale = __ldg(p.scale_inv + (tok / p.block_rows) * p.scale_cols + col / p.block_cols);
    if constexpr (kVec) {
      float f[kE];
      unpack_chunk<F>(ld_stream(row + u * kLinearVecBytes), f);
#pragma unroll
      for (int q = 0; q < kE / 4; ++q) {
        float4 v = make_float4(f[4 * q], f[4 * q + 1], f[4 * q + 2], f[4 * q + 3]);
        if constexpr (F == LinearWeight::kFp8Block) v.x *= scale, v.y *= scale, v.z *= scale, v.w *= scale;
        reinterpret_cast<float4*>(y)[q] = v;  // fp8 * scale: one f32 multiply, as the CPU's
      }
    } else {
      float v = load_elem<F>(row, col);
      if constexpr (F == LinearWeight::kFp8Block) v *= scale;
      *y = v;
    }
  }
}

template <LinearWeight F>
cudaError_t launch_embedding_f(const EmbeddingParams& p, cudaStream_t stream) {
  const int64_t units = p.vec ? p.hidden / linear_vec_elems(F) : p.hidden;
  const dim3 grid(unsigned((units + kEmbeddingThreads - 1) / kEmbeddingThreads), unsigned(std::min(p.m, kEmbeddingMaxGridY)));
  if (p.vec) PG_LAUNCH_PDL(embedding_kernel<F, true>, dim3(grid), dim3(kEmbeddingThreads), 0, stream, p);
  else PG_LAUNCH_PDL(embedding_kernel<F, false>, dim3(grid), dim3(kEmbeddingThreads), 0, stream, p);
  return cudaGetLastError();
}

// ---------------------------------------------------------------------------------------------
// RoPE, as ops::cpu::rope: the angle is the f32 product inv_freq * float(pos) (the reference's
// precision); cos and sin in double, rounded to f32, then times attention_factor in f32. The
// _rn intrinsics keep nvcc from contracting the rotation into FMAs the CPU does not use.
// (double sincos brings a 40-byte local array, its Payne-Hanek reduction for huge arguments:
// ptxas's local-memory note on rope_kernel and mla_kv_write_kernel; the path is never taken at
// |angle| <= 163839 rad, yet it is compiled in.)
__device__ __forceinline__ void rope_cos_sin(float inv_freq, float pos, float attention_factor, float& c, float& s) {
  const float angle = __fmul_rn(inv_freq, pos);
  double sd, cd;
  sincos(double(angle), &sd, &cd);
  c = __fmul_rn(float(cd), attention_factor);
  s = __fmul_rn(float(sd), attention_factor);
}

// Pair k of one head's rope part rotated: (x[2k], x[2k+1]) interleaved, else (x[k], x[k+half]); its
// columns (i0, i1) and values (o0, o1).
__device__ __forceinline__ void rope_pair(const float* in, int64_t k, int64_t half, bool interleave, float c, float s,
                                          int64_t& i0, int64_t& i1, float& o0, float& o1) {
  i0 = interleave ? 2 * k : k, i1 = interleave ? 2 * k + 1 : k + half;
  const float a0 = in[i0], a1 = in[i1];
  o0 = __fsub_rn(__fmul_rn(a0, c), __fmul_rn(a1, s));
  o1 = __fadd_rn(__fmul_rn(a1, c), __fmul_rn(a0, s));
}
__device__ __forceinline__ void rope_rotate(const float* in, float* out, int64_t k, int64_t half, bool interleave,
                                            float c, float s) {
  int64_t i0, i1;
  float o0, o1;
  rope_pair(in, k, half, interleave, c, s, i0, i1, o0, o1);  // `in` and `out` may be the same
  out[i0] = o0;
  out[i1] = o1;
}

// The step's cos / sin: one thread per (token, pair), the values rope_cos_sin() above gives, into
// [m, rope_dim] (cos of pair k at column k, its sin at rope_dim / 2 + k). Once per step, so that
// mla_prep, every layer, reads them instead of computing them (mla_ops_params.h).
__global__ void __launch_bounds__(kRopeThreads) rope_cos_sin_kernel(const __grid_constant__ RopeCosSinParams p) {
  pdl_trigger();
  pdl_wait();  // the kernels before may still read the previous step's values (PDL: ops/cuda/common/pdl.cuh)
  const int64_t half = p.rope_dim / 2;
  const int64_t i = int64_t(blockIdx.x) * kRopeThreads + threadIdx.x;
  if (i >= p.m * half) return;
  const int64_t t = i / half, k = i - t * half;
  float c, s;
  rope_cos_sin(__ldg(p.inv_freq + k), float(p.positions[t]), p.attention_factor, c, s);
  p.cos_sin[t * p.rope_dim + k] = c;
  p.cos_sin[t * p.rope_dim + half + k] = s;
}

// Grid (token, slice of kRopeThreads (head, pair) items), one (head, pair) per thread, so that a
// decode step (m = 1, 128 heads x 32 pairs) spreads over 32 blocks instead of looping 32 dependent
// load-store rounds in one. kTable: cos / sin from the step's p.cos_sin. Else the token's pairs
// into shared memory first (each block recomputes them: rope_dim / 2 double sincos, cheaper than a
// second pass).
// One rope block: token t, slice `slice` of the (head, pair) items; cos_sin: shared [rope_dim]
// (unused with kTable).
template <bool kTable>
__device__ __forceinline__ void rope_block(const RopeParams& p, int64_t t, int64_t slice, float* cos_sin) {
  const int64_t half = p.rope_dim / 2;
  if constexpr (kTable) {
    const int64_t j = slice * kRopeThreads + threadIdx.x;
    if (j >= p.n_heads * half) return;
    const int64_t h = j / half, k = j - h * half;
    const float* cs = p.cos_sin + t * p.rope_dim;
    float* x = p.x + t * p.row_stride + h * p.head_stride + p.offset;
    rope_rotate(x, x, k, half, p.interleave, cs[k], cs[half + k]);
    return;
  }
  float* cs = cos_sin;
  float* sn = cos_sin + half;
  const float pos = float(p.positions[t]);
  for (int64_t k = threadIdx.x; k < half; k += kRopeThreads) rope_cos_sin(p.inv_freq[k], pos, p.attention_factor, cs[k], sn[k]);
  __syncthreads();
  const int64_t j = slice * kRopeThreads + threadIdx.x;
  if (j >= p.n_heads * half) return;
  const int64_t h = j / half, k = j - h * half;
  float* x = p.x + t * p.row_stride + h * p.head_stride + p.offset;
  rope_rotate(x, x, k, half, p.interleave, cs[k], sn[k]);
}

template <bool kTable>
__global__ void __launch_bounds__(kRopeThreads) rope_kernel(const __grid_constant__ RopeParams p) {
  pdl_trigger();
  pdl_wait();  // inputs come from the kernel before (PDL: ops/cuda/common/pdl.cuh)
  extern __shared__ float cos_sin[];  // [2, half]
  rope_block<kTable>(p, blockIdx.x, blockIdx.y, cos_sin);
}

// ---------------------------------------------------------------------------------------------
// mla_kv_write: one block per token. rmsnorm as rmsnorm.cu (same per-element expression as the
// CPU, block-order sum of squares), then the rope pairs of k_pe straight from kv to the cache.
// One kv_write block: token t; scratch: shared [kKvWriteThreads / 32]. Returns uniformly over
// the block. kTable: the rope's cos / sin from the step's p.cos_sin. kBf16: the row rounded to
// nearest even into the bf16 pool p.cache16 (the same f32 values first).
template <bool kTable, bool kBf16>
__device__ __forceinline__ void mla_kv_write_row(const MlaKvWriteParams& p, int64_t t, float* scratch) {
  const int64_t R = p.kv_lora_rank, D = R + p.rope_dim, half = p.rope_dim / 2;
  const int64_t pos = ld_now(p.positions + t);
  const int32_t seq = ld_now(p.token_seq + t);  // with pos: one round trip (it had waited for pos's branch)
  // Out-of-range token data (a caller bug): skip the token, uniformly over the block.
  if (pos < 0 || pos / p.block_size >= p.max_blocks_per_seq) return;
  const int32_t blk = p.block_tables[int64_t(seq) * p.max_blocks_per_seq + pos / p.block_size];
  if (blk < 0 || blk >= p.n_blocks) return;
  const float* src = p.kv + t * p.kv_stride;
  const int64_t row = (int64_t(blk) * p.block_size + pos % p.block_size) * D;
  const auto put = [&](int64_t j, float v) {
    if constexpr (kBf16) p.cache16[row + j] = to_bf16_bits(v);
    else p.cache[row + j] = v;
  };

  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < R; j += kKvWriteThreads) ss = fmaf(src[j], src[j], ss);
  const float ms = block_sum<kKvWriteThreads>(ss, scratch) / float(R);
  const float inv = 1.0f / sqrtf(ms + p.eps);  // IEEE sqrt and division, as the CPU's
  for (int64_t j = threadIdx.x; j < R; j += kKvWriteThreads) put(j, __ldg(p.norm_weight + j) * (src[j] * inv));

  for (int64_t k = threadIdx.x; k < half; k += kKvWriteThreads) {
    float c, s;
    if constexpr (kTable) {
      c = p.cos_sin[t * p.rope_dim + k], s = p.cos_sin[t * p.rope_dim + half + k];
    } else {
      rope_cos_sin(__ldg(p.inv_freq + k), float(pos), p.attention_factor, c, s);
    }
    int64_t i0, i1;
    float o0, o1;
    rope_pair(src + R, k, half, p.interleave, c, s, i0, i1, o0, o1);
    put(R + i0, o0);
    put(R + i1, o1);
  }
}
// The bf16 pool's row out of line: the f32 pool's path (every default step's mla_prep) keeps its code.
template <bool kTable>
__device__ __noinline__ void mla_kv_write_row_bf16(const MlaKvWriteParams& p, int64_t t, float* scratch) {
  mla_kv_write_row<kTable, true>(p, t, scratch);
}
template <bool kTable>
__device__ __forceinline__ void mla_kv_write_block(const MlaKvWriteParams& p, int64_t t, float* scratch) {
  if (p.cache16) mla_kv_write_row_bf16<kTable>(p, t, scratch);
  else mla_kv_write_row<kTable, false>(p, t, scratch);
}

template <bool kTable>
__global__ void __launch_bounds__(kKvWriteThreads) mla_kv_write_kernel(const __grid_constant__ MlaKvWriteParams p) {
  pdl_trigger();
  pdl_wait();  // inputs come from the kernel before (PDL: ops/cuda/common/pdl.cuh)
  __shared__ float scratch[kKvWriteThreads / kWarpSize];
  mla_kv_write_block<kTable>(p, blockIdx.x, scratch);
}

// One chunk's x (kVec / 4 float4s) into a token's sums of the kR rows: each row's dot product from 0
// over the chunk (FMAs in element order), then added into its sum (FP8: times the chunk's scale).
template <bool kFp8, int kR, int kVec>
__device__ __forceinline__ void head_chunk_sums(const float (&wf)[kR][kVec], const float4 (&xc)[kVec / 4],
                                                const float (&sc)[kR], float (&acc)[kR]) {
  float xf[kVec];
#pragma unroll
  for (int q = 0; q < kVec / 4; ++q)
    xf[4 * q] = xc[q].x, xf[4 * q + 1] = xc[q].y, xf[4 * q + 2] = xc[q].z, xf[4 * q + 3] = xc[q].w;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    float d = 0.0f;
#pragma unroll
    for (int e = 0; e < kVec; ++e) d = fmaf(wf[r][e], xf[e], d);
    if constexpr (kFp8) acc[r] = fmaf(d, sc[r], acc[r]);
    else acc[r] += d;
  }
}

// ---------------------------------------------------------------------------------------------
// head_linear, vector path (see mla_ops_params.h). Lane group g of warp w owns rows
// row0 .. row0 + kR - 1 of W ([n_heads * n, k]); with n % kR == 0 they lie in one head. Block y
// owns tokens [t_begin, t_end), kMTile per pass.
// One block of (row block bx, token block by). It loads its first segment of W (weights depend
// on no kernel) before waiting on PDL for x, so those loads overlap the kernel before.
// stage_x (optional): called by every thread after the wait with the lane group's head h, returns
// where to read head h's x (head_linear_combine_kernel's o_lat, combined into shared memory) in
// place of p.x + h x_head_stride; without it the code is head_linear's and mla_prep's as it was.
template <LinearWeight F, int kL, int kMTile, class StageX = std::nullptr_t>
__device__ __forceinline__ void head_linear_vec_block(const HeadLinearParams& p, int64_t bx, int64_t by,
                                                      [[maybe_unused]] StageX stage_x = nullptr) {
  constexpr bool kStaged = !std::is_same_v<StageX, std::nullptr_t>;
  constexpr int kVec = linear_vec_elems(F), kElemBytes = linear_elem_bytes(F);
  constexpr int kG = kWarpSize / kL, kR = kHeadRowsPerLane, kU = kHeadChunksPerLane, kSeg = kL * kU;
  static_assert(kL >= 1 && kL <= kWarpSize && kWarpSize % kL == 0, "lane groups tile the warp");
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int g = lane / kL, s = lane % kL;
  const int64_t row0 = ((bx * kHeadWarps + warp) * kG + g) * kR;
  // Groups past the last row compute on row 0 (their loads are predicated off) and store
  // nothing; they stay in the loop because the group sums shuffle over the whole warp.
  const bool valid = row0 < p.n_heads * p.n;
  const int64_t row = valid ? row0 : 0, h = row / p.n;
  const int64_t row_bytes = p.k * kElemBytes;
  const uint8_t* wr = static_cast<const uint8_t*>(p.w) + row * row_bytes;
  const float* xh = nullptr;
  if constexpr (!kStaged) xh = p.x + h * p.x_head_stride;
  float* yh = p.y + h * p.y_head_stride + (row - h * p.n);
  const int64_t k_chunks = p.k / kVec, n_seg = (k_chunks + kSeg - 1) / kSeg;
  const int64_t t_begin = by * p.tokens_per_block, t_end = min(p.m, t_begin + p.tokens_per_block);

  constexpr bool kFp8 = F == LinearWeight::kFp8Block;
  uint4 wv[kU][kR];  // this lane's chunks of the current segment; with one segment, kept for every pass
  float sc[kU][kR];  // FP8: their scales (a chunk's 16 codes share one: groups are >= 16 columns)
  const float* srow = kFp8 ? p.w_scale + row * p.scale_cols : nullptr;
  auto load_w = [&](int64_t c0) {
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const int64_t c = c0 + int64_t(u) * kL;
        wv[u][r] = valid && c < k_chunks ? ld_stream(wr + r * row_bytes + c * kLinearVecBytes) : make_uint4(0, 0, 0, 0);
        if constexpr (kFp8)
          sc[u][r] = valid && c < k_chunks ? __ldg(srow + r * p.scale_cols + ((c * kVec) >> p.log2_group)) : 0.0f;
      }
  };
  load_w(s);  // the first pass's segment 0, before the wait
  pdl_wait();  // x comes from the kernel before (PDL: ops/cuda/common/pdl.cuh)
  if constexpr (kStaged) xh = stage_x(p, h);  // head h's x, rows x_row_stride apart
  for (int64_t t0 = t_begin; t0 < t_end; t0 += kMTile) {
    const int mv = int(min(int64_t(kMTile), t_end - t0));
    float acc[kMTile][kR];
#pragma unroll
    for (int i = 0; i < kMTile; ++i)
#pragma unroll
      for (int r = 0; r < kR; ++r) acc[i][r] = 0.0f;
    for (int64_t seg = 0; seg < n_seg; ++seg) {
      const int64_t c0 = seg * kSeg + s;  // this lane's first chunk of the segment
      if (n_seg > 1 && !(t0 == t_begin && seg == 0)) load_w(c0);  // one segment: loaded once, above
      // One token a pass (decode): the segment's x chunks are loaded together before any sum, one
      // round trip (loaded chunk by chunk, each went out after the previous chunk's FMAs). Not for
      // FP8 (16 floats a chunk): 92 -> 128 registers here, 105 -> 149 in mla_prep, below the 4 blocks
      // an SM its grids are balanced for; bf16 / f32 stay <= 128 (bf16 72 -> 90, mla_prep 77 -> 105).
      constexpr bool kX1 = kMTile == 1 && !kFp8;
      float4 x1[kX1 ? kU : 1][kVec / 4];
      if constexpr (kX1) {
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int64_t c = c0 + int64_t(u) * kL;
          if (c < k_chunks)
#pragma unroll
            for (int q = 0; q < kVec / 4; ++q) x1[u][q] = ld_act4(xh + t0 * p.x_row_stride + c * kVec + 4 * q);
        }
      }
      // The small tile (kHeadMTileSmall at 2..8 tokens, the default; not FP8): token by
      // token, the token's x chunks of the segment loaded together before its sums (one round trip a
      // token, as kX1's), the chunks' weights unpacked again for each token. The large tile goes chunk
      // by chunk with the tokens inside, each x load after the previous chunk's FMAs: kU round trips a
      // token (H100, ncu: mla_prep 5.0 -> 6.8 / 8.5 us from 1 to 2 / 4 tokens). The same sums in the
      // same order: the same bits.
      constexpr bool kXTok = kMTile == kHeadMTileSmall && head_has_small_tile(F);
      if constexpr (kXTok) {
#pragma unroll
        for (int i = 0; i < kMTile; ++i) {
          if (i < mv) {
            const float* xt = xh + (t0 + i) * p.x_row_stride;
            float4 xc[kU][kVec / 4];
#pragma unroll
            for (int u = 0; u < kU; ++u) {
              const int64_t c = c0 + int64_t(u) * kL;
              if (c < k_chunks)
#pragma unroll
                for (int q = 0; q < kVec / 4; ++q) xc[u][q] = ld_act4(xt + c * kVec + 4 * q);
            }
#pragma unroll
            for (int u = 0; u < kU; ++u) {
              const int64_t c = c0 + int64_t(u) * kL;
              if (c < k_chunks) {
                float wf[kR][kVec];
#pragma unroll
                for (int r = 0; r < kR; ++r) unpack_chunk<F>(wv[u][r], wf[r]);
                head_chunk_sums<kFp8>(wf, xc[u], sc[u], acc[i]);
              }
            }
          }
        }
      } else {
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int64_t c = c0 + int64_t(u) * kL;
          if (c < k_chunks) {
            float wf[kR][kVec];
#pragma unroll
            for (int r = 0; r < kR; ++r) unpack_chunk<F>(wv[u][r], wf[r]);
#pragma unroll
            for (int i = 0; i < kMTile; ++i) {
              if (i < mv) {
                const float* xp = xh + (t0 + i) * p.x_row_stride + c * kVec;
                float4 xc[kVec / 4];
#pragma unroll
                for (int q = 0; q < kVec / 4; ++q) xc[q] = kX1 ? x1[u][q] : ld_act4(xp + 4 * q);
                head_chunk_sums<kFp8>(wf, xc, sc[u], acc[i]);
              }
            }
          }
        }
      }
    }
    // Sum over the group's kL lanes (butterfly: every lane of the group gets the sums); output
    // (i, r) is stored by lane (i * kR + r) % kL of the group.
#pragma unroll
    for (int i = 0; i < kMTile; ++i)
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        float v = acc[i][r];
#pragma unroll
        for (int o = kL / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
        if (valid && i < mv && s == (i * kR + r) % kL) yh[(t0 + i) * p.y_row_stride + r] = v * p.y_scale;
      }
  }
}

template <LinearWeight F, int kL, int kMTile>
__global__ void __launch_bounds__(kHeadThreads) head_linear_vec_kernel(const __grid_constant__ HeadLinearParams p) {
  pdl_trigger();
  head_linear_vec_block<F, kL, kMTile>(p, blockIdx.x, blockIdx.y);
}

// ---------------------------------------------------------------------------------------------
// head_linear_combine: W_UV over o_lat combined from the deferred attention's split partials
// (MlaPartials; mla_attention.cu's kDefer). A block combines, after the wait, the o_lat of each
// (token, head) its rows need into shared memory ([token][head - its first][R], p.heads_per_block
// heads), with the arithmetic of the attention's combine() (mla_attention_common.cuh) in split
// order: w_s = 2^(m_s - M) over the token's active splits, L = sum w_s l_s, o = (sum w_s o_s) / L,
// zeros for an empty context; then its GEMV reads x from there (its first weights were loaded
// before the wait). Per (token, head): ctx_len, every split's (max, sum) and the first
// kHeadCombineBatch splits' partials go out together (a split past the token's active ones gets no
// weight, so its stale partial is never used), then the rest in batches. The fence, ticket and
// waiting combiners of the attention's own combine, its o_lat stores and W_UV's o_lat loads leave
// the critical path; each of the 8 blocks of a moonlight head reads its 33 partials (66 KB) from L2.
constexpr int kHeadCombineBatch = 16;

__device__ __forceinline__ void head_combine_stage(const MlaPartials& d, int64_t h_first, int64_t h_last, int m,
                                                   int heads_per_block, float* sx, float* sw) {
  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int R = int(d.kv_lora_rank), n_splits = d.n_splits, q4 = R / 4;
  float* s_inv = sw + kMlaMaxSplits;
  int* s_nact = reinterpret_cast<int*>(s_inv + 1);
  const int64_t split_floats = int64_t(d.heads) * R;  // between two splits' partials
  const int nh = int(h_last - h_first + 1);
  for (int i = 0; i < m * nh; ++i) {
    const int t = i / nh;
    const int64_t h = h_first + i % nh;
    const int64_t item = int64_t(t) * d.head_groups + h / d.heads, slot = h % d.heads;
    const float* o = d.ws_o + (item * n_splits * d.heads + slot) * R;
    float4 v[kHeadCombineBatch];
#pragma unroll
    for (int b = 0; b < kHeadCombineBatch; ++b)
      if (b < n_splits && tid < q4) v[b] = __ldcg(reinterpret_cast<const float4*>(o + b * split_floats) + tid);
    if (warp == 0) {  // the weights: lanes over the splits
      const float* ml = d.ws_ml + (item * n_splits * d.heads + slot) * 2;
      const int64_t ctx_len = __ldcg(d.ctx_len + t);
      constexpr int kPerLane = kMlaMaxSplits / kWarpSize;
      float2 e[kPerLane];
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int s = lane + kWarpSize * j;
        if (s < n_splits) e[j] = __ldcg(reinterpret_cast<const float2*>(ml + int64_t(s) * d.heads * 2));
      }
      const int ctx = int(ctx_len < d.max_rows ? ctx_len : d.max_rows);
      int n_act = 0;
      if (ctx > 0) {
        const int rows = int(mla_split_rows(ctx, n_splits, d.chunk_rows));
        n_act = (ctx + rows - 1) / rows;
      }
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j)
        if (lane + kWarpSize * j < n_act) mx = fmaxf(mx, e[j].x);
      mx = warp_max(mx);
      float l = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int s = lane + kWarpSize * j;
        if (s < n_act) {
          const float w = exp2f(e[j].x - mx);
          sw[s] = w;
          l = fmaf(w, e[j].y, l);
        }
      }
      l = warp_sum(l);
      if (lane == 0) *s_inv = n_act > 0 ? 1.0f / l : 0.0f, *s_nact = n_act;  // as the CPU: one reciprocal
    }
    __syncthreads();
    const int n_act = *s_nact;
    if (tid < q4) {
      float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int b = 0; b < kHeadCombineBatch; ++b)
        if (b < n_act) {
          const float w = sw[b];
          a.x = fmaf(w, v[b].x, a.x), a.y = fmaf(w, v[b].y, a.y), a.z = fmaf(w, v[b].z, a.z), a.w = fmaf(w, v[b].w, a.w);
        }
      for (int s0 = kHeadCombineBatch; s0 < n_act; s0 += kHeadCombineBatch) {
#pragma unroll
        for (int b = 0; b < kHeadCombineBatch; ++b)
          if (s0 + b < n_act) v[b] = __ldcg(reinterpret_cast<const float4*>(o + (s0 + b) * split_floats) + tid);
#pragma unroll
        for (int b = 0; b < kHeadCombineBatch; ++b)
          if (s0 + b < n_act) {
            const float w = sw[s0 + b];
            a.x = fmaf(w, v[b].x, a.x), a.y = fmaf(w, v[b].y, a.y), a.z = fmaf(w, v[b].z, a.z), a.w = fmaf(w, v[b].w, a.w);
          }
      }
      const float inv = *s_inv;
      float* dst = sx + (int64_t(t) * heads_per_block + (h - h_first)) * R;
      reinterpret_cast<float4*>(dst)[tid] = make_float4(a.x * inv, a.y * inv, a.z * inv, a.w * inv);
    }
    __syncthreads();  // sw is rewritten for the next (token, head); sx complete after the last
  }
}

template <LinearWeight F, int kL, int kMTile>
__global__ void __launch_bounds__(kHeadThreads) head_linear_combine_kernel(const __grid_constant__ HeadCombineParams p) {
  pg_tl_mark(TimelineKernel::kHeadCombine, 0);
  pdl_trigger();
  __shared__ float4 sx4[kHeadCombineFloats / 4];  // [token][head - h_first][R]: the block's combined o_lat
  __shared__ float sw[kMlaMaxSplits + 2];          // one (token, head)'s weights, 1 / L, n_act
  constexpr int64_t kRowsPerBlock = int64_t(kHeadWarps) * (kWarpSize / kL) * kHeadRowsPerLane;
  const int64_t rows = p.lin.n_heads * p.lin.n, r0 = int64_t(blockIdx.x) * kRowsPerBlock;
  const int64_t h_first = r0 / p.lin.n, h_last = (min(r0 + kRowsPerBlock, rows) - 1) / p.lin.n;
  head_linear_vec_block<F, kL, kMTile>(p.lin, blockIdx.x, 0, [&](const HeadLinearParams& lin, int64_t h) {
    float* sx = reinterpret_cast<float*>(sx4);
    head_combine_stage(p.parts, h_first, h_last, int(lin.m), p.heads_per_block, sx, sw);
    // Groups past the last row run on row 0 (head 0, maybe not this block's): any staged head, never stored.
    return static_cast<const float*>(sx) + (h >= h_first ? h - h_first : 0) * lin.k;
  });
  pg_tl_mark(TimelineKernel::kHeadCombine, 2);  // the block's rows written
}

// ---------------------------------------------------------------------------------------------
// mla_prep: the blocks of the three kernels above in one grid (mla_ops_params.h), the rope's cos /
// sin from the step's table (no double sincos in this kernel's code).
template <LinearWeight F, int kL, int kMTile>
__global__ void __launch_bounds__(kHeadThreads) mla_prep_kernel(const __grid_constant__ MlaPrepParams p) {
  if (!p.late_trigger) pdl_trigger();
  int64_t b = blockIdx.x;
  const int64_t small_blocks = p.kv.m * (1 + p.rope_slices);
  if (b >= small_blocks) {
    b -= small_blocks;
    head_linear_vec_block<F, kL, kMTile>(p.uk, b % p.uk_row_blocks, b / p.uk_row_blocks);
  } else {
    pg_tl_mark(TimelineKernel::kMlaPrep, 0);  // the kv_write and rope blocks
    pdl_wait();  // inputs come from the kernel before (PDL: ops/cuda/common/pdl.cuh)
    pg_tl_mark(TimelineKernel::kMlaPrep, 1);
    if (b < p.kv.m) {
      __shared__ float scratch[kKvWriteThreads / kWarpSize];
      mla_kv_write_block<true>(p.kv, b, scratch);
    } else {
      b -= p.kv.m;
      rope_block<true>(p.rope, b / p.rope_slices, b % p.rope_slices, nullptr);
    }
  }
  if (p.late_trigger) pdl_trigger();
}

template <LinearWeight F, int kL>
cudaError_t launch_prep_l(int m_tile, const MlaPrepParams& p, cudaStream_t stream) {
  const dim3 grid(unsigned(p.uk_blocks + p.kv.m * (1 + p.rope_slices)));
  if (m_tile == 1) PG_LAUNCH_PDL(mla_prep_kernel<F, kL, 1>, grid, dim3(kHeadThreads), 0, stream, p);
  else if (m_tile == kHeadMTileLarge) PG_LAUNCH_PDL(mla_prep_kernel<F, kL, kHeadMTileLarge>, grid, dim3(kHeadThreads), 0, stream, p);
  else if constexpr (head_has_small_tile(F)) PG_LAUNCH_PDL(mla_prep_kernel<F, kL, kHeadMTileSmall>, grid, dim3(kHeadThreads), 0, stream, p);
  else return cudaErrorInvalidValue;
  return cudaGetLastError();
}

template <LinearWeight F>
cudaError_t launch_prep_f(int lanes, int m_tile, const MlaPrepParams& p, cudaStream_t stream) {
  switch (lanes) {
    case 4: return launch_prep_l<F, 4>(m_tile, p, stream);
    case 8: return launch_prep_l<F, 8>(m_tile, p, stream);
    case 16: return launch_prep_l<F, 16>(m_tile, p, stream);
    case 32: return launch_prep_l<F, 32>(m_tile, p, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <LinearWeight F, int kL>
cudaError_t launch_head_vec_l(int m_tile, const HeadLinearParams& p, dim3 grid, cudaStream_t stream) {
  if (m_tile == 1) PG_LAUNCH_PDL(head_linear_vec_kernel<F, kL, 1>, dim3(grid), dim3(kHeadThreads), 0, stream, p);
  else if (m_tile == kHeadMTileLarge) PG_LAUNCH_PDL(head_linear_vec_kernel<F, kL, kHeadMTileLarge>, dim3(grid), dim3(kHeadThreads), 0, stream, p);
  else if constexpr (head_has_small_tile(F)) PG_LAUNCH_PDL(head_linear_vec_kernel<F, kL, kHeadMTileSmall>, dim3(grid), dim3(kHeadThreads), 0, stream, p);
  else return cudaErrorInvalidValue;
  return cudaGetLastError();
}

template <LinearWeight F>
cudaError_t launch_head_vec_f(int lanes, int m_tile, const HeadLinearParams& p, dim3 grid, cudaStream_t stream) {
  switch (lanes) {
    case 4: return launch_head_vec_l<F, 4>(m_tile, p, grid, stream);
    case 8: return launch_head_vec_l<F, 8>(m_tile, p, grid, stream);
    case 16: return launch_head_vec_l<F, 16>(m_tile, p, grid, stream);
    case 32: return launch_head_vec_l<F, 32>(m_tile, p, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

// head_linear, generic path: one warp per row of W, lanes striding over k, tokens of grid.y.
template <LinearWeight F>
__global__ void __launch_bounds__(kHeadThreads) head_linear_scalar_kernel(const __grid_constant__ HeadLinearParams p) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kHeadWarps + warp;
  if (row >= p.n_heads * p.n) return;  // uniform over the warp
  const int64_t h = row / p.n;
  const uint8_t* wr = static_cast<const uint8_t*>(p.w) + row * p.k * linear_elem_bytes(F);
  const float* xh = p.x + h * p.x_head_stride;
  float* yh = p.y + h * p.y_head_stride + (row - h * p.n);
  const int64_t t_begin = int64_t(blockIdx.y) * kHeadScalarTokensPerBlock;
  const int64_t t_end = min(p.m, t_begin + kHeadScalarTokensPerBlock);
  const float* srow = F == LinearWeight::kFp8Block ? p.w_scale + row * p.scale_cols : nullptr;
  for (int64_t t = t_begin; t < t_end; ++t) {
    const float* x = xh + t * p.x_row_stride;
    float sum = 0.0f;
    for (int64_t j = lane; j < p.k; j += kWarpSize) {
      float w = load_elem<F>(wr, j);
      if constexpr (F == LinearWeight::kFp8Block) w *= __ldg(srow + (j >> p.log2_group));  // as the CPU's row
      sum = fmaf(w, x[j], sum);
    }
    sum = warp_sum(sum);
    if (lane == 0) yh[t * p.y_row_stride] = sum * p.y_scale;
  }
}

}  // namespace

cudaError_t launch_embedding(LinearWeight f, const EmbeddingParams& p, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  switch (f) {
    case LinearWeight::kF32: return launch_embedding_f<LinearWeight::kF32>(p, stream);
    case LinearWeight::kBF16: return launch_embedding_f<LinearWeight::kBF16>(p, stream);
    case LinearWeight::kFp8Block: return launch_embedding_f<LinearWeight::kFp8Block>(p, stream);
    case LinearWeight::kNvfp4: break;  // rejected by the launcher (check_kernel_format)
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_rope_cos_sin(const RopeCosSinParams& p, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  const int64_t blocks = (p.m * (p.rope_dim / 2) + kRopeThreads - 1) / kRopeThreads;
  if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  PG_LAUNCH_PDL(rope_cos_sin_kernel, dim3(unsigned(blocks)), dim3(kRopeThreads), 0, stream, p);
  return cudaGetLastError();
}

cudaError_t launch_rope(const RopeParams& p, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  if (p.m > INT32_MAX) return cudaErrorInvalidConfiguration;
  const int64_t slices = (p.n_heads * (p.rope_dim / 2) + kRopeThreads - 1) / kRopeThreads;
  if (slices > 65535) return cudaErrorInvalidConfiguration;
  const dim3 grid(unsigned(p.m), unsigned(slices));
  if (p.cos_sin) {
    PG_LAUNCH_PDL(rope_kernel<true>, dim3(grid), dim3(kRopeThreads), 0, stream, p);
  } else {
    const size_t smem = size_t(p.rope_dim) * sizeof(float);  // cos and sin of rope_dim / 2 pairs
    PG_LAUNCH_PDL(rope_kernel<false>, dim3(grid), dim3(kRopeThreads), smem, stream, p);
  }
  return cudaGetLastError();
}

cudaError_t launch_mla_kv_write(const MlaKvWriteParams& p, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  if (p.m > INT32_MAX) return cudaErrorInvalidConfiguration;
  if (p.cos_sin) PG_LAUNCH_PDL(mla_kv_write_kernel<true>, dim3(unsigned(p.m)), dim3(kKvWriteThreads), 0, stream, p);
  else PG_LAUNCH_PDL(mla_kv_write_kernel<false>, dim3(unsigned(p.m)), dim3(kKvWriteThreads), 0, stream, p);
  return cudaGetLastError();
}

cudaError_t launch_head_linear_vec(LinearWeight f, int lanes, int m_tile, const HeadLinearParams& p, dim3 grid,
                                   cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  switch (f) {
    case LinearWeight::kF32: return launch_head_vec_f<LinearWeight::kF32>(lanes, m_tile, p, grid, stream);
    case LinearWeight::kBF16: return launch_head_vec_f<LinearWeight::kBF16>(lanes, m_tile, p, grid, stream);
    case LinearWeight::kFp8Block: return launch_head_vec_f<LinearWeight::kFp8Block>(lanes, m_tile, p, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <LinearWeight F, int kL>
cudaError_t launch_head_combine_l(int m_tile, const HeadCombineParams& p, dim3 grid, cudaStream_t stream) {
  if (m_tile == 1) PG_LAUNCH_PDL(head_linear_combine_kernel<F, kL, 1>, grid, dim3(kHeadThreads), 0, stream, p);
  else if (m_tile == kHeadMTileLarge) PG_LAUNCH_PDL(head_linear_combine_kernel<F, kL, kHeadMTileLarge>, grid, dim3(kHeadThreads), 0, stream, p);
  else if constexpr (head_has_small_tile(F)) PG_LAUNCH_PDL(head_linear_combine_kernel<F, kL, kHeadMTileSmall>, grid, dim3(kHeadThreads), 0, stream, p);
  else return cudaErrorInvalidValue;
  return cudaGetLastError();
}

template <LinearWeight F>
cudaError_t launch_head_combine_f(int lanes, int m_tile, const HeadCombineParams& p, dim3 grid, cudaStream_t stream) {
  switch (lanes) {
    case 4: return launch_head_combine_l<F, 4>(m_tile, p, grid, stream);
    case 8: return launch_head_combine_l<F, 8>(m_tile, p, grid, stream);
    case 16: return launch_head_combine_l<F, 16>(m_tile, p, grid, stream);
    case 32: return launch_head_combine_l<F, 32>(m_tile, p, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_head_linear_combine(LinearWeight f, int lanes, int m_tile, const HeadCombineParams& p,
                                      dim3 grid, cudaStream_t stream) {
  if (p.lin.m <= 0) return cudaSuccess;
  switch (f) {
    case LinearWeight::kF32: return launch_head_combine_f<LinearWeight::kF32>(lanes, m_tile, p, grid, stream);
    case LinearWeight::kBF16: return launch_head_combine_f<LinearWeight::kBF16>(lanes, m_tile, p, grid, stream);
    case LinearWeight::kFp8Block: return launch_head_combine_f<LinearWeight::kFp8Block>(lanes, m_tile, p, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_mla_prep(LinearWeight f, int lanes, int m_tile, const MlaPrepParams& p, cudaStream_t stream) {
  if (p.kv.m <= 0) return cudaSuccess;
  switch (f) {
    case LinearWeight::kF32: return launch_prep_f<LinearWeight::kF32>(lanes, m_tile, p, stream);
    case LinearWeight::kBF16: return launch_prep_f<LinearWeight::kBF16>(lanes, m_tile, p, stream);
    case LinearWeight::kFp8Block: return launch_prep_f<LinearWeight::kFp8Block>(lanes, m_tile, p, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_head_linear_scalar(LinearWeight f, const HeadLinearParams& p, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  const int64_t rows = p.n_heads * p.n;
  const dim3 grid(unsigned((rows + kHeadWarps - 1) / kHeadWarps),
                  unsigned((p.m + kHeadScalarTokensPerBlock - 1) / kHeadScalarTokensPerBlock));
  switch (f) {
    case LinearWeight::kF32: head_linear_scalar_kernel<LinearWeight::kF32><<<grid, kHeadThreads, 0, stream>>>(p); break;
    case LinearWeight::kBF16: head_linear_scalar_kernel<LinearWeight::kBF16><<<grid, kHeadThreads, 0, stream>>>(p); break;
    case LinearWeight::kFp8Block:
      head_linear_scalar_kernel<LinearWeight::kFp8Block><<<grid, kHeadThreads, 0, stream>>>(p);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
