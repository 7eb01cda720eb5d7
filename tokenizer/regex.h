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
  // punctuation; Oniguruma's (?m) is PCRE2's (?s); \p{L|M|N|P|S} gain the code points assigned
  // after PCRE2's Unicode version (unicode_supplement.inc). Unsupported constructs (class
  // intersection &&, nested classes, absent operator...) give an Unsupported error naming them.
  // With `supplement` false the classes are PCRE2's own (its Unicode version).
  static Result<std::string> translate_oniguruma(std::string_view pattern, bool supplement = true);

  const std::string& pattern() const { return pattern_; }

  // Leftmost match in `subject` starting the search at byte `start`. `subject` must be valid
  // UTF-8 (not re-checked) and `start` on a character boundary. Returns 1 and sets [*begin,
  // *end) on a match, 0 when there is none, a negative PCRE2 error code on failure.
  // `supplement`: use the variant with the newer-Unicode classes. It is slower (its classes
  // carry ~150 extra ranges), so callers pass needs_unicode_supplement(text) of their text.
  int find(RegexMatchState& state, std::string_view subject, size_t start, size_t* begin, size_t* end,
           bool supplement = true) const;
  static Status error_status(int code, std::string_view pattern);

 private:
  std::string pattern_;  // as written in tokenizer.json
  std::shared_ptr<pcre2_real_code_8> code_;              // PCRE2's Unicode tables
  std::shared_ptr<pcre2_real_code_8> code_supplemented_;  // plus unicode_supplement.inc; null if same
};

// Whether `text` (valid UTF-8) holds a code point from unicode_supplement.inc, i.e. one PCRE2's
// tables classify differently from newer Unicode. False for all text below U+0800.
bool needs_unicode_supplement(std::string_view text);

}  // namespace pg
