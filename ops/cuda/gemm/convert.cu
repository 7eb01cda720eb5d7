// The bf16 staging kernel of the cuBLASLt GEMM: activations (f32) and weights (f32, bf16, DeepSeek
// FP8 blocks, NVFP4) to bf16 rows, dequantized exactly as ops::cpu reads them (fp8 value * its
// block's scale_inv in f32; NVFP4 (e2m1 * block scale) * scale_2 in f32), then rounded to nearest
// even as core/dtype.h's f32_to_bf16. This is the NVFP4 dequantize kernel of the prefill paths.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "ops/cuda/common/bf16.cuh"
#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/gemm/convert.h"

namespace pg::ops::cuda {
namespace {

constexpr int kToBf16Threads = 256;
// gridDim.y limit; more rows loop.
constexpr int64_t kMaxGridY = 65535;

// NVFP4 row r's scale_2 and the block scale of column c, as f32.
__device__ __forceinline__ float nvfp4_scale_2(const ToBf16Params& p, int64_t r) {
  return p.scale_2_rows ? __ldg(p.scale_2_rows + r / p.scale_2_group_rows) : p.scale_2;
}
__device__ __forceinline__ float nvfp4_block_scale(const ToBf16Params& p, int64_t r, int64_t c) {
  return fp8_e4m3_to_f32(__ldg(p.scale_fp8 + r * (p.src_stride / 16) + c / 16));
}

// One source element as bf16 bits (the scalar path: any alignment, any block size).
template <ToBf16Src S>
__device__ __forceinline__ uint16_t elem_bits(const ToBf16Params& p, int64_t r, int64_t c) {
  if constexpr (S == ToBf16Src::kF32) {
    return to_bf16_bits(__ldg(static_cast<const float*>(p.src) + r * p.src_stride + c));
  } else if constexpr (S == ToBf16Src::kBF16) {
    return __ldg(static_cast<const unsigned short*>(p.src) + r * p.src_stride + c);
  } else if constexpr (S == ToBf16Src::kFp8Block) {
    const uint8_t v = static_cast<const uint8_t*>(p.src)[r * p.src_stride + c];
    const float s = __ldg(p.scale_inv + (r / p.block_rows) * p.scale_cols + c / p.block_cols);
    return to_bf16_bits(fp8_e4m3_to_f32(v) * s);
  } else {
    const uint8_t b = __ldg(static_cast<const uint8_t*>(p.src) + r * (p.src_stride / 2) + c / 2);
    return to_bf16_bits((e2m1_to_f32(nvfp4_device_code(b, uint32_t(c % 2))) * nvfp4_block_scale(p, r, c)) *
                        nvfp4_scale_2(p, r));
  }
}

// Eight source elements starting at chunk column c0 (c0 + 8 <= cols, p.vec) as four bf16x2 words.
template <ToBf16Src S>
__device__ __forceinline__ uint4 chunk_vec(const ToBf16Params& p, int64_t r, int64_t c0) {
  uint4 o;
  if constexpr (S == ToBf16Src::kF32) {
    const float* s = static_cast<const float*>(p.src) + r * p.src_stride + c0;
    const uint4 a = ld_stream(s), b = ld_stream(s + 4);
    o.x = pack_bf16x2(__uint_as_float(a.x), __uint_as_float(a.y));
    o.y = pack_bf16x2(__uint_as_float(a.z), __uint_as_float(a.w));
    o.z = pack_bf16x2(__uint_as_float(b.x), __uint_as_float(b.y));
    o.w = pack_bf16x2(__uint_as_float(b.z), __uint_as_float(b.w));
  } else if constexpr (S == ToBf16Src::kBF16) {
    o = ld_stream(static_cast<const uint16_t*>(p.src) + r * p.src_stride + c0);
  } else if constexpr (S == ToBf16Src::kNvfp4) {
    // Four bytes = the chunk's 8 codes, all in one 16-element block (c0 % 8 == 0).
    const uint32_t w =
        __ldg(reinterpret_cast<const unsigned int*>(static_cast<const uint8_t*>(p.src) + r * (p.src_stride / 2) + c0 / 2));
    const float s = nvfp4_block_scale(p, r, c0), s2 = nvfp4_scale_2(p, r);
    uint32_t h[4];
    e2m1x8_to_f16x2(w, h);  // h[j] = (element j, element j + 4) * 2^-14
    float v[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = f16x2_bits_to_f32(h[j]);
      // code * 2^14 exact, times the block scale exact (<= 2 x 4 significant bits), then scale_2
      v[j] = (f.x * kE2m1F16Unscale * s) * s2;
      v[j + 4] = (f.y * kE2m1F16Unscale * s) * s2;
    }
    o = make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
  } else {
    const uint2 q = __ldg(reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(p.src) + r * p.src_stride + c0));
    // The whole chunk lies in one block (block_cols % 8 == 0 and c0 % 8 == 0).
    const float s = __ldg(p.scale_inv + (r / p.block_rows) * p.scale_cols + c0 / p.block_cols);
    const uint32_t words[2] = {q.x, q.y};
    uint32_t out[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 lo = fp8x2_e4m3_to_f32(words[h] & 0xffffu), hi = fp8x2_e4m3_to_f32(words[h] >> 16);
      out[2 * h] = pack_bf16x2(lo.x * s, lo.y * s);
      out[2 * h + 1] = pack_bf16x2(hi.x * s, hi.y * s);
    }
    o = make_uint4(out[0], out[1], out[2], out[3]);
  }
  return o;
}

// grid (ceil(chunks per row / blockDim.x), min(rows, 65535)); thread = one 8-element chunk of a row.
template <ToBf16Src S>
__global__ void __launch_bounds__(kToBf16Threads) to_bf16_kernel(const __grid_constant__ ToBf16Params p) {
  const int64_t c0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kToBf16Chunk;
  if (c0 >= p.dst_stride) return;
  // 16-byte stores need whole, aligned chunks; else element stores up to dst_stride.
  const bool vec_store = is_aligned16(p.dst) && p.dst_stride % kToBf16Chunk == 0;
  for (int64_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
    uint16_t* d = p.dst + r * p.dst_stride + c0;
    if (vec_store) {
      uint4 o = make_uint4(0, 0, 0, 0);  // columns >= cols are zero padding
      if (p.vec && c0 + kToBf16Chunk <= p.cols) {
        o = chunk_vec<S>(p, r, c0);
      } else if (c0 < p.cols) {
        uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
        for (int j = 0; j < kToBf16Chunk; ++j)
          if (c0 + j < p.cols) w[j / 2] |= uint32_t(elem_bits<S>(p, r, c0 + j)) << (16 * (j % 2));
        o = make_uint4(w[0], w[1], w[2], w[3]);
      }
      *reinterpret_cast<uint4*>(d) = o;
    } else {
      for (int j = 0; j < kToBf16Chunk && c0 + j < p.dst_stride; ++j)
        d[j] = c0 + j < p.cols ? elem_bits<S>(p, r, c0 + j) : uint16_t(0);
    }
  }
}

}  // namespace

