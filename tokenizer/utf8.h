// UTF-8 helpers for the tokenizer: validation, code point decoding, and lossy conversion that
// replaces each maximal invalid subpart with U+FFFD exactly as Rust's String::from_utf8_lossy
// (and WHATWG TextDecoder) do, which is what Hugging Face `tokenizers` decode produces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pg::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed sequence starting at s[0] (1..4), or 0 when s does not start with
// one. `incomplete` is set when s ends inside a sequence whose bytes so far are a valid prefix.
// `n_bad` (when returning 0) is the length of the maximal invalid subpart to replace.
size_t sequence_length(std::string_view s, bool* incomplete = nullptr, size_t* n_bad = nullptr);

// Byte offset of the first ill-formed byte, or s.size() when s is valid UTF-8.
size_t first_invalid(std::string_view s);
inline bool is_valid(std::string_view s) { return first_invalid(s) == s.size(); }

// Appends `bytes` to `out` with every maximal invalid subpart replaced by U+FFFD. When `final`
// is false a trailing incomplete-but-valid prefix is not consumed; returns the bytes consumed.
size_t append_lossy(std::string_view bytes, bool final, std::string& out);

// Decodes the code point at s[i] of a VALID UTF-8 string and advances i.
char32_t decode(std::string_view s, size_t& i);
void append(char32_t cp, std::string& out);

// Unicode White_Space (what Rust's char::is_whitespace and Oniguruma's Unicode \s accept).
bool is_white_space(char32_t cp);

}  // namespace pg::utf8
