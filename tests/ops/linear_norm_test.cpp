// ops::cuda::linear_norm against its CPU definition (ops::cpu::linear_norm: ops::cpu::rmsnorm and
// ops::cpu::linear composed): the fused norms of the decode layer at real shapes (moonlight's
// input_norm -> q_kv_a and o_proj -> post_norm, V3's q_a_norm -> q_b on strided rows), every
// weight format, m = 1..8 (every m tile), the tiny golden models' odd dims and misaligned rows
// (scalar path), accumulate, and the out_norm counter across launches.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/linear_norm.h"
#include "ops/cuda/linear_norm/linear_norm.h"
#include "tests/ops/host_weights.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {
namespace {

// Tolerance, derived (per output; u = 2^-24, lambda = 10: Higham & Mary's probabilistic bound,
// see linear_test.cpp and rmsnorm_test.cpp).
//  - The sum of squares: the CPU sums 16 chains of ceil(n/16) terms + a 4-level tree; the GPU one
//    chain per thread of <= ceil(n/256) terms (4 per float4) + a 5-level butterfly + 8 warps. The
//    mean square errs relatively by <= lambda (sqrt(n_cpu) + sqrt(n_gpu)) u, the inverse RMS by
//    half that + 2u (sqrt, divide): d_inv(n).
//  - in_norm: each normalized x_k = g_k * (x_k * inv) then errs relatively by <= d_inv + 2u (the
//    two products may round differently once inv differs), so the GEMV's inputs move by that
//    fraction of sum_k |w_k xn_k| =: a, on top of the GEMV's own summation-order bound
//    lambda (sqrt(n_cpu) + sqrt(n_gpu)) u a of linear_test.cpp (NVFP4: 2 more terms on the CPU,
//    2 ceil(k/16) + 28 on the GPU); accumulate adds 2u (|y0| + a).
//  - out_norm: y is the GEMV (its bound t_j); the row's inverse RMS moves by d_inv plus, to first
//    order, sum_j |y_j| t_j / sum_j y_j^2 (from y's own errors), and y_normed_j = g_j (y_j inv) by
//    |g_j| inv (t_j + |y_j| (that + 2u)).
constexpr double kLambda = 10.0;
constexpr double kMinCosine = 1.0 - 1e-6;

double inv_rel_tol(int64_t n) {
  const double n_cpu = std::ceil(double(n) / 16) + 4, n_gpu = std::ceil(double(n) / 256) + 13;
  return 0.5 * kLambda * (std::sqrt(n_cpu) + std::sqrt(n_gpu)) * kF32Unit + 2 * kF32Unit;
}
// NVFP4 at one token with f16 activations (the default, LinearArgs::f16_activations) takes
// linear's tensor-core kernel where cuda::linear_norm_nvfp4_fits: the GEMV's x (in_norm: the
// normalized x) is rounded to f16 (relative 2^-11, 2^-25 absolute below f16's normal range:
// + 2^-11 a + 2^-25 sum_k |w_k|) and the mma's f32 accumulation truncates (linear_test.cpp's
// mma_accum_bound replaces the GPU chain).
constexpr double kF16Unit = 1.0 / 2048;
constexpr double kF16SubnormalAbs = 0x1p-25;
double mma_accum_rel_tol(int64_t k) { return (17 * std::ceil(double(k) / 16) + 16) * 0x1p-23; }
double gemv_rel_tol(WeightFormat f, int64_t k) {
  const bool fp4 = f == WeightFormat::kNvfp4;
  const double n_cpu = std::ceil(double(k) / 16) + 6 + (fp4 ? 2 : 0);
  const double n_gpu = fp4 ? 2 * std::ceil(double(k) / 16) + 28 : 2 * std::ceil(double(k) / 32) + 10;
  return kLambda * (std::sqrt(n_cpu) + std::sqrt(n_gpu)) * kF32Unit;
}

struct NormCase {
  const char* name;
  bool in;  // in_norm, else out_norm
  WeightFormat format;
  int64_t m, n, k;
  int64_t x_pad = 0, y_pad = 0;  // row strides k + x_pad, n + y_pad (y_normed: n + y_pad too)
  bool accumulate = false;
  bool misalign = false;  // x (in) or y and y_normed (out) 4 bytes past a 16-byte boundary
};
void PrintTo(const NormCase& c, std::ostream* os) { *os << c.name; }

constexpr WeightFormat kF32 = WeightFormat::kF32, kBF16 = WeightFormat::kBF16, kFp8 = WeightFormat::kFp8Block,
                       kFp4 = WeightFormat::kNvfp4;

const NormCase kCases[] = {
    // moonlight-16b-a3b: input_norm -> [q | kv_a] (3072 + 576 rows), o_proj -> post_norm.
    {"moonlight_q_kv_a_bf16", true, kBF16, 1, 3648, 2048},
    {"moonlight_q_kv_a_bf16_m2", true, kBF16, 2, 3648, 2048},
    {"moonlight_q_kv_a_bf16_m8", true, kBF16, 8, 3648, 2048},
    {"moonlight_o_proj_bf16", false, kBF16, 1, 2048, 2048, 0, 0, true},
    {"moonlight_o_proj_bf16_m5", false, kBF16, 5, 2048, 2048, 0, 0, true},
    {"moonlight_q_kv_a_nvfp4", true, kFp4, 1, 3648, 2048},
    {"v3_q_a_kv_a_nvfp4", true, kFp4, 1, 2112, 7168},
    {"v3_q_b_nvfp4_strided", true, kFp4, 1, 24576, 1536, 576},
    {"moonlight_q_kv_a_nvfp4_m3", true, kFp4, 3, 3648, 2048},
    {"moonlight_q_kv_a_nvfp4_m8", true, kFp4, 8, 3648, 2048},
    {"moonlight_o_proj_nvfp4", false, kFp4, 1, 2048, 2048, 0, 0, true},
    {"v3_o_proj_nvfp4", false, kFp4, 1, 7168, 16384, 0, 0, true},
    {"moonlight_q_kv_a_f32", true, kF32, 1, 3648, 2048},
    {"moonlight_o_proj_f32_m4", false, kF32, 4, 2048, 2048, 0, 0, true},
    // DeepSeek-V3: input_norm -> [q_a | kv_a] (1536 + 576), q_a_norm -> q_b on the strided q_a
    // rows of that output, o_proj -> post_norm.
    {"v3_q_a_kv_a_fp8", true, kFp8, 1, 2112, 7168},
    {"v3_q_a_kv_a_fp8_m8", true, kFp8, 8, 2112, 7168},
    {"v3_q_b_fp8_strided", true, kFp8, 3, 24576, 1536, 576},
    {"v3_o_proj_fp8", false, kFp8, 1, 7168, 16384, 0, 0, true},
    {"v3_o_proj_fp8_m8", false, kFp8, 8, 7168, 16384, 0, 0, true},
    {"v3_q_a_kv_a_bf16_m6", true, kBF16, 6, 2112, 7168},
    // Not accumulating; strided outputs.
    {"out_plain_bf16_strided", false, kBF16, 3, 1408, 2048, 0, 12},
    {"in_accumulate_bf16", true, kBF16, 2, 1408, 2048, 0, 4, true},
    // The scalar path: the tiny golden models' dims (hidden 52, inter 22, kv_lora 27 + rope 6),
    // primes, misaligned rows.
    {"tiny_in_bf16", true, kBF16, 3, 3 * 9 + 33, 52},
    {"tiny_out_bf16", false, kBF16, 2, 52, 22, 0, 0, true},
    {"tiny_in_f32_m8", true, kF32, 8, 33, 52},
    {"tiny_out_fp8", false, kFp8, 4, 52, 44, 0, 0, true},
    {"prime_in_bf16", true, kBF16, 5, 131, 263},
    {"prime_out_f32", false, kF32, 7, 131, 97, 0, 0, true},
    {"misaligned_in_bf16", true, kBF16, 2, 1408, 2048, 0, 0, false, true},
    {"misaligned_out_bf16", false, kBF16, 2, 2048, 1408, 0, 0, true, true},
    {"one_by_one", true, kF32, 1, 1, 1},
};

// Weights of every format at moderate scales (tests/ops/host_weights.h): bf16 / f32 in [-1, 1);
// fp8 every finite code with 128x128 block scales in [2^-12, 2^-6]; NVFP4 every code with block
// scales in [2^-3, 30].
HostWeights make_weights(const NormCase& c, uint64_t seed) { return make_host_weights({c.format, c.n, c.k}, seed); }

class LinearNormCuda : public ::testing::TestWithParam<NormCase> {};

TEST_P(LinearNormCuda, MatchesCpu) {
  PG_REQUIRE_CUDA();
  const NormCase& c = GetParam();
  const uint64_t seed = seed_of(c.name);
  const int64_t off = c.misalign ? 1 : 0;  // floats
  const int64_t xs = c.k + c.x_pad, ys = c.n + c.y_pad;
  const int64_t x_off = c.in ? off : 0, y_off = c.in ? 0 : off;
  const HostWeights hw = make_weights(c, seed);
  // x: residual-stream-like rows (in_norm: scale 3) or attention outputs (out_norm).
  std::vector<float> x(size_t(c.m * xs + x_off)), g(size_t((c.in ? c.k : c.n) + off));
  std::vector<float> y0(size_t(c.m * ys + y_off));
  parallel_fill(x, [&](uint64_t i) { return 3.0f * uniform_pm1(seed + 2, i); });
  parallel_fill(g, [&](uint64_t i) { return 1.0f + 0.5f * uniform_pm1(seed + 3, i); });
  if (c.accumulate) parallel_fill(y0, [&](uint64_t i) { return 4.0f * uniform_pm1(seed + 4, i); });
  else std::fill(y0.begin(), y0.end(), std::numeric_limits<float>::quiet_NaN());
  const float* gh = g.data() + (c.in ? x_off : y_off);

  // CPU definition.
  std::vector<float> y_cpu = y0, z_cpu(size_t(c.m * ys + y_off), 0.0f);
  LinearNormArgs ha;
  ha.lin.x = x.data() + x_off, ha.lin.w = &hw.w, ha.lin.y = y_cpu.data() + y_off, ha.lin.m = c.m;
  ha.lin.x_stride = xs, ha.lin.y_stride = ys, ha.lin.accumulate = c.accumulate;
  (c.in ? ha.in_norm : ha.out_norm) = gh;
  if (!c.in) ha.y_normed = z_cpu.data() + y_off, ha.y_normed_stride = ys;
  ha.eps = 1e-6f;
  PG_ASSERT_OK(validate(ha));
  cpu::linear_norm(ha, ThreadPool::global());

  // a = sum_k |w_rk xn_k| per output, xn the CPU's GEMV input (normalized x for in_norm).
  std::vector<float> xn(size_t(c.m * c.k));
  for (int64_t i = 0; i < c.m; ++i) {
    const float* xi = x.data() + x_off + i * xs;
    if (!c.in) {
      std::copy(xi, xi + c.k, xn.begin() + i * c.k);
      continue;
    }
    double ss = 0;
    for (int64_t j = 0; j < c.k; ++j) ss += double(xi[j]) * xi[j];
    const double inv = 1.0 / std::sqrt(ss / double(c.k) + 1e-6);
    for (int64_t j = 0; j < c.k; ++j) xn[size_t(i * c.k + j)] = float(gh[j] * (xi[j] * inv));
  }
  std::vector<double> absdot(size_t(c.m * c.n)), absw(size_t(c.n));
  ThreadPool::global().parallel_for(c.n, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(size_t(c.k));
    for (int64_t r = r0; r < r1; ++r) {
      matrix_row_to_f32(hw.w, r, row.data());
      double sw = 0;
      for (int64_t j = 0; j < c.k; ++j) sw += std::fabs(double(row[size_t(j)]));
      absw[size_t(r)] = sw;
      for (int64_t i = 0; i < c.m; ++i) {
        double s = 0;
        for (int64_t j = 0; j < c.k; ++j) s += std::fabs(double(xn[size_t(i * c.k + j)]) * row[size_t(j)]);
        absdot[size_t(i * c.n + r)] = s;
      }
    }
  });

