// The CPU definition of moe_router with the post-attention norm in front (no GPU): it equals, bit
// for bit, ops::cpu::rmsnorm then the router on its output (the normed rows written at their
// stride); bad norm arguments are refused.
#include <gtest/gtest.h>

#include <vector>

#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/moe_router.h"
#include "tests/ops/random.h"

namespace pg::ops::test {
namespace {

struct Router {
  int64_t m = 3, hidden = 52, stride = 60, experts = 8;
  std::vector<float> x, w, gamma, bias, logits, weight;
  std::vector<int32_t> idx;
  Matrix router;
  Router() {
    x.resize(size_t(m * stride)), w.resize(size_t(experts * hidden)), gamma.resize(size_t(hidden)), bias.resize(size_t(experts));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 3 * uniform_pm1(1, i);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * uniform_pm1(2, i);
    for (size_t i = 0; i < gamma.size(); ++i) gamma[i] = 1 + 0.5f * uniform_pm1(3, i);
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1f * uniform_pm1(4, i);
    router = Matrix{WeightFormat::kF32, experts, hidden, w.data()};
  }
  MoeRouterArgs args(const float* in, int64_t in_stride) {
    logits.assign(size_t(m * experts), 0.0f), weight.assign(size_t(m * 2), 0.0f), idx.assign(size_t(m * 2), -1);
    MoeRouterArgs a;
    a.x = in, a.x_stride = in_stride, a.router = &router, a.logits = logits.data();
    a.routing.logits = logits.data(), a.routing.expert_idx = idx.data(), a.routing.expert_weight = weight.data();
    a.routing.m = m, a.routing.n_experts = experts, a.routing.top_k = 2, a.routing.bias = bias.data();
    return a;
  }
};

TEST(MoeRouterCpu, NormInFrontEqualsRmsNormThenRouter) {
  Router r;
  std::vector<float> normed_ref(size_t(r.m * r.hidden));
  cpu::rmsnorm(RmsNormArgs{r.x.data(), r.gamma.data(), normed_ref.data(), r.m, r.hidden, r.stride, 0, 1e-6f});
  MoeRouterArgs ref = r.args(normed_ref.data(), 0);
  ASSERT_TRUE(validate(ref).ok());
  cpu::moe_router(ref, ThreadPool::global());
  const std::vector<float> logits_ref = r.logits, weight_ref = r.weight;
  const std::vector<int32_t> idx_ref = r.idx;

  std::vector<float> normed(size_t(r.m * r.stride), -7.0f);  // written at its stride; the padding untouched
  MoeRouterArgs a = r.args(r.x.data(), r.stride);
  a.norm_weight = r.gamma.data(), a.norm_eps = 1e-6f, a.normed = normed.data(), a.normed_stride = r.stride;
  ASSERT_TRUE(validate(a).ok());
  cpu::moe_router(a, ThreadPool::global());
  EXPECT_EQ(r.logits, logits_ref);
  EXPECT_EQ(r.idx, idx_ref);
  EXPECT_EQ(r.weight, weight_ref);
  for (int64_t t = 0; t < r.m; ++t)
    for (int64_t j = 0; j < r.stride; ++j)
      EXPECT_EQ(normed[size_t(t * r.stride + j)], j < r.hidden ? normed_ref[size_t(t * r.hidden + j)] : -7.0f)
          << "row " << t << " column " << j;
}

TEST(MoeRouterCpu, RefusesInconsistentNormArguments) {
  Router r;
  std::vector<float> normed(size_t(r.m * r.stride));
  MoeRouterArgs a = r.args(r.x.data(), r.stride);
  a.norm_weight = r.gamma.data();  // no output for the normed rows
  EXPECT_EQ(validate(a).code(), StatusCode::kInvalidArgument);
  a = r.args(r.x.data(), r.stride);
  a.normed = normed.data();  // an output but no norm
  EXPECT_EQ(validate(a).code(), StatusCode::kInvalidArgument);
  a.norm_weight = r.gamma.data(), a.normed_stride = r.hidden - 1;  // rows overlap
  EXPECT_EQ(validate(a).code(), StatusCode::kInvalidArgument);
  a.normed_stride = 0, a.norm_eps = -1.0f;
  EXPECT_EQ(validate(a).code(), StatusCode::kInvalidArgument);
  a.norm_eps = 1e-6f;
  EXPECT_TRUE(validate(a).ok());
}

}  // namespace
}  // namespace pg::ops::test
