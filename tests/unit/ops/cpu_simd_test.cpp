// The CPU inner loops (ops/cpu/simd.h): every form this processor has gives the portable form's
// bits: dot products at every length from 0 to 80 and around the 16-lane chunks of long rows, over
// values from subnormal to large with both signs (so rounding and cancellation differ between
// orders); the bf16-row dot against the dot of the converted row; axpy; bf16 -> f32 over all
// 65,536 codes.
#include "ops/cpu/simd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace pg::ops::cpu {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

std::vector<float> values(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-140, 20);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = std::ldexp(mant(g), ex(g) / 4 - (ex(g) < -130 ? 120 : 0));
  return v;
}

std::vector<int64_t> lengths() {
  std::vector<int64_t> ns;
  for (int64_t n = 0; n <= 80; ++n) ns.push_back(n);
  for (int64_t n : {255, 256, 257, 1023, 1024, 1031, 7168}) ns.push_back(n);
  return ns;
}

const SimdKernels* portable() { return simd_kernels("portable"); }

TEST(CpuSimd, EveryFormDotsAsThePortableOne) {
  ASSERT_NE(portable(), nullptr);
  std::printf("[ measure  ] CPU loops in use: %s\n", simd_level());
  for (const char* level : {"portable", "avx2", "avx512"}) {
    const SimdKernels* k = simd_kernels(level);
    if (!k) {
      std::printf("[ measure  ] %s: not on this processor, not compared\n", level);
      continue;
    }
    for (int64_t n : lengths()) {
      const auto a = values(n, uint32_t(n) * 2 + 1), b = values(n, uint32_t(n) * 2 + 2);
      EXPECT_EQ(bits(k->dot(a.data(), b.data(), n)), bits(portable()->dot(a.data(), b.data(), n)))
          << level << " dot at n = " << n;
      EXPECT_EQ(bits(simd_dot(a.data(), b.data(), n)), bits(portable()->dot(a.data(), b.data(), n)))
          << "simd_dot at n = " << n;
    }
  }
}

TEST(CpuSimd, Bf16RowDotIsTheDotOfTheConvertedRow) {
  for (const char* level : {"portable", "avx2", "avx512"}) {
    const SimdKernels* k = simd_kernels(level);
    if (!k) continue;
    for (int64_t n : lengths()) {
      const auto x = values(n, uint32_t(n) + 7);
      const auto wf = values(n, uint32_t(n) + 11);
      std::vector<uint16_t> w(static_cast<size_t>(n));
      std::vector<float> wr(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) w[size_t(i)] = f32_to_bf16(wf[size_t(i)]), wr[size_t(i)] = bf16_to_f32(w[size_t(i)]);
      EXPECT_EQ(bits(k->dot_bf16(x.data(), w.data(), n)), bits(portable()->dot(x.data(), wr.data(), n)))
          << level << " at n = " << n;
    }
  }
}

// Several rows at once (1..9 rows, so whole blocks and remainders): each row the bits of its dot.
TEST(CpuSimd, RowsAtOnceDotAsOneAtATime) {
  for (const char* level : {"portable", "avx2", "avx512"}) {
    const SimdKernels* k = simd_kernels(level);
    if (!k) continue;
    for (int64_t n : {0, 5, 16, 37, 256, 1031})
      for (int64_t rows = 1; rows <= 9; ++rows) {
        const int64_t stride = n + 3;
        const auto a = values(rows * stride, uint32_t(n * 16 + rows)), b = values(n, uint32_t(n) + 99);
        std::vector<uint16_t> w(static_cast<size_t>(rows * stride));
        for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(a[i]);
        std::vector<float> got(static_cast<size_t>(rows)), got16(static_cast<size_t>(rows));
        k->dots(a.data(), stride, rows, b.data(), n, got.data());
        k->dots_bf16(b.data(), w.data(), stride, rows, n, got16.data());
        for (int64_t r = 0; r < rows; ++r) {
          EXPECT_EQ(bits(got[size_t(r)]), bits(portable()->dot(a.data() + r * stride, b.data(), n)))
              << level << " dots: n " << n << " rows " << rows << " row " << r;
          EXPECT_EQ(bits(got16[size_t(r)]), bits(portable()->dot_bf16(b.data(), w.data() + r * stride, n)))
              << level << " bf16 dots: n " << n << " rows " << rows << " row " << r;
        }
      }
  }
}

