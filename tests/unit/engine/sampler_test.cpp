// The CPU sampler: Philox known answers (Random123 kat_vectors), the fp32 exp, greedy ties,
// top-k/top-p/min-p on hand-made distributions and against a full-sort reference of the
// documented spec, penalties by hand, seeded determinism, a chi-square test of the draws, logprobs.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampling_math.h"

namespace pg {
namespace {

using sampling::kMaxWeight;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<int32_t> ids_of(std::span<const WeightedToken> dist) {
  std::vector<int32_t> ids;
  for (const WeightedToken& e : dist) ids.push_back(e.token_id);
  return ids;
}

std::vector<float> log_of(std::initializer_list<double> probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(float(std::log(p)));
  return l;
}

SamplingParams sampled(double temperature = 1.0) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Philox4x32-10 and the conversions.

// The three philox4x32 10 lines of Random123's tests/kat_vectors (counter[4] key[2] -> out[4]).
TEST(Philox, KnownAnswers) {
  struct Kat {
    sampling::PhiloxCounter ctr;
    sampling::PhiloxKey key;
    sampling::PhiloxCounter out;
  };
  const Kat kats[] = {
      {{0x00000000, 0x00000000, 0x00000000, 0x00000000}, {0x00000000, 0x00000000},
       {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) EXPECT_EQ(sampling::philox4x32_10(k.ctr, k.key), k.out);
  static_assert(sampling::philox4x32_10({0, 0, 0, 0}, {0, 0})[0] == 0x6627e8d5u);  // usable at compile time
}

TEST(Philox, CounterAndKeyLayout) {
  EXPECT_EQ(sampling::rng_key(0x0123456789abcdefull), (sampling::PhiloxKey{0x89abcdef, 0x01234567}));
  EXPECT_EQ(sampling::rng_counter(0x100000002ll, 3, sampling::kStreamSample),
            (sampling::PhiloxCounter{2, 1, 3, 0}));
  EXPECT_EQ(sampling::uniform_u64({0x89abcdef, 0x01234567, 9, 9}), 0x0123456789abcdefull);
}

TEST(Philox, Uniforms) {
  EXPECT_EQ(sampling::uniform_f32(0), 0.0f);
  EXPECT_EQ(sampling::uniform_f32(0xFFu), 0.0f);  // only the top 24 bits count
  EXPECT_EQ(sampling::uniform_f32(0x80000000u), 0.5f);
  EXPECT_EQ(sampling::uniform_f32(0xFFFFFFFFu), 1.0f - 0x1p-24f);
  EXPECT_LT(sampling::uniform_f32(0xFFFFFFFFu), 1.0f);
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(sampling::scale_u64(0, 10), 0u);
  EXPECT_EQ(sampling::scale_u64(max, 10), 9u);
  EXPECT_EQ(sampling::scale_u64(uint64_t(1) << 63, 10), 5u);
  EXPECT_EQ(sampling::scale_u64(max, uint64_t(1) << 63), (uint64_t(1) << 63) - 1);
}

TEST(SamplingExp, AccurateAndBounded) {
  EXPECT_EQ(sampling::sampling_exp(0.0f), 1.0f);
  EXPECT_EQ(sampling::sampling_exp(-kInf), 0.0f);
  EXPECT_EQ(sampling::sampling_exp(kNaN), 0.0f);
  EXPECT_EQ(sampling::sampling_exp(std::nextafter(-30.0f, -kInf)), 0.0f);
  EXPECT_GT(sampling::sampling_exp(-30.0f), 0.0f);
  // Every float of one binade, [-1, -0.5), and a fine grid down to -30: relative error within
  // 2 x 2^-23, never above 1, so the fixed-point weight never exceeds 2^42.
  double worst = 0;
  int64_t n_above_one = 0;
  auto check = [&](float d) {
    const float w = sampling::sampling_exp(d);
    const double ref = std::exp(double(d));
    worst = std::max(worst, std::abs(double(w) - ref) / ref);
    n_above_one += w > 1.0f;
  };
  for (float d = -1.0f; d < -0.5f; d = std::nextafter(d, 0.0f)) check(d);
  for (int i = 0; i <= 3000000; ++i) check(-30.0f * float(i) / 3000000.0f);
  check(-0.0f);
  check(-std::numeric_limits<float>::denorm_min());
  for (float d = -1e-38f; d > -1e-3f; d *= 1.01f) check(d);  // tiny distances from the max
  EXPECT_EQ(n_above_one, 0);
  EXPECT_LT(worst, 2 * 0x1p-23) << "worst relative error " << worst;
  std::printf("sampling_exp: worst relative error %.3g (2^-23 = %.3g)\n", worst, double(0x1p-23));
}

// ---------------------------------------------------------------------------------------------
// Greedy.

TEST(Greedy, ArgmaxTiesToLowestId) {
  Sampler s;
  SamplingParams p = sampled(0.0);
  const RngPosition rng;
  EXPECT_EQ(s.sample(std::vector<float>{1, 3, 3, 2}, p, rng).token_id, 1);
  EXPECT_EQ(s.sample(std::vector<float>{kNaN, 1, kNaN, 1}, p, rng).token_id, 1);
  EXPECT_EQ(s.sample(std::vector<float>{-kInf, -kInf, -kInf}, p, rng).token_id, 0);
  EXPECT_EQ(s.sample(std::vector<float>{kNaN, kNaN}, p, rng).token_id, 0);
  EXPECT_EQ(s.sample(std::vector<float>{0, kInf, 5, kInf}, p, rng).token_id, 1);
  p.temperature = 0.5e-5;  // below the greedy threshold
  EXPECT_EQ(s.sample(std::vector<float>{1, 2, 9, 9, 3}, p, rng).token_id, 2);
  const auto dist = s.distribution(std::vector<float>{1, 2, 9, 9, 3}, p);
  ASSERT_EQ(dist.size(), 1u);
  EXPECT_EQ(dist[0].token_id, 2);
  EXPECT_EQ(dist[0].weight, kMaxWeight);
}

TEST(Greedy, LongRowsWithNaNAndInf) {  // long enough for the vectorized max
  Sampler s;
  std::vector<float> l(1001, 0.5f);
  for (size_t i = 0; i < l.size(); i += 3) l[i] = kNaN;
  l[700] = 2.0f;
  l[900] = 2.0f;
  EXPECT_EQ(s.sample(l, sampled(0.0), RngPosition{}).token_id, 700);
  l[5] = kInf;
  EXPECT_EQ(s.sample(l, sampled(0.0), RngPosition{}).token_id, 5);
  std::fill(l.begin(), l.end(), kNaN);
  l[999] = -kInf;
  EXPECT_EQ(s.sample(l, sampled(0.0), RngPosition{}).token_id, 0);
  l[998] = -1e30f;
  EXPECT_EQ(s.sample(l, sampled(0.0), RngPosition{}).token_id, 998);
}

TEST(Greedy, SameForEverySeed) {
  Sampler s;
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0, 3);
  std::vector<float> logits(5000);
  for (float& v : logits) v = normal(gen);
  const auto best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  for (uint64_t seed = 0; seed < 20; ++seed)
    EXPECT_EQ(s.sample(logits, sampled(0.0), RngPosition{seed, 0, int64_t(seed)}).token_id, best);
}

// ---------------------------------------------------------------------------------------------
// Filters on hand-made distributions.

TEST(Filters, TopK) {
  Sampler s;
  SamplingParams p = sampled();
  p.top_k = 2;
  EXPECT_EQ(ids_of(s.distribution(std::vector<float>{1, 3, 3, 2, 0}, p)), (std::vector<int32_t>{1, 2}));
  // Ties at the cut go to the lower ids.
  EXPECT_EQ(ids_of(s.distribution(std::vector<float>{5, 4, 4, 4, 1}, p)), (std::vector<int32_t>{0, 1}));
  p.top_k = 3;
  EXPECT_EQ(ids_of(s.distribution(std::vector<float>{4, 4, 1, 4, 4}, p)), (std::vector<int32_t>{0, 1, 3}));
  p.top_k = 1;
  EXPECT_EQ(ids_of(s.distribution(std::vector<float>{0, 7, 1, 7}, p)), (std::vector<int32_t>{1}));
  for (int64_t off : {-1, 0, 5, 99}) {  // disabled, or >= vocab: everything stays
    p.top_k = off;
    EXPECT_EQ(ids_of(s.distribution(std::vector<float>{0, 1, 2, 3, 4}, p)), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  }
}

TEST(Filters, TopP) {
  Sampler s;
  SamplingParams p = sampled();
  const std::vector<float> l = log_of({0.5, 0.25, 0.15, 0.1});
  const std::vector<float> shuffled = log_of({0.15, 0.5, 0.1, 0.25});
  // Keep a token while the mass before it is < top_p.
  p.top_p = 0.3;
  EXPECT_EQ(ids_of(s.distribution(l, p)), (std::vector<int32_t>{0}));
  p.top_p = 0.7;
  EXPECT_EQ(ids_of(s.distribution(l, p)), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(ids_of(s.distribution(shuffled, p)), (std::vector<int32_t>{1, 3}));
  p.top_p = 0.8;
  EXPECT_EQ(ids_of(s.distribution(l, p)), (std::vector<int32_t>{0, 1, 2}));
  p.top_p = 0.95;
  EXPECT_EQ(ids_of(s.distribution(l, p)), (std::vector<int32_t>{0, 1, 2, 3}));
  p.top_p = 1e-9;  // never empty
  EXPECT_EQ(ids_of(s.distribution(shuffled, p)), (std::vector<int32_t>{1}));
  // Equal weights: order by id; the cut at exactly half drops the third token (mass before = T).
  p.top_p = 0.5;
  EXPECT_EQ(ids_of(s.distribution(std::vector<float>{2, 2, 2, 2}, p)), (std::vector<int32_t>{0, 1}));
}

TEST(Filters, TopPAfterTopKIsRenormalised) {
  Sampler s;
  SamplingParams p = sampled();
  const std::vector<float> l = log_of({0.4, 0.3, 0.2, 0.1});
  p.top_p = 0.75;
  EXPECT_EQ(ids_of(s.distribution(l, p)), (std::vector<int32_t>{0, 1, 2}));  // 0.7 before token 2
  p.top_k = 3;  // over {0.4, 0.3, 0.2} / 0.9, 0.778 comes before token 2
  EXPECT_EQ(ids_of(s.distribution(l, p)), (std::vector<int32_t>{0, 1}));
}

TEST(Filters, MinP) {
  Sampler s;
  SamplingParams p = sampled();
  const std::vector<float> l = log_of({0.5, 0.25, 0.15, 0.1});
  p.min_p = 0.35;  // p >= 0.175
  EXPECT_EQ(ids_of(s.distribution(l, p)), (std::vector<int32_t>{0, 1}));
  p.min_p = 0.25;  // p >= 0.125
  EXPECT_EQ(ids_of(s.distribution(l, p)), (std::vector<int32_t>{0, 1, 2}));
  p.min_p = 1.0;  // only the maximum (and exact ties)
  EXPECT_EQ(ids_of(s.distribution(l, p)), (std::vector<int32_t>{0}));
  EXPECT_EQ(ids_of(s.distribution(std::vector<float>{3, 1, 3}, p)), (std::vector<int32_t>{0, 2}));
  // Relative to the max, so independent of top-p's renormalisation: top-p keeps {0, 1, 2}.
  p.min_p = 0.35;
  p.top_p = 0.8;
  EXPECT_EQ(ids_of(s.distribution(l, p)), (std::vector<int32_t>{0, 1}));
}

TEST(Filters, TemperatureScalesWeights) {
  Sampler s;
  for (double t : {0.25, 0.5, 1.0, 2.0}) {
    const auto dist = s.distribution(std::vector<float>{0.0f, -1.0f, 0.5f}, sampled(t));
    ASSERT_EQ(dist.size(), 3u);
    EXPECT_EQ(dist[2].weight, kMaxWeight);
    EXPECT_NEAR(double(dist[0].weight) / double(kMaxWeight), std::exp(-0.5 / t), 1e-6);
    EXPECT_NEAR(double(dist[1].weight) / double(kMaxWeight), std::exp(-1.5 / t), 1e-6);
  }
}

TEST(Filters, NonFiniteLogits) {
  Sampler s;
  EXPECT_EQ(ids_of(s.distribution(std::vector<float>{kNaN, 0, kNaN, 0, -kInf}, sampled())),
            (std::vector<int32_t>{1, 3}));
  // +inf is clamped to the largest float: ties with it, and everything else weighs 0.
  EXPECT_EQ(ids_of(s.distribution(std::vector<float>{1, kInf, 2, kInf}, sampled())), (std::vector<int32_t>{1, 3}));
  // No finite score: the lowest candidate.
  EXPECT_EQ(ids_of(s.distribution(std::vector<float>{-kInf, kNaN, -kInf}, sampled())), (std::vector<int32_t>{0}));
  SamplingParams p = sampled();
  p.top_k = 2;
  EXPECT_EQ(ids_of(s.distribution(std::vector<float>{-kInf, -kInf, -kInf}, p)), (std::vector<int32_t>{0}));
  EXPECT_EQ(s.sample(std::vector<float>{-kInf, -kInf}, p, RngPosition{}).token_id, 0);
}

// ---------------------------------------------------------------------------------------------
// The documented spec (sampler.h steps 3-6) with full sorts, against the partial selections.

std::vector<WeightedToken> reference_distribution(std::span<const float> logits, const SamplingParams& p) {
  const auto n = int64_t(logits.size());
  const float temperature = float(p.temperature);
  std::vector<float> s(static_cast<size_t>(n));
  for (size_t i = 0; i < size_t(n); ++i) {
    float v = logits[i] / temperature;
    if (std::isnan(v)) v = -kInf;
    if (v == kInf) v = std::numeric_limits<float>::max();
    if (v == 0) v = 0;
    s[i] = v;
  }
  const float m = *std::max_element(s.begin(), s.end());
  std::vector<int32_t> cand(static_cast<size_t>(n));
  std::iota(cand.begin(), cand.end(), 0);
  if (p.top_k > 0 && p.top_k < n) {
    std::stable_sort(cand.begin(), cand.end(), [&](int32_t a, int32_t b) { return s[size_t(a)] > s[size_t(b)]; });
    cand.resize(size_t(p.top_k));
    std::sort(cand.begin(), cand.end());
  }
  std::vector<WeightedToken> kept;
  for (int32_t id : cand) {
    const uint64_t q = sampling::fixed_weight(sampling::sampling_exp(s[size_t(id)] - m));
    if (q > 0) kept.push_back({id, q});
  }
  if (kept.empty()) return {{cand.front(), kMaxWeight}};
  if (p.top_p < 1) {
    uint64_t z = 0;
    for (const auto& e : kept) z += e.weight;
    const uint64_t t = std::max<uint64_t>(1, uint64_t(double(z) * p.top_p));
    std::vector<WeightedToken> order = kept;
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.weight > b.weight; });
    std::vector<bool> keep(static_cast<size_t>(n), false);
    uint64_t before = 0;
    for (const auto& e : order) {
      if (before < t) keep[size_t(e.token_id)] = true;
      before += e.weight;
    }
    std::erase_if(kept, [&](const WeightedToken& e) { return !keep[size_t(e.token_id)]; });
  }
  if (p.min_p > 0) {
    const auto q_min = uint64_t(p.min_p * 0x1p42);
    std::erase_if(kept, [&](const WeightedToken& e) { return e.weight < q_min; });
  }
  return kept;
}

void expect_same(std::span<const WeightedToken> got, const std::vector<WeightedToken>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].token_id, want[i].token_id) << what << " at " << i;
    ASSERT_EQ(got[i].weight, want[i].weight) << what << " at " << i;
  }
}

