// validate(SamplingParams): every field's bound, and that each message names the field, the bad
// value and the allowed range (these reach clients as OpenAI 400 errors).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "engine/sampling_params.h"

namespace pg {
namespace {

constexpr int64_t kVocab = 129280;

std::string error_of(const std::function<void(SamplingParams&)>& edit) {
  SamplingParams p;
  edit(p);
  Status st = validate(p, kVocab);
  if (st.ok()) return "ok";
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  return st.message();
}

TEST(SamplingParams, DefaultsAreValidAndMeanOff) {
  SamplingParams p;
  EXPECT_TRUE(validate(p, kVocab).ok());
  EXPECT_FALSE(p.is_greedy());
  EXPECT_FALSE(p.top_k_enabled());
  EXPECT_FALSE(p.has_penalties());
}

TEST(SamplingParams, AcceptedEdges) {
  for (auto edit : std::vector<std::function<void(SamplingParams&)>>{
           [](SamplingParams& p) { p.temperature = 0; },
           [](SamplingParams& p) { p.temperature = 7.5; },
           [](SamplingParams& p) { p.top_p = 1e-9; },
           [](SamplingParams& p) { p.top_k = 0; },
           [](SamplingParams& p) { p.top_k = 1; },
           [](SamplingParams& p) { p.top_k = 10 * kVocab; },
           [](SamplingParams& p) { p.min_p = 1; },
           [](SamplingParams& p) { p.presence_penalty = -2; p.frequency_penalty = 2; },
           [](SamplingParams& p) { p.repetition_penalty = 1e-3; },
           [](SamplingParams& p) { p.logprobs = true; p.top_logprobs = 20; },
           [](SamplingParams& p) { p.n = 128; },
           [](SamplingParams& p) { p.max_tokens = 1; },
           [](SamplingParams& p) { p.seed = -1; },
           [](SamplingParams& p) { p.stop.assign(64, "x"); },
           [](SamplingParams& p) { p.stop = {std::string(1024, 'a'), "\xF0\x9F\x91\x8B", "caf\xC3\xA9"}; },
           [](SamplingParams& p) { p.stop_token_ids = {0, int32_t(kVocab - 1)}; },
       })
    EXPECT_EQ(error_of(edit), "ok");
}

TEST(SamplingParams, MessagesNameFieldValueAndRange) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(error_of([&](SamplingParams& p) { p.temperature = nan; }),
            "temperature must be a finite number >= 0 (got nan)");
  EXPECT_EQ(error_of([&](SamplingParams& p) { p.temperature = -0.5; }),
            "temperature must be a finite number >= 0 (got -0.5)");
  EXPECT_EQ(error_of([&](SamplingParams& p) { p.temperature = inf; }),
            "temperature must be a finite number >= 0 (got inf)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.top_p = 0; }), "top_p must be in (0, 1] (got 0)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.top_p = 1.5; }), "top_p must be in (0, 1] (got 1.5)");
  EXPECT_EQ(error_of([&](SamplingParams& p) { p.top_p = nan; }), "top_p must be in (0, 1] (got nan)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.top_k = -2; }),
            "top_k must be -1 or 0 (disabled) or >= 1 (got -2)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.min_p = -0.1; }), "min_p must be in [0, 1] (got -0.1)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.min_p = 1.01; }), "min_p must be in [0, 1] (got 1.01)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.max_tokens = 0; }), "max_tokens must be >= 1 (got 0)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.presence_penalty = 2.5; }),
            "presence_penalty must be in [-2, 2] (got 2.5)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.frequency_penalty = -3; }),
            "frequency_penalty must be in [-2, 2] (got -3)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.repetition_penalty = 0; }),
            "repetition_penalty must be a finite number > 0 (got 0)");
  EXPECT_EQ(error_of([&](SamplingParams& p) { p.repetition_penalty = inf; }),
            "repetition_penalty must be a finite number > 0 (got inf)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.n = 0; }), "n must be in [1, 128] (got 0)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.n = 129; }), "n must be in [1, 128] (got 129)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.logprobs = true; p.top_logprobs = 21; }),
            "top_logprobs must be in [0, 20] (got 21)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.top_logprobs = -1; }), "top_logprobs must be in [0, 20] (got -1)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.top_logprobs = 5; }),
            "top_logprobs = 5 requires logprobs to be true");
}

TEST(SamplingParams, StopStrings) {
  EXPECT_EQ(error_of([](SamplingParams& p) { p.stop.assign(65, "x"); }),
            "stop has 65 strings; at most 64 are allowed");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.stop = {"a", "b", ""}; }),
            "stop[2] is empty; stop strings must be non-empty");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.stop = {std::string(1025, 'a')}; }),
            "stop[0] is 1025 bytes long; at most 1024 bytes are allowed");
  // Not UTF-8: a stray continuation byte, a truncated sequence, an overlong, a surrogate, > U+10FFFF.
  for (const char* bad : {"\x80", "ab\xC3", "\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xFF"})
    EXPECT_EQ(error_of([&](SamplingParams& p) { p.stop = {"ok", bad}; }), "stop[1] is not valid UTF-8") << bad;
}

TEST(SamplingParams, StopTokenIdsWithinVocab) {
  EXPECT_EQ(error_of([](SamplingParams& p) { p.stop_token_ids = {1, -1}; }),
            "stop_token_ids[1] = -1 is outside the vocabulary [0, 129280)");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.stop_token_ids = {int32_t(kVocab)}; }),
            "stop_token_ids[0] = 129280 is outside the vocabulary [0, 129280)");
}

TEST(SamplingParams, GreedyBelowEpsilon) {
  SamplingParams p;
  p.temperature = 0;
  EXPECT_TRUE(p.is_greedy());
  p.temperature = 0.9e-5;
  EXPECT_TRUE(p.is_greedy());
  p.temperature = 1e-5;
  EXPECT_FALSE(p.is_greedy());
}

}  // namespace
}  // namespace pg
