// IncrementalDetokenizer: token ids in, UTF-8 text out, for streaming. Never emits a broken
// UTF-8 sequence: the bytes of a character split across tokens wait for the rest. The
// concatenation of every push() and the final flush() equals Tokenizer::decode of all the ids.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace pg {

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(Tokenizer tokenizer, bool skip_special_tokens = false)
      : tokenizer_(std::move(tokenizer)), skip_special_tokens_(skip_special_tokens) {}

  // The text this token completes (often empty for the first bytes of a multi-byte character).
  // Bytes that can never become valid UTF-8 are replaced by U+FFFD as soon as that is certain.
  // An id outside the vocabulary is an OutOfRange error and changes nothing.
  Result<std::string> push(int32_t id);
  // At the end of the stream: the held-back bytes, an incomplete sequence becoming U+FFFD.
  std::string flush();

  size_t n_pending_bytes() const { return pending_.size(); }

 private:
  Tokenizer tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // an incomplete UTF-8 sequence (at most 3 bytes)
};

}  // namespace pg
