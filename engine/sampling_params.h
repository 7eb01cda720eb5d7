// SamplingParams: how one request picks its tokens and when it stops, with the OpenAI / vLLM
// field names, and validate(), whose messages become OpenAI 400 errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace pg {

// Limits checked by validate(). OpenAI allows 4 stop sequences and vLLM any number; we take a
// generous bound that still keeps the per-token stop search (n_stop x delta bytes) trivial.
inline constexpr int64_t kMaxStopStrings = 64;
inline constexpr int64_t kMaxStopStringBytes = 1024;
inline constexpr int64_t kMaxTopLogprobs = 20;  // OpenAI's top_logprobs maximum (vLLM's max_logprobs default)
inline constexpr int64_t kMaxChoices = 128;     // OpenAI's bound on n
// A temperature below this samples greedily (as vLLM's _SAMPLING_EPS): dividing logits by a
// tinier value overflows fp32 and would turn the distribution into ties.
inline constexpr double kGreedyTemperature = 1e-5;

struct SamplingParams {
  int64_t n = 1;              // choices per request, [1, kMaxChoices]
  double temperature = 1.0;   // >= 0; < kGreedyTemperature means greedy (argmax)
  double top_p = 1.0;         // (0, 1]; 1 = off
  int64_t top_k = -1;         // -1 or 0 = off (vLLM accepts both), else >= 1; >= vocab = off
  double min_p = 0.0;         // [0, 1]; 0 = off
  // Seeds the request's Philox stream (engine/sampling_math.h). Unset: a seed is drawn from a
  // process-level random source when the request is created (resolve_seed in sampler.h).
  std::optional<int64_t> seed;
  std::optional<int64_t> max_tokens;   // >= 1; unset = until the context is full
  std::vector<std::string> stop;       // non-empty UTF-8 strings; not included in the output
  std::vector<int32_t> stop_token_ids; // in [0, vocab); the token's text is not included
  bool ignore_eos = false;             // keep generating past EOS (benchmarks)
  double presence_penalty = 0.0;       // [-2, 2], OpenAI: subtracted once if the token was output
  double frequency_penalty = 0.0;      // [-2, 2], OpenAI: subtracted per output occurrence
  double repetition_penalty = 1.0;     // > 0, HF/vLLM: over prompt + output tokens; 1 = off
  // Log-probabilities of the raw model distribution (see sampler.h). Chat: `logprobs` +
  // `top_logprobs`; completions' integer `logprobs: N` maps to logprobs = true, top_logprobs = N.
  bool logprobs = false;   // return the chosen token's logprob
  int64_t top_logprobs = 0;  // [0, kMaxTopLogprobs] alternatives per token; > 0 needs logprobs

  bool is_greedy() const { return temperature < kGreedyTemperature; }
  bool top_k_enabled() const { return top_k > 0; }
  bool has_penalties() const {
    return presence_penalty != 0.0 || frequency_penalty != 0.0 || repetition_penalty != 1.0;
  }
};

// Checks every field; InvalidArgument names the field, the bad value and the allowed range,
// e.g. "temperature must be a finite number >= 0 (got nan)". `vocab_size` bounds stop_token_ids.
Status validate(const SamplingParams& params, int64_t vocab_size);

}  // namespace pg
