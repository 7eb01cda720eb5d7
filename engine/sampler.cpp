// Sampler implementation: the pipeline documented in sampler.h, with partial selection (a k-heap
// or nth_element for top-k, weight buckets for top-p) instead of sorting the vocabulary.
#include "engine/sampler.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "core/check.h"

namespace pg {
namespace {

using sampling::kMaxWeight;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Top-k up to this size keeps a k-entry min-heap in one pass; larger k uses nth_element.
constexpr int64_t kHeapSelectMax = 1024;

// Step 3's clean-up, so that every score is ordered and finite or -inf.
inline float sanitize_score(float s) {
  if (s != s) return -kInf;
  if (s == kInf) return std::numeric_limits<float>::max();
  if (s == 0.0f) return 0.0f;  // -0 -> +0: equal floats must get equal keys
  return s;
}

// Order-preserving map of non-NaN floats to uint32 (negative floats: all bits flipped).
inline uint32_t order_key(float f) {
  const auto b = std::bit_cast<uint32_t>(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
// (score desc, id asc) as one integer, larger = better.
inline uint64_t pack_score(float s, int32_t id) {
  return (uint64_t(order_key(s)) << 32) | (0xFFFFFFFFu - uint32_t(id));
}
inline int32_t score_key_id(uint64_t key) { return int32_t(0xFFFFFFFFu - uint32_t(key)); }
// (weight desc, id asc) as one integer: weights are < 2^44 and ids < 2^20 (kMaxVocab).
inline uint64_t pack_weight(uint64_t q, int32_t id) { return (q << 20) | uint64_t(0xFFFFF - id); }
inline uint64_t weight_of_key(uint64_t key) { return key >> 20; }

// Monotone bucket of a weight >= 1: its bit length and the 4 bits after the leading one, so a
// bucket spans weights within a factor 1 + 1/16 of each other.
constexpr int kNumBuckets = 64 * 16;
inline int weight_bucket(uint64_t q) {
  const int lead = 63 - std::countl_zero(q);
  const uint64_t sub = lead >= 4 ? (q >> (lead - 4)) & 15 : (q << (4 - lead)) & 15;
  return lead * 16 + int(sub);
}

// The packed keys of the k best values (value desc, id asc; NaN as -inf), in no order.
void select_best(std::span<const float> values, int64_t k, std::vector<uint64_t>& keys) {
  keys.clear();
  const auto n = int64_t(values.size());
  k = std::min(k, n);
  if (k <= 0) return;
  if (k <= kHeapSelectMax) {
    keys.reserve(size_t(k));
    for (int32_t i = 0; i < int32_t(n); ++i) {
      const uint64_t key = pack_score(sanitize_score(values[size_t(i)]), i);
      if (int64_t(keys.size()) < k) {
        keys.push_back(key);
        std::push_heap(keys.begin(), keys.end(), std::greater<>());
      } else if (key > keys.front()) {  // front = the worst of the best k so far
        std::pop_heap(keys.begin(), keys.end(), std::greater<>());
        keys.back() = key;
        std::push_heap(keys.begin(), keys.end(), std::greater<>());
      }
    }
  } else {
    keys.resize(size_t(n));
    for (int32_t i = 0; i < int32_t(n); ++i) keys[size_t(i)] = pack_score(sanitize_score(values[size_t(i)]), i);
    std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<>());
    keys.resize(size_t(k));
  }
}

// Greedy: first index of the maximum; NaN never compares greater, so it never wins.
int32_t argmax(std::span<const float> l) {
  int32_t best = 0;
  float best_v = -kInf;
  for (size_t i = 0; i < l.size(); ++i)
    if (l[i] > best_v) {
      best_v = l[i];
      best = int32_t(i);
    }
  return best;
}

// Step 5 over `kept` (id order, weights > 0); keeps the id order.
void apply_top_p(std::vector<WeightedToken>& kept, double top_p, std::vector<uint64_t>& keys) {
  uint64_t z = 0;
  for (const WeightedToken& e : kept) z += e.weight;
  uint64_t t = uint64_t(double(z) * top_p);
  if (t < 1) t = 1;
  if (t >= z) return;  // every token has less than z before it
  // The boundary bucket holds the last kept token: buckets above it are kept whole, below it
  // dropped; only its own tokens need ordering.
  std::array<uint64_t, kNumBuckets> mass{};
  for (const WeightedToken& e : kept) mass[size_t(weight_bucket(e.weight))] += e.weight;
  int b = kNumBuckets - 1;
  uint64_t above = 0;  // mass of the buckets above b; always < t
  for (; b > 0; --b) {
    if (above + mass[size_t(b)] >= t) break;
    above += mass[size_t(b)];
  }
  keys.clear();
  for (const WeightedToken& e : kept)
    if (weight_bucket(e.weight) == b) keys.push_back(pack_weight(e.weight, e.token_id));
  std::sort(keys.begin(), keys.end(), std::greater<>());
  uint64_t cum = above, cut = 0;
  for (uint64_t key : keys) {
    if (cum >= t) break;
    cut = key;
    cum += weight_of_key(key);
  }
  std::erase_if(kept, [cut](const WeightedToken& e) { return pack_weight(e.weight, e.token_id) < cut; });
}

// Raw logprobs (see sampler.h): log_softmax of the sanitized logits, double sum.
void fill_logprobs(std::span<const float> logits, int64_t n_top, std::vector<uint64_t>& keys, SampledToken& out) {
  float m = -kInf;
  for (float v : logits) m = std::max(m, sanitize_score(v));
  double lse = -std::numeric_limits<double>::infinity();
  if (m > -kInf) {
    double sum = 0;
    for (float v : logits) sum += double(sampling::sampling_exp(sanitize_score(v) - m));
    lse = double(m) + std::log(sum);
  }
  auto logprob = [&](int32_t id) -> float {
    if (lse == -std::numeric_limits<double>::infinity()) return -kInf;
    return float(double(sanitize_score(logits[size_t(id)])) - lse);
  };
  out.logprob = logprob(out.token_id);
  out.top_logprobs.clear();
  if (n_top <= 0) return;
  select_best(logits, n_top, keys);
  std::sort(keys.begin(), keys.end(), std::greater<>());
  for (uint64_t key : keys) {
    const int32_t id = score_key_id(key);
    out.top_logprobs.emplace_back(id, logprob(id));
  }
}

}  // namespace

TokenHistory::TokenHistory(std::span<const int32_t> prompt_ids) {
  entries_.reserve(prompt_ids.size());
  for (int32_t id : prompt_ids) entries_[id].in_prompt = true;
}

void TokenHistory::add_output(int32_t token_id) { ++entries_[token_id].n_output; }

uint64_t draw_random_seed() {
  static const uint64_t base = [] {
    try {
      std::random_device rd;
      return (uint64_t(rd()) << 32) ^ uint64_t(rd());
    } catch (...) {  // no entropy source: the clock is still different per process
      return uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    }
  }();
  static std::atomic<uint64_t> counter{0};
  // splitmix64 (Steele et al.): a Weyl sequence through a bijective mixer, so seeds never repeat.
  uint64_t z = base + 0x9E3779B97F4A7C15ull * (counter.fetch_add(1, std::memory_order_relaxed) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t resolve_seed(const SamplingParams& params) {
  return params.seed ? uint64_t(*params.seed) : draw_random_seed();
}

void apply_penalties(std::span<float> logits, const SamplingParams& p, const TokenHistory& history) {
  const float rp = float(p.repetition_penalty);
  const float fp = float(p.frequency_penalty);
  const float pp = float(p.presence_penalty);
  const auto n = int64_t(logits.size());
  for (const auto& [id, e] : history.entries()) {
    PG_CHECK(id >= 0 && id < n, "token {} in the history is outside the vocabulary [0, {})", id, n);
    float l = logits[size_t(id)];
    if (rp != 1.0f) l = l > 0.0f ? l / rp : l * rp;
    if (e.n_output > 0) {
      if (fp != 0.0f) {
        const float f = fp * float(e.n_output);
        l = l - f;
      }
      if (pp != 0.0f) l = l - pp;
    }
    logits[size_t(id)] = l;
  }
}

int32_t draw_token(std::span<const WeightedToken> dist, uint64_t u) {
  PG_CHECK(!dist.empty(), "empty distribution");
  uint64_t z = 0;
  for (const WeightedToken& e : dist) z += e.weight;
  PG_CHECK(z > 0, "a distribution of {} tokens with zero total weight", dist.size());
  const uint64_t r = sampling::scale_u64(u, z);  // in [0, z)
  uint64_t cum = 0;
  for (const WeightedToken& e : dist) {
    cum += e.weight;
    if (r < cum) return e.token_id;
  }
  PG_CHECK(false, "unreachable: r {} >= total {}", r, z);
  return dist.back().token_id;
}

std::span<const WeightedToken> Sampler::distribution(std::span<const float> logits, const SamplingParams& p,
                                                     const TokenHistory* history) {
  const auto n = int64_t(logits.size());
  PG_CHECK(n > 0 && n <= sampling::kMaxVocab, "vocabulary of {} tokens, expected [1, {}]", n, sampling::kMaxVocab);
  kept_.clear();

  // 1. Penalties, on a copy.
  std::span<const float> l = logits;
  if (p.has_penalties()) {
    PG_CHECK(history != nullptr, "penalties are set but no token history was given");
    scores_.assign(logits.begin(), logits.end());
    apply_penalties(scores_, p, *history);
    l = scores_;
  }
  // 2. Greedy.
  if (p.is_greedy()) {
    kept_.push_back({argmax(l), kMaxWeight});
    return kept_;
  }
  // 3. Temperature (l may alias scores_: each element is read before it is written).
  scores_.resize(size_t(n));
  const float temperature = float(p.temperature);
  float m = -kInf;
  for (size_t i = 0; i < size_t(n); ++i) {
    const float s = sanitize_score(l[i] / temperature);
    scores_[i] = s;
    m = std::max(m, s);
  }
  // 3-4. Top-k candidates, weights.
  const bool use_top_k = p.top_k > 0 && p.top_k < n;
  auto add = [&](int32_t id) {
    const uint64_t q = sampling::fixed_weight(sampling::sampling_exp(scores_[size_t(id)] - m));
    if (q > 0) kept_.push_back({id, q});
  };
  if (use_top_k) {
    select_best(scores_, p.top_k, keys_);
    ids_.clear();
    for (uint64_t key : keys_) ids_.push_back(score_key_id(key));
    std::sort(ids_.begin(), ids_.end());
    for (int32_t id : ids_) add(id);
  } else {
    kept_.reserve(size_t(n));
    for (int32_t i = 0; i < int32_t(n); ++i) add(i);
  }
  if (kept_.empty()) {  // no finite score
    kept_.push_back({use_top_k ? ids_.front() : 0, kMaxWeight});
    return kept_;
  }
  // 5. Top-p.
  if (p.top_p < 1.0) apply_top_p(kept_, p.top_p, keys_);
  // 6. Min-p: the maximum weighs 2^42, so p >= min_p * p_max is q >= min_p * 2^42.
  if (p.min_p > 0.0) {
    const auto q_min = uint64_t(p.min_p * 0x1p42);
    std::erase_if(kept_, [q_min](const WeightedToken& e) { return e.weight < q_min; });
  }
  return kept_;
}

SampledToken Sampler::sample(std::span<const float> logits, const SamplingParams& p, const RngPosition& rng,
                             const TokenHistory* history) {
  SampledToken out;
  const std::span<const WeightedToken> dist = distribution(logits, p, history);
  if (dist.size() == 1) {
    out.token_id = dist[0].token_id;
  } else {
    const sampling::PhiloxCounter x = sampling::philox4x32_10(
        sampling::rng_counter(rng.output_idx, rng.choice_idx, sampling::kStreamSample), sampling::rng_key(rng.seed));
    out.token_id = draw_token(dist, sampling::uniform_u64(x));
  }
  if (p.logprobs) fill_logprobs(logits, p.top_logprobs, keys_, out);
  return out;
}

std::vector<float> log_softmax(std::span<const float> logits) {
  double m = -std::numeric_limits<double>::infinity();
  for (float v : logits)
    if (v > m) m = v;
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - m);
  const double lse = m + std::log(sum);
  std::vector<float> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = float(double(logits[i]) - lse);
  return out;
}

std::vector<int32_t> top_k_ids(std::span<const float> values, int64_t k) {
  std::vector<uint64_t> keys;
  select_best(values, k, keys);
  std::sort(keys.begin(), keys.end(), std::greater<>());
  std::vector<int32_t> ids;
  ids.reserve(keys.size());
  for (uint64_t key : keys) ids.push_back(score_key_id(key));
  return ids;
}

}  // namespace pg