  // GPU, launched twice (the out_norm counter must be back at zero after each launch: a stale
  // count leaves no block last and y_normed poisoned).
  DeviceWeights dw;
  upload(hw, dw);
  auto dx = to_device(x), dg = to_device(g);
  auto rc = cuda::DeviceBuffer<unsigned>::create(4);
  PG_ASSERT_OK(rc.status());
  cuda::DeviceBuffer<unsigned> counter = std::move(rc).value();
  PG_ASSERT_OK(counter.fill_bytes(0));
  cuda::DeviceBuffer<float> dy, dz;
  for (int launch = 0; launch < 2; ++launch) {
    dy = c.accumulate ? to_device(y0) : poisoned<float>(y0.size());
    dz = poisoned<float>(z_cpu.size());
    LinearNormArgs da = ha;
    da.lin.x = dx.data() + x_off, da.lin.w = &dw.w, da.lin.y = dy.data() + y_off;
    (c.in ? da.in_norm : da.out_norm) = dg.data() + (c.in ? x_off : y_off);
    if (!c.in) da.y_normed = dz.data() + y_off;
    PG_ASSERT_OK(cuda::linear_norm(da, counter.data(), nullptr));
    ASSERT_TRUE(sync_ok());
    EXPECT_EQ(to_host(counter)[0], 0u) << "the last block resets the counter";
  }
  const std::vector<float> y_gpu = to_host(dy), z_gpu = to_host(dz);

