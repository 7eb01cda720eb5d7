// StopChecker: when a request stops and which text is safe to stream. Stop strings may span
// token boundaries: text that could still become a stop string is held back until decided; a
// matched stop string and everything after it are never emitted (OpenAI semantics).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling_params.h"

namespace pg {

enum class FinishReason {
  kNone,    // still running
  kStop,    // EOS, a stop token id or a stop string
  kLength,  // max_tokens (or the caller's limit) reached
};
// "stop" / "length" (OpenAI's finish_reason); "" for kNone.
std::string_view finish_reason_name(FinishReason reason);

struct StopUpdate {
  std::string text;  // safe to emit now (whole UTF-8 characters when the input deltas are)
  FinishReason finish = FinishReason::kNone;
  std::optional<std::string> stop_string;  // the stop string that matched
  std::optional<int32_t> stop_token_id;    // the EOS / stop token that ended the request
};

// Fed, in order, each generated token with the text delta it completed (from the incremental
// detokenizer: complete UTF-8, possibly empty). Rules:
//  - A token that is EOS (unless ignore_eos) or in stop_token_ids finishes with "stop"; its own
//    text is dropped (as vLLM does) and held-back text is released.
//  - Stop strings are searched in the text generated so far (not the prompt). The first match
//    to END wins (ties: the longer string), which is also the first one a token-by-token stream
//    could detect, so the result does not depend on how the text is split into deltas. The
//    text is cut before the match.
//  - Otherwise, at the token limit (min of max_tokens and `max_new_tokens`) it finishes with
//    "length" and releases held-back text.
//  Priority on one token: stop token > stop string > length.
//  Held back: the longest suffix of the text that is a proper prefix of some stop string (a
//  stop string is valid UTF-8, so the cut is on a character boundary).
class StopChecker {
 public:
  // `eos_token_ids`: the model's end-of-sequence ids. `max_new_tokens`: an extra cap on the
  // generated tokens (e.g. what the context leaves after the prompt).
  StopChecker(const SamplingParams& params, std::span<const int32_t> eos_token_ids,
              std::optional<int64_t> max_new_tokens = std::nullopt);

  // Not after a finish (a token after the end is a caller bug: PG_CHECK).
  StopUpdate on_token(int32_t token_id, std::string_view text_delta);
  // Text without a new token: the detokenizer's final bytes. Checked for stop strings while
  // running; after a "length" finish it passes through unchecked (generation is over and the
  // held-back text was released); after a "stop" finish or flush() it is dropped.
  StopUpdate on_text(std::string_view text_delta);
  // The request ends for another reason (abort, error, context full): the held-back text.
  // Safe to call at any time; later text is dropped.
  std::string flush();

  bool finished() const { return finish_ != FinishReason::kNone || flushed_; }
  int64_t n_tokens() const { return n_tokens_; }
  // Bytes currently held back.
  size_t n_held() const { return pending_.size(); }

 private:
  struct Stop {
    std::string text;
    std::vector<int32_t> fail;  // KMP failure function: fail[i] = longest proper border of text[0..i]
    int32_t state = 0;          // longest prefix of text that is a suffix of the output so far
  };
  void scan(std::string_view delta, StopUpdate& out);

  std::vector<Stop> stops_;
  std::vector<int32_t> stop_ids_;  // sorted: stop_token_ids and (unless ignore_eos) EOS
  std::optional<int64_t> limit_;
  std::string pending_;  // text not emitted yet (only ever a held-back suffix between calls)
  int64_t n_tokens_ = 0;
  FinishReason finish_ = FinishReason::kNone;
  bool flushed_ = false;
};

}  // namespace pg
