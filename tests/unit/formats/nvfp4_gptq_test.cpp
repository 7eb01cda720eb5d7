// GPTQ for NVFP4 (formats/nvfp4_gptq.h): the Hessian sums, the inverse factor U (Uᵀ U = H⁻¹),
// quantize_nvfp4's bits when no error can move (H = c I), a smaller output error than rounding to
// nearest on correlated inputs, thread-count invariance, unseen inputs, and the errors.
#include "formats/nvfp4_gptq.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace pg {
namespace {

std::vector<float> normal(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

// Calibration inputs with correlated features, as a Linear's inputs are: x = z A + 0.1 noise,
// with a few large "outlier" features.
std::vector<float> correlated_inputs(int64_t m, int64_t n, uint32_t seed) {
  const int64_t k = n / 4;  // latent dimension
  const std::vector<float> z = normal(m * k, seed), a = normal(k * n, seed + 1), e = normal(m * n, seed + 2, 0.1f);
  std::vector<float> x(size_t(m * n));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      float s = e[size_t(r * n + c)];
      for (int64_t i = 0; i < k; ++i) s += z[size_t(r * k + i)] * a[size_t(i * n + c)];
      x[size_t(r * n + c)] = s * (c % 37 == 5 ? 8.0f : 1.0f);
    }
  return x;
}

GptqHessian hessian_of(const std::vector<float>& x, int64_t m, int64_t n, ThreadPool* pool = nullptr) {
  GptqHessian h;
  h.reset(n);
  nvfp4_hessian_add(h, x.data(), m, 0, pool);
  return h;
}

// Σ over calibration rows and weight rows of (x · (w - q))², q the dequantized tensor.
double output_error(const std::vector<float>& x, int64_t m, const std::vector<float>& w, const Nvfp4Tensor& q) {
  std::vector<float> d(size_t(q.rows * q.cols));
  dequantize_nvfp4(q, d.data());
  double err = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t o = 0; o < q.rows; ++o) {
      double s = 0;
      for (int64_t c = 0; c < q.cols; ++c)
        s += double(x[size_t(r * q.cols + c)]) * (double(w[size_t(o * q.cols + c)]) - double(d[size_t(o * q.cols + c)]));
      err += s * s;
    }
  return err;
}

TEST(Nvfp4Gptq, HessianAddSumsTheLowerTriangleInOrderForAnyThreadCount) {
  const int64_t m = 37, n = 48, stride = 53;
  const std::vector<float> x = normal(m * stride, 7);
  GptqHessian h1, h3;
  h1.reset(n);
  h3.reset(n);
  ThreadPool one(1), three(3);
  nvfp4_hessian_add(h1, x.data(), m, stride, &one);
  nvfp4_hessian_add(h3, x.data(), 20, stride, &three);  // in two calls
  nvfp4_hessian_add(h3, x.data() + 20 * stride, m - 20, stride, &three);
  EXPECT_EQ(h1.samples, m);
  EXPECT_EQ(h3.samples, m);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double want = 0;
      for (int64_t r = 0; r < m; ++r) want += double(x[size_t(r * stride + i)]) * double(x[size_t(r * stride + j)]);
      EXPECT_NEAR(h1.h[size_t(i * n + j)], want, 1e-9 * (1 + std::fabs(want))) << i << "," << j;
      EXPECT_EQ(h1.h[size_t(i * n + j)], h3.h[size_t(i * n + j)]) << i << "," << j;
    }
}

TEST(Nvfp4Gptq, InverseFactorIsTheUpperCholeskyFactorOfTheDampedInverse) {
  const int64_t m = 200, n = 64;
  const std::vector<float> x = correlated_inputs(m, n, 11);
  const GptqHessian h = hessian_of(x, m, n);
  const double damp = 0.01;
  auto u = gptq_inverse_factor(h, damp);
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  double mean_diag = 0;
  for (int64_t i = 0; i < n; ++i) mean_diag += h.h[size_t(i * n + i)];
  mean_diag /= double(n);
  auto hd = [&](int64_t i, int64_t j) {
    return (i >= j ? h.h[size_t(i * n + j)] : h.h[size_t(j * n + i)]) + (i == j ? damp * mean_diag : 0.0);
  };
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < i; ++j) EXPECT_EQ((*u)[size_t(i * n + j)], 0.0) << "below the diagonal";
  // (Uᵀ U) H_damped = I.
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t k = 0; k < n; ++k) {
        double inv_ik = 0;  // (Uᵀ U)[i][k] = Σ_l U[l][i] U[l][k]
        for (int64_t l = 0; l <= std::min(i, k); ++l) inv_ik += (*u)[size_t(l * n + i)] * (*u)[size_t(l * n + k)];
        s += inv_ik * hd(k, j);
      }
      worst = std::max(worst, std::fabs(s - (i == j ? 1.0 : 0.0)));
    }
  EXPECT_LT(worst, 1e-8);
}

