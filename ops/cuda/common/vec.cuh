// 16-byte vector loads and the register-level unpacking of weight formats (bf16, fp8 e4m3).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/common/nvfp4_layout.h"

namespace pg::ops::cuda {

// 16 bytes of read-only, read-once data (weights); p must be 16-byte aligned. The non-coherent
// load, evict-first (".cs": LDG.E.EF.CONSTANT, no extra instruction): a decode step streams ~10 GB
// of weights through the 50 MB L2, which would otherwise evict with them what every layer re-reads
// (the kernels' code, ~30K instructions a layer, and the activations). On the H200 a 4 GiB
// read-only reduction reached 4.53 TB/s with the plain ".nc" load and 4.22 TB/s with
// ".L1::no_allocate.L2::256B" (bench_ops_cuda, 2026-11-30).
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.cs.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 16 bytes of read-only data that other warps of the SM re-read (kept in L1).
__device__ __forceinline__ float4 ld_f4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }

// Activations: data an earlier kernel wrote. A kernel launched with PDL starts while that kernel
// runs, so these loads must stay after pdl_wait(). A __ldg (ld.global.nc) promises data that no
// one writes while the kernel runs, so the compiler may hoist it above the wait (it did: the MoE
// down kernel read stale h in the decode graph). Plain loads stay below the wait's "memory"
// clobber and still hit L1 (an L2-only ld.global.cg cost the fp8 MoE 2.2x: x is re-read by every
// warp).
__device__ __forceinline__ float4 ld_act4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float ld_act(const float* p) { return *p; }

// Two bf16 packed in a 32-bit word (element 0 in the low half) -> exact f32.
__device__ __forceinline__ void bf16x2_to_f32(uint32_t u, float& lo, float& hi) {
  lo = __uint_as_float(u << 16);
  hi = __uint_as_float(u & 0xffff0000u);
}

// Two fp8 e4m3fn in a 16-bit value (element 0 in the low byte) -> exact f32: one
// cvt.rn.f16x2.e4m3x2 (sm_89+; every e4m3 value is exact in f16) then f16 -> f32. An integer-op
// unpack (byte_perm + masks into f16 bits) measured slower on the H200: the fp8 GEMV at
// 7168x18432 took 64.7 us with it against 48.4 us with this (bench_ops_cuda, 2026-11-30).
__device__ __forceinline__ float2 fp8x2_e4m3_to_f32(uint32_t two_bytes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xffffu), __NV_E4M3);
  return __half22float2(__half2(h));
}

__device__ __forceinline__ float fp8_e4m3_to_f32(uint8_t v) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3);
  return __half2float(__half(h));
}

// Eight NVFP4 e2m1 codes of a 32-bit word in the device layout (nvfp4_layout.h: element 2j's code
// at bits 3..1 and 7 of byte j, element 2j + 1's at bits 6..4 and 0) as four f16x2 words, each value
// times 2^-14 exactly, with integer ops only. An e2m1 code is s e1 e0 m (value (-1)^s 2^(E-1) (1 +
// m/2) for E = e1e0 > 0, and (-1)^s m / 2 for E = 0). Its three magnitude bits placed at f16 bits
// 11..9 make the f16 exponent field E and top mantissa bit m: 2^(E-15) (1 + m/2) = value * 2^-14
// for E > 0, and for E = 0 the subnormal m * 2^-15 = value * 2^-14; the sign goes to bit 15.
// h[i] = f16x2(element i, element i + 4) (low, high half).
//
// The f16's low byte is zero, so each code only needs its high byte s000 e1e0m0, which the device
// layout already holds for the even elements: bytes 1 and 3 are h[2] under one mask, bytes 0 and 2
// h[0] after a shift. The odd elements' high bytes are built in place (`odd`: magnitude down 3, sign
// up 7), then one byte_perm (bytes 0, 2 -> 1, 3) or one mask (bytes 1, 3 stay) each: 9 integer ops
// a word (11 with the checkpoint's nibbles). e2m1x8_to_f16x2_direct places each output straight
// from w (11 ops, fewer live temporaries). Both give the bits of e2m1_to_f32 * 2^-14 for every code.
__device__ __forceinline__ void e2m1x8_to_f16x2(uint32_t w, uint32_t (&h)[4]) {
  h[0] = (w << 8) & 0x8E008E00u;  // elements 0, 4
  h[2] = w & 0x8E008E00u;         // elements 2, 6
  const uint32_t odd = ((w >> 3) & 0x0E0E0E0Eu) | ((w << 7) & 0x80808080u);
  h[1] = __byte_perm(odd, 0u, 0x2404);  // bytes (0, odd.0, 0, odd.2): elements 1, 5
  h[3] = odd & 0xFF00FF00u;             // elements 3, 7
}

