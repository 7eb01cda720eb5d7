// The pre-tokenizer of tokenizer.json: the steps that cut text into the pieces BPE sees.
// Mirrors HF `tokenizers` pre_tokenizers: Sequence, Split (Regex/String pattern, all five
// behaviours, invert), Digits, ByteLevel (add_prefix_space, use_regex); ByteLevel comes last.
#pragma once

#include <deque>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace pg {

// What a Split does with the pattern's matches ("delimiters"), as HF SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel };
  Kind kind = Kind::kSplit;
  std::optional<Regex> regex;  // kSplit: the pattern; kByteLevel: GPT-2's pattern when use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;            // kSplit: the matches are the pieces, the gaps the delimiters
  bool add_prefix_space = false;  // kByteLevel: prepend ' ' to a piece not starting with one
};

// Reused buffers for one thread's pre-tokenization (no allocation once warm).
struct PreTokenizerScratch {
  struct Segment {
    size_t begin = 0, end = 0;
    bool is_match = false;
    bool removed = false;
  };
  RegexMatchState match;
  bool unicode_supplement = false;             // the text needs the newer-Unicode regex variants
  std::vector<std::vector<Segment>> segments;  // one list per step (recursion depth)
  std::deque<std::string> prefixed;            // pieces with an added prefix space
};

// Receives the final pieces, left to right. A non-ok Status stops the run.
class PieceSink {
 public:
  virtual Status on_piece(std::string_view piece) = 0;

 protected:
  ~PieceSink() = default;
};

class PreTokenizer {
 public:
  // `j` is tokenizer.json's "pre_tokenizer" (may be null: the whole text is one piece).
  static Result<PreTokenizer> from_json(const nlohmann::json& j);

  Status run(std::string_view text, PreTokenizerScratch& scratch, PieceSink& sink) const;

  const std::vector<PreTokenizerStep>& steps() const { return steps_; }
  bool ends_with_byte_level() const {
    return !steps_.empty() && steps_.back().kind == PreTokenizerStep::Kind::kByteLevel;
  }

 private:
  Status run_from(size_t step_idx, std::string_view piece, PreTokenizerScratch& scratch, PieceSink& sink) const;
  Status split(const PreTokenizerStep& step, std::string_view piece, PreTokenizerScratch& scratch,
               std::vector<PreTokenizerScratch::Segment>& segs) const;

  std::vector<PreTokenizerStep> steps_;
};

}  // namespace pg
