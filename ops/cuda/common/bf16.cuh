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

}  // namespace pg::ops::cuda