TEST(Filters, MatchFullSortReference) {
  Sampler s;
  std::mt19937 gen(12345);
  std::normal_distribution<float> normal(0, 1);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int64_t vocab : {1, 2, 7, 300, 5000, 129280}) {
    const int n_cases = vocab == 129280 ? 6 : 40;
    for (int c = 0; c < n_cases; ++c) {
      std::vector<float> logits(static_cast<size_t>(vocab));
      const float spread = std::array<float, 4>{0.5f, 3.0f, 8.0f, 30.0f}[size_t(c % 4)];
      for (float& v : logits) v = normal(gen) * spread;
      if (c % 3 == 0)  // quantized: many exact ties in scores and weights
        for (float& v : logits) v = std::round(v * 2) / 2;
      if (c % 7 == 3 && vocab > 4) {
        logits[1] = kNaN;
        logits[3] = -kInf;
      }
      SamplingParams p = sampled(std::array<double, 4>{1.0, 0.6, 1.7, 0.05}[size_t(c % 4)]);
      p.top_k = std::array<int64_t, 6>{-1, 0, 1, 50, 2000, vocab - 1}[size_t((c / 2) % 6)];
      p.top_p = c % 5 == 0 ? 1.0 : std::array<double, 5>{0.95, 0.5, 0.9999, 0.1, 0.8}[size_t(c % 5)];
      p.min_p = c % 4 == 1 ? unit(gen) * 0.2 : 0.0;
      const std::string what = "vocab " + std::to_string(vocab) + " case " + std::to_string(c);
      expect_same(s.distribution(logits, p), reference_distribution(logits, p), what.c_str());
      if (HasFatalFailure()) return;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The draw.

TEST(Draw, InverseCdfInTokenIdOrder) {
  const std::vector<WeightedToken> dist = {{3, 1}, {5, 2}, {9, 1}};  // total 4
  const uint64_t q = uint64_t(1) << 62;                                // a quarter of 2^64
  EXPECT_EQ(draw_token(dist, 0), 3);
  EXPECT_EQ(draw_token(dist, q - 1), 3);
  EXPECT_EQ(draw_token(dist, q), 5);
  EXPECT_EQ(draw_token(dist, 3 * q - 1), 5);
  EXPECT_EQ(draw_token(dist, 3 * q), 9);
  EXPECT_EQ(draw_token(dist, std::numeric_limits<uint64_t>::max()), 9);
}

// sample() is draw_token over distribution() with the Philox number of its position, for the
// dense (no top-k) and top-k paths, with and without top-p / min-p.
TEST(Draw, SampleIsDistributionThenPhilox) {
  Sampler s;
  std::mt19937 gen(9);
  std::normal_distribution<float> normal(0, 2);
  std::vector<float> logits(3000);
  for (float& v : logits) v = normal(gen);
  for (int c = 0; c < 24; ++c) {
    SamplingParams p = sampled(std::array<double, 3>{0.8, 1.0, 1.6}[size_t(c % 3)]);
    p.top_k = std::array<int64_t, 4>{-1, 40, 1500, -1}[size_t(c % 4)];
    p.top_p = c % 2 ? 0.9 : 1.0;
    p.min_p = c % 6 >= 3 ? 0.01 : 0.0;
    for (int64_t pos : {0, 1, 17, 1000000007}) {
      const RngPosition rng{0xfeedfacecafebeefull + uint64_t(c), uint32_t(c % 3), pos};
      const auto dist = s.distribution(logits, p);
      const std::vector<WeightedToken> copy(dist.begin(), dist.end());
      const auto x = sampling::philox4x32_10(sampling::rng_counter(pos, rng.choice_idx, sampling::kStreamSample),
                                             sampling::rng_key(rng.seed));
      EXPECT_EQ(s.sample(logits, p, rng).token_id, draw_token(copy, sampling::uniform_u64(x))) << c << " " << pos;
    }
  }
}

std::vector<int32_t> draw_many(std::span<const float> logits, const SamplingParams& p, uint64_t seed,
                               uint32_t choice_idx, int n) {
  Sampler s;
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(logits, p, RngPosition{seed, choice_idx, i}).token_id);
  return out;
}

TEST(Draw, SeededDeterminism) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> logits(1000);
  for (float& v : logits) v = normal(gen);
  const SamplingParams p = sampled(1.0);
  const auto a = draw_many(logits, p, 42, 0, 200);
  EXPECT_EQ(a, draw_many(logits, p, 42, 0, 200));  // same seed, fresh sampler
  EXPECT_NE(a, draw_many(logits, p, 43, 0, 200));  // another seed
  EXPECT_NE(a, draw_many(logits, p, 42, 1, 200));  // another choice of the same request
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 50u);  // it does sample
  // A draw depends on its position only, not on the order of calls (recomputation, batching).
  Sampler s;
  for (int i = 199; i >= 0; i -= 7) EXPECT_EQ(s.sample(logits, p, RngPosition{42, 0, i}).token_id, a[size_t(i)]);
  // Seeds from the process source differ; an explicit seed is used as given.
  EXPECT_NE(draw_random_seed(), draw_random_seed());
  SamplingParams seeded = p;
  seeded.seed = -7;
  EXPECT_EQ(resolve_seed(seeded), uint64_t(int64_t(-7)));
}

