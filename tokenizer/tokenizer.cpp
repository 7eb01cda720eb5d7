// Tokenizer: loading tokenizer.json/tokenizer_config.json into BPE model, pre-tokenizer and added
// tokens, and the encode/decode pipelines (HF `tokenizers` TokenizerImpl::encode_single_sequence
// and decode). Per-thread scratch (regex state, BPE buffers, word memo) comes from a small pool.
#include "tokenizer/tokenizer.h"

#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace pg {

using json = nlohmann::json;

struct Tokenizer::Impl {
  struct Scratch {
    PreTokenizerScratch pre;
    BpeScratch bpe;
  };

  BpeModel bpe;
  PreTokenizer pre_tokenizer;
  std::vector<AddedToken> added;  // file order
  StringIdMap added_ids;          // content -> id (first occurrence)
  AddedTokenTrie raw_trie;        // "normalized": false tokens, matched on the raw text
  AddedTokenTrie normalized_trie; // "normalized": true tokens, matched in the gaps
  std::vector<std::string> spelling;  // id -> token as in tokenizer.json
  std::vector<std::string> bytes;     // id -> bytes the ByteLevel decoder gives
  std::vector<uint8_t> present;       // id -> 1 when the id exists
  std::vector<uint8_t> special;       // id -> 1 for special added tokens
  std::optional<int32_t> bos, eos;
  bool add_bos = false;
  bool add_eos = false;

  mutable std::mutex pool_mu;
  mutable std::vector<std::unique_ptr<Scratch>> pool;

  std::unique_ptr<Scratch> acquire() const {
    std::lock_guard<std::mutex> lock(pool_mu);
    if (pool.empty()) return std::make_unique<Scratch>();
    auto s = std::move(pool.back());
    pool.pop_back();
    return s;
  }
  void release(std::unique_ptr<Scratch> s) const {
    std::lock_guard<std::mutex> lock(pool_mu);
    pool.push_back(std::move(s));
  }
};

namespace {

// Pieces from the pre-tokenizer go straight into BPE.
class BpeSink final : public PieceSink {
 public:
  BpeSink(const BpeModel& bpe, BpeScratch& scratch, std::vector<int32_t>& ids) : bpe_(bpe), scratch_(scratch), ids_(ids) {}
  Status on_piece(std::string_view piece) override {
    bpe_.encode_word(piece, scratch_, ids_);
    return ok_status();
  }

 private:
  const BpeModel& bpe_;
  BpeScratch& scratch_;
  std::vector<int32_t>& ids_;
};

Result<std::string> read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return not_found("{} does not exist (or is not a file)", path.string());
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("cannot open {}", path.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return io_error("error reading {}", path.string());
  return ss.str();
}

// The normalizers we implement are the identity ones: null and (nested) empty Sequences.
Status check_normalizer(const json& j, const std::string& where) {
  if (j.is_null()) return ok_status();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return data_loss("{} must be null or an object with a type", where);
  const std::string& type = j["type"].get_ref<const std::string&>();
  if (type == "Sequence") {
    const auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return data_loss("{}.normalizers must be an array", where);
    for (size_t i = 0; i < it->size(); ++i) PG_TRY(check_normalizer((*it)[i], fmt::format("{}.normalizers[{}]", where, i)));
    return ok_status();
  }
  return unsupported("{}: normalizer type '{}' is not supported (only null or an empty Sequence)", where, type);
}

// Decoder and post-processor: ByteLevel (alone or in a Sequence) is all DeepSeek/Kimi files use.
Status check_byte_level_only(const json& j, const std::string& where, const char* list_key, bool allow_null) {
  if (j.is_null()) {
    if (allow_null) return ok_status();
    return unsupported("{} is null; only a ByteLevel {} is supported", where, where);
  }
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return data_loss("{} must be an object with a type", where);
  const std::string& type = j["type"].get_ref<const std::string&>();
  if (type == "ByteLevel") return ok_status();
  if (type == "Sequence") {
    const auto it = j.find(list_key);
    if (it == j.end() || !it->is_array()) return data_loss("{}.{} must be an array", where, list_key);
    for (size_t i = 0; i < it->size(); ++i)
      PG_TRY(check_byte_level_only((*it)[i], fmt::format("{}.{}[{}]", where, list_key, i), list_key, false));
    return ok_status();
  }
  return unsupported("{}: type '{}' is not supported (only ByteLevel)", where, type);
}

Result<bool> get_flag(const json& j, const char* key, bool dflt, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) return data_loss("{}.{} must be a boolean", where, key);
  return it->get<bool>();
}

