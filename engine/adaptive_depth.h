// AdaptiveDepth: picks a request's speculative draft depth k each step from its recent acceptance.
// With a per-draft acceptance rate a (drafts are accepted in order until the first rejection), a
// verify step over k drafts yields E(k) = 1 + a + ... + a^k tokens and costs about 1 + c k plain
// decode steps (c: what one more draft and its verify row cost, relative to a step; bandwidth-
// bound GPUs make it small, the compute-bound CPU near 1). choose() maximises E(k) / (1 + c k)
// over 1..max_k; a is an exponential average over the drafts seen, starting from a prior.
#pragma once

#include <cstdint>

namespace pg {

class AdaptiveDepth {
 public:
  static constexpr double kPrior = 0.6;   // a before any draft was verified
  static constexpr double kDecay = 0.9;   // weight of the past per observed draft

  // A verify step: `drafted` drafts, the first `accepted` of them accepted. Drafts after the
  // first rejection were not judged and do not count.
  void observe(int64_t drafted, int64_t accepted) {
    for (int64_t i = 0; i < accepted; ++i) rate_ = kDecay * rate_ + (1.0 - kDecay);
    if (accepted < drafted) rate_ = kDecay * rate_;
  }
  int64_t choose(int64_t max_k, double step_cost) const {
    int64_t best = 1;
    double best_value = 0, expected = 1, power = 1;
    for (int64_t k = 1; k <= max_k; ++k) {
      power *= rate_;
      expected += power;
      const double value = expected / (1.0 + step_cost * double(k));
      if (value > best_value * (1.0 + 1e-9)) best = k, best_value = value;  // ties keep the smaller k
    }
    return best;
  }
  double rate() const { return rate_; }

 private:
  double rate_ = kPrior;
};

}  // namespace pg