// Pearson chi-square of `counts` against `probs` (all > 0).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t n) {
  double chi2 = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = probs[i] * double(n);
    chi2 += (double(counts[i]) - expected) * (double(counts[i]) - expected) / expected;
  }
  return chi2;
}

// Draws at temperature 1 follow softmax(logits). Deterministic (fixed seed), and a wrong
// sampler fails it: 200000 draws see a 2% relative error on a 0.3 probability as chi2 ~ 24.
TEST(Draw, ChiSquareMatchesSoftmax) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 2.0f, 0.2f, -2.0f};
  std::vector<double> probs(logits.size());
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) z += probs[i] = std::exp(double(logits[i]));
  for (double& pr : probs) pr /= z;
  const int64_t n = 200000;
  std::vector<int64_t> counts(logits.size(), 0);
  for (int32_t t : draw_many(logits, sampled(1.0), 2024, 0, int(n))) ++counts[size_t(t)];
  // 7 degrees of freedom: P(chi2 > 24.32) = 0.001.
  EXPECT_LT(chi_square(counts, probs, n), 24.32);
  // Power: the same counts against a distribution with two probabilities swapped are rejected.
  std::vector<double> wrong = probs;
  std::swap(wrong[0], wrong[5]);
  EXPECT_GT(chi_square(counts, wrong, n), 1000.0);
}