cudaError_t launch_to_bf16(const ToBf16Params& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.dst_stride <= 0) return cudaSuccess;
  const int64_t chunks = (p.dst_stride + kToBf16Chunk - 1) / kToBf16Chunk;
  // Short rows (the tiny models' odd dims) take a block of just enough whole warps.
  const int64_t threads = std::min<int64_t>(kToBf16Threads, (chunks + 31) / 32 * 32);
  const int64_t blocks_x = (chunks + threads - 1) / threads;
  if (blocks_x > INT32_MAX) return cudaErrorInvalidConfiguration;
  const dim3 grid{unsigned(blocks_x), unsigned(std::min(p.rows, kMaxGridY))};
  const dim3 block{unsigned(threads)};
  switch (p.src_type) {
    case ToBf16Src::kF32: to_bf16_kernel<ToBf16Src::kF32><<<grid, block, 0, stream>>>(p); break;
    case ToBf16Src::kBF16: to_bf16_kernel<ToBf16Src::kBF16><<<grid, block, 0, stream>>>(p); break;
    case ToBf16Src::kFp8Block: to_bf16_kernel<ToBf16Src::kFp8Block><<<grid, block, 0, stream>>>(p); break;
    case ToBf16Src::kNvfp4: to_bf16_kernel<ToBf16Src::kNvfp4><<<grid, block, 0, stream>>>(p); break;
  }
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
