// The CPU definition of the fused op linear_norm (no GPU): it equals, bit for bit, ops::cpu::rmsnorm
// and ops::cpu::linear composed in its order; bad arguments are refused.
#include <gtest/gtest.h>

#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/linear_norm.h"
#include "tests/ops/random.h"

namespace pg::ops::test {
namespace {

struct Data {
  std::vector<float> w, x, y0, g_in, g_out;
  Matrix m;
};
Data make(int64_t m, int64_t n, int64_t k) {
  Data d;
  d.w.resize(size_t(n * k)), d.x.resize(size_t(m * k)), d.y0.resize(size_t(m * n));
  d.g_in.resize(size_t(k)), d.g_out.resize(size_t(n));
  for (size_t i = 0; i < d.w.size(); ++i) d.w[i] = uniform_pm1(1, i);
  for (size_t i = 0; i < d.x.size(); ++i) d.x[i] = 3 * uniform_pm1(2, i);
  for (size_t i = 0; i < d.y0.size(); ++i) d.y0[i] = 4 * uniform_pm1(3, i);
  for (size_t i = 0; i < d.g_in.size(); ++i) d.g_in[i] = 1 + 0.5f * uniform_pm1(4, i);
  for (size_t i = 0; i < d.g_out.size(); ++i) d.g_out[i] = 1 + 0.5f * uniform_pm1(5, i);
  d.m = Matrix{WeightFormat::kF32, n, k, d.w.data()};
  return d;
}

TEST(LinearNormCpu, InNormEqualsRmsNormThenLinear) {
  for (int64_t k : {1, 7, 52, 2048}) {
    const int64_t m = 3, n = 37;
    Data d = make(m, n, k);
    std::vector<float> xn(d.x.size()), y_ref(d.y0.size());
    cpu::rmsnorm(RmsNormArgs{d.x.data(), d.g_in.data(), xn.data(), m, k, 0, 0, 1e-6f});
    LinearArgs la;
    la.x = xn.data(), la.w = &d.m, la.y = y_ref.data(), la.m = m;
    cpu::linear(la, ThreadPool::global());

    std::vector<float> y(d.y0.size());
    LinearNormArgs a;
    a.lin = la, a.lin.x = d.x.data(), a.lin.y = y.data(), a.in_norm = d.g_in.data();
    ASSERT_TRUE(validate(a).ok());
    cpu::linear_norm(a, ThreadPool::global());
    EXPECT_EQ(y, y_ref) << "k=" << k;
  }
}

TEST(LinearNormCpu, OutNormEqualsLinearThenRmsNorm) {
  for (int64_t n : {1, 7, 52, 2048}) {
    const int64_t m = 3, k = 29;
    Data d = make(m, n, k);
    std::vector<float> y_ref = d.y0, z_ref(d.y0.size());
    LinearArgs la;
    la.x = d.x.data(), la.w = &d.m, la.y = y_ref.data(), la.m = m, la.accumulate = true;
    cpu::linear(la, ThreadPool::global());
    cpu::rmsnorm(RmsNormArgs{y_ref.data(), d.g_out.data(), z_ref.data(), m, n, 0, 0, 1e-6f});

    std::vector<float> y = d.y0, z(d.y0.size());
    LinearNormArgs a;
    a.lin = la, a.lin.y = y.data(), a.out_norm = d.g_out.data(), a.y_normed = z.data();
    ASSERT_TRUE(validate(a).ok());
    cpu::linear_norm(a, ThreadPool::global());
    EXPECT_EQ(y, y_ref) << "n=" << n;
    EXPECT_EQ(z, z_ref) << "n=" << n;
  }
}

TEST(LinearNormCpu, RefusesBadArguments) {
  Data d = make(2, 4, 4);
  std::vector<float> y(8), z(8);
  LinearNormArgs a;
  a.lin.x = d.x.data(), a.lin.w = &d.m, a.lin.y = y.data(), a.lin.m = 2;
  EXPECT_FALSE(validate(a).ok()) << "no norm";
  a.in_norm = d.g_in.data(), a.out_norm = d.g_out.data(), a.y_normed = z.data();
  EXPECT_FALSE(validate(a).ok()) << "both norms";
  a.in_norm = nullptr, a.y_normed = nullptr;
  EXPECT_FALSE(validate(a).ok()) << "out_norm without y_normed";
  a.y_normed = y.data();
  EXPECT_FALSE(validate(a).ok()) << "y_normed aliasing y";
  a.y_normed = z.data(), a.y_normed_stride = 3;
  EXPECT_FALSE(validate(a).ok()) << "y_normed stride below n";
  a.y_normed_stride = 0;
  EXPECT_TRUE(validate(a).ok());
}

}  // namespace
}  // namespace pg::ops::test