// With temperature, top-k and top-p the draws follow the renormalised filtered distribution.
TEST(Draw, ChiSquareFiltered) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 2.0f, 0.2f, -2.0f};
  SamplingParams p = sampled(0.7);
  p.top_k = 5;     // {5, 0, 1, 6, 2}
  p.top_p = 0.95;  // their probabilities at T = 0.7: 0.671, 0.161, 0.079, 0.051 | 0.039: mass
                   // before token 2 is 0.962, so it goes
  Sampler s;
  const auto dist = s.distribution(logits, p);
  ASSERT_EQ(ids_of(dist), (std::vector<int32_t>{0, 1, 5, 6}));
  std::vector<double> probs;
  double z = 0;
  for (const WeightedToken& e : dist) z += probs.emplace_back(std::exp(double(logits[size_t(e.token_id)]) / 0.7));
  for (double& pr : probs) pr /= z;
  const int64_t n = 200000;
  std::vector<int64_t> counts(dist.size(), 0);
  const std::vector<int32_t> ids = ids_of(dist);
  for (int32_t t : draw_many(logits, p, 77, 3, int(n))) {
    const auto it = std::find(ids.begin(), ids.end(), t);
    ASSERT_NE(it, ids.end()) << "drew filtered-out token " << t;
    ++counts[size_t(it - ids.begin())];
  }
  // 3 degrees of freedom: P(chi2 > 16.27) = 0.001.
  EXPECT_LT(chi_square(counts, probs, n), 16.27);
}

