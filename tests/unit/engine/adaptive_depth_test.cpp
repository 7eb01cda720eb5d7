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

}  // namespace
}  // namespace pg