TEST(Nvfp4Gptq, ScaledIdentityHessianGivesQuantizeNvfp4BitForBit) {
  const int64_t rows = 40, cols = 96;
  const std::vector<float> w = normal(rows * cols, 3, 0.05f);
  GptqHessian h;
  h.reset(cols);
  for (int64_t i = 0; i < cols; ++i) h.h[size_t(i * cols + i)] = 3.0;
  for (bool mse : {false, true}) {
    SCOPED_TRACE(mse ? "mse" : "amax");
    Nvfp4Tensor want, got;
    ASSERT_TRUE(quantize_nvfp4(w.data(), rows, cols, kNvfp4AutoScale2, mse, want).ok());
    auto st = quantize_nvfp4_gptq(w.data(), rows, cols, h, {.damp = 0.01, .mse_search = mse}, got);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    EXPECT_EQ(got.packed, want.packed);
    EXPECT_EQ(got.scale_fp8, want.scale_fp8);
    EXPECT_EQ(got.scale_2, want.scale_2);
    EXPECT_EQ(st->dead_inputs, 0);
  }
}

TEST(Nvfp4Gptq, SmallerOutputErrorThanRoundingToNearestOnCorrelatedInputs) {
  const int64_t m = 1024, rows = 48, cols = 128;
  const std::vector<float> x = correlated_inputs(m, cols, 21);
  const std::vector<float> w = normal(rows * cols, 22, 0.02f);
  const GptqHessian h = hessian_of(x, m, cols);
  for (bool mse : {false, true}) {
    SCOPED_TRACE(mse ? "mse" : "amax");
    Nvfp4Tensor rtn, gptq;
    ASSERT_TRUE(quantize_nvfp4(w.data(), rows, cols, kNvfp4AutoScale2, mse, rtn).ok());
    ASSERT_TRUE(quantize_nvfp4_gptq(w.data(), rows, cols, h, {.damp = 0.01, .mse_search = mse}, gptq).ok());
    const double e_rtn = output_error(x, m, w, rtn), e_gptq = output_error(x, m, w, gptq);
    std::printf("output error (%s): round to nearest %.6g, gptq %.6g (%.1f%%)\n", mse ? "mse" : "amax", e_rtn, e_gptq,
                100.0 * e_gptq / e_rtn);
    EXPECT_LT(e_gptq, 0.8 * e_rtn);
  }
}

TEST(Nvfp4Gptq, SameBytesForAnyThreadCount) {
  const int64_t m = 300, rows = 37, cols = 64;  // rows: two full tasks of 16 and a partial one
  const std::vector<float> x = correlated_inputs(m, cols, 31);
  const std::vector<float> w = normal(rows * cols, 32, 0.1f);
  const GptqHessian h = hessian_of(x, m, cols);
  ThreadPool one(1), three(3);
  Nvfp4Tensor a, b;
  ASSERT_TRUE(quantize_nvfp4_gptq(w.data(), rows, cols, h, {}, a, &one).ok());
  ASSERT_TRUE(quantize_nvfp4_gptq(w.data(), rows, cols, h, {}, b, &three).ok());
  EXPECT_EQ(a.packed, b.packed);
  EXPECT_EQ(a.scale_fp8, b.scale_fp8);
}

TEST(Nvfp4Gptq, InputsNeverSeenAreCountedAndStillQuantized) {
  const int64_t m = 100, rows = 16, cols = 32;
  std::vector<float> x = correlated_inputs(m, cols, 41);
  for (int64_t r = 0; r < m; ++r) x[size_t(r * cols + 7)] = 0.0f;  // input 7 is never non-zero
  const std::vector<float> w = normal(rows * cols, 42, 0.1f);
  Nvfp4Tensor q;
  auto st = quantize_nvfp4_gptq(w.data(), rows, cols, hessian_of(x, m, cols), {}, q);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->dead_inputs, 1);
  EXPECT_EQ(st->damp_used, GptqOptions{}.damp);
  std::vector<float> d(size_t(rows * cols));
  dequantize_nvfp4(q, d.data());
  for (int64_t r = 0; r < rows; ++r) EXPECT_TRUE(std::isfinite(d[size_t(r * cols + 7)]));
}

TEST(Nvfp4Gptq, Errors) {
  const std::vector<float> w = normal(16 * 32, 51);
  GptqHessian h;
  h.reset(32);
  for (int64_t i = 0; i < 32; ++i) h.h[size_t(i * 32 + i)] = 1.0;
  Nvfp4Tensor q;
  auto msg = [](const Result<GptqStats>& r) { return r.ok() ? std::string("ok") : r.status().to_string(); };
  EXPECT_NE(msg(quantize_nvfp4_gptq(w.data(), 16, 24, h, {}, q)).find("multiple of 16"), std::string::npos);
  EXPECT_NE(msg(quantize_nvfp4_gptq(w.data(), 32, 16, h, {}, q)).find("Hessian is for 32 inputs"), std::string::npos);
  EXPECT_NE(msg(quantize_nvfp4_gptq(w.data(), 16, 32, h, {.damp = 2.0}, q)).find("damp"), std::string::npos);
  std::vector<float> bad = w;
  bad[37] = NAN;
  EXPECT_NE(msg(quantize_nvfp4_gptq(bad.data(), 16, 32, h, {}, q)).find("w[1][5]"), std::string::npos);
  GptqHessian nan_h = h;
  nan_h.h[33] = NAN;
  EXPECT_NE(msg(quantize_nvfp4_gptq(w.data(), 16, 32, nan_h, {}, q)).find("non-finite"), std::string::npos);
  GptqHessian negative = h;
  for (int64_t i = 0; i < 32; ++i) negative.h[size_t(i * 32 + i)] = -1.0;
  EXPECT_NE(msg(quantize_nvfp4_gptq(w.data(), 16, 32, negative, {}, q)).find("not positive definite"), std::string::npos);
}

}  // namespace
}  // namespace pg