// ---------------------------------------------------------------------------------------------
// Penalties.

TEST(Penalties, ByHand) {
  const TokenHistory history = [] {
    TokenHistory h(std::vector<int32_t>{0, 1, 1});
    for (int32_t t : {2, 2, 3}) h.add_output(t);
    return h;
  }();
  SamplingParams p;
  p.repetition_penalty = 2.0;
  p.frequency_penalty = 0.5;
  p.presence_penalty = 0.3;
  std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f, 1.0f};
  apply_penalties(l, p, history);
  EXPECT_EQ(l[0], 1.0f);                          // prompt: 2 / 2
  EXPECT_EQ(l[1], -2.0f);                         // prompt, negative: -1 * 2
  EXPECT_EQ(l[2], (0.5f / 2.0f - 1.0f) - 0.3f);   // output x2: 0.25 - 0.5 * 2 - 0.3 = -1.05
  EXPECT_EQ(l[3], (3.0f / 2.0f - 0.5f) - 0.3f);   // output x1: 1.5 - 0.5 - 0.3 = 0.7
  EXPECT_EQ(l[4], 1.0f);                          // never seen
  EXPECT_NEAR(l[2], -1.05f, 1e-6f);
  EXPECT_NEAR(l[3], 0.7f, 1e-6f);
}

