// Exhaustive checks of the narrow float formats: every code decodes to the value the format
// defines and re-encodes to itself; rounding from f32 matches an independent oracle
// (nearest value in the sorted list of representable values, ties to the even code);
// NaN / inf / saturation rules are spelled out case by case.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace pg {
namespace {

struct Format {
  const char* name;
  const MiniFloatSpec* spec;
  int bits;
};
const Format kFormats[] = {{"f16", &kSpecF16, 16},
                           {"bf16", &kSpecBF16, 16},
                           {"e4m3", &kSpecE4M3, 8},
                           {"e5m2", &kSpecE5M2, 8},
                           {"e2m1", &kSpecE2M1, 4}};

// The oracle: positive finite values in code order (which is value order), plus one virtual
// "overflow" value one ulp above the maximum, so ties at the top follow the even-code rule.
struct Oracle {
  std::vector<double> values;  // index = code
  explicit Oracle(const MiniFloatSpec& s) {
    const uint32_t n_pos = 1u << (s.exp_bits + s.man_bits);
    for (uint32_t c = 0; c < n_pos; ++c) {
      double v = minifloat_decode(s, c);
      if (!std::isfinite(v)) break;
      values.push_back(v);
    }
    const double top = values.back(), below = values[values.size() - 2];
    values.push_back(top + (top - below));  // the overflow "code"
  }
  // Returns the code for |x|; code == values.size()-1 means overflow.
  uint32_t round(double a) const {
    auto it = std::lower_bound(values.begin(), values.end(), a);
    if (it == values.end()) return uint32_t(values.size() - 1);
    uint32_t hi = uint32_t(it - values.begin());
    if (*it == a || hi == 0) return hi;
    uint32_t lo = hi - 1;
    const double dlo = a - values[lo], dhi = values[hi] - a;
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo % 2 == 0) ? lo : hi;  // tie: even code (mantissa lsb 0)
  }
};

TEST(DType, EveryCodeRoundTrips) {
  for (const auto& f : kFormats) {
    SCOPED_TRACE(f.name);
    for (uint32_t c = 0; c < (1u << f.bits); ++c) {
      const double v = minifloat_decode(*f.spec, c);
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(double(minifloat_decode(*f.spec, minifloat_encode(*f.spec, float(v), Overflow::kInfOrNaN)))));
        continue;
      }
      ASSERT_EQ(double(float(v)), v) << "every value must be exact in f32";
      EXPECT_EQ(minifloat_encode(*f.spec, float(v), Overflow::kInfOrNaN), c) << "code " << c;
    }
  }
}

TEST(DType, FastPathsEqualTheDefinition) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const double bf = minifloat_decode(kSpecBF16, c), h = minifloat_decode(kSpecF16, c);
    if (std::isnan(bf)) EXPECT_TRUE(std::isnan(bf16_to_f32(uint16_t(c))));
    else EXPECT_EQ(double(bf16_to_f32(uint16_t(c))), bf);
    if (std::isnan(h)) EXPECT_TRUE(std::isnan(f16_to_f32(uint16_t(c))));
    else EXPECT_EQ(double(f16_to_f32(uint16_t(c))), h) << c;
  }
  for (uint32_t c = 0; c < 256; ++c) {
    const double a = minifloat_decode(kSpecE4M3, c), b = minifloat_decode(kSpecE5M2, c);
    if (std::isnan(a)) EXPECT_TRUE(std::isnan(f8e4m3_to_f32(uint8_t(c))));
    else EXPECT_EQ(double(f8e4m3_to_f32(uint8_t(c))), a);
    if (std::isnan(b)) EXPECT_TRUE(std::isnan(f8e5m2_to_f32(uint8_t(c))));
    else EXPECT_EQ(double(f8e5m2_to_f32(uint8_t(c))), b);
  }
  for (uint32_t c = 0; c < 16; ++c) EXPECT_EQ(double(e2m1_to_f32(uint8_t(c))), minifloat_decode(kSpecE2M1, c));
}

TEST(DType, KnownValues) {
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x08), 0.015625f);            // 2^-6, smallest normal
  EXPECT_EQ(f8e4m3_to_f32(0x01), 0.001953125f);         // 2^-9, smallest subnormal
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0xff)));
  EXPECT_EQ(f8e4m3_to_f32(0x78), 256.0f);  // S.1111.000 is a number in e4m3fn
  EXPECT_EQ(f8e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_TRUE(std::isinf(f8e5m2_to_f32(0x7c)));
  EXPECT_TRUE(std::isnan(f8e5m2_to_f32(0x7d)));
  EXPECT_EQ(f8e5m2_to_f32(0x01), 1.52587890625e-05f);  // 2^-16
  const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(e2m1_to_f32(uint8_t(i)), e2m1[i]);
    EXPECT_EQ(e2m1_to_f32(uint8_t(i | 8)), -e2m1[i]);
  }
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 5.9604644775390625e-8f);
}

