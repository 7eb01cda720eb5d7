// Added tokens (tokenizer.json "added_tokens"): found in the text before pre-tokenization,
// leftmost-longest, with lstrip/rstrip/single_word, as HF `tokenizers` AddedVocabulary does:
// first the non-normalized tokens over the raw text, then the normalized ones in the gaps.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pg {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by decode(skip_special_tokens); a control token
  bool lstrip = false;       // swallows the whitespace before it
  bool rstrip = false;       // swallows the whitespace after it
  bool single_word = false;  // matches only when not inside a word
  bool normalized = true;    // matched against the normalized text (second pass)
};

// A byte trie of token contents with HF's find_matches on top.
class AddedTokenTrie {
 public:
  void insert(std::string_view content, int32_t token_idx);
  bool empty() const { return nodes_.size() <= 1; }

  // Calls on_token(token_idx) and on_text(text) over `text` in order (text pieces may be empty
  // only when `text` is). The callbacks return a Status-like bool: false stops the walk.
  template <typename OnToken, typename OnText>
  bool split(std::string_view text, const std::vector<AddedToken>& tokens, OnToken&& on_token,
             OnText&& on_text) const;

 private:
  struct Node {
    int32_t token_idx = -1;
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
  };
  // Longest token starting at text[pos]: returns its index (-1 for none) and sets *len.
  int32_t longest_at(std::string_view text, size_t pos, size_t* len) const;

  std::vector<Node> nodes_ = std::vector<Node>(1);
  bool first_byte_[256] = {};
};

// Word characters for single_word (Rust regex \w: Alphabetic, M, Nd, Pc, Join_Control) and
// whitespace for lstrip/rstrip (White_Space), measured on the UTF-8 text around a match.
bool ends_with_word_char(std::string_view text);
bool starts_with_word_char(std::string_view text);
size_t trailing_space_start(std::string_view text);  // start of the trailing whitespace run
size_t leading_space_len(std::string_view text);

template <typename OnToken, typename OnText>
bool AddedTokenTrie::split(std::string_view text, const std::vector<AddedToken>& tokens, OnToken&& on_token,
                           OnText&& on_text) const {
  size_t start_offset = 0;  // end of the previous accepted match
  size_t pos = 0;
  const size_t n = text.size();
  while (pos < n) {
    if (!first_byte_[uint8_t(text[pos])]) {
      ++pos;
      continue;
    }
    size_t len = 0;
    const int32_t idx = longest_at(text, pos, &len);
    if (idx < 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;  // like aho-corasick's non-overlapping iterator, even when the match is dropped
    const AddedToken& t = tokens[size_t(idx)];
    if (start < start_offset) continue;  // inside the whitespace an rstrip token swallowed
    if (t.single_word) {
      const bool space_before = start == 0 || !ends_with_word_char(text.substr(0, start));
      const bool space_after = stop == n || !starts_with_word_char(text.substr(stop));
      if (!space_before || !space_after) continue;
    }
    if (t.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (t.rstrip) stop += leading_space_len(text.substr(stop));
    if (start_offset < start && !on_text(text.substr(start_offset, start - start_offset))) return false;
    if (!on_token(idx)) return false;
    start_offset = stop;
  }
  if (start_offset < n) return on_text(text.substr(start_offset));
  return true;
}

}  // namespace pg