// The same placement, each output straight from w: more ops but fewer live temporaries;
// nvfp4_mma_stream at 2 tiles x 2 steps spilled (4 bytes) with the one above.
__device__ __forceinline__ void e2m1x8_to_f16x2_direct(uint32_t w, uint32_t (&h)[4]) {
  h[0] = (w << 8) & 0x8E008E00u;
  h[1] = ((w << 5) & 0x0E000E00u) | ((w << 15) & 0x80008000u);
  h[2] = w & 0x8E008E00u;
  h[3] = ((w >> 3) & 0x0E000E00u) | ((w << 7) & 0x80008000u);
}

// One f16x2 word -> two exact f32 (low half first). A register reinterpretation: the halves are
// read by the conversions directly (no masks or shifts to split the word).
__device__ __forceinline__ float2 f16x2_bits_to_f32(uint32_t h) {
  __half2 v;
  memcpy(&v, &h, sizeof(v));
  return __half22float2(v);
}

// One e2m1 code (low 4 bits of v: s e1 e0 m) -> exact f32 (the scalar paths; a device byte's codes:
// nvfp4_device_code).
__device__ __forceinline__ float e2m1_to_f32(uint32_t v) {
  __half_raw r;
  r.x = static_cast<unsigned short>(((v & 7u) << 9) | ((v & 8u) << 12));
  return __half2float(__half(r)) * 16384.0f;  // undo the 2^-14 of the f16 placement (exact)
}

// 2^14: the factor the f16 placement above leaves out, folded into a kernel's per-row scale.
constexpr float kE2m1F16Unscale = 16384.0f;

// ---- NVFP4 on the f16 tensor cores (linear/nvfp4_mma.cuh, moe_experts/nvfp4_kernel.cu) ----

// Two f32 -> f16x2 (lo in the low half), round to nearest even, saturating: |v| > 65504 becomes
// +-65504 (f16's largest finite) instead of inf; NaN stays NaN. One cvt.rn.satfinite.f16x2.f32.
__device__ __forceinline__ uint32_t f32x2_to_f16x2_sat(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

// Two e4m3fn (low byte first) -> f16x2 bits, exact (every e4m3 value is an f16).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2_bits(uint32_t two_bytes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xffffu), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// The two e4m3fn in bits 16..31 of w -> f16x2 bits, exact: the cvt reads the high half directly
// (F2FP's .H1 operand), where e4m3x2_to_f16x2_bits(w >> 16) costs a shift first.
__device__ __forceinline__ uint32_t e4m3x2_hi_to_f16x2_bits(uint32_t w) {
  uint32_t d;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;\n}" : "=r"(d) : "r"(w));
  return d;
}

// f16x2 product, round to nearest, subnormals kept (no .ftz for f16 in PTX's default).
__device__ __forceinline__ uint32_t hmul2_bits(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// d += A (16x16 f16, row) x B (16x8 f16, col) in f32: mma.sync m16n8k16. Fragments (g = lane/4,
// t = lane%4): a0 (row g, k 2t..2t+1), a1 (row g+8, k 2t..), a2 (row g, k 2t+8..), a3 (row g+8,
// k 2t+8..); b0 (k 2t..2t+1, col g), b1 (k 2t+8.., col g); d0,d1 (row g, cols 2t, 2t+1), d2,d3
// (row g+8, cols 2t, 2t+1).
__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                 uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The same product with bf16 A and B (fragments as above).
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ bool is_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace pg::ops::cuda
