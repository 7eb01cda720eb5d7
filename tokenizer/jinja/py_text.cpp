// Python str semantics over UTF-8 (see py_text.h). Tables follow CPython's unicodectype for the
// ranges chat templates meet; the float formatting follows CPython's repr (float_repr_style short).
#include "tokenizer/jinja/py_text.h"

#include <string.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace pg::jinja::py {

char32_t next_cp(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int n = 0;
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 2;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 3;
    cp = b0 & 0x07;
  } else {
    ++i;
    return 0xFFFD;
  }
  if (i + n >= s.size()) {  // truncated sequence: s[i + n] must exist
    ++i;
    return 0xFFFD;
  }
  for (int k = 1; k <= n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  // Reject overlong forms, surrogates and values past U+10FFFF.
  if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return 0xFFFD;
  }
  i += n + 1;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t at = i;
    const char32_t cp = next_cp(s, i);
    // A genuine U+FFFD is three bytes; a one-byte advance means a decoding error.
    if (cp == 0xFFFD && i - at != 3) return false;
  }
  return true;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

size_t cp_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    next_cp(s, i);
    ++n;
  }
  return n;
}

std::vector<size_t> cp_offsets(std::string_view s) {
  std::vector<size_t> off;
  off.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    off.push_back(i);
    next_cp(s, i);
  }
  off.push_back(s.size());
  return off;
}

bool is_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

bool is_digit(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  static constexpr char32_t kZeros[] = {0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66,
                                        0xBE6, 0xC66, 0xCE6, 0xD66, 0xE50, 0xED0, 0xF20, 0xFF10};
  for (char32_t z : kZeros)
    if (c >= z && c <= z + 9) return true;
  return c == 0xB2 || c == 0xB3 || c == 0xB9;  // superscripts count as digits in Python
}

namespace {

// Simple one-to-one case pairs: upper -> lower offsets over ranges.
char32_t lower_of(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';  // İ -> i (Python gives i + U+0307; approximation)
    if (c == 0x178) return 0xFF;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
    if (c == 0x138 || c == 0x149 || c == 0x17F) return c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F))
    return (c % 2 == 0) ? c + 1 : c;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;  // fullwidth Latin
  return c;
}

char32_t upper_of(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (c == 0x138 || c == 0x149) return c;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F))
    return (c % 2 == 1) ? c - 1 : c;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

}  // namespace

bool is_upper(char32_t c) { return lower_of(c) != c; }
bool is_lower(char32_t c) { return upper_of(c) != c || c == 0xDF || c == 0x138 || c == 0x149; }
bool is_cased(char32_t c) { return is_upper(c) || is_lower(c); }

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c == 0xAA || c == 0xB5 || c == 0xBA) return true;
  if (c >= 0xC0 && c <= 0x24F) return c != 0xD7 && c != 0xF7;
  if (c >= 0x370 && c <= 0x3FF) return c != 0x375 && c != 0x37E && c != 0x384 && c != 0x385 && c != 0x387;
  if (c >= 0x400 && c <= 0x52F) return !(c >= 0x482 && c <= 0x489);
  if (c >= 0x5D0 && c <= 0x5EA) return true;                                      // Hebrew letters
  if (c >= 0x620 && c <= 0x64A) return true;                                      // Arabic letters
  if (c >= 0x3041 && c <= 0x3096) return true;                                    // Hiragana
  if (c >= 0x30A1 && c <= 0x30FA) return true;                                    // Katakana
  if ((c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF)) return true;  // CJK
  if (c >= 0xAC00 && c <= 0xD7A3) return true;                                    // Hangul syllables
  if ((c >= 0xFF21 && c <= 0xFF3A) || (c >= 0xFF41 && c <= 0xFF5A)) return true;
  if (c >= 0x20000 && c <= 0x3134F) return true;  // CJK extensions
  return false;
}

void append_upper(std::string& out, char32_t c) {
  if (c == 0xDF) {
    out += "SS";
    return;
  }
  append_utf8(out, upper_of(c));
}

void append_title(std::string& out, char32_t c) {
  if (c == 0xDF) {
    out += "Ss";
    return;
  }
  append_utf8(out, upper_of(c));
}

void append_lower(std::string& out, char32_t c) {
  if (c == 0x130) {
    out += "i\xCC\x87";  // Python: 'İ'.lower() == 'i̇'
    return;
  }
  append_utf8(out, lower_of(c));
}

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_upper(out, next_cp(s, i));
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_lower(out, next_cp(s, i));
  return out;
}

ByteRange strip_range(std::string_view s, const std::string_view* chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars != nullptr)
    for (size_t i = 0; i < chars->size();) set.push_back(next_cp(*chars, i));
  auto strip_it = [&](char32_t c) {
    if (chars == nullptr) return is_space(c);
    for (char32_t x : set)
      if (x == c) return true;
    return false;
  };
  size_t begin = 0;
  if (left) {
    while (begin < s.size()) {
      size_t j = begin;
      if (!strip_it(next_cp(s, j))) break;
      begin = j;
    }
  }
  size_t end = s.size();
  if (right) {
    // Walk forward, remembering where the last kept code point ends.
    size_t last_keep = begin;
    for (size_t i = begin; i < s.size();) {
      const char32_t c = next_cp(s, i);
      if (!strip_it(c)) last_keep = i;
    }
    end = last_keep;
  }
  return {begin, end};
}

size_t find(std::string_view hay, std::string_view needle, size_t from) {
  if (from > hay.size()) return std::string_view::npos;
  if (needle.empty()) return from;
  const void* p = memmem(hay.data() + from, hay.size() - from, needle.data(), needle.size());
  return p == nullptr ? std::string_view::npos : static_cast<size_t>(static_cast<const char*>(p) - hay.data());
}

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest digits that round-trip, as CPython's repr uses (mode 0 of dtoa).
  auto res = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string out;
  size_t p = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    p = 1;
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t i = p; i < e_pos; ++i)
    if (sci[i] != '.') digits.push_back(sci[i]);
  const int exp10 = std::atoi(sci.c_str() + e_pos + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  const int nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (decpt >= nd) {
      out += digits;
      out.append(static_cast<size_t>(decpt - nd), '0');
      out += ".0";
    } else {
      out += digits.substr(0, decpt);
      out.push_back('.');
      out += digits.substr(decpt);
    }
  } else {
    out.push_back(digits[0]);
    if (nd > 1) {
      out.push_back('.');
      out += digits.substr(1);
    }
    const int e = decpt - 1;
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    out += eb;
  }
  return out;
}

namespace {

// Code points CPython's str.isprintable() rejects, for the ranges that occur in practice:
// controls, separators other than space, format characters and private use.
bool is_printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c >= 0x80 && c <= 0xA0) return false;
  if (c == 0xAD || c == 0x61C || c == 0x1680 || c == 0x180E) return false;
  if (c >= 0x2000 && c <= 0x200F) return false;
  if (c >= 0x2028 && c <= 0x202F) return false;
  if (c >= 0x205F && c <= 0x206F) return false;
  if (c == 0x3000 || c == 0xFEFF) return false;
  if (c >= 0xD800 && c <= 0xF8FF) return false;
  if (c >= 0xFFF9 && c <= 0xFFFB) return false;
  if (c >= 0xE0000 && c <= 0xE007F) return false;
  if (c >= 0xF0000) return false;
  return true;
}

}  // namespace

std::string str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back(quote);
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next_cp(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (is_printable(c)) {
      append_utf8(out, c);
    } else {
      char buf[16];
      if (c < 0x100)
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000)
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      else
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace pg::jinja::py
