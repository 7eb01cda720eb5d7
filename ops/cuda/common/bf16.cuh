// bf16 packing for the kernels that stage f32 activations or weights as bf16 for the tensor
// cores (round to nearest even, as __float2bfloat16_rn and core/dtype.h's f32_to_bf16).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace pg::ops::cuda {

// Two floats as one 32-bit word of bf16: lo in the low half (the lower address).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &h, sizeof(u));
  return u;
}

__device__ __forceinline__ uint16_t to_bf16_bits(float v) {
  const __nv_bfloat16 h = __float2bfloat16_rn(v);
  uint16_t u;
  memcpy(&u, &h, sizeof(u));
  return u;
}

// Two floats as a pair of bf16 words hi = bf16(x), lo = bf16(x - hi) (lo in the low halves as
// above): hi + lo keeps ~16 of x's 24 significand bits, so hi·hi + hi·lo + lo·hi on the bf16
// tensor cores computes a product of f32 values to ~2^-16 relative (lo·lo and the parts below
// lo are dropped). x - hi is exact in f32 (hi is x rounded to fewer bits, same exponent range).
__device__ __forceinline__ void split_bf16x2(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  const float2 hf = __bfloat1622float2(h);
  const __nv_bfloat162 l = __floats2bfloat162_rn(a - hf.x, b - hf.y);
  memcpy(&hi, &h, sizeof(hi));
  memcpy(&lo, &l, sizeof(lo));
}

}  // namespace pg::ops::cuda