// Rounding from f32 against the oracle, on every f32 whose low 13 bits are one of a few
// patterns (this hits every midpoint and neighbour of every 8-bit and 16-bit value) and
// on random f32s.
TEST(DType, RoundingMatchesOracle) {
  std::mt19937 rng(1234);
  for (const auto& f : kFormats) {
    SCOPED_TRACE(f.name);
    const Oracle oracle(*f.spec);
    const uint32_t overflow_code = uint32_t(oracle.values.size() - 1);
    auto check = [&](float x) {
      if (!std::isfinite(x)) return;
      const uint32_t sign_bit = 1u << (f.bits - 1);
      const uint32_t expect_mag = oracle.round(std::fabs(double(x)));
      for (Overflow ov : {Overflow::kSaturate, Overflow::kInfOrNaN}) {
        const uint32_t got = minifloat_encode(*f.spec, x, ov);
        const bool neg = std::signbit(x);
        if (expect_mag == overflow_code) {
          const double g = minifloat_decode(*f.spec, got);
          if (ov == Overflow::kSaturate || f.spec->special == MiniFloatSpec::Special::kNone) {
            ASSERT_EQ(std::fabs(g), f.spec->max_finite()) << x;
          } else if (f.spec->special == MiniFloatSpec::Special::kIeee) {
            ASSERT_TRUE(std::isinf(g)) << x;
          } else {
            ASSERT_TRUE(std::isnan(g)) << x;
          }
          ASSERT_EQ(bool(got & sign_bit), neg) << x;
        } else {
          ASSERT_EQ(got, expect_mag | (neg ? sign_bit : 0u)) << "x=" << x;
        }
      }
    };
    for (uint32_t hi = 0; hi < (1u << 19); ++hi) {
      for (uint32_t lo : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu}) {
        const uint32_t b = (hi << 13) | lo;
        check(bits_to_f32(b));
      }
    }
    for (int i = 0; i < 200000; ++i) check(bits_to_f32(rng()));
  }
}

TEST(DType, Bf16FastRoundingEqualsDefinition) {
  std::mt19937 rng(99);
  for (int i = 0; i < 2000000; ++i) {
    const float x = bits_to_f32(rng());
    const uint16_t fast = f32_to_bf16(x);
    const uint32_t slow = minifloat_encode(kSpecBF16, x, Overflow::kInfOrNaN);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(fast)));
    } else {
      ASSERT_EQ(fast, slow) << x;
    }
  }
  for (uint32_t c = 0; c < 65536; ++c) {  // every bf16 value, and its midpoints
    for (uint32_t lo : {0x0000u, 0x7fffu, 0x8000u, 0x8001u}) {
      const float x = bits_to_f32((c << 16) | lo);
      if (std::isnan(x)) continue;
      ASSERT_EQ(f32_to_bf16(x), minifloat_encode(kSpecBF16, x, Overflow::kInfOrNaN)) << c << " " << lo;
    }
  }
}

TEST(DType, SpecialValueRules) {
  // e4m3fn: no inf. torch's .to() semantics: overflow -> NaN; saturating: clamp to 448.
  EXPECT_EQ(f32_to_f8e4m3(460.0f), 0x7e);          // rounds down to 448
  EXPECT_EQ(f32_to_f8e4m3(464.0f), 0x7e);          // tie -> even (448 has mantissa 110)
  EXPECT_EQ(f32_to_f8e4m3(470.0f), 0x7f);          // rounds to 480: not representable -> NaN
  EXPECT_EQ(f32_to_f8e4m3(INFINITY), 0x7f);
  EXPECT_EQ(f32_to_f8e4m3(-INFINITY), 0xff);
  EXPECT_EQ(f32_to_f8e4m3(1e6f, Overflow::kSaturate), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(-INFINITY, Overflow::kSaturate), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(NAN, Overflow::kSaturate) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_f8e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_f8e4m3(0.0009765625f), 0x00);  // 2^-10: tie between 0 and 2^-9 -> 0 (even)
  EXPECT_EQ(f32_to_f8e4m3(0.00146484375f), 0x01);  // 1.5 * 2^-10 -> 2^-9
  // e5m2: IEEE-like.
  EXPECT_EQ(f32_to_f8e5m2(61440.0f), 0x7c);  // tie at the top: odd max -> inf
  EXPECT_EQ(f32_to_f8e5m2(61439.0f), 0x7b);
  EXPECT_EQ(f32_to_f8e5m2(1e9f, Overflow::kSaturate), 0x7b);
  EXPECT_EQ(f32_to_f8e5m2(-INFINITY), 0xfc);
  EXPECT_TRUE(std::isnan(f8e5m2_to_f32(f32_to_f8e5m2(NAN))));
  // e2m1: saturating, ties to even.
  EXPECT_EQ(f32_to_e2m1(0.25f), 0x0);
  EXPECT_EQ(f32_to_e2m1(0.75f), 0x2);
  EXPECT_EQ(f32_to_e2m1(1.25f), 0x2);
  EXPECT_EQ(f32_to_e2m1(1.75f), 0x4);
  EXPECT_EQ(f32_to_e2m1(2.5f), 0x4);
  EXPECT_EQ(f32_to_e2m1(3.5f), 0x6);
  EXPECT_EQ(f32_to_e2m1(5.0f), 0x6);
  EXPECT_EQ(f32_to_e2m1(5.01f), 0x7);
  EXPECT_EQ(f32_to_e2m1(100.0f), 0x7);
  EXPECT_EQ(f32_to_e2m1(-INFINITY), 0xf);
  EXPECT_EQ(f32_to_e2m1(-0.1f), 0x8);
  // bf16 / f16 overflow to inf, NaN stays NaN.
  EXPECT_EQ(f32_to_bf16(3.4028235e38f), 0x7f80);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // tie at the top -> inf
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
}

TEST(DType, SafetensorsNames) {
  EXPECT_EQ(dtype_from_safetensors("BF16"), DType::kBF16);
  EXPECT_EQ(dtype_from_safetensors("F8_E4M3"), DType::kF8E4M3);
  EXPECT_EQ(dtype_from_safetensors("U8"), DType::kU8);
  EXPECT_FALSE(dtype_from_safetensors("bf16").has_value());
  EXPECT_FALSE(dtype_from_safetensors("Q4_K").has_value());
  EXPECT_EQ(dtype_bits(DType::kE2M1), 4);
}

}  // namespace
}  // namespace pg