// Tokens against bf16 and f32 rows (1..9 tokens, 1..5 rows: whole token and row blocks and their
// remainders).
TEST(CpuSimd, TokensAgainstBf16RowsDotAsOneAtATime) {
  for (const char* level : {"portable", "avx2", "avx512"}) {
    const SimdKernels* k = simd_kernels(level);
    if (!k) continue;
    for (int64_t n : {0, 7, 16, 40, 256})
      for (int64_t m = 1; m <= 9; ++m)
        for (int64_t rows = 1; rows <= 5; ++rows) {
          const int64_t xs = n + 1, wsd = n + 2, os = rows + 3;
          const auto x = values(m * xs, uint32_t(n * 100 + m * 10 + rows));
          const auto wf = values(rows * wsd, uint32_t(n * 100 + m * 10 + rows + 7));
          std::vector<uint16_t> w(wf.size());
          for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(wf[i]);
          std::vector<float> out(static_cast<size_t>(m * os), -1.0f), out32(out);
          k->dots_bf16_tokens(x.data(), xs, m, w.data(), wsd, rows, n, out.data(), os);
          k->dots_tokens(x.data(), xs, m, wf.data(), wsd, rows, n, out32.data(), os);
          for (int64_t t = 0; t < m; ++t)
            for (int64_t r = 0; r < rows; ++r) {
              ASSERT_EQ(bits(out[size_t(t * os + r)]), bits(portable()->dot_bf16(x.data() + t * xs, w.data() + r * wsd, n)))
                  << level << " bf16: n " << n << " m " << m << " rows " << rows << " at (" << t << ", " << r << ")";
              ASSERT_EQ(bits(out32[size_t(t * os + r)]), bits(portable()->dot(x.data() + t * xs, wf.data() + r * wsd, n)))
                  << level << " f32: n " << n << " m " << m << " rows " << rows << " at (" << t << ", " << r << ")";
            }
        }
  }
}

TEST(CpuSimd, EveryFormAxpysAsThePortableOne) {
  for (const char* level : {"portable", "avx2", "avx512"}) {
    const SimdKernels* k = simd_kernels(level);
    if (!k) continue;
    for (int64_t n : lengths()) {
      const auto x = values(n, uint32_t(n) + 3);
      auto y = values(n, uint32_t(n) + 5), want = y;
      k->axpy(0.37f, x.data(), y.data(), n);
      portable()->axpy(0.37f, x.data(), want.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(y[size_t(i)]), bits(want[size_t(i)])) << level << " n " << n << " at " << i;
    }
  }
}

