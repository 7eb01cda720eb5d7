// round_rows_e4m3 (model/activation_quant.h): the W4A8 probe's rounding of activations.
#include "model/activation_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"

namespace pg {
namespace {

TEST(RoundRowsE4m3, EachRowScaledToItsOwnMaxThenRounded) {
  // Row 0: amax 448, scale 1: e4m3's own values. 1.0625 is the tie between 1 and 1.125 (3 mantissa
  // bits): to even, 1; 300 lies between 288 and 320 (steps of 32 above 256): nearest, 288.
  // Row 1: amax 7, scale 7 / 448 = 1/64 (exact): 7 -> 448 -> 7, 0.1 * 64 = 6.4 -> 6.5 -> 0.1015625.
  const std::vector<float> x = {448.0f, 1.0625f, -300.0f, 0.0f, 7.0f, 0.1f, -7.0f, 0.0f};
  std::vector<float> out(x.size());
  round_rows_e4m3(x.data(), 2, 4, 0, out.data());
  EXPECT_EQ(out[0], 448.0f);
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[2], -288.0f);
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_EQ(out[4], 7.0f);
  EXPECT_EQ(out[5], 6.5f / 64.0f);
  EXPECT_EQ(out[6], -7.0f);
  EXPECT_EQ(out[7], 0.0f);
}

TEST(RoundRowsE4m3, StridedRowsZeroRowsAndNonFiniteRows) {
  const float inf = std::numeric_limits<float>::infinity();
  // Three rows of 2 in a stride of 3 (the third column is never read).
  const std::vector<float> x = {0.0f, 0.0f, 99.0f, inf, 1.0f, 99.0f, 3.0f, -1.0f, 99.0f};
  std::vector<float> out(6, -1.0f);
  round_rows_e4m3(x.data(), 3, 2, 3, out.data());
  EXPECT_EQ(out[0], 0.0f);  // zeros stay zeros
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], inf);   // a non-finite row is left as it is
  EXPECT_EQ(out[3], 1.0f);
  EXPECT_FLOAT_EQ(out[4], 3.0f);  // scale 3 / 448: 3 -> 448 -> 3 (up to the scale's rounding)
  // -1 * 448 / 3 = -149.33: steps of 16 between 128 and 256, so -144 (nearer than -160), times 3 / 448.
  EXPECT_FLOAT_EQ(out[5], -144.0f * (3.0f / 448.0f));
}

TEST(RoundRowsE4m3, EveryValueIsAnE4m3CodeTimesTheRowScale) {
  std::vector<float> x(256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.37f) * float(i % 17 + 1);
  std::vector<float> out(x.size());
  round_rows_e4m3(x.data(), 1, int64_t(x.size()), 0, out.data());
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float scale = amax / 448.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    const float code = out[i] / scale;
    EXPECT_NEAR(f8e4m3_to_f32(f32_to_f8e4m3(code, Overflow::kSaturate)), code, std::fabs(code) * 1e-6f) << i;
    EXPECT_LE(std::fabs(out[i] - x[i]), std::fabs(x[i]) / 16.0f + scale * 0x1p-9f) << i;  // half an ulp (3 bits)
  }
}

}  // namespace
}  // namespace pg
