// Token text helpers over pg::Tokenizer (see tokens.h).
#include "server/tokens.h"

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace pg::server {

std::string token_bytes(const Tokenizer& tok, int32_t id) {
  auto b = tok.token_bytes(id);
  return b.ok() ? std::string(*b) : std::string();
}

std::string lossy_text(std::string_view bytes) {
  std::string out;
  utf8::append_lossy(bytes, /*final=*/true, out);
  return out;
}

std::string decode_ids(const Tokenizer& tok, std::span<const int32_t> ids) {
  auto text = tok.decode(ids, /*skip_special_tokens=*/false);
  return text.ok() ? std::move(*text) : std::string();
}

std::vector<int32_t> encode_prompt(const Tokenizer& tok, std::string_view text, bool add_bos) {
  EncodeOptions opts;
  opts.parse_special = true;
  opts.add_bos = add_bos;
  opts.add_eos = false;
  auto ids = tok.encode(text, opts);
  return ids.ok() ? std::move(*ids) : std::vector<int32_t>();
}

int64_t vocab_size(const Tokenizer& tok) { return tok.vocab_size(); }

}  // namespace pg::server
