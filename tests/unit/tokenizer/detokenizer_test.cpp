// IncrementalDetokenizer: multi-byte characters split across tokens (Chinese, emoji with ZWJ),
// invalid bytes, skip_special_tokens, and the property joined(push...) + flush() == decode(ids).
#include <gtest/gtest.h>

// GCC 12 -Wextra flags designated initializers that leave defaulted members out
// ({.parse_special = false}); that is the intended way to pass EncodeOptions.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <random>

#include "tests/unit/tokenizer/tiny_tokenizer.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/utf8.h"

namespace pg {
namespace {

using Ids = std::vector<int32_t>;
const std::string kFffd = "\xEF\xBF\xBD";

// Byte tokens have id == byte; merges make tokens that end inside a character.
Tokenizer tiny() {
  test::TinySpec spec;
  spec.merges = {{"\xE4", "\xBD"}, {"\xA0", "\xE5"}, {"a", "\xF0"}};
  spec.added_tokens = nlohmann::json::array({test::added_token(1000, "<s>", true), test::added_token(1001, "<t>", false)});
  auto t = Tokenizer::from_json(test::tiny_tokenizer_json(spec).dump(), "");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

std::vector<std::string> stream(IncrementalDetokenizer& d, const Ids& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) {
    auto piece = d.push(id);
    EXPECT_TRUE(piece.ok()) << piece.status().to_string();
    out.push_back(piece.ok() ? *piece : "");
  }
  out.push_back(d.flush());
  return out;
}

TEST(Detokenizer, HoldsBackSplitCharacters) {
  IncrementalDetokenizer d(tiny());
  // 你 = E4 BD A0, 好 = E5 A5 BD; tokens: [E4 BD] [A0 E5] [A5] [BD].
  EXPECT_EQ(stream(d, Ids{256, 257, 0xA5, 0xBD}), (std::vector<std::string>{"", "你", "", "好", ""}));
  EXPECT_EQ(d.n_pending_bytes(), 0u);
  // 😀 = F0 9F 98 80 after "a", as [a F0] [9F] [98] [80].
  EXPECT_EQ(stream(d, Ids{258, 0x9F, 0x98, 0x80}), (std::vector<std::string>{"a", "", "", "😀", ""}));
}

TEST(Detokenizer, EmojiZwjSequenceByteByByte) {
  const std::string family = "👨‍👩‍👧";  // ZWJ sequence: 3 emoji + 2 U+200D
  IncrementalDetokenizer d(tiny());
  std::string joined;
  for (char c : family) {
    auto piece = d.push(int32_t(uint8_t(c)));
    ASSERT_TRUE(piece.ok());
    EXPECT_TRUE(utf8::is_valid(*piece));
    joined += *piece;
  }
  joined += d.flush();
  EXPECT_EQ(joined, family);
}

TEST(Detokenizer, InvalidBytesAndFlush) {
  IncrementalDetokenizer d(tiny());
  EXPECT_EQ(*d.push(0xFF), kFffd);  // can never start a character: replaced at once
  EXPECT_EQ(*d.push(0xE4), "");
  EXPECT_EQ(*d.push('x'), kFffd + "x");  // the held E4 is now known to be broken
  EXPECT_EQ(*d.push(0xF0), "");
  EXPECT_EQ(*d.push(0x9F), "");
  EXPECT_EQ(d.flush(), kFffd);  // truncated at the end: one U+FFFD, as HF decode
  EXPECT_EQ(d.flush(), "");
  auto bad = d.push(5000);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange);
}

TEST(Detokenizer, SkipsSpecialTokens) {
  IncrementalDetokenizer keep(tiny()), skip(tiny(), /*skip_special_tokens=*/true);
  EXPECT_EQ(*keep.push(1000), "<s>");
  EXPECT_EQ(*skip.push(1000), "");
  EXPECT_EQ(*skip.push(1001), "<t>");  // added but not special
}

TEST(Detokenizer, StreamEqualsDecodeOnRandomIds) {
  const Tokenizer t = tiny();
  std::mt19937 rng(7);
  // Mostly high bytes (multi-byte starts and continuations), some merges and added tokens.
  const Ids pool = {0x41, 0x20, 0x80, 0x9F, 0xA0, 0xBD, 0xC3, 0xA9, 0xE4, 0xE5, 0xED, 0xF0, 0xF4, 0xFF, 256, 257, 258, 1000, 1001};
  for (int round = 0; round < 2000; ++round) {
    Ids ids(std::uniform_int_distribution<int>(0, 12)(rng));
    for (auto& id : ids) id = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    for (bool skip : {false, true}) {
      IncrementalDetokenizer d(t, skip);
      std::string joined;
      for (const auto& piece : stream(d, ids)) {
        EXPECT_TRUE(utf8::is_valid(piece));
        joined += piece;
      }
      EXPECT_EQ(joined, *t.decode(ids, skip)) << "round " << round;
    }
  }
}

TEST(Detokenizer, DeepSeekV3ChineseAndEmoji) {
  if (!test::have_deepseek_v3()) GTEST_SKIP() << "DeepSeek-V3 tokenizer files absent: run scripts/setup.sh";
  auto t = Tokenizer::load(test::deepseek_v3_dir());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  for (const std::string text : {"深度求索发布了新模型。", "家族 👨‍👩‍👧‍👦 and 🏳️‍🌈 flags 🇯🇵", "日本語のテキスト、한국어 텍스트"}) {
    const Ids ids = *t->encode(text, {.add_bos = true});
    IncrementalDetokenizer d(*t, /*skip_special_tokens=*/true);
    std::string joined;
    int n_held = 0;  // tokens that ended inside a character
    for (int32_t id : ids) {
      const std::string piece = *d.push(id);
      EXPECT_TRUE(utf8::is_valid(piece));
      n_held += d.n_pending_bytes() > 0;
      joined += piece;
    }
    joined += d.flush();
    EXPECT_EQ(joined, text);
    if (text.find("👨") != std::string::npos) {
      EXPECT_GT(n_held, 0) << "expected emoji bytes split across tokens";
    }
  }
}

}  // namespace
}  // namespace pg
