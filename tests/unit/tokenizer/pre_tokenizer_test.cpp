// Regex translation (Oniguruma -> PCRE2) and pre-tokenizer steps: DeepSeek-V3's Split sequence,
// the five Split behaviours, invert, Digits, ByteLevel, and the errors for what we do not support.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"

namespace pg {
namespace {

using json = nlohmann::json;

// DeepSeek-V3's pre_tokenizer, verbatim from its tokenizer.json.
const char* const kDeepSeekV3PreTokenizer = R"({"type": "Sequence", "pretokenizers": [
  {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": false},
  {"type": "Split", "pattern": {"Regex": "[一-龥぀-ゟ゠-ヿ]+"}, "behavior": "Isolated", "invert": false},
  {"type": "Split", "pattern": {"Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
  {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})";

class Collect final : public PieceSink {
 public:
  Status on_piece(std::string_view piece) override {
    pieces.emplace_back(piece);
    return ok_status();
  }
  std::vector<std::string> pieces;
};

std::vector<std::string> pieces_of(const std::string& pre_tokenizer_json, std::string_view text) {
  auto pre = PreTokenizer::from_json(json::parse(pre_tokenizer_json));
  EXPECT_TRUE(pre.ok()) << pre.status().to_string();
  if (!pre.ok()) return {};
  PreTokenizerScratch scratch;
  Collect sink;
  Status s = pre->run(text, scratch, sink);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return sink.pieces;
}

std::string split_json(const std::string& behavior, bool invert = false, const std::string& pattern = R"({"String": "-"})") {
  return R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": )" + pattern +
         R"(, "behavior": ")" + behavior + R"(", "invert": )" + (invert ? "true" : "false") +
         R"(}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
}

using Pieces = std::vector<std::string>;

TEST(Regex, TranslatesOnigurumaEscapes) {
  auto t = Regex::translate_oniguruma(R"(\s+(?!\S)|\h\w(?m:.))");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_NE(t->find("\\x{85}"), std::string::npos);  // NEL is Oniguruma whitespace
  EXPECT_NE(t->find("[^\\x{9}"), std::string::npos);
  EXPECT_NE(t->find("[0-9a-fA-F]"), std::string::npos);
  EXPECT_NE(t->find("(?s:"), std::string::npos);     // Oniguruma (?m) is dot-all
  auto in_class = Regex::translate_oniguruma(R"([\s\p{L}])");
  ASSERT_TRUE(in_class.ok());
  EXPECT_EQ(in_class->find('['), 0u);
  EXPECT_EQ(in_class->find('[', 1), std::string::npos);  // spliced into the class, no nesting
}

TEST(Regex, UnsupportedConstructsAreNamed) {
  for (const char* p : {"[a-z&&[^aeiou]]", "[a[bc]]", "(?~abc)", "[\\S]", "\\y"}) {
    auto r = Regex::compile(p, RegexSyntax::kOniguruma);
    ASSERT_FALSE(r.ok()) << p;
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported) << p;
    EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().message();
  }
  auto bad = Regex::compile("(unclosed", RegexSyntax::kOniguruma);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(Regex, FindsWithOnigurumaSemantics) {
  RegexMatchState st;
  auto ws = Regex::compile(R"(\s+)", RegexSyntax::kOniguruma);
  ASSERT_TRUE(ws.ok());
  size_t b = 0, e = 0;
  const std::string nel = "a\u0085\u3000b";
  ASSERT_EQ(ws->find(st, nel, 0, &b, &e), 1);
  EXPECT_EQ(b, 1u);
  EXPECT_EQ(e, 6u);  // U+0085 (2 bytes) + U+3000 (3 bytes)
  auto lit = Regex::compile("a.b", RegexSyntax::kLiteral);
  ASSERT_TRUE(lit.ok());
  EXPECT_EQ(lit->find(st, "axb a.b", 0, &b, &e), 1);
  EXPECT_EQ(b, 4u);
  EXPECT_EQ(lit->find(st, "axb", 0, &b, &e), 0);
  auto dollar = Regex::compile(R"(\s+$)", RegexSyntax::kOniguruma);  // $ is a line end
  ASSERT_TRUE(dollar.ok());
  EXPECT_EQ(dollar->find(st, "a  \nb", 0, &b, &e), 1);
  EXPECT_EQ(b, 1u);
  EXPECT_EQ(e, 3u);
}

TEST(PreTokenizer, DeepSeekV3Sequence) {
  EXPECT_EQ(pieces_of(kDeepSeekV3PreTokenizer, "Hello, world! 1234567 你好世界ab"),
            (Pieces{"Hello", ",", " world", "!", " ", "123", "456", "7", " ", "你好世界", "ab"}));
  EXPECT_EQ(pieces_of(kDeepSeekV3PreTokenizer, "a  \n\n  b\t\tc   "),
            (Pieces{"a", "  \n\n", " ", " b", "\t", "\tc", "   "}));
  EXPECT_EQ(pieces_of(kDeepSeekV3PreTokenizer, "x.y = foo.bar(\"z\");"),
            (Pieces{"x", ".y", " =", " foo", ".bar", "(\"", "z", "\");"}));
  EXPECT_EQ(pieces_of(kDeepSeekV3PreTokenizer, "カタカナとひらがな"), (Pieces{"カタカナとひらがな"}));
  EXPECT_EQ(pieces_of(kDeepSeekV3PreTokenizer, " \u0085x"), (Pieces{" ", "\u0085x"}));  // NEL is \s, not \S
  EXPECT_TRUE(pieces_of(kDeepSeekV3PreTokenizer, "").empty());
  // Emoji newer than PCRE2's Unicode 14 tables are \p{S} through unicode_supplement.inc.
  EXPECT_EQ(pieces_of(kDeepSeekV3PreTokenizer, "hi \U0001FAE8\U0001FA77!"), (Pieces{"hi", " \U0001FAE8\U0001FA77!"}));
}

TEST(Regex, UnicodeSupplement) {
  EXPECT_FALSE(needs_unicode_supplement("plain ASCII, café, Ελληνικά, русский"));
  EXPECT_FALSE(needs_unicode_supplement("你好 👍"));       // in Unicode 14 already
  EXPECT_TRUE(needs_unicode_supplement("shaking \U0001FAE8"));  // U+1FAE8, Unicode 15
  RegexMatchState st;
  auto sym = Regex::compile(R"(\p{S}+)", RegexSyntax::kOniguruma);
  ASSERT_TRUE(sym.ok());
  size_t b = 0, e = 0;
  EXPECT_EQ(sym->find(st, "\U0001FAE8", 0, &b, &e, /*supplement=*/true), 1);
}

TEST(PreTokenizer, SplitBehaviours) {
  // The HF documentation's example: "the-final--countdown" split on "-".
  const std::string text = "the-final--countdown";
  EXPECT_EQ(pieces_of(split_json("Removed"), text), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(pieces_of(split_json("Isolated"), text), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pieces_of(split_json("MergedWithPrevious"), text), (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pieces_of(split_json("MergedWithNext"), text), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pieces_of(split_json("Contiguous"), text), (Pieces{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(pieces_of(split_json("MergedWithNext"), "-a"), (Pieces{"-a"}));
  EXPECT_EQ(pieces_of(split_json("MergedWithPrevious"), "-a"), (Pieces{"-", "a"}));
}

TEST(PreTokenizer, InvertKeepsTheMatches) {
  EXPECT_EQ(pieces_of(split_json("Removed", true, R"({"Regex": "\\p{L}+"})"), "ab, cd!"), (Pieces{"ab", "cd"}));
  EXPECT_EQ(pieces_of(split_json("Isolated", true, R"({"Regex": "\\p{L}+"})"), "ab, cd!"),
            (Pieces{"ab", ", ", "cd", "!"}));
}

TEST(PreTokenizer, DigitsAndByteLevel) {
  const std::string digits = R"({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
  EXPECT_EQ(pieces_of(digits, "ab123c"), (Pieces{"ab", "1", "2", "3", "c"}));
  const std::string runs = R"({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
  EXPECT_EQ(pieces_of(runs, "ab123c4"), (Pieces{"ab", "123", "c", "4"}));
  // GPT-2 style: ByteLevel alone, with its regex and a prefix space.
  EXPECT_EQ(pieces_of(R"({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true})", "Hello world's 42!"),
            (Pieces{" Hello", " world", "'s", " 42", "!"}));
}

TEST(PreTokenizer, UnsupportedIsNamed) {
  auto meta = PreTokenizer::from_json(json::parse(R"({"type": "Metaspace", "replacement": "▁"})"));
  ASSERT_FALSE(meta.ok());
  EXPECT_EQ(meta.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(meta.status().message().find("Metaspace"), std::string::npos);
  auto order = PreTokenizer::from_json(json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "ByteLevel", "add_prefix_space": false}, {"type": "Digits", "individual_digits": true}]})"));
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.status().message().find("ByteLevel must be the last"), std::string::npos);
  auto behavior = PreTokenizer::from_json(json::parse(split_json("Sideways")));
  ASSERT_FALSE(behavior.ok());
  EXPECT_NE(behavior.status().message().find("Sideways"), std::string::npos);
  auto no_pattern = PreTokenizer::from_json(json::parse(R"({"type": "Split", "behavior": "Isolated"})"));
  ASSERT_FALSE(no_pattern.ok());
  EXPECT_EQ(no_pattern.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(no_pattern.status().message().find("pattern"), std::string::npos);
}

}  // namespace
}  // namespace pg