Result<std::vector<AddedToken>> parse_added_tokens(const json& root) {
  std::vector<AddedToken> out;
  const auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return out;
  if (!it->is_array()) return data_loss("added_tokens must be an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& e = (*it)[i];
    const std::string where = fmt::format("added_tokens[{}]", i);
    if (!e.is_object()) return data_loss("{} must be an object", where);
    AddedToken t;
    const auto id = e.find("id");
    if (id == e.end() || !id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() > INT32_MAX)
      return data_loss("{}.id must be an id in [0, 2^31)", where);
    t.id = int32_t(id->get<int64_t>());
    const auto content = e.find("content");
    if (content == e.end() || !content->is_string()) return data_loss("{}.content must be a string", where);
    t.content = content->get<std::string>();
    if (!utf8::is_valid(t.content)) return data_loss("{}.content is not valid UTF-8", where);
    PG_ASSIGN_OR_RETURN(t.special, get_flag(e, "special", false, where));
    PG_ASSIGN_OR_RETURN(t.lstrip, get_flag(e, "lstrip", false, where));
    PG_ASSIGN_OR_RETURN(t.rstrip, get_flag(e, "rstrip", false, where));
    PG_ASSIGN_OR_RETURN(t.single_word, get_flag(e, "single_word", false, where));
    PG_ASSIGN_OR_RETURN(t.normalized, get_flag(e, "normalized", !t.special, where));
    out.push_back(std::move(t));
  }
  return out;
}

// bos_token / eos_token: a string, {"content": ...} (an AddedToken dump), or null.
Result<std::optional<std::string>> config_token(const json& cfg, const char* key) {
  const auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object()) {
    const auto c = it->find("content");
    if (c != it->end() && c->is_string()) return std::optional<std::string>(c->get<std::string>());
  }
  return data_loss("{} must be a string, an object with a string \"content\", or null", key);
}