  // The tensor-core path (x' rounded to f16), as linear_norm chooses it.
  const bool f16 = c.m == 1 && !c.misalign && ha.lin.f16_activations && cuda::linear_norm_nvfp4_fits(dw.w);
  const double d_inv = inv_rel_tol(c.in ? c.k : c.n);
  const double d_gemv = f16 ? (kLambda * std::sqrt(std::ceil(double(c.k) / 16) + 8) * kF32Unit + mma_accum_rel_tol(c.k)) *
                                      (1 + 2 * kF16Unit) + kF16Unit
                            : gemv_rel_tol(c.format, c.k);
  std::vector<float> got_y, ref_y, got_z, ref_z;
  std::vector<double> tol_y, tol_z;
  int64_t gap_touched = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    std::vector<double> t(size_t(c.n));
    double num = 0, den = 0;  // out_norm: sum |y| t, sum y^2
    for (int64_t r = 0; r < c.n; ++r) {
      const size_t o = size_t(y_off + i * ys + r);
      const double a = absdot[size_t(i * c.n + r)];
      double tr = (d_gemv + (c.in ? d_inv + 2 * kF32Unit : 0.0)) * a;
      if (f16) tr += kF16SubnormalAbs * absw[size_t(r)];
      if (c.accumulate) tr += 2 * kF32Unit * (std::fabs(double(y0[o])) + a);
      t[size_t(r)] = tr;
      got_y.push_back(y_gpu[o]), ref_y.push_back(y_cpu[o]), tol_y.push_back(tr);
      num += std::fabs(double(y_cpu[o])) * tr, den += double(y_cpu[o]) * y_cpu[o];
    }
    if (!c.in) {
      const double inv = 1.0 / std::sqrt(den / double(c.n) + 1e-6);
      const double rel = d_inv + (den > 0 ? num / den : 0.0) + 2 * kF32Unit;
      for (int64_t r = 0; r < c.n; ++r) {
        const size_t o = size_t(y_off + i * ys + r);
        got_z.push_back(z_gpu[o]), ref_z.push_back(z_cpu[o]);
        tol_z.push_back(std::fabs(double(gh[r])) * inv * (t[size_t(r)] + std::fabs(double(y_cpu[o])) * rel) * (1 + 1e-6));
      }
    }
    for (int64_t j = c.n; j < ys; ++j) {  // row gaps are never written
      const size_t o = size_t(y_off + i * ys + j);
      if (c.accumulate ? y_gpu[o] != y0[o] : !is_poison(y_gpu[o])) ++gap_touched;
      if (!c.in && !is_poison(z_gpu[o])) ++gap_touched;
    }
  }
  const Diff dy_ = compare(got_y.data(), ref_y.data(), int64_t(got_y.size()), [&](int64_t e) { return tol_y[size_t(e)]; });
  EXPECT_EQ(dy_.non_finite, 0) << "y: unwritten or non-finite: " << dy_.summary();
  EXPECT_EQ(dy_.over_tol, 0) << "y: " << dy_.summary();
  EXPECT_GE(dy_.cosine, kMinCosine) << "y: " << dy_.summary();
  EXPECT_EQ(gap_touched, 0) << "elements between rows were written";
  std::printf("[ lin_norm ] %-28s %s%s m=%lld n=%-6lld k=%-6lld y: %s\n", c.name, c.in ? "in " : "out",
              f16 ? " (f16 tensor cores)" : "", (long long)c.m, (long long)c.n, (long long)c.k, dy_.summary().c_str());
  if (!c.in) {
    const Diff dz_ = compare(got_z.data(), ref_z.data(), int64_t(got_z.size()), [&](int64_t e) { return tol_z[size_t(e)]; });
    EXPECT_EQ(dz_.non_finite, 0) << "y_normed: unwritten or non-finite: " << dz_.summary();
    EXPECT_EQ(dz_.over_tol, 0) << "y_normed: " << dz_.summary();
    EXPECT_GE(dz_.cosine, kMinCosine) << "y_normed: " << dz_.summary();
    std::printf("[ lin_norm ] %-28s y_normed: %s\n", c.name, dz_.summary().c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearNormCuda, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<NormCase>& i) { return std::string(i.param.name); });

// More rows than the kernels hold, or an out_norm without its counter: refused before any launch.
TEST(LinearNormCudaArgs, RefusesWhatItCannotRun) {
  Matrix w{WeightFormat::kF32, 4, 4, nullptr};
  std::vector<float> wd(16), x(64), y(64), z(64), g(4);
  w.data = wd.data();
  LinearNormArgs a;
  a.lin.x = x.data(), a.lin.w = &w, a.lin.y = y.data(), a.lin.m = cuda::kLinearNormMaxRows + 1;
  a.in_norm = g.data();
  EXPECT_EQ(cuda::linear_norm(a, nullptr, nullptr).code(), StatusCode::kUnsupported);
  a.lin.m = 1, a.in_norm = nullptr, a.out_norm = g.data(), a.y_normed = z.data();
  EXPECT_EQ(cuda::linear_norm(a, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pg::ops::test
