// validate(SamplingParams): field-by-field checks whose messages name the field, the value and
// the allowed range (they reach the client as OpenAI 400 errors).
#include "engine/sampling_params.h"

#include <cmath>
#include <string_view>

#include "core/check.h"

namespace pg {
namespace {

// Strict UTF-8 (no overlongs, no surrogates, <= U+10FFFF). Stop strings must be valid so that
// a match, and any held-back prefix of one, always starts on a character boundary.
bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) { ++i; continue; }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) len = 2;
    else if (b0 == 0xE0) { len = 3; lo = 0xA0; }
    else if (b0 == 0xED) { len = 3; hi = 0x9F; }
    else if (b0 >= 0xE1 && b0 <= 0xEF) len = 3;
    else if (b0 == 0xF0) { len = 4; lo = 0x90; }
    else if (b0 == 0xF4) { len = 4; hi = 0x8F; }
    else if (b0 >= 0xF1 && b0 <= 0xF3) len = 4;
    else return false;
    if (i + len > s.size()) return false;
    const auto b1 = static_cast<unsigned char>(s[i + 1]);
    if (b1 < lo || b1 > hi) return false;
    for (size_t k = 2; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

}  // namespace

Status validate(const SamplingParams& p, int64_t vocab_size) {
  PG_CHECK(vocab_size > 0, "vocab_size {}", vocab_size);
  // Comparisons are written so that NaN fails them.
  if (!(p.n >= 1 && p.n <= kMaxChoices))
    return invalid_argument("n must be in [1, {}] (got {})", kMaxChoices, p.n);
  if (!(std::isfinite(p.temperature) && p.temperature >= 0))
    return invalid_argument("temperature must be a finite number >= 0 (got {})", p.temperature);
  if (!(p.top_p > 0 && p.top_p <= 1))
    return invalid_argument("top_p must be in (0, 1] (got {})", p.top_p);
  if (p.top_k < -1)
    return invalid_argument("top_k must be -1 or 0 (disabled) or >= 1 (got {})", p.top_k);
  if (!(p.min_p >= 0 && p.min_p <= 1))
    return invalid_argument("min_p must be in [0, 1] (got {})", p.min_p);
  if (p.max_tokens && *p.max_tokens < 1)
    return invalid_argument("max_tokens must be >= 1 (got {})", *p.max_tokens);
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2))
    return invalid_argument("presence_penalty must be in [-2, 2] (got {})", p.presence_penalty);
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2))
    return invalid_argument("frequency_penalty must be in [-2, 2] (got {})", p.frequency_penalty);
  if (!(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0))
    return invalid_argument("repetition_penalty must be a finite number > 0 (got {})", p.repetition_penalty);
  if (!(p.top_logprobs >= 0 && p.top_logprobs <= kMaxTopLogprobs))
    return invalid_argument("top_logprobs must be in [0, {}] (got {})", kMaxTopLogprobs, p.top_logprobs);
  if (p.top_logprobs > 0 && !p.logprobs)
    return invalid_argument("top_logprobs = {} requires logprobs to be true", p.top_logprobs);
  if (int64_t(p.stop.size()) > kMaxStopStrings)
    return invalid_argument("stop has {} strings; at most {} are allowed", p.stop.size(), kMaxStopStrings);
  for (size_t i = 0; i < p.stop.size(); ++i) {
    const std::string& s = p.stop[i];
    if (s.empty()) return invalid_argument("stop[{}] is empty; stop strings must be non-empty", i);
    if (int64_t(s.size()) > kMaxStopStringBytes)
      return invalid_argument("stop[{}] is {} bytes long; at most {} bytes are allowed", i, s.size(),
                              kMaxStopStringBytes);
    if (!is_valid_utf8(s)) return invalid_argument("stop[{}] is not valid UTF-8", i);
  }
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    const int32_t id = p.stop_token_ids[i];
    if (id < 0 || id >= vocab_size)
      return invalid_argument("stop_token_ids[{}] = {} is outside the vocabulary [0, {})", i, id, vocab_size);
  }
  return ok_status();
}

}  // namespace pg
