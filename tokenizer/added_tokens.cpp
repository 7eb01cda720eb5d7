// Added-token trie and the word/whitespace tests HF's AddedVocabulary applies around a match.
#include "tokenizer/added_tokens.h"

#include <algorithm>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/utf8.h"

namespace pg {
namespace {

// Rust's regex \w (Unicode): Alphabetic | M | Nd | Pc | Join_Control, via PCRE2's Unicode tables.
// Only single_word tokens ask (none of DeepSeek-V3's), so an interpreted match per call is fine.
bool is_word_char(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  static pcre2_code* const kWord = [] {
    int err = 0;
    PCRE2_SIZE off = 0;
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])"),
                         PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &off, nullptr);
  }();
  if (kWord == nullptr) return false;
  std::string s;
  utf8::append(cp, s);
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  const int rc = md == nullptr ? -1
                               : pcre2_match(kWord, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0,
                                             PCRE2_NO_UTF_CHECK, md, nullptr);
  pcre2_match_data_free(md);
  return rc >= 0;
}

// Code point ending at byte `end` of valid UTF-8.
char32_t last_char(std::string_view text, size_t end, size_t* begin) {
  size_t b = end - 1;
  while (b > 0 && (uint8_t(text[b]) & 0xC0) == 0x80) --b;
  *begin = b;
  size_t i = b;
  return utf8::decode(text, i);
}

}  // namespace

void AddedTokenTrie::insert(std::string_view content, int32_t token_idx) {
  if (content.empty()) return;
  first_byte_[uint8_t(content[0])] = true;
  int32_t node = 0;
  for (const char ch : content) {
    const uint8_t c = uint8_t(ch);
    auto& kids = nodes_[size_t(node)].children;
    auto it = std::lower_bound(kids.begin(), kids.end(), c, [](const auto& kv, uint8_t v) { return kv.first < v; });
    if (it != kids.end() && it->first == c) {
      node = it->second;
    } else {
      const auto child = int32_t(nodes_.size());
      kids.insert(it, {c, child});
      nodes_.emplace_back();  // invalidates `kids`: not used again below
      node = child;
    }
  }
  // The first token with a given content wins, as HF keeps the first (later copies are ignored).
  if (nodes_[size_t(node)].token_idx < 0) nodes_[size_t(node)].token_idx = token_idx;
}

int32_t AddedTokenTrie::longest_at(std::string_view text, size_t pos, size_t* len) const {
  int32_t best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& kids = nodes_[size_t(node)].children;
    const uint8_t c = uint8_t(text[i]);
    auto it = std::lower_bound(kids.begin(), kids.end(), c, [](const auto& kv, uint8_t v) { return kv.first < v; });
    if (it == kids.end() || it->first != c) break;
    node = it->second;
    if (nodes_[size_t(node)].token_idx >= 0) {
      best = nodes_[size_t(node)].token_idx;
      *len = i + 1 - pos;
    }
  }
  return best;
}

bool ends_with_word_char(std::string_view text) {
  if (text.empty()) return false;
  size_t b = 0;
  return is_word_char(last_char(text, text.size(), &b));
}

bool starts_with_word_char(std::string_view text) {
  if (text.empty()) return false;
  size_t i = 0;
  return is_word_char(utf8::decode(text, i));
}

size_t trailing_space_start(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t b = 0;
    if (!utf8::is_white_space(last_char(text, end, &b))) break;
    end = b;
  }
  return end;
}

size_t leading_space_len(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    if (!utf8::is_white_space(utf8::decode(text, j))) break;
    i = j;
  }
  return i;
}

}  // namespace pg
