// AdaptiveDepth: picks a request's speculative draft depth k each step from its recent acceptance.
// With a per-draft acceptance rate a (drafts are accepted in order until the first rejection), a
// verify step over k drafts yields E(k) = 1 + a + ... + a^k tokens and costs about 1 + c k plain
// decode steps (c: what one more draft and its verify row cost, relative to a step; bandwidth-
// bound GPUs make it small, the compute-bound CPU near 1). choose() maximises E(k) / (1 + c k)
// over 1..max_k; a is an exponential average over the drafts seen, starting from a prior.
// DraftCostFit measures c on the machine at hand from timed verify steps.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

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

// The draft cost c of AdaptiveDepth::choose, fitted from measured steps. A step that verifies and
// then drafts k tokens takes about t(k) = alpha + beta k (alpha: a decode step with speculation's
// fixed work, the MTP pass over the accepted positions; beta: one more draft, its chain step and
// its verify row). Maximising E(k) / t(k) over k >= 1 is maximising E(k) / (1 + (beta / alpha) k),
// so c = beta / alpha: least squares over (k, seconds per step) samples. Measured on the 2-core
// CPU with the embedded model c = 0.63 .. 1.06 (bench/RESULTS.md, "Speculation end to end through
// the engine", session 36), hence the CPU runner's default 0.75 (ModelRunner::draft_cost_hint; GPUs
// 0.25).
class DraftCostFit {
 public:
  void add(int64_t k, double seconds_per_step) {
    const double x = double(k);
    n_ += 1, sx_ += x, sy_ += seconds_per_step, sxx_ += x * x, sxy_ += x * seconds_per_step;
    if (n_ == 1) k_min_ = k_max_ = k;
    k_min_ = std::min(k_min_, k), k_max_ = std::max(k_max_, k);
  }
  // None until two distinct k were seen. Clamped to [0, kMaxCost]: a falling line means free
  // drafts; a line through the origin or below (alpha <= 0: steps grow as fast as k or faster)
  // means every draft costs at least a step, and a draft slower than ten steps never pays.
  std::optional<double> cost() const {
    if (k_min_ == k_max_) return std::nullopt;
    const double beta = (n_ * sxy_ - sx_ * sy_) / (n_ * sxx_ - sx_ * sx_);
    const double alpha = (sy_ - beta * sx_) / n_;
    if (beta <= 0) return 0.0;
    if (alpha <= 0) return kMaxCost;
    return std::min(beta / alpha, kMaxCost);
  }
  static constexpr double kMaxCost = 10.0;  // EngineConfig::speculative_draft_cost's upper bound

 private:
  double n_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
  int64_t k_min_ = 0, k_max_ = 0;
};

}  // namespace pg
