// 16-byte vector loads and the register-level unpacking of weight formats (bf16, fp8 e4m3).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace pg::ops::cuda {

// 16 bytes of read-only, read-once data (weights); p must be 16-byte aligned. The plain
// non-coherent load: on the H200 a 4 GiB read-only reduction reached 4.53 TB/s with it and
// 4.22 TB/s with ".L1::no_allocate.L2::256B" (bench_ops_cuda, 2026-11-30).
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 16 bytes of read-only data that other warps of the SM re-read (kept in L1).
__device__ __forceinline__ float4 ld_f4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }

// Two bf16 packed in a 32-bit word (element 0 in the low half) -> exact f32.
__device__ __forceinline__ void bf16x2_to_f32(uint32_t u, float& lo, float& hi) {
  lo = __uint_as_float(u << 16);
  hi = __uint_as_float(u & 0xffff0000u);
}

// Four e4m3fn in a 32-bit word (element 0 in the low byte) -> their values x 2^-8, exactly, with
// integer ops and two f16x2 -> f32 conversions: e4m3 bits s.eeee.mmm placed as f16 bits
// s.0eeee.mmm0000000 give the same significand with an exponent 8 lower (bias 15 vs 7),
// subnormals included (m x 2^-9 -> f16 subnormal m x 2^-17; checked for all 256 codes). This
// keeps off the conversion pipe that cvt.f16x2.e4m3x2 + f16->f32 use, which held the fp8 GEMV
// to ~60% of bandwidth (bench_ops_cuda, 2026-11-30). The NaN codes map to finite values.
__device__ __forceinline__ void fp8x4_e4m3_to_f32_div256(uint32_t w, float& v0, float& v1, float& v2, float& v3) {
  const uint32_t lo = __byte_perm(w, 0u, 0x1404);  // halves: byte0 << 8, byte1 << 8
  const uint32_t hi = __byte_perm(w, 0u, 0x3424);  // halves: byte2 << 8, byte3 << 8
  const uint32_t hlo = (lo & 0x80008000u) | ((lo >> 1) & 0x3f803f80u);
  const uint32_t hhi = (hi & 0x80008000u) | ((hi >> 1) & 0x3f803f80u);
  __half2_raw rlo, rhi;
  rlo.x = uint16_t(hlo), rlo.y = uint16_t(hlo >> 16);
  rhi.x = uint16_t(hhi), rhi.y = uint16_t(hhi >> 16);
  const float2 a = __half22float2(__half2(rlo)), b = __half22float2(__half2(rhi));
  v0 = a.x, v1 = a.y, v2 = b.x, v3 = b.y;
}

__device__ __forceinline__ float fp8_e4m3_to_f32(uint8_t v) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3);
  return __half2float(__half(h));
}

__device__ __forceinline__ bool is_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace pg::ops::cuda
