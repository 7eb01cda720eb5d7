// Sampler implementation: the pipeline documented in sampler.h, with partial selection (a k-heap
// or nth_element for top-k, a weight histogram for top-p) instead of sorting the vocabulary, and
// branch-free, vectorizable per-vocabulary loops.
#include "engine/sampler.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
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
  s = s != s ? -kInf : s;
  s = s == kInf ? std::numeric_limits<float>::max() : s;
  return s == 0.0f ? 0.0f : s;  // -0 -> +0: equal floats must get equal keys
}

// Order-preserving map of non-NaN floats to uint32: negative floats get all bits flipped,
// positive ones the sign bit set (branch-free: signs of logits are unpredictable).
inline uint32_t order_key(float f) {
  const auto b = std::bit_cast<uint32_t>(f);
  const auto negative_mask = uint32_t(int32_t(b) >> 31);
  return b ^ (negative_mask | 0x80000000u);
}
inline float key_score(uint64_t key) {
  const auto k = uint32_t(key >> 32);
  return std::bit_cast<float>((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}
// (score desc, id asc) as one integer, larger = better.
inline uint64_t pack_score(float s, int32_t id) {
  return (uint64_t(order_key(s)) << 32) | (0xFFFFFFFFu - uint32_t(id));
}
inline int32_t score_key_id(uint64_t key) { return int32_t(0xFFFFFFFFu - uint32_t(key)); }
// (weight desc, id asc) as one integer: weights are < 2^44 and ids < 2^20 (kMaxVocab).
inline uint64_t pack_weight(uint64_t q, int32_t id) { return (q << 20) | uint64_t(0xFFFFF - id); }
inline uint64_t weight_of_key(uint64_t key) { return key >> 20; }

// Monotone bucket of a weight (equal weights share one): the exponent and 4 leading mantissa
// bits of float(q), so a bucket spans a factor <= 1 + 1/16; weights below 2^24 (relative weight
// < 2^-18) share bucket 0. float(q) rounds, but monotonically, so the order is kept.
constexpr uint32_t kBucketBase = (151u << 4) - 1;          // float bits >> 19 of 2^24, minus 1
constexpr int kNumBuckets = int((171u << 4) + 16 - kBucketBase);  // weights < 2^44 (exponent <= 171)
inline int weight_bucket(uint64_t q) {
  if (q < (uint64_t(1) << 24)) return 0;
  return int((std::bit_cast<uint32_t>(float(int64_t(q))) >> 19) - kBucketBase);
}
// The same bucket from f = w * 2^42 >= 0, the float that q = trunc(f) came from: at f >= 2^24 a
// float is an integer, so float(q) == f there, and below 2^24 the bits give <= 0. Branch-free:
// at high temperature about half the tokens are below 2^24, unpredictably.
inline int weight_bucket_of_scaled(float f) {
  const int v = int(std::bit_cast<uint32_t>(f) >> 19) - int(kBucketBase);
  return v > 0 ? v : 0;
}
using WeightHistogram = std::array<uint64_t, kNumBuckets>;

// Sums of weights per bucket, with four interleaved partial histograms: runs of equal buckets
// would otherwise chain every add through store-to-load forwarding.
struct HistogramBuilder {
  std::array<WeightHistogram, 4> part{};
  void add(size_t j, int bucket, uint64_t q) { part[j & 3][size_t(bucket)] += q; }
  WeightHistogram total() const {
    WeightHistogram mass;
    for (size_t i = 0; i < mass.size(); ++i) mass[i] = part[0][i] + part[1][i] + part[2][i] + part[3][i];
    return mass;
  }
};

// The packed keys of the k best values (value desc, id asc; NaN as -inf), in no order.
void select_best(std::span<const float> values, int64_t k, std::vector<uint64_t>& keys) {
  keys.clear();
  const auto n = int64_t(values.size());
  k = std::min(k, n);
  if (k <= 0) return;
  if (k <= kHeapSelectMax) {
    // A min-heap of the best k keys. Once full, a value must beat the worst kept score to enter:
    // on a tie the later (higher) id loses, so one float compare rejects almost every element.
    keys.reserve(size_t(k));
    int32_t i = 0;
    for (; i < int32_t(n) && int64_t(keys.size()) < k; ++i) {
      keys.push_back(pack_score(sanitize_score(values[size_t(i)]), i));
      std::push_heap(keys.begin(), keys.end(), std::greater<>());
    }
    float worst = key_score(keys.front());
    for (; i < int32_t(n); ++i) {
      // The raw compare also rejects NaN; the second one catches +inf (sanitized to FLT_MAX).
      if (!(values[size_t(i)] > worst)) continue;
      const float s = sanitize_score(values[size_t(i)]);
      if (!(s > worst)) continue;
      std::pop_heap(keys.begin(), keys.end(), std::greater<>());
      keys.back() = pack_score(s, i);
      std::push_heap(keys.begin(), keys.end(), std::greater<>());
      worst = key_score(keys.front());
    }
  } else {
    keys.resize(size_t(n));
    for (int32_t i = 0; i < int32_t(n); ++i) keys[size_t(i)] = pack_score(sanitize_score(values[size_t(i)]), i);
    std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<>());
    keys.resize(size_t(k));
  }
}

// Max with 8 independent accumulators (no loop-carried maxss chain; the
// compiler turns it into vector max). NaN is skipped: std::max(acc, NaN) keeps acc.
float max_of(std::span<const float> v) {
  std::array<float, 8> acc;
  acc.fill(-kInf);
  size_t i = 0;
  for (; i + 8 <= v.size(); i += 8)
    for (size_t j = 0; j < 8; ++j) acc[j] = std::max(acc[j], v[i + j]);
  for (; i < v.size(); ++i) acc[0] = std::max(acc[0], v[i]);
  return *std::max_element(acc.begin(), acc.end());
}

// The two per-vocabulary fp32 loops, built twice (AVX2 and baseline x86-64; picked at load time).
// Same IEEE operations either way, so the same bits.
#if defined(__x86_64__) && defined(__GNUC__)
#define PG_VOCAB_LOOP __attribute__((target_clones("avx2", "default"), noinline))
#else
#define PG_VOCAB_LOOP
#endif
PG_VOCAB_LOOP void scale_scores(const float* l, float* out, size_t n, float temperature) {
  for (size_t i = 0; i < n; ++i) out[i] = sanitize_score(l[i] / temperature);
}
PG_VOCAB_LOOP void exp_scores(float* s, size_t n, float m) {
  for (size_t i = 0; i < n; ++i) s[i] = sampling::sampling_exp(s[i] - m);
}

// Greedy: the first index of the maximum; NaN never wins; no value above -inf gives 0.
int32_t argmax(std::span<const float> l) {
  const float m = max_of(l);
  if (m == -kInf) return 0;
  return int32_t(std::find(l.begin(), l.end(), m) - l.begin());
}

// Smallest weight q whose bucket is >= b (weight_bucket is monotone; 2^44 is past every bucket).
uint64_t bucket_lower_bound(int b) {
  uint64_t lo = 0, hi = uint64_t(1) << 44;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (weight_bucket(mid) >= b) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

struct TopPCut {
  uint64_t cut = 0;          // kept iff pack_weight(q, id) >= cut
  uint64_t kept_weight = 0;  // sum of the kept weights
};

// Step 5 over candidates j (weight q[j], id id_of(j)) whose weights sum to z > 0 and whose
// per-bucket sums are `mass`. The boundary bucket holds the last kept token: buckets above it
// are kept whole and buckets below dropped, so only the boundary bucket's tokens are sorted.
template <class IdOf>
TopPCut top_p_cut(std::span<const uint64_t> q, IdOf id_of, uint64_t z, const WeightHistogram& mass, double top_p,
                  std::vector<uint64_t>& keys) {
  uint64_t t = uint64_t(double(z) * top_p);
  if (t < 1) t = 1;
  if (t >= z) return {0, z};  // every token has less than z before it
  int b = kNumBuckets - 1;
  uint64_t above = 0;  // mass of the buckets above b; always < t
  for (; b > 0; --b) {
    if (above + mass[size_t(b)] >= t) break;
    above += mass[size_t(b)];
  }
  const uint64_t lo = bucket_lower_bound(b), width = bucket_lower_bound(b + 1) - lo;
  keys.clear();
  for (size_t j = 0; j < q.size(); ++j)
    if (q[j] - lo < width) keys.push_back(pack_weight(q[j], id_of(j)));  // q in [lo, lo + width)
  std::sort(keys.begin(), keys.end(), std::greater<>());
  TopPCut out{0, above};
  for (uint64_t key : keys) {
    if (out.kept_weight >= t) break;
    out.cut = key;
    out.kept_weight += weight_of_key(key);
  }
  return out;
}

// Raw logprobs (see sampler.h): log_softmax of the sanitized logits; exps in fp32 (into
// `scratch`), summed in double by 8 accumulators.
void fill_logprobs(std::span<const float> logits, int64_t n_top, std::vector<float>& scratch,
                   std::vector<uint64_t>& keys, SampledToken& out) {
  const size_t n = logits.size();
  scratch.resize(n);
  scale_scores(logits.data(), scratch.data(), n, 1.0f);  // x / 1 == x: sanitizes only
  const float m = max_of(scratch);
  double lse = -std::numeric_limits<double>::infinity();
  if (m > -kInf) {
    exp_scores(scratch.data(), n, m);
    std::array<double, 8> acc{};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (size_t j = 0; j < 8; ++j) acc[j] += double(scratch[i + j]);
    for (; i < n; ++i) acc[0] += double(scratch[i]);
    lse = double(m) + std::log(std::accumulate(acc.begin(), acc.end(), 0.0));
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

void Sampler::filter(std::span<const float> logits, const SamplingParams& p, const TokenHistory* history) {
  const auto n = int64_t(logits.size());
  PG_CHECK(n > 0 && n <= sampling::kMaxVocab, "vocabulary of {} tokens, expected [1, {}]", n, sampling::kMaxVocab);
  single_.reset();

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
    single_ = argmax(l);
    return;
  }
  // 3. Temperature (l may alias scores_: each element is read before it is written).
  scores_.resize(size_t(n));
  const float temperature = float(p.temperature);
  scale_scores(l.data(), scores_.data(), size_t(n), temperature);
  const float m = max_of(scores_);
  // 3-4. Candidates and their weights.
  dense_ = !(p.top_k > 0 && p.top_k < n);
  const bool top_p = p.top_p < 1.0;
  HistogramBuilder hist;
  uint64_t z = 0;
  if (dense_) {
    exp_scores(scores_.data(), size_t(n), m);
    weights_.resize(size_t(n));
    if (top_p) {
      for (size_t i = 0; i < size_t(n); ++i) {
        const float f = scores_[i] * 0x1p42f;  // = fixed_weight before truncation
        const auto q = static_cast<uint64_t>(static_cast<int64_t>(f));
        weights_[i] = q;
        z += q;
        hist.add(i, weight_bucket_of_scaled(f), q);
      }
    } else {
      for (size_t i = 0; i < size_t(n); ++i) z += weights_[i] = sampling::fixed_weight(scores_[i]);
    }
  } else {
    select_best(scores_, p.top_k, keys_);
    ids_.clear();
    for (uint64_t key : keys_) ids_.push_back(score_key_id(key));
    std::sort(ids_.begin(), ids_.end());
    weights_.resize(ids_.size());
    for (size_t j = 0; j < ids_.size(); ++j) {
      const uint64_t q = sampling::fixed_weight(sampling::sampling_exp(scores_[size_t(ids_[j])] - m));
      weights_[j] = q;
      z += q;
      hist.add(j, weight_bucket(q), q);
    }
  }
  if (z == 0) {  // no finite score: the lowest candidate
    single_ = dense_ ? 0 : ids_.front();
    return;
  }
  cut_ = pack_weight(1, 0xFFFFF);  // weight >= 1
  kept_weight_ = z;
  // 5. Top-p.
  if (top_p) {
    const WeightHistogram mass = hist.total();
    const TopPCut c = dense_ ? top_p_cut(weights_, [](size_t j) { return int32_t(j); }, z, mass, p.top_p, keys_)
                             : top_p_cut(weights_, [this](size_t j) { return ids_[j]; }, z, mass, p.top_p, keys_);
    if (c.cut > cut_) {
      cut_ = c.cut;
      kept_weight_ = c.kept_weight;
    }
  }
  // 6. Min-p: the maximum weighs 2^42, so p >= min_p * p_max is q >= min_p * 2^42, a prefix of
  // the same order: keys >= pack_weight(q_min, largest id).
  if (p.min_p > 0.0) {
    const uint64_t min_p_cut = pack_weight(uint64_t(p.min_p * 0x1p42), 0xFFFFF);
    if (min_p_cut > cut_) {
      cut_ = min_p_cut;
      kept_weight_ = 0;
      for (size_t j = 0; j < weights_.size(); ++j)
        kept_weight_ += pack_weight(weights_[j], candidate_id(j)) >= cut_ ? weights_[j] : 0;
    }
  }
}

int32_t Sampler::draw(uint64_t u) const {
  const uint64_t r = sampling::scale_u64(u, kept_weight_);  // in [0, kept_weight_)
  uint64_t cum = 0;
  for (size_t j = 0; j < weights_.size(); ++j) {
    const int32_t id = candidate_id(j);
    // Dropped tokens add 0 (a select, not a branch: kept and dropped tokens interleave randomly),
    // so the running sum first exceeds r at a kept token.
    cum += pack_weight(weights_[j], id) >= cut_ ? weights_[j] : 0;
    if (r < cum) return id;
  }
  PG_CHECK(false, "unreachable: r {} >= kept weight {}", r, kept_weight_);
  return 0;
}

std::span<const WeightedToken> Sampler::distribution(std::span<const float> logits, const SamplingParams& p,
                                                     const TokenHistory* history) {
  filter(logits, p, history);
  kept_.clear();
  if (single_) {
    kept_.push_back({*single_, kMaxWeight});
    return kept_;
  }
  for (size_t j = 0; j < weights_.size(); ++j) {
    const int32_t id = candidate_id(j);
    if (pack_weight(weights_[j], id) >= cut_) kept_.push_back({id, weights_[j]});
  }
  return kept_;
}

SampledToken Sampler::sample(std::span<const float> logits, const SamplingParams& p, const RngPosition& rng,
                             const TokenHistory* history) {
  filter(logits, p, history);
  SampledToken out;
  if (single_) {
    out.token_id = *single_;
  } else {
    const sampling::PhiloxCounter x = sampling::philox4x32_10(
        sampling::rng_counter(rng.output_idx, rng.choice_idx, sampling::kStreamSample), sampling::rng_key(rng.seed));
    out.token_id = draw(sampling::uniform_u64(x));
  }
  if (p.logprobs) fill_logprobs(logits, p.top_logprobs, scores_, keys_, out);
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
