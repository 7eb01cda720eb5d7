// CPU sampler over one fp32 logits row: penalties, temperature, top-k, top-p, min-p, a seeded
// draw (Philox4x32-10, engine/sampling_math.h) and raw logprobs. The CPU definition of sampling:
// a GPU sampler follows the numbered steps below and draws the same token for the same inputs.
//
// The pipeline (every fp32 operation rounded once, no FMA contraction):
//  1. Penalties (when any is set), per token t seen in the history, in this order:
//     repetition (HF/vLLM, t in prompt or output): l = l > 0 ? l / rp : l * rp
//     frequency  (OpenAI, t in output c > 0 times): l = l - fp * float(c)
//     presence   (OpenAI, t in output):             l = l - pp
//     (rp, fp, pp are the params rounded to fp32.)
//  2. Greedy (temperature < kGreedyTemperature): the argmax of the penalized logits, ties to the
//     lowest id; NaN never wins; a row of NaN / -inf gives token 0. Steps 3-7 are skipped.
//  3. Scores s = l / float(temperature), then NaN -> -inf, +inf -> FLT_MAX, -0 -> +0.
//     m = max s. Top-k (k >= 1 and < vocab): keep the k best by (s desc, id asc).
//  4. Weights q = fixed_weight(sampling_exp(s - m)) (integers, the max token weighs 2^42);
//     tokens with q = 0 are dropped. If none is left (no finite score), the lowest candidate id
//     is the result.
//  5. Top-p (< 1): Z = sum q, T = max(1, uint64(double(Z) * top_p)) (double ops, truncation).
//     In the order (q desc, id asc) keep token j iff the mass before it is < T: the smallest
//     prefix holding at least top_p of the mass (HF/vLLM), never empty.
//  6. Min-p (> 0): keep q >= uint64(min_p * 2^42), i.e. p >= min_p * p_max. Applied after top-p
//     as HF does (vLLM v1 applies min-p before top-k/top-p, which can move the top-p cut).
//  7. Draw: x = philox4x32_10(rng_counter(output_idx, choice_idx, kStreamSample), rng_key(seed)),
//     u = uniform_u64(x), Zk = sum of the kept q, R = scale_u64(u, Zk) = floor(u * Zk / 2^64).
//     In token-id order over the kept set, the result is the first token whose inclusive prefix
//     sum of q exceeds R (a single kept token needs no draw).
// Why integers from step 4 on: sums, thresholds and prefix sums of uint64 weights are exact in
// any order, so a GPU's parallel reductions and scans reproduce them bit for bit; only step 1,
// 3 and sampling_exp are fp32, and those are elementwise. Losing weights below 2^-42 of the
// maximum moves at most 129280 * 2^-42 < 3e-8 of probability.
//
// Logprobs are those of the raw model distribution (vLLM's default "raw_logprobs"): log_softmax
// of the logits as given, before penalties, temperature and filters, for the chosen token and
// the top_logprobs best tokens (logit desc, id asc). They are reported, not used to sample, so
// they need only be accurate (double sum of exp), not bit-exact. A -inf logit gives -inf.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/sampling_math.h"
#include "engine/sampling_params.h"

namespace pg {

// The tokens penalties look at: which appear in the prompt or the output, and how often each
// appears in the output. One per choice, kept only when params.has_penalties();
// memory is O(distinct tokens), not O(vocab).
class TokenHistory {
 public:
  struct Entry {
    int32_t n_output = 0;    // occurrences among generated tokens
    bool in_prompt = false;
  };

  TokenHistory() = default;
  explicit TokenHistory(std::span<const int32_t> prompt_ids);
  void add_output(int32_t token_id);

  const std::unordered_map<int32_t, Entry>& entries() const { return entries_; }

 private:
  std::unordered_map<int32_t, Entry> entries_;
};

// Which random numbers a draw uses (see step 7).
struct RngPosition {
  uint64_t seed = 0;        // the request's seed (resolve_seed)
  uint32_t choice_idx = 0;  // which of the request's n choices
  int64_t output_idx = 0;   // tokens this choice generated before the one being drawn
};

struct SampledToken {
  int32_t token_id = 0;
  float logprob = 0;  // raw logprob of token_id; set when params.logprobs
  std::vector<std::pair<int32_t, float>> top_logprobs;  // params.top_logprobs best, best first
};

// One token of the distribution a request draws from after every filter (steps 4-6).
struct WeightedToken {
  int32_t token_id = 0;
  uint64_t weight = 0;  // fixed point; probability = weight / (sum of the kept weights)
};

// A fresh seed from a process-level random source (std::random_device once, then a counter
// through splitmix64); thread-safe. resolve_seed: params.seed when set, else a fresh one. Call
// once when the request is created and keep the result for all its tokens.
uint64_t draw_random_seed();
uint64_t resolve_seed(const SamplingParams& params);

// Step 1 in place. `history` must hold the request's prompt and output tokens.
void apply_penalties(std::span<float> logits, const SamplingParams& params, const TokenHistory& history);

// Step 7 alone: the token of `dist` (token-id order, weights not all 0) that `u` selects.
int32_t draw_token(std::span<const WeightedToken> dist, uint64_t u);

// Not thread-safe (scratch buffers reused across calls): one per thread.
class Sampler {
 public:
  // `logits`: [vocab] fp32, vocab <= sampling::kMaxVocab. `history` is required when
  // params.has_penalties(). params must have passed validate().
  SampledToken sample(std::span<const float> logits, const SamplingParams& params, const RngPosition& rng,
                      const TokenHistory* history = nullptr);

  // Steps 1-6: the kept tokens in id order with their weights (greedy: the argmax alone).
  // Valid until the next call on this Sampler.
  std::span<const WeightedToken> distribution(std::span<const float> logits, const SamplingParams& params,
                                              const TokenHistory* history = nullptr);

 private:
  // Steps 1-6. The candidates are every token (no top-k) or the top-k ids; the kept set is the
  // candidates whose packed (weight desc, id asc) key is >= cut_ (top-p and min-p both cut a
  // prefix of that order), or single_ alone (greedy, no finite score).
  void filter(std::span<const float> logits, const SamplingParams& params, const TokenHistory* history);
  int32_t candidate_id(size_t j) const { return dense_ ? int32_t(j) : ids_[j]; }
  int32_t draw(uint64_t u) const;

  std::optional<int32_t> single_;
  bool dense_ = false;            // candidates are all tokens, ids_ unused
  uint64_t cut_ = 0;
  uint64_t kept_weight_ = 0;      // sum of the kept weights
  std::vector<float> scores_;     // [vocab] penalized, scaled scores, then their sampling_exp
  std::vector<int32_t> ids_;      // [top_k] candidate ids, ascending
  std::vector<uint64_t> weights_; // [candidates] fixed-point weights
  std::vector<uint64_t> keys_;    // selection scratch
  std::vector<WeightedToken> kept_;
};

// Reference helpers (tests, logprobs): log_softmax in double with std::exp, returned as fp32;
// and the ids of the k largest values, best first (value desc, id asc; NaN ranks as -inf).
std::vector<float> log_softmax(std::span<const float> logits);
std::vector<int32_t> top_k_ids(std::span<const float> values, int64_t k);

}  // namespace pg