TEST(Penalties, OpenAiOnlyCountsOutputTokens) {
  TokenHistory h(std::vector<int32_t>{0});
  h.add_output(1);
  SamplingParams p;
  p.presence_penalty = 1.0;
  p.frequency_penalty = -0.5;  // negative: encourages repetition
  std::vector<float> l = {2.0f, 2.0f, 2.0f};
  apply_penalties(l, p, h);
  EXPECT_EQ(l, (std::vector<float>{2.0f, 1.5f, 2.0f}));  // 2 + 0.5 - 1
}

TEST(Penalties, ChangeTheGreedyChoice) {
  TokenHistory h(std::vector<int32_t>{});
  h.add_output(3);
  SamplingParams p = sampled(0.0);
  p.presence_penalty = 0.6;
  Sampler s;
  const std::vector<float> l = {0.0f, 1.0f, 0.5f, 1.5f};
  EXPECT_EQ(s.sample(l, sampled(0.0), RngPosition{}).token_id, 3);
  EXPECT_EQ(s.sample(l, p, RngPosition{}, &h).token_id, 1);  // 1.5 - 0.6 < 1.0
  // Ties after penalties go to the lowest id: 2 / 2 == 1.
  TokenHistory prompt(std::vector<int32_t>{1});
  SamplingParams rep = sampled(0.0);
  rep.repetition_penalty = 2.0;
  EXPECT_EQ(s.sample(std::vector<float>{1.0f, 2.0f}, rep, RngPosition{}, &prompt).token_id, 0);
}