Result<std::shared_ptr<Tokenizer::Impl>> build(std::string_view tokenizer_json, std::string_view config_json) {
  auto impl = std::make_shared<Tokenizer::Impl>();
  json root = json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return data_loss("tokenizer.json is not valid JSON");
  if (!root.is_object()) return data_loss("tokenizer.json: the top level must be an object");
  auto in_tok = [](const Status& s) { return s.with_context("tokenizer.json"); };

  const auto model = root.find("model");
  if (model == root.end()) return data_loss("tokenizer.json: no \"model\"");
  auto bpe = BpeModel::from_json(*model);
  if (!bpe.ok()) return in_tok(bpe.status());
  impl->bpe = std::move(bpe).value();

  if (Status s = check_normalizer(root.value("normalizer", json()), "normalizer"); !s.ok()) return in_tok(s);
  auto pre = PreTokenizer::from_json(root.value("pre_tokenizer", json()));
  if (!pre.ok()) return in_tok(pre.status());
  impl->pre_tokenizer = std::move(pre).value();
  if (!impl->pre_tokenizer.ends_with_byte_level())
    return unsupported("tokenizer.json: pre_tokenizer must end with a ByteLevel step (only byte-level BPE is supported)");
  if (Status s = check_byte_level_only(root.value("decoder", json()), "decoder", "decoders", false); !s.ok())
    return in_tok(s);
  if (Status s = check_byte_level_only(root.value("post_processor", json()), "post_processor", "processors", true); !s.ok())
    return in_tok(s);

  auto added = parse_added_tokens(root);
  if (!added.ok()) return in_tok(added.status());
  impl->added = std::move(added).value();

  // Id tables over [0, vocab_size).
  int64_t n_ids = 0;
  for (const auto& [tok, id] : impl->bpe.vocab()) n_ids = std::max<int64_t>(n_ids, int64_t(id) + 1);
  for (const AddedToken& t : impl->added) n_ids = std::max<int64_t>(n_ids, int64_t(t.id) + 1);
  if (n_ids > (int64_t(1) << 24))
    return data_loss("tokenizer.json: ids reach {}, more than the 2^24 we accept", n_ids - 1);
  impl->spelling.assign(size_t(n_ids), {});
  impl->present.assign(size_t(n_ids), 0);
  impl->special.assign(size_t(n_ids), 0);
  for (const auto& [tok, id] : impl->bpe.vocab()) {
    if (impl->present[size_t(id)]) return data_loss("tokenizer.json: model.vocab gives id {} to two tokens", id);
    impl->present[size_t(id)] = 1;
    impl->spelling[size_t(id)] = tok;
  }
  for (size_t i = 0; i < impl->added.size(); ++i) {
    const AddedToken& t = impl->added[i];
    if (const auto it = impl->bpe.vocab().find(t.content); it != impl->bpe.vocab().end() && it->second != t.id)
      return data_loss("tokenizer.json: added_tokens[{}] '{}' has id {} but model.vocab gives it id {}", i, t.content,
                       t.id, it->second);
    if (impl->present[size_t(t.id)] && impl->spelling[size_t(t.id)] != t.content)
      return data_loss("tokenizer.json: added_tokens[{}] '{}' reuses id {} of '{}'", i, t.content, t.id,
                       impl->spelling[size_t(t.id)]);
    impl->present[size_t(t.id)] = 1;
    impl->spelling[size_t(t.id)] = t.content;
    if (t.special) impl->special[size_t(t.id)] = 1;
    impl->added_ids.emplace(t.content, t.id);
    (t.normalized ? impl->normalized_trie : impl->raw_trie).insert(t.content, int32_t(i));
  }
  impl->bytes.assign(size_t(n_ids), {});
  for (size_t id = 0; id < size_t(n_ids); ++id) {
    if (!impl->present[id]) continue;
    if (!byte_level::decode_token(impl->spelling[id], impl->bytes[id])) impl->bytes[id] = impl->spelling[id];
  }

  if (!config_json.empty()) {
    json cfg = json::parse(config_json, nullptr, false);
    if (cfg.is_discarded()) return data_loss("tokenizer_config.json is not valid JSON");
    if (!cfg.is_object()) return data_loss("tokenizer_config.json: the top level must be an object");
    auto in_cfg = [](const Status& s) { return s.with_context("tokenizer_config.json"); };
    auto find_id = [&](const std::string& t) -> std::optional<int32_t> {
      if (const auto it = impl->added_ids.find(t); it != impl->added_ids.end()) return it->second;
      if (const auto it = impl->bpe.vocab().find(t); it != impl->bpe.vocab().end()) return it->second;
      return std::nullopt;
    };
    for (const char* key : {"bos_token", "eos_token"}) {
      auto tok = config_token(cfg, key);
      if (!tok.ok()) return in_cfg(tok.status());
      if (!tok->has_value()) continue;
      const auto id = find_id(**tok);
      if (!id) return data_loss("tokenizer_config.json: {} '{}' is not a token of tokenizer.json", key, **tok);
      (std::string_view(key) == "bos_token" ? impl->bos : impl->eos) = id;
    }
    auto add_bos = get_flag(cfg, "add_bos_token", false, "add_bos_token");
    if (!add_bos.ok()) return in_cfg(add_bos.status());
    auto add_eos = get_flag(cfg, "add_eos_token", false, "add_eos_token");
    if (!add_eos.ok()) return in_cfg(add_eos.status());
    impl->add_bos = *add_bos;
    impl->add_eos = *add_eos;
    if (impl->add_bos && !impl->bos) return data_loss("tokenizer_config.json: add_bos_token is true but there is no bos_token");
    if (impl->add_eos && !impl->eos) return data_loss("tokenizer_config.json: add_eos_token is true but there is no eos_token");
  }
  return impl;
}

}  // namespace

Result<Tokenizer> Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json) {
  try {
    auto impl = build(tokenizer_json, config_json);
    if (!impl.ok()) return impl.status();
    return Tokenizer(std::move(impl).value());
  } catch (const json::exception& e) {  // a type our checks missed: still an error, never a throw
    return data_loss("malformed tokenizer files: {}", e.what());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory loading the tokenizer");
  }
}

