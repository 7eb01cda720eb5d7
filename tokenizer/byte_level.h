// Byte-level BPE alphabet (GPT-2's bytes_to_unicode, as HF `tokenizers` ByteLevel): every byte
// maps to one printable code point so that BPE works on strings; decode maps back.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pg::byte_level {

// The code point standing for byte b: printable Latin-1 bytes stand for themselves, the other
// 68 bytes take U+0100.. in byte order ("Ġ" U+0120 is the space, "Ċ" U+010A the newline).
char32_t char_of_byte(uint8_t b);
// The byte a code point stands for, or -1 when it is not in the byte-level alphabet.
int byte_of_char(char32_t cp);

// Appends the byte-level spelling of raw bytes ("a b" -> "aĠb").
void append_encoded(std::string_view bytes, std::string& out);

// HF ByteLevel decoder, per token: when every character of `token` is in the alphabet, appends
// the bytes they stand for and returns true; otherwise appends nothing and returns false (the
// caller then uses the token's own UTF-8 bytes, as added tokens like "<｜User｜>" need).
bool decode_token(std::string_view token, std::string& out);

}  // namespace pg::byte_level