// ---------------------------------------------------------------------------------------------
// Logprobs and helpers.

TEST(Logprobs, RawDistributionNotTheProcessedOne) {
  const std::vector<float> l = {1.0f, 3.0f, 3.0f, -2.0f, 0.5f, -kInf};
  const std::vector<float> ref = log_softmax(l);
  TokenHistory h(std::vector<int32_t>{1});
  SamplingParams p = sampled(0.3);
  p.repetition_penalty = 1.5;
  p.top_k = 2;
  p.logprobs = true;
  p.top_logprobs = 4;
  Sampler s;
  const SampledToken t = s.sample(l, p, RngPosition{1, 0, 0}, &h);
  EXPECT_NEAR(t.logprob, ref[size_t(t.token_id)], 1e-6f);
  ASSERT_EQ(t.top_logprobs.size(), 4u);
  const std::vector<int32_t> want_ids = {1, 2, 0, 4};  // logit desc, ties by id
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(t.top_logprobs[i].first, want_ids[i]);
    EXPECT_NEAR(t.top_logprobs[i].second, ref[size_t(want_ids[i])], 1e-6f);
  }
  // A -inf logit has logprob -inf; without logprobs nothing is filled.
  SamplingParams greedy = sampled(0.0);
  greedy.logprobs = true;
  EXPECT_EQ(s.sample(std::vector<float>{-kInf, 0.0f}, greedy, RngPosition{}).top_logprobs.size(), 0u);
  p.logprobs = false;
  p.top_logprobs = 0;
  const SampledToken bare = s.sample(l, p, RngPosition{1, 0, 0}, &h);
  EXPECT_EQ(bare.logprob, 0.0f);
  EXPECT_TRUE(bare.top_logprobs.empty());
  EXPECT_EQ(bare.token_id, t.token_id);  // logprobs do not change the draw
}

