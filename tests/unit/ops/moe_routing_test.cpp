// MoE routing rules on hand-made router logits: DeepSeek-V3 noaux_tc (sigmoid + bias, group
// top-2 sums, -inf outside the kept groups), DeepSeek-V2 greedy and group-limited greedy, the
// tie order, and the one place where transformers departs from DeepSeek's definition.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace pg::ops {
namespace {

float logit(float p) { return std::log(p / (1 - p)); }  // inverse sigmoid

struct Routed {
  std::vector<int32_t> idx;
  std::vector<float> w;
};

Routed route(MoeRoutingArgs a, const std::vector<float>& logits, const std::vector<float>* bias = nullptr) {
  Routed r{std::vector<int32_t>(size_t(a.top_k)), std::vector<float>(size_t(a.top_k))};
  a.logits = logits.data();
  a.bias = bias ? bias->data() : nullptr;
  a.expert_idx = r.idx.data();
  a.expert_weight = r.w.data();
  a.m = 1;
  EXPECT_TRUE(validate(a).ok()) << validate(a).message();
  cpu::moe_routing(a);
  return r;
}

MoeRoutingArgs v3_args(int64_t E, int64_t k, int64_t groups, int64_t keep) {
  MoeRoutingArgs a;
  a.n_experts = E; a.top_k = k; a.n_group = groups; a.topk_group = keep;
  a.scoring = MoeScoring::kSigmoid; a.method = MoeTopk::kNoAuxTc; a.norm_topk_prob = true;
  a.routed_scaling_factor = 2.5f;
  return a;
}

TEST(MoeRouting, V3GroupTop2SumSelectsGroupsThenExperts) {
  // 4 groups of 2. Scores (after sigmoid) chosen so the best single expert (e0=0.95) sits in a
  // group whose top-2 sum (0.95+0.05) loses to groups 1 and 2.
  const std::vector<float> p = {0.95f, 0.05f, 0.6f, 0.6f, 0.7f, 0.45f, 0.1f, 0.2f};
  std::vector<float> lg;
  for (float v : p) lg.push_back(logit(v));
  const std::vector<float> bias(8, 0.0f);
  Routed r = route(v3_args(8, 2, 4, 2), lg, &bias);
  // Kept groups: g1 (1.2) and g2 (1.15). Top-2 by score: e4 (0.7), then e2/e3 tie at 0.6 -> e2.
  EXPECT_EQ(r.idx, (std::vector<int32_t>{4, 2}));
  const float sum = 0.7f + 0.6f;
  EXPECT_NEAR(r.w[0], 0.7f / sum * 2.5f, 1e-6);
  EXPECT_NEAR(r.w[1], 0.6f / sum * 2.5f, 1e-6);
}

TEST(MoeRouting, V3BiasChoosesButDoesNotWeigh) {
  const std::vector<float> lg = {logit(0.5f), logit(0.4f), logit(0.3f), logit(0.2f)};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.5f};  // e3: 0.2 + 0.5 = 0.7 -> chosen first
  auto a = v3_args(4, 2, 1, 1);
  a.norm_topk_prob = false;
  a.routed_scaling_factor = 1.0f;
  Routed r = route(a, lg, &bias);
  EXPECT_EQ(r.idx, (std::vector<int32_t>{3, 0}));
  EXPECT_NEAR(r.w[0], 0.2f, 1e-6);  // unbiased score
  EXPECT_NEAR(r.w[1], 0.5f, 1e-6);
}

TEST(MoeRouting, TiesGoToTheLowerExpertIndex) {
  const std::vector<float> lg(8, 0.0f);
  const std::vector<float> bias(8, 0.0f);
  Routed r = route(v3_args(8, 3, 4, 2), lg, &bias);
  EXPECT_EQ(r.idx, (std::vector<int32_t>{0, 1, 2}));  // groups 0 and 1 kept, then experts in order
}

// DeepSeek's reference masks experts of dropped groups with -inf before the top-k; transformers
// 5.x fills 0. They differ only when score + bias < 0 for some experts of the kept groups.
// We follow DeepSeek: an expert of a dropped group is never chosen.
TEST(MoeRouting, DroppedGroupsAreMinusInfinityAsInDeepSeek) {
  // 2 groups of 2, keep 1, top_k 2. Group 0: choice values -0.1 and -0.2 (score + negative bias),
  // group 1: -0.5, -0.6. Group 0 wins; both of its experts are chosen even though their choice
  // values are below 0 — transformers' 0-fill would have picked an expert of group 1 instead.
  const std::vector<float> lg = {logit(0.4f), logit(0.3f), logit(0.1f), logit(0.05f)};
  const std::vector<float> bias = {-0.5f, -0.5f, -0.6f, -0.65f};
  auto a = v3_args(4, 2, 2, 1);
  Routed r = route(a, lg, &bias);
  EXPECT_EQ(r.idx, (std::vector<int32_t>{0, 1}));
}

TEST(MoeRouting, V2GreedySoftmaxNoNorm) {
  MoeRoutingArgs a;
  a.n_experts = 4; a.top_k = 2; a.scoring = MoeScoring::kSoftmax; a.method = MoeTopk::kGreedy;
  a.norm_topk_prob = false; a.routed_scaling_factor = 1.0f;
  const std::vector<float> lg = {1.0f, 3.0f, 2.0f, 0.0f};
  Routed r = route(a, lg);
  const float z = std::exp(1.f) + std::exp(3.f) + std::exp(2.f) + 1.f;
  EXPECT_EQ(r.idx, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(r.w[0], std::exp(3.f) / z, 1e-6);
  EXPECT_NEAR(r.w[1], std::exp(2.f) / z, 1e-6);
}

TEST(MoeRouting, V2GroupLimitedGreedyUsesGroupMax) {
  // 3 groups of 2, keep 1. Group maxima: g0 0.30 (e1), g1 0.32 (e2), g2 0.2. The sum rule would
  // prefer g0 (0.30 + 0.15 = 0.45 vs 0.32 + 0.03); V2's max rule keeps g1.
  const std::vector<float> p = {0.15f, 0.30f, 0.32f, 0.03f, 0.2f, 0.0f};
  std::vector<float> lg;
  for (float v : p) lg.push_back(std::log(std::max(v, 1e-9f)));
  MoeRoutingArgs a;
  a.n_experts = 6; a.top_k = 2; a.n_group = 3; a.topk_group = 1;
  a.scoring = MoeScoring::kSoftmax; a.method = MoeTopk::kGroupLimitedGreedy; a.routed_scaling_factor = 1.0f;
  Routed r = route(a, lg);
  EXPECT_EQ(r.idx, (std::vector<int32_t>{2, 3}));
}

TEST(MoeRouting, ValidateRejectsImpossibleConfigs) {
  MoeRoutingArgs a = v3_args(8, 3, 3, 1);  // 8 experts do not split into 3 groups
  EXPECT_FALSE(validate(a).ok());
  a = v3_args(8, 5, 4, 2);  // 5 experts from 2 groups of 2
  EXPECT_FALSE(validate(a).ok());
}

}  // namespace
}  // namespace pg::ops
