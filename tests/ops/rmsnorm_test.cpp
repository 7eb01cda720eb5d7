// ops::cuda::rmsnorm and ops::cuda::rmsnorm_residual against the CPU definitions: hidden sizes
// 2048 / 7168, the latent norms (512, 1536), primes and 1, strides, aliasing, misalignment.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {
namespace {

// Tolerance, derived. Both backends compute y_j = w_j * (x_j * inv) with the same IEEE
// operations; only inv = 1/sqrt(mean(x^2) + eps) differs, through the order of the sum of n
// squares (positive terms, so the sum's relative error is bounded by the rounding count):
// the CPU sums 16 chains of ceil(n/16) terms + a 4-level tree, the GPU one chain of
// ceil(n/threads) terms per thread + a 10-level tree (<= 1024 threads). With Higham & Mary's
// probabilistic bound (lambda = 10, see linear_test.cpp) the relative error of the mean square
// is <= lambda (sqrt(n_cpu) + sqrt(n_gpu)) u, inv's is half that plus 2u (sqrt, divide), and y
// adds 2u for its two products whenever inv differs in the last bit.
double rel_tolerance(int64_t n) {
  const double n_cpu = std::ceil(double(n) / 16) + 4, n_gpu = std::ceil(double(n) / 128) + 10;
  return 0.5 * 10.0 * (std::sqrt(n_cpu) + std::sqrt(n_gpu)) * kF32Unit + 4 * kF32Unit;
}

struct NormCase {
  const char* name;
  int64_t m, n;
  int64_t x_pad = 0, y_pad = 0;
  bool alias_y_x = false;
  bool misalign = false;  // every pointer 4 bytes past a 16-byte boundary: scalar path
};
// gtest prints a case by its name (test names and failure messages stay readable).
void PrintTo(const NormCase& c, std::ostream* os) { *os << c.name; }

const NormCase kCases[] = {
    {"v3_hidden", 1, 7168},       {"v3_hidden_m16", 16, 7168},     {"moonlight_hidden", 1, 2048},
    {"moonlight_hidden_m5", 5, 2048}, {"kv_lora_rank", 3, 512},    {"q_lora_rank", 2, 1536},
    {"n_one", 4, 1},              {"n_seven", 3, 7},               {"prime_n", 2, 4099},
    {"strided", 3, 2048, 4, 8},   {"aliased_y_is_x", 4, 7168, 0, 0, true},
    {"misaligned", 3, 2048, 0, 0, false, true}, {"many_rows", 300, 512},
    {"past_register_rows", 2, 12288},  // > kRmsNormRegsPerThread float4 a thread: the loop kernel
};

struct NormData {
  std::vector<float> x, residual, weight;
  int64_t xs, ys, off;
};

NormData make_data(const NormCase& c, uint64_t seed) {
  NormData d;
  d.off = c.misalign ? 1 : 0;
  d.xs = c.n + c.x_pad;
  d.ys = c.alias_y_x ? d.xs : c.n + c.y_pad;
  d.x.resize(size_t(c.m * d.xs + d.off));
  d.residual.resize(size_t(c.m * d.xs + d.off));
  d.weight.resize(size_t(c.n + d.off));
  parallel_fill(d.x, [&](uint64_t i) { return 3.0f * uniform_pm1(seed, i); });
  parallel_fill(d.residual, [&](uint64_t i) { return 10.0f * uniform_pm1(seed + 1, i); });
  parallel_fill(d.weight, [&](uint64_t i) { return 1.0f + 0.5f * uniform_pm1(seed + 2, i); });
  return d;
}

void check_rows(const NormCase& c, const std::vector<float>& got, const std::vector<float>& ref, int64_t ys,
                int64_t off, const char* what) {
  std::vector<float> g, r;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      g.push_back(got[size_t(off + i * ys + j)]);
      r.push_back(ref[size_t(off + i * ys + j)]);
    }
  const double rel = rel_tolerance(c.n);
  const Diff d = compare(g.data(), r.data(), int64_t(g.size()), [&](int64_t i) { return rel * std::fabs(double(r[size_t(i)])); });
  EXPECT_EQ(d.non_finite, 0) << what << ": " << d.summary();
  EXPECT_EQ(d.over_tol, 0) << what << ": " << d.summary() << " rel_tol=" << rel;
  EXPECT_GE(d.cosine, 1.0 - 1e-9) << what << ": " << d.summary();
  std::printf("[ rmsnorm  ] %-22s %-9s m=%-4lld n=%-5lld %s\n", c.name, what, (long long)c.m, (long long)c.n,
              d.summary().c_str());
}

