// AdaptiveDepth: the depth follows acceptance — deep when drafts are accepted, one when they are
// not — and maximises expected tokens per unit of step cost.
#include "engine/adaptive_depth.h"

#include <gtest/gtest.h>

#include <cmath>

namespace pg {
namespace {

// E(k) / (1 + c k) evaluated directly, for the choice to be checked against.
double value(double a, int64_t k, double c) {
  double e = 0;
  for (int64_t i = 0; i <= k; ++i) e += std::pow(a, double(i));
  return e / (1.0 + c * double(k));
}

TEST(AdaptiveDepth, ChoiceMaximisesTokensPerCost) {
  for (double a : {0.0, 0.2, 0.5, 0.6, 0.8, 0.95, 1.0})
    for (double c : {0.0, 0.1, 0.25, 1.0})
      for (int64_t max_k : {1, 2, 4, 8}) {
        AdaptiveDepth d;
        // Drive the rate to about a: accept-all or reject-first steps in the right proportion.
        for (int i = 0; i < 400; ++i) d.observe(1, (std::fmod(i * a, 1.0) + a >= 1.0 || a == 1.0) ? 1 : 0);
        const int64_t k = d.choose(max_k, c);
        ASSERT_GE(k, 1);
        ASSERT_LE(k, max_k);
        for (int64_t j = 1; j <= max_k; ++j)
          EXPECT_LE(value(d.rate(), j, c), value(d.rate(), k, c) * (1 + 1e-9)) << "a=" << a << " c=" << c;
      }
}

TEST(AdaptiveDepth, FollowsAcceptance) {
  AdaptiveDepth d;
  EXPECT_DOUBLE_EQ(d.rate(), AdaptiveDepth::kPrior);
  for (int i = 0; i < 50; ++i) d.observe(4, 4);  // everything accepted
  EXPECT_GT(d.rate(), 0.99);
  EXPECT_EQ(d.choose(4, 0.1), 4);
  for (int i = 0; i < 50; ++i) d.observe(4, 0);  // the first draft rejected every time
  EXPECT_LT(d.rate(), 0.01);
  EXPECT_EQ(d.choose(4, 0.1), 1);
  // Partial acceptance: two accepted then a rejection counts three judged drafts.
  AdaptiveDepth p;
  p.observe(4, 2);
  const double expect = (AdaptiveDepth::kPrior * 0.9 + 0.1) * 0.9 + 0.1;
  EXPECT_NEAR(p.rate(), expect * 0.9, 1e-12);
}

TEST(AdaptiveDepth, FreeDraftsGoDeepCostlyOnesStayShallow) {
  AdaptiveDepth d;  // a = 0.6
  EXPECT_EQ(d.choose(8, 0.0), 8);  // no cost: every draft adds expected tokens
  EXPECT_EQ(d.choose(8, 1.0), 1);  // a draft costs a whole step: one at most pays
}

// DraftCostFit: c = beta / alpha of the step time t(k) = alpha + beta k, and the choice it leads to
// equals maximising tokens per second over the measured step times.
TEST(DraftCostFit, RecoversTheLineAndItsChoice) {
  DraftCostFit f;
  EXPECT_FALSE(f.cost());
  f.add(2, 0.015);
  f.add(2, 0.015);
  EXPECT_FALSE(f.cost()) << "one k says nothing about the slope";
  // The CPU's shape: t(k) = 6 ms + 4.5 ms k (c = 0.75), with +-0.2 ms noise around it.
  DraftCostFit cpu;
  cpu.add(1, 0.0107), cpu.add(2, 0.0148), cpu.add(3, 0.0197), cpu.add(1, 0.0103);
  ASSERT_TRUE(cpu.cost());
  EXPECT_NEAR(*cpu.cost(), 0.75, 0.06);
  // At the greedy acceptance measured there (a ~ 0.68) drafts cost more than they bring: k = 1,
  // which is also the k with the most tokens per second over the measured times.
  AdaptiveDepth d;
  for (int i = 0; i < 400; ++i) d.observe(1, i % 3 != 2 ? 1 : 0);  // a ~ 0.67
  ASSERT_NEAR(d.rate(), 0.68, 0.04);
  const int64_t k = d.choose(3, *cpu.cost());
  EXPECT_EQ(k, 1);
  for (int64_t j = 1; j <= 3; ++j)
    EXPECT_LE(value(d.rate(), j, *cpu.cost()), value(d.rate(), k, *cpu.cost()) * (1 + 1e-9));
  // Bandwidth-bound steps: a draft adds a tenth of a step, so deep drafts pay.
  DraftCostFit gpu;
  for (int64_t j = 1; j <= 4; ++j) gpu.add(j, 0.010 * (1 + 0.1 * double(j)));
  EXPECT_NEAR(*gpu.cost(), 0.1, 1e-9);
  EXPECT_GE(d.choose(4, *gpu.cost()), 3);
  // A falling line (a noise artefact) means free drafts, never a negative cost.
  DraftCostFit down;
  down.add(1, 0.012), down.add(2, 0.011);
  EXPECT_DOUBLE_EQ(*down.cost(), 0.0);
  // Steps growing faster than k (noise, or drafts dearer than a step): the largest cost.
  DraftCostFit steep;
  steep.add(1, 0.007), steep.add(2, 0.015);
  EXPECT_DOUBLE_EQ(*steep.cost(), DraftCostFit::kMaxCost);
  EXPECT_EQ(d.choose(3, *steep.cost()), 1);
}

}  // namespace
}  // namespace pg
