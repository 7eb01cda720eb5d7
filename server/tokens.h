// Token text for responses (logprob entries, echo): the bytes a token stands for and their
// lossy UTF-8 text, over the tokenizer's API.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pg {
class Tokenizer;
}

namespace pg::server {

// The raw bytes token `id` decodes to (may be part of a UTF-8 sequence).
std::string token_bytes(const Tokenizer& tok, int32_t id);
// `bytes` as valid UTF-8 (invalid subparts replaced by U+FFFD).
std::string lossy_text(std::string_view bytes);
// The text of a token sequence (special tokens included as their text).
std::string decode_ids(const Tokenizer& tok, std::span<const int32_t> ids);

}  // namespace pg::server

namespace pg::server {

// Tokenizes plain prompt text as Hugging Face does for a completion prompt: added tokens in the
// text are recognized, and BOS is prepended when `add_bos`.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, std::string_view text, bool add_bos);
int64_t vocab_size(const Tokenizer& tok);

}  // namespace pg::server