// Several axpys into one y (0..9 rows): the bits of one axpy after another, in row order.
TEST(CpuSimd, AxpysAreAxpysInRowOrder) {
  for (const char* level : {"portable", "avx2", "avx512"}) {
    const SimdKernels* k = simd_kernels(level);
    if (!k) continue;
    for (int64_t n : {0, 5, 16, 37, 64, 512})
      for (int64_t rows = 0; rows <= 9; ++rows) {
        const int64_t stride = n + 5;
        const auto x = values(rows * stride, uint32_t(n * 10 + rows)), alpha = values(rows, uint32_t(rows) + 77);
        auto y = values(n, uint32_t(n) + 13), want = y;
        k->axpys(alpha.data(), x.data(), stride, rows, y.data(), n);
        for (int64_t r = 0; r < rows; ++r) portable()->axpy(alpha[size_t(r)], x.data() + r * stride, want.data(), n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(bits(y[size_t(i)]), bits(want[size_t(i)])) << level << " n " << n << " rows " << rows << " at " << i;
      }
  }
}

// NVFP4 rows in the dots (1..9 tokens, 1..9 rows): each value the bits of the dot of the row as
// nvfp4_to_f32 dequantizes it (the block scales' e4m3 codes through f8e4m3_to_f32).
TEST(CpuSimd, Nvfp4RowsInTheDotsAsDequantizedRows) {
  for (const char* level : {"portable", "avx2", "avx512"}) {
    const SimdKernels* k = simd_kernels(level);
    if (!k) continue;
    for (int64_t n : {16, 48, 256, 1408})
      for (int64_t m = 1; m <= 9; m += 2)
        for (int64_t rows = 1; rows <= 9; ++rows) {
          const int64_t xs = n + 3, os = rows + 2;
          const auto x = values(m * xs, uint32_t(n * 100 + m * 10 + rows));
          std::vector<uint8_t> packed(static_cast<size_t>(rows * n / 2)), sc(static_cast<size_t>(rows * n / 16));
          for (size_t i = 0; i < packed.size(); ++i) packed[i] = uint8_t((i * 131 + size_t(n + m + rows)) % 256);
          for (size_t i = 0; i < sc.size(); ++i) sc[i] = uint8_t((i * 53 + 7) % 0x7f);  // finite e4m3 codes
          const float s2 = 0.00731f;
          std::vector<float> out(static_cast<size_t>(m * os), -1.0f), row(static_cast<size_t>(n)),
              bs(static_cast<size_t>(n / 16));
          k->dots_nvfp4_tokens(x.data(), xs, m, packed.data(), sc.data(), s2, rows, n, out.data(), os);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t b = 0; b < n / 16; ++b) bs[size_t(b)] = f8e4m3_to_f32(sc[size_t(r * (n / 16) + b)]);
            portable()->nvfp4_to_f32(packed.data() + r * (n / 2), bs.data(), s2, n, row.data());
            for (int64_t t = 0; t < m; ++t)
              ASSERT_EQ(bits(out[size_t(t * os + r)]), bits(portable()->dot(x.data() + t * xs, row.data(), n)))
                  << level << ": n " << n << " m " << m << " rows " << rows << " at (" << t << ", " << r << ")";
          }
        }
  }
}

// NVFP4 rows: every byte value in both nibble positions, block scales from e4m3's range, a scale_2;
// each form against core/dtype.h's e2m1_to_f32 with the two products rounded in order.
TEST(CpuSimd, Nvfp4RowsAsTheDefinition) {
  const int64_t cols = 2 * 256 + 64;  // every byte once, then more
  std::vector<uint8_t> packed(static_cast<size_t>(cols / 2));
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = uint8_t(i * 37 + 11);
  std::vector<float> scales(static_cast<size_t>(cols / 16));
  for (size_t b = 0; b < scales.size(); ++b) scales[b] = f8e4m3_to_f32(uint8_t((b * 29 + 3) % 0x7f));
  const float scale_2 = 0.0371f;
  std::vector<float> want(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    const uint8_t b = packed[size_t(c / 2)];
    want[size_t(c)] = (e2m1_to_f32(c % 2 ? b >> 4 : b & 0xf) * scales[size_t(c / 16)]) * scale_2;
  }
  for (const char* level : {"portable", "avx2", "avx512"}) {
    const SimdKernels* k = simd_kernels(level);
    if (!k) continue;
    std::vector<float> out(static_cast<size_t>(cols), -1.0f);
    k->nvfp4_to_f32(packed.data(), scales.data(), scale_2, cols, out.data());
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(bits(out[size_t(c)]), bits(want[size_t(c)])) << level << " at " << c;
  }
}

TEST(CpuSimd, Bf16ToF32OnEveryCode) {
  std::vector<uint16_t> w(65536 + 5);
  for (size_t i = 0; i < w.size(); ++i) w[i] = uint16_t(i);
  for (const char* level : {"portable", "avx2", "avx512"}) {
    const SimdKernels* k = simd_kernels(level);
    if (!k) continue;
    std::vector<float> out(w.size());
    k->bf16_to_f32(w.data(), out.data(), int64_t(w.size()));
    for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(bits(out[i]), uint32_t(w[i]) << 16) << level << " code " << i;
  }
}

}  // namespace
}  // namespace pg::ops::cpu