Result<Tokenizer> Tokenizer::load(const std::filesystem::path& model_dir) {
  const auto tok_path = model_dir / "tokenizer.json";
  const auto cfg_path = model_dir / "tokenizer_config.json";
  PG_ASSIGN_OR_RETURN(const std::string tok, read_file(tok_path));
  std::string cfg;
  std::error_code ec;
  if (std::filesystem::exists(cfg_path, ec)) {
    PG_ASSIGN_OR_RETURN(cfg, read_file(cfg_path));
  }
  auto t = from_json(tok, cfg);
  if (!t.ok()) return t.status().with_context(fmt::format("loading the tokenizer from {}", model_dir.string()));
  return t;
}

Status Tokenizer::encode_append(std::string_view text, const EncodeOptions& options, std::vector<int32_t>& ids) const {
  const Impl& im = *impl_;
  if (const size_t bad = utf8::first_invalid(text); bad != text.size())
    return invalid_argument("text is not valid UTF-8 (byte {} of {})", bad, text.size());
  const bool add_bos = options.add_bos.value_or(im.add_bos);
  const bool add_eos = options.add_eos.value_or(im.add_eos);
  if (add_bos && !im.bos) return failed_precondition("add_bos asked but the tokenizer has no bos_token");
  if (add_eos && !im.eos) return failed_precondition("add_eos asked but the tokenizer has no eos_token");

  const size_t n_before = ids.size();
  std::unique_ptr<Impl::Scratch> scratch = im.acquire();
  if (add_bos) ids.push_back(*im.bos);
  BpeSink sink(im.bpe, scratch->bpe, ids);
  Status status;
  auto plain = [&](std::string_view piece) {
    status = im.pre_tokenizer.run(piece, scratch->pre, sink);
    return status.ok();
  };
  auto token = [&](int32_t idx) {
    ids.push_back(im.added[size_t(idx)].id);
    return true;
  };
  if (!options.parse_special) {
    plain(text);
  } else {
    // Pass 1: non-normalized tokens over the text; pass 2: normalized tokens in the gaps (the
    // normalizer is the identity, so the gaps are already normalized).
    im.raw_trie.split(text, im.added, token, [&](std::string_view gap) {
      return im.normalized_trie.split(gap, im.added, token, plain);
    });
  }
  if (status.ok() && add_eos) ids.push_back(*im.eos);
  im.release(std::move(scratch));
  if (!status.ok()) ids.resize(n_before);
  return status;
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  PG_TRY(encode_append(text, options, ids));
  return ids;
}

Result<std::string_view> Tokenizer::token_bytes(int32_t id) const {
  const Impl& im = *impl_;
  if (id < 0 || size_t(id) >= im.present.size() || !im.present[size_t(id)])
    return out_of_range("token id {} is not in the vocabulary (size {})", id, im.present.size());
  return std::string_view(im.bytes[size_t(id)]);
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& im = *impl_;
  std::string raw;
  raw.reserve(ids.size() * 4);
  for (const int32_t id : ids) {
    PG_ASSIGN_OR_RETURN(const std::string_view b, token_bytes(id));
    if (skip_special_tokens && im.special[size_t(id)]) continue;
    raw.append(b);
  }
  if (utf8::is_valid(raw)) return raw;
  std::string out;
  out.reserve(raw.size() + 16);
  utf8::append_lossy(raw, /*final=*/true, out);
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(token); it != impl_->added_ids.end()) return it->second;
  if (const auto it = impl_->bpe.vocab().find(token); it != impl_->bpe.vocab().end()) return it->second;
  return std::nullopt;
}

std::optional<std::string_view> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->present.size() || !impl_->present[size_t(id)]) return std::nullopt;
  return std::string_view(impl_->spelling[size_t(id)]);
}

int32_t Tokenizer::vocab_size() const { return int32_t(impl_->present.size()); }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
bool Tokenizer::add_bos_token() const { return impl_->add_bos; }
bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->special.size() && impl_->special[size_t(id)];
}
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

}  // namespace pg
