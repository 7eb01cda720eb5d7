// Python str semantics over UTF-8 bytes: code points, isspace/upper/lower, str()/repr() of
// floats and strings, exactly as CPython 3 prints them (the reference Jinja2 runs on CPython).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pg::jinja::py {

// Decodes one code point at s[i] and advances i. Invalid bytes decode as U+FFFD, one byte at a
// time, so any byte string can be walked without failing.
char32_t next_cp(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t cp);
bool is_valid_utf8(std::string_view s);
bool is_ascii(std::string_view s);
size_t cp_count(std::string_view s);
// Byte offset of every code point start, plus s.size() at the end ([n_cp + 1]).
std::vector<size_t> cp_offsets(std::string_view s);

// str.isspace() / regex \s for str patterns (Unicode White_Space as CPython defines it).
bool is_space(char32_t c);
// Line boundaries of str.splitlines().
bool is_line_break(char32_t c);
bool is_digit(char32_t c);  // str.isdigit (ASCII and common Unicode decimal ranges)
bool is_alpha(char32_t c);  // str.isalpha (approximation: Latin, Greek, Cyrillic, CJK, kana, Hangul)
bool is_cased(char32_t c);  // has an upper/lower case form
bool is_upper(char32_t c);
bool is_lower(char32_t c);
// Case mapping; ß upper-cases to "SS" like Python. Covers Latin-1, Latin Extended-A, Greek and
// Cyrillic; other scripts are caseless here (documented approximation).
void append_upper(std::string& out, char32_t c);
void append_lower(std::string& out, char32_t c);
// Title case of one code point (str.title / str.capitalize): like upper, but ß gives "Ss".
void append_title(std::string& out, char32_t c);
std::string upper(std::string_view s);
std::string lower(std::string_view s);

// Python's str.strip()/lstrip()/rstrip(): with chars == nullptr strip whitespace, else any
// code point in *chars. Returns the [begin, end) byte range of the result.
struct ByteRange {
  size_t begin, end;
};
ByteRange strip_range(std::string_view s, const std::string_view* chars, bool left, bool right);

// Byte offset of the first occurrence of needle in hay at or after `from` (npos if none), in
// linear time (glibc's two-way memmem), so hostile inputs cannot make searches quadratic.
size_t find(std::string_view hay, std::string_view needle, size_t from = 0);

// repr(float) / str(float): shortest round-trip digits, fixed notation for 1e-4 <= |x| < 1e16.
std::string float_repr(double x);
// repr(str): quotes chosen like CPython, escapes for non-printable code points.
std::string str_repr(std::string_view s);

}  // namespace pg::jinja::py
