// The CPU definition of the fused op rmsnorm_residual (no GPU): it equals, bit for bit, the
// residual add followed by ops::cpu::rmsnorm, also when y aliases x; bad arguments are refused.
#include <gtest/gtest.h>

#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "tests/ops/random.h"

namespace pg::ops::test {
namespace {

TEST(RmsNormResidualCpu, EqualsAddThenRmsNorm) {
  for (int64_t n : {1, 7, 512, 2048}) {
    const int64_t m = 3;
    std::vector<float> x(size_t(m * n)), r(size_t(m * n)), w(static_cast<size_t>(n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = uniform_pm1(1, i), r[i] = 5 * uniform_pm1(2, i);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 1 + uniform_pm1(3, i);

    // Composition: r2 = r + x; y2 = rmsnorm(r2).
    std::vector<float> r2 = r, y2(x.size());
    for (size_t i = 0; i < r2.size(); ++i) r2[i] += x[i];
    RmsNormArgs na;
    na.x = r2.data(), na.weight = w.data(), na.y = y2.data(), na.m = m, na.n = n;
    cpu::rmsnorm(na);

    std::vector<float> r1 = r, y1(x.size());
    RmsNormResidualArgs a;
    a.x = x.data(), a.residual = r1.data(), a.weight = w.data(), a.y = y1.data(), a.m = m, a.n = n;
    ASSERT_TRUE(validate(a).ok());
    cpu::rmsnorm_residual(a);
    EXPECT_EQ(r1, r2);
    EXPECT_EQ(y1, y2);

    // y aliasing x: same bits.
    std::vector<float> x3 = x, r3 = r;
    a.x = x3.data(), a.residual = r3.data(), a.y = x3.data();
    ASSERT_TRUE(validate(a).ok());
    cpu::rmsnorm_residual(a);
    EXPECT_EQ(r3, r2);
    EXPECT_EQ(x3, y2);
  }
}

TEST(RmsNormResidualCpu, RejectsBadArguments) {
  std::vector<float> v(16);
  RmsNormResidualArgs a;
  a.x = v.data(), a.residual = v.data() + 4, a.weight = v.data(), a.y = v.data() + 8, a.m = 1, a.n = 4;
  EXPECT_TRUE(validate(a).ok());
  a.y = a.residual;
  EXPECT_FALSE(validate(a).ok());  // y must not alias the residual stream
  a.y = v.data() + 8;
  a.x_stride = 3;
  EXPECT_FALSE(validate(a).ok());  // stride below n
  a.x_stride = 0;
  a.residual = nullptr;
  EXPECT_FALSE(validate(a).ok());
}

}  // namespace
}  // namespace pg::ops::test
