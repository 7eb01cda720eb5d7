// UTF-8 validation, decoding and U+FFFD-replacing conversion (maximal-subpart rule, as Rust's
// from_utf8_lossy: a truncated or broken multi-byte sequence becomes one U+FFFD).
#include "tokenizer/utf8.h"

namespace pg::utf8 {
namespace {

// Second-byte bounds by lead byte (Unicode Table 3-7, well-formed byte sequences).
struct LeadInfo {
  uint8_t n;   // total sequence length; 0 = byte can never start a sequence
  uint8_t lo;  // allowed range of the second byte
  uint8_t hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};  // continuation bytes and overlong C0/C1
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};  // no overlong 3-byte forms
  if (b == 0xED) return {3, 0x80, 0x9F};  // no surrogates D800..DFFF
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};  // no overlong 4-byte forms
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // nothing above U+10FFFF
  return {0, 0, 0};
}

}  // namespace

size_t sequence_length(std::string_view s, bool* incomplete, size_t* n_bad) {
  if (incomplete) *incomplete = false;
  if (n_bad) *n_bad = 0;
  if (s.empty()) return 0;
  const LeadInfo li = lead_info(uint8_t(s[0]));
  if (li.n == 1) return 1;
  if (li.n == 0) {
    if (n_bad) *n_bad = 1;
    return 0;
  }
  size_t i = 1;
  for (; i < li.n; ++i) {
    if (i >= s.size()) {
      if (incomplete) *incomplete = true;
      if (n_bad) *n_bad = i;
      return 0;
    }
    const uint8_t c = uint8_t(s[i]);
    const uint8_t lo = i == 1 ? li.lo : 0x80, hi = i == 1 ? li.hi : 0xBF;
    if (c < lo || c > hi) {
      if (n_bad) *n_bad = i;  // the valid prefix before the offending byte
      return 0;
    }
  }
  return li.n;
}

size_t first_invalid(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (uint8_t(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t len = sequence_length(s.substr(i));
    if (len == 0) return i;
    i += len;
  }
  return n;
}

size_t append_lossy(std::string_view bytes, bool final, std::string& out) {
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    size_t j = i;
    while (j < n && uint8_t(bytes[j]) < 0x80) ++j;
    out.append(bytes.data() + i, j - i);
    i = j;
    if (i >= n) break;
    bool incomplete = false;
    size_t n_bad = 0;
    const size_t len = sequence_length(bytes.substr(i), &incomplete, &n_bad);
    if (len > 0) {
      out.append(bytes.data() + i, len);
      i += len;
    } else if (incomplete && !final) {
      return i;  // wait for the rest of the sequence
    } else {
      out.append(kReplacement);
      i += n_bad;
    }
  }
  return n;
}

char32_t decode(std::string_view s, size_t& i) {
  const uint8_t b = uint8_t(s[i]);
  if (b < 0x80) {
    i += 1;
    return b;
  }
  if (b < 0xE0) {
    const char32_t cp = (char32_t(b & 0x1F) << 6) | (uint8_t(s[i + 1]) & 0x3F);
    i += 2;
    return cp;
  }
  if (b < 0xF0) {
    const char32_t cp =
        (char32_t(b & 0x0F) << 12) | (char32_t(uint8_t(s[i + 1]) & 0x3F) << 6) | (uint8_t(s[i + 2]) & 0x3F);
    i += 3;
    return cp;
  }
  const char32_t cp = (char32_t(b & 0x07) << 18) | (char32_t(uint8_t(s[i + 1]) & 0x3F) << 12) |
                      (char32_t(uint8_t(s[i + 2]) & 0x3F) << 6) | (uint8_t(s[i + 3]) & 0x3F);
  i += 4;
  return cp;
}

void append(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

bool is_white_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace pg::utf8
