// The NVFP4 device layout (ops/cuda/common/nvfp4_layout.h), exhaustively on the host: each byte's
// bits permuted (a bijection, undone by nvfp4_checkpoint_byte), the word form equal to the byte
// form on every byte position, and nvfp4_device_code giving back the checkpoint's nibbles. The
// device unpacks that read this layout (vec.cuh) are checked against the CPU on the H200 by the
// NVFP4 op tests (Nvfp4DequantCuda bit for bit, LinearCuda, MoeExpertsCuda). Also the device
// quantizer's e2m1 rounding (nvfp4_encode_rne) against the CPU quantizer's (nvfp4_encode).
#include "ops/cuda/common/nvfp4_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>

#include "formats/nvfp4.h"

namespace pg::ops::cuda {
namespace {

TEST(Nvfp4Layout, BytePermutationIsABijectionWithItsInverse) {
  std::set<int> seen;
  for (int b = 0; b < 256; ++b) {
    const uint8_t d = nvfp4_device_byte(uint8_t(b));
    seen.insert(d);
    EXPECT_EQ(nvfp4_checkpoint_byte(d), b) << "byte " << b;
    EXPECT_EQ(__builtin_popcount(unsigned(d)), __builtin_popcount(unsigned(b))) << "a permutation of bits: byte " << b;
  }
  EXPECT_EQ(seen.size(), 256u);
}

TEST(Nvfp4Layout, CodesComeBackFromTheirDeviceByte) {
  for (int b = 0; b < 256; ++b) {
    const uint8_t d = nvfp4_device_byte(uint8_t(b));
    EXPECT_EQ(nvfp4_device_code(d, 0), uint32_t(b & 0xf)) << "element 2j of byte " << b;
    EXPECT_EQ(nvfp4_device_code(d, 1), uint32_t(b >> 4)) << "element 2j + 1 of byte " << b;
  }
}

TEST(Nvfp4Layout, WordFormIsTheByteFormOnEveryByte) {
  for (int pos = 0; pos < 4; ++pos)
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t fill = 0xA5C3E187u & ~(0xffu << (8 * pos));  // other bytes: fixed, distinct
      const uint32_t w = fill | (b << (8 * pos));
      uint32_t want = 0;
      for (int k = 0; k < 4; ++k) want |= uint32_t(nvfp4_device_byte(uint8_t(w >> (8 * k)))) << (8 * k);
      EXPECT_EQ(nvfp4_device_word(w), want) << "byte " << b << " at position " << pos;
    }
}

// The even element's code as the unpack takes it (vec.cuh): its device byte's bits 3..1 and 7 are
// the high byte of its f16 placement (magnitude at f16 bits 11..9, sign at 15); the odd element's
// magnitude sits at bits 6..4 and its sign at bit 0.
TEST(Nvfp4Layout, EvenCodesSitWhereTheirF16HighByteWantsThem) {
  for (int b = 0; b < 256; ++b) {
    const uint32_t d = nvfp4_device_byte(uint8_t(b)), lo = uint32_t(b & 0xf), hi = uint32_t(b >> 4);
    EXPECT_EQ(d & 0x8Eu, ((lo & 7u) << 1) | ((lo & 8u) << 4)) << "byte " << b;
    EXPECT_EQ(d & 0x71u, ((hi & 7u) << 4) | (hi >> 3)) << "byte " << b;
  }
}

// Every rounding boundary of e2m1 (the midpoints between its values), the floats either side of
// each, the values themselves, zeros, infinities, NaN, and a sweep of 2^20 floats over [-8, 8]:
// the device quantizer's branch chain rounds as the CPU quantizer's minifloat encoder.
TEST(Nvfp4Layout, DeviceEncodeRoundsAsTheCpuQuantizer) {
  std::vector<float> xs = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), 1e-30f, -1e-30f, 100.0f, -100.0f};
  const float values[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int i = 0; i < 8; ++i) {
    const float mids[] = {values[i], i < 7 ? (values[i] + values[i + 1]) / 2 : 7.0f};
    for (float m : mids)
      for (float x : {m, std::nextafter(m, 0.0f), std::nextafter(m, 100.0f)}) xs.insert(xs.end(), {x, -x});
  }
  for (int i = 0; i < (1 << 20); ++i) xs.push_back(-8.0f + 16.0f * float(i) / float(1 << 20));
  for (float x : xs) EXPECT_EQ(int(nvfp4_encode_rne(x)), int(pg::nvfp4_encode(x))) << "x = " << x;
}

}  // namespace
}  // namespace pg::ops::cuda
