// The GPT-2 byte <-> code point table and byte-level token spelling/decoding.
#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace pg::byte_level {
namespace {

struct Tables {
  std::array<char32_t, 256> char_of{};
  std::array<int16_t, 324> byte_of{};  // indexed by code point; the alphabet ends at U+0143
  std::array<std::string, 256> spelled;  // UTF-8 of char_of[b]
};

const Tables& tables() {
  static const Tables t = [] {
    Tables t;
    t.byte_of.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t.char_of[b] = printable ? char32_t(b) : next++;
    }
    for (int b = 0; b < 256; ++b) {
      t.byte_of[t.char_of[b]] = int16_t(b);
      utf8::append(t.char_of[b], t.spelled[b]);
    }
    return t;
  }();
  return t;
}

}  // namespace

char32_t char_of_byte(uint8_t b) { return tables().char_of[b]; }

int byte_of_char(char32_t cp) {
  const auto& t = tables();
  return cp < t.byte_of.size() ? t.byte_of[cp] : -1;
}

void append_encoded(std::string_view bytes, std::string& out) {
  const auto& t = tables();
  for (char c : bytes) out += t.spelled[uint8_t(c)];
}

bool decode_token(std::string_view token, std::string& out) {
  const size_t mark = out.size();
  size_t i = 0;
  while (i < token.size()) {
    const int b = utf8::sequence_length(token.substr(i)) > 0 ? byte_of_char(utf8::decode(token, i)) : -1;
    if (b < 0) {
      out.resize(mark);
      return false;
    }
    out.push_back(char(b));
  }
  return true;
}

}  // namespace pg::byte_level
