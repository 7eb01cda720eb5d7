// Regex for tokenizer.json patterns: PCRE2 (UTF + UCP, JIT) behind a small interface, with the
// Oniguruma -> PCRE2 translation that makes `\s`, `\h`, `\w`, `\b`, `^`, `$` mean what they mean
// in Oniguruma, the engine Hugging Face `tokenizers` compiles these patterns with.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_match_context_8;
struct pcre2_real_jit_stack_8;

namespace pg {

enum class RegexSyntax {
  kOniguruma,  // tokenizer.json {"Regex": ...}
  kLiteral,    // tokenizer.json {"String": ...}: the text itself
};

// Per-thread matching state (match data, JIT stack); reuse it across calls. Not thread-safe.
class RegexMatchState {
 public:
  RegexMatchState();
  ~RegexMatchState();
  RegexMatchState(const RegexMatchState&) = delete;
  RegexMatchState& operator=(const RegexMatchState&) = delete;

 private:
  friend class Regex;
  pcre2_real_match_data_8* match_data_ = nullptr;
  pcre2_real_match_context_8* context_ = nullptr;
  pcre2_real_jit_stack_8* jit_stack_ = nullptr;
};

class Regex {
 public:
  static Result<Regex> compile(std::string_view pattern, RegexSyntax syntax);

  // The PCRE2 pattern an Oniguruma pattern becomes: \s -> Unicode White_Space class (PCRE2's
  // misses U+0085), \h -> hex digit, \w/\b -> letters, marks, decimal digits, connector
  // punctuation; Oniguruma's (?m) is PCRE2's (?s). Unsupported constructs (class intersection
  // &&, nested classes, absent operator...) give an Unsupported error naming them.
  static Result<std::string> translate_oniguruma(std::string_view pattern);

  const std::string& pattern() const { return pattern_; }

  // Leftmost match in `subject` starting the search at byte `start`. `subject` must be valid
  // UTF-8 (not re-checked) and `start` on a character boundary. Returns 1 and sets [*begin,
  // *end) on a match, 0 when there is none, a negative PCRE2 error code on failure.
  int find(RegexMatchState& state, std::string_view subject, size_t start, size_t* begin, size_t* end) const;
  static Status error_status(int code, std::string_view pattern);

 private:
  std::string pattern_;  // as written in tokenizer.json
  std::shared_ptr<pcre2_real_code_8> code_;
  bool jit_ = false;
};

}  // namespace pg
