// The CPU definition of moe_router with the MLP's RMSNorm folded in (MoeRouterArgs::norm_weight, no
// GPU): normed is ops::cpu::rmsnorm of the residual rows and the routing is moe_router's on normed,
// bit for bit, at a strided x; validate refuses a missing or overlapping normed buffer and a bad eps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/moe_router.h"
#include "tests/ops/random.h"

namespace pg::ops::test {
namespace {

struct Routed {
  std::vector<float> logits, weight;
  std::vector<int32_t> idx;
};

MoeRoutingArgs moonlight_routing(int64_t m, Routed& o, const float* bias) {
  const int64_t E = 64, K = 6;
  o.logits.assign(size_t(m * E), 0.0f), o.weight.assign(size_t(m * K), 0.0f), o.idx.assign(size_t(m * K), -1);
  MoeRoutingArgs r;
  r.logits = o.logits.data(), r.bias = bias, r.expert_idx = o.idx.data(), r.expert_weight = o.weight.data();
  r.m = m, r.n_experts = E, r.top_k = K, r.n_group = 1, r.topk_group = 1;
  r.scoring = MoeScoring::kSigmoid, r.method = MoeTopk::kNoAuxTc, r.norm_topk_prob = true;
  r.routed_scaling_factor = 2.446f;
  return r;
}

TEST(MoeRouterCpu, NormFoldedInEqualsRmsnormThenRouter) {
  const int64_t m = 3, H = 256, xs = H + 4, E = 64;
  std::vector<float> x(size_t(m * xs)), w(size_t(E * H)), nw(static_cast<size_t>(H)), bias(static_cast<size_t>(E));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 3 * uniform_pm1(11, i);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * uniform_pm1(12, i);
  for (size_t i = 0; i < nw.size(); ++i) nw[i] = 1 + 0.5f * uniform_pm1(13, i);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1f * uniform_pm1(14, i);
  const Matrix router{WeightFormat::kF32, E, H, w.data()};
  ThreadPool pool(2);

  std::vector<float> normed_ref(size_t(m * H));
  RmsNormArgs rn;
  rn.x = x.data(), rn.x_stride = xs, rn.weight = nw.data(), rn.y = normed_ref.data(), rn.m = m, rn.n = H, rn.eps = 1e-6f;
  cpu::rmsnorm(rn);
  Routed ref;
  MoeRouterArgs a;
  a.x = normed_ref.data(), a.router = &router, a.routing = moonlight_routing(m, ref, bias.data());
  a.logits = ref.logits.data();
  ASSERT_TRUE(validate(a).ok());
  cpu::moe_router(a, pool);

  Routed got;
  std::vector<float> normed(size_t(m * H), NAN);
  MoeRouterArgs f;
  f.x = x.data(), f.x_stride = xs, f.router = &router, f.routing = moonlight_routing(m, got, bias.data());
  f.logits = got.logits.data(), f.norm_weight = nw.data(), f.normed = normed.data(), f.eps = 1e-6f;
  ASSERT_TRUE(validate(f).ok()) << validate(f).to_string();
  cpu::moe_router(f, pool);
  EXPECT_EQ(std::memcmp(normed.data(), normed_ref.data(), normed.size() * 4), 0);
  EXPECT_EQ(std::memcmp(got.logits.data(), ref.logits.data(), ref.logits.size() * 4), 0);
  EXPECT_EQ(got.idx, ref.idx);
  EXPECT_EQ(std::memcmp(got.weight.data(), ref.weight.data(), ref.weight.size() * 4), 0);
  for (int32_t e : got.idx) EXPECT_TRUE(e >= 0 && e < E);

  // Refused: no normed buffer, normed over x's rows, a negative or non-finite eps.
  MoeRouterArgs bad = f;
  bad.normed = nullptr;
  EXPECT_EQ(validate(bad).code(), StatusCode::kInvalidArgument);
  bad = f;
  bad.normed = x.data() + xs;  // inside x's second row
  EXPECT_EQ(validate(bad).code(), StatusCode::kInvalidArgument) << validate(bad).to_string();
  bad = f;
  bad.eps = -1.0f;
  EXPECT_EQ(validate(bad).code(), StatusCode::kInvalidArgument);
  bad = f;
  bad.eps = NAN;
  EXPECT_EQ(validate(bad).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pg::ops::test
