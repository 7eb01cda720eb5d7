// NVFP4 codes on the device: each byte of a checkpoint's packed e2m1 pairs rearranged once, at
// upload, so that the tensor-core kernels unpack a 32-bit word of 8 codes into four f16x2 words in
// 9 integer ops instead of 11 (vec.cuh's e2m1x8_to_f16x2; measured on the H200, 2026-12-03: +2.0%
// decode tok/s at moonlight NVFP4, +2.3% at V3 4 layers, the verify step -2.1%).
//
// A checkpoint byte holds element 2j in its low nibble and 2j + 1 in its high nibble, each code
// s e1 e0 m (sign, then the 3 magnitude bits). On the device the same byte holds the same two
// elements, placed where the unpack wants them:
//   bit   7   6   5   4   3   2   1   0
//   ckpt  sH  eH  eH' mH  sL  eL  eL' mL      (H: element 2j + 1, L: element 2j)
//   dev   sL  eH  eH' mH  eL  eL' mL  sH
// L's magnitude at bits 3..1 and its sign at bit 7 is already the high byte of its f16 placement
// (code x 2^-14: magnitude at f16 bits 11..9, sign at 15), so the even elements of a word need one
// mask (bytes 1, 3) or a shift and a mask (bytes 0, 2); H keeps its magnitude at bits 6..4, its sign
// moves to bit 0. A permutation of each byte's bits: the bytes stay where they were, so every
// kernel's addressing (rows, 16-byte chunks, k-steps) is unchanged; only what reads the codes
// inside a byte or word uses this layout (vec.cuh's unpacks, nvfp4_device_code below).
// Host copies (ops::, the CPU model, files) keep the checkpoint's layout.
// No CUDA headers: the host tests use it too. The in-place conversion: nvfp4_layout_launch.h.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PG_NVFP4_HD __host__ __device__
#else
#define PG_NVFP4_HD
#endif

namespace pg::ops::cuda {

// A checkpoint byte in the device layout, and back.
PG_NVFP4_HD constexpr uint8_t nvfp4_device_byte(uint8_t b) {
  return uint8_t((b & 0x70u) | ((b & 0x07u) << 1) | ((b & 0x08u) << 4) | (b >> 7));
}
PG_NVFP4_HD constexpr uint8_t nvfp4_checkpoint_byte(uint8_t d) {
  return uint8_t(((d >> 1) & 0x07u) | ((d >> 4) & 0x08u) | (d & 0x70u) | ((d & 0x01u) << 7));
}
// The same on the four bytes of a word at once.
PG_NVFP4_HD constexpr uint32_t nvfp4_device_word(uint32_t w) {
  return (w & 0x70707070u) | ((w & 0x07070707u) << 1) | ((w & 0x08080808u) << 4) | ((w >> 7) & 0x01010101u);
}

// The e2m1 code (s e1 e0 m, low 4 bits) of element 2j + odd from device byte j.
PG_NVFP4_HD constexpr uint32_t nvfp4_device_code(uint32_t d, uint32_t odd) {
  return odd ? ((d >> 4) & 0x07u) | ((d & 0x01u) << 3) : ((d >> 1) & 0x07u) | ((d >> 4) & 0x08u);
}

// The e2m1 code (checkpoint order: s e1 e0 m) of x, already divided by its block scale, as
// formats/nvfp4.h's nvfp4_encode (the device quantizer's, nvfp4_quantize.h):
// round to nearest, ties to the even mantissa, magnitudes above 6 (and inf) saturate to 6, the
// sign bit set only for x < 0 (so +0 and -0 give 0, and -0.1 gives 0x8), NaN gives 0.
PG_NVFP4_HD constexpr uint8_t nvfp4_encode_rne(float x) {
  const float a = x < 0 ? -x : x;
  const uint8_t mag = a > 5.0f    ? 7
                      : a >= 3.5f  ? 6
                      : a > 2.5f   ? 5
                      : a >= 1.75f ? 4
                      : a > 1.25f  ? 3
                      : a >= 0.75f ? 2
                      : a > 0.25f  ? 1
                                   : 0;
  return uint8_t(mag | (x < 0 ? 8 : 0));
}

}  // namespace pg::ops::cuda