class RmsNormCuda : public ::testing::TestWithParam<NormCase> {};

TEST_P(RmsNormCuda, MatchesCpu) {
  PG_REQUIRE_CUDA();
  const NormCase& c = GetParam();
  NormData h = make_data(c, 11 + uint64_t(c.n) * 7 + uint64_t(c.m));
  const size_t y_size = size_t(c.m * h.ys + h.off);

  std::vector<float> x_cpu = h.x, y_cpu(y_size, 0.0f);
  RmsNormArgs ha;
  ha.x = x_cpu.data() + h.off, ha.weight = h.weight.data() + h.off, ha.m = c.m, ha.n = c.n;
  ha.x_stride = h.xs, ha.y_stride = h.ys;
  ha.y = c.alias_y_x ? x_cpu.data() + h.off : y_cpu.data() + h.off;
  cpu::rmsnorm(ha);

  auto dx = to_device(h.x), dw = to_device(h.weight);
  auto ry = cuda::DeviceBuffer<float>::create(y_size);
  PG_ASSERT_OK(ry.status());
  cuda::DeviceBuffer<float> dy = std::move(ry).value();
  PG_ASSERT_OK(dy.fill_bytes(0xff));
  RmsNormArgs da = ha;
  da.x = dx.data() + h.off, da.weight = dw.data() + h.off;
  da.y = c.alias_y_x ? dx.data() + h.off : dy.data() + h.off;
  PG_ASSERT_OK(cuda::rmsnorm(da, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (c.alias_y_x) check_rows(c, to_host(dx), x_cpu, h.ys, h.off, "aliased");
  else check_rows(c, to_host(dy), y_cpu, h.ys, h.off, "y");
}

TEST_P(RmsNormCuda, ResidualMatchesCpu) {
  PG_REQUIRE_CUDA();
  const NormCase& c = GetParam();
  NormData h = make_data(c, 23 + uint64_t(c.n) * 5 + uint64_t(c.m));
  const size_t y_size = size_t(c.m * h.ys + h.off);

  std::vector<float> x_cpu = h.x, r_cpu = h.residual, y_cpu(y_size, 0.0f);
  RmsNormResidualArgs ha;
  ha.x = x_cpu.data() + h.off, ha.residual = r_cpu.data() + h.off, ha.weight = h.weight.data() + h.off;
  ha.m = c.m, ha.n = c.n, ha.x_stride = h.xs, ha.residual_stride = h.xs, ha.y_stride = h.ys;
  ha.y = c.alias_y_x ? x_cpu.data() + h.off : y_cpu.data() + h.off;
  ASSERT_TRUE(validate(ha).ok());
  cpu::rmsnorm_residual(ha);

  auto dx = to_device(h.x), dr = to_device(h.residual), dw = to_device(h.weight);
  auto ry = cuda::DeviceBuffer<float>::create(y_size);
  PG_ASSERT_OK(ry.status());
  cuda::DeviceBuffer<float> dy = std::move(ry).value();
  PG_ASSERT_OK(dy.fill_bytes(0xff));
  RmsNormResidualArgs da = ha;
  da.x = dx.data() + h.off, da.residual = dr.data() + h.off, da.weight = dw.data() + h.off;
  da.y = c.alias_y_x ? dx.data() + h.off : dy.data() + h.off;
  PG_ASSERT_OK(cuda::rmsnorm_residual(da, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // The residual stream is one IEEE add of the same operands on both sides: bit-exact.
  const std::vector<float> r_gpu = to_host(dr);
  int64_t r_diff = 0;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) r_diff += r_gpu[size_t(h.off + i * h.xs + j)] != r_cpu[size_t(h.off + i * h.xs + j)];
  EXPECT_EQ(r_diff, 0) << "residual += x must be bit-exact";
  if (c.alias_y_x) check_rows(c, to_host(dx), x_cpu, h.ys, h.off, "res_alias");
  else check_rows(c, to_host(dy), y_cpu, h.ys, h.off, "res_y");
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormCuda, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<NormCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace pg::ops::test