TEST(Logprobs, LargeVocabMatchesReference) {
  std::mt19937 gen(77);
  std::normal_distribution<float> normal(0, 4);
  std::vector<float> l(129280);
  for (float& v : l) v = normal(gen);
  const std::vector<float> ref = log_softmax(l);
  SamplingParams p = sampled(1.0);
  p.logprobs = true;
  p.top_logprobs = 20;
  Sampler s;
  const SampledToken t = s.sample(l, p, RngPosition{5, 0, 0});
  EXPECT_NEAR(t.logprob, ref[size_t(t.token_id)], 2e-5f);
  const std::vector<int32_t> top = top_k_ids(l, 20);
  ASSERT_EQ(t.top_logprobs.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(t.top_logprobs[i].first, top[i]);
    EXPECT_NEAR(t.top_logprobs[i].second, ref[size_t(top[i])], 2e-5f);
  }
}

TEST(Helpers, LogSoftmaxAndTopK) {
  const std::vector<float> ls = log_softmax(std::vector<float>{0.0f, std::log(3.0f)});
  EXPECT_NEAR(ls[0], std::log(0.25f), 1e-6f);
  EXPECT_NEAR(ls[1], std::log(0.75f), 1e-6f);
  EXPECT_EQ(top_k_ids(std::vector<float>{1, 3, 3, kNaN, 2}, 3), (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(top_k_ids(std::vector<float>{1, 2}, 5), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(top_k_ids(std::vector<float>{-0.0f, 0.0f}, 1), (std::vector<int32_t>{0}));  // -0 == +0
  // Above the heap threshold (nth_element path).
  std::vector<float> v(5000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(int(i * 7919 % 5000) / 4);  // ties in fours
  const std::vector<int32_t> big = top_k_ids(v, 2000);
  std::vector<int32_t> want(v.size());
  std::iota(want.begin(), want.end(), 0);
  std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return v[size_t(a)] > v[size_t(b)]; });
  want.resize(2000);
  EXPECT_EQ(big, want);
}

}  // namespace
}  // namespace pg
