// Tokenizer: DeepSeek-V3-family text <-> token ids from a model folder's tokenizer.json and
// tokenizer_config.json, id-exact with Hugging Face `tokenizers` (byte-level BPE, Split/ByteLevel
// pre-tokenizer, added tokens matched first, ByteLevel decoder). Thread-safe; cheap to copy.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pg {

struct EncodeOptions {
  // true: added tokens in the text ("<｜User｜>", "<｜begin▁of▁sentence｜>"...) become their ids.
  // false: no added token is recognised, special or not: all text is tokenized as plain text.
  // Use false for untrusted content (user messages). Note this is stricter than HF's
  // split_special_tokens, which still matches added tokens marked special=false — and
  // DeepSeek-V3 marks its role and tool markers (<｜User｜>, <｜Assistant｜>...) special=false.
  bool parse_special = true;
  std::optional<bool> add_bos;  // unset: tokenizer_config.json add_bos_token
  std::optional<bool> add_eos;  // unset: tokenizer_config.json add_eos_token
};

struct AddedToken;

class Tokenizer {
 public:
  // Reads <model_dir>/tokenizer.json and <model_dir>/tokenizer_config.json (the latter may be
  // absent: no BOS/EOS then). Errors name the file and what is wrong in it.
  static Result<Tokenizer> load(const std::filesystem::path& model_dir);
  // The same from the files' contents; `config_json` may be empty.
  static Result<Tokenizer> from_json(std::string_view tokenizer_json, std::string_view config_json);

  // Text must be valid UTF-8 (InvalidArgument otherwise).
  Result<std::vector<int32_t>> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Appends to `ids` (which keeps what it held before, also on error).
  Status encode_append(std::string_view text, const EncodeOptions& options, std::vector<int32_t>& ids) const;

  // Bytes of the tokens, with invalid UTF-8 replaced by U+FFFD as HF decode does. An id outside
  // the vocabulary is an OutOfRange error.
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  // The raw bytes one token decodes to (possibly an incomplete UTF-8 sequence).
  Result<std::string_view> token_bytes(int32_t id) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string_view> id_to_token(int32_t id) const;  // as spelled in tokenizer.json
  int32_t vocab_size() const;                                     // max id + 1, added tokens included
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  bool add_bos_token() const;
  bool is_special(int32_t id) const;  // an added token with "special": true
  const std::vector<AddedToken>& added_tokens() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace pg
