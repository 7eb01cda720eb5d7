// UTF-8 validation and U+FFFD replacement (maximal-subpart rule, as Rust from_utf8_lossy), and
// the byte-level alphabet.
#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace pg {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string lossy(std::string_view s) {
  std::string out;
  utf8::append_lossy(s, true, out);
  return out;
}

TEST(Utf8, Validity) {
  EXPECT_TRUE(utf8::is_valid(""));
  EXPECT_TRUE(utf8::is_valid("plain ascii"));
  EXPECT_TRUE(utf8::is_valid("你好 👋 é"));
  EXPECT_TRUE(utf8::is_valid("\xF4\x8F\xBF\xBF"));        // U+10FFFF
  EXPECT_EQ(utf8::first_invalid("ab\xC0\x80"), 2u);        // overlong NUL
  EXPECT_EQ(utf8::first_invalid("\xE0\x80\x80"), 0u);      // overlong 3-byte
  EXPECT_EQ(utf8::first_invalid("x\xED\xA0\x80"), 1u);     // surrogate U+D800
  EXPECT_EQ(utf8::first_invalid("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(utf8::first_invalid("abc\xE4\xBD"), 3u);       // truncated
  EXPECT_EQ(utf8::first_invalid("\x80"), 0u);              // lone continuation
  EXPECT_EQ(utf8::first_invalid("0123456789abcdef\xFF"), 16u);  // past the ASCII fast path
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(lossy("ok"), "ok");
  EXPECT_EQ(lossy("\xFF"), kFffd);
  EXPECT_EQ(lossy("a\x80\x80z"), "a" + kFffd + kFffd + "z");    // each stray continuation
  EXPECT_EQ(lossy("\xF0\x9F\x98" "A"), kFffd + "A");           // broken 4-byte prefix: one
  EXPECT_EQ(lossy("\xE2\x82\xE2\x82\xAC"), kFffd + "\xE2\x82\xAC");
  EXPECT_EQ(lossy("\xF0\x80\x80"), kFffd + kFffd + kFffd);      // F0 80 is not a valid prefix
  EXPECT_EQ(lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);      // surrogates
  EXPECT_EQ(lossy("x\xE4\xBD"), "x" + kFffd);                   // truncated at the end: one
}

TEST(Utf8, NonFinalHoldsBackAnIncompleteTail) {
  std::string out;
  EXPECT_EQ(utf8::append_lossy("ab\xE4\xBD", false, out), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(utf8::append_lossy("\xE4\xBD\xA0", false, out), 3u);
  EXPECT_EQ(out, "你");
  out.clear();
  EXPECT_EQ(utf8::append_lossy("\xE4" "A", false, out), 2u);  // decided: not a prefix any more
  EXPECT_EQ(out, kFffd + "A");
}

TEST(Utf8, WhiteSpace) {
  for (char32_t c : {U' ', U'\t', U'\n', U'\r', U'\v', U'\f', U'\u0085', U'\u00A0', U'\u2003', U'\u3000', U'\u2028'})
    EXPECT_TRUE(utf8::is_white_space(c)) << uint32_t(c);
  for (char32_t c : {U'a', U'\u200B', U'\uFEFF', U'\u180E', U'_'}) EXPECT_FALSE(utf8::is_white_space(c)) << uint32_t(c);
}

TEST(ByteLevel, AlphabetIsABijection) {
  EXPECT_EQ(byte_level::char_of_byte(' '), U'\u0120');   // Ġ
  EXPECT_EQ(byte_level::char_of_byte('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(byte_level::char_of_byte('A'), U'A');
  EXPECT_EQ(byte_level::char_of_byte(0xAD), U'\u0143');  // the last of the 68 remapped bytes
  for (int b = 0; b < 256; ++b) EXPECT_EQ(byte_level::byte_of_char(byte_level::char_of_byte(uint8_t(b))), b);
  EXPECT_EQ(byte_level::byte_of_char(U'\u0144'), -1);
  EXPECT_EQ(byte_level::byte_of_char(U'你'), -1);
}

TEST(ByteLevel, DecodeToken) {
  std::string spelled;
  byte_level::append_encoded(" héllo\n", spelled);
  EXPECT_EQ(spelled, "Ġh\xC3\x83\xC2\xA9lloĊ");
  std::string out;
  EXPECT_TRUE(byte_level::decode_token(spelled, out));
  EXPECT_EQ(out, " héllo\n");
  out = "keep";
  EXPECT_FALSE(byte_level::decode_token("<｜User｜>", out));  // '｜' is not in the alphabet
  EXPECT_EQ(out, "keep");
}

}  // namespace
}  // namespace pg
