// Pre-tokenizer steps parsed from tokenizer.json and run recursively over pieces (views into the
// text). Split semantics follow HF `tokenizers` NormalizedString::split + PreTokenizedString::split:
// empty pieces are dropped; an empty match right after the previous match is skipped.
#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "tokenizer/utf8.h"

namespace pg {
namespace {

using json = nlohmann::json;
using Segment = PreTokenizerScratch::Segment;

// GPT-2's pattern, which ByteLevel uses when use_regex is true (HF byte_level.rs).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Result<bool> get_bool(const json& j, const char* key, bool dflt, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) return data_loss("{}.{} must be a boolean", where, key);
  return it->get<bool>();
}

Result<SplitBehavior> parse_behavior(const json& j, const std::string& where) {
  const auto it = j.find("behavior");
  if (it == j.end() || !it->is_string()) return data_loss("{}.behavior must be a string", where);
  const std::string& b = it->get_ref<const std::string&>();
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return unsupported("{}.behavior '{}' is not supported (Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                     "Contiguous)",
                     where, b);
}

Status parse_step(const json& j, const std::string& where, std::vector<PreTokenizerStep>& steps) {
  if (!j.is_object()) return data_loss("{} must be an object", where);
  const auto type_it = j.find("type");
  if (type_it == j.end() || !type_it->is_string()) return data_loss("{}.type must be a string", where);
  const std::string& type = type_it->get_ref<const std::string&>();
  if (type == "Sequence") {
    const auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) return data_loss("{}.pretokenizers must be an array", where);
    for (size_t i = 0; i < it->size(); ++i)
      PG_TRY(parse_step((*it)[i], fmt::format("{}.pretokenizers[{}]", where, i), steps));
    return ok_status();
  }
  PreTokenizerStep step;
  if (type == "Split") {
    const auto pat = j.find("pattern");
    if (pat == j.end() || !pat->is_object()) return data_loss("{}.pattern must be an object", where);
    const auto re = pat->find("Regex");
    const auto str = pat->find("String");
    Result<Regex> compiled = data_loss("{}.pattern needs a \"Regex\" or \"String\" string", where);
    if (re != pat->end() && re->is_string()) {
      compiled = Regex::compile(re->get_ref<const std::string&>(), RegexSyntax::kOniguruma);
    } else if (str != pat->end() && str->is_string()) {
      compiled = Regex::compile(str->get_ref<const std::string&>(), RegexSyntax::kLiteral);
    }
    if (!compiled.ok()) return compiled.status().with_context(where + ".pattern");
    step.regex = std::move(compiled).value();
    PG_ASSIGN_OR_RETURN(step.behavior, parse_behavior(j, where));
    PG_ASSIGN_OR_RETURN(step.invert, get_bool(j, "invert", false, where));
  } else if (type == "Digits") {
    // HF Digits splits on char::is_numeric (general category N): one piece per digit, or runs.
    PG_ASSIGN_OR_RETURN(const bool individual, get_bool(j, "individual_digits", false, where));
    PG_ASSIGN_OR_RETURN(Regex digits, Regex::compile(R"(\p{N})", RegexSyntax::kOniguruma));
    step.regex = std::move(digits);
    step.behavior = individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    PG_ASSIGN_OR_RETURN(step.add_prefix_space, get_bool(j, "add_prefix_space", true, where));
    PG_ASSIGN_OR_RETURN(const bool use_regex, get_bool(j, "use_regex", true, where));
    if (use_regex) {
      PG_ASSIGN_OR_RETURN(Regex gpt2, Regex::compile(kGpt2Pattern, RegexSyntax::kOniguruma));
      step.regex = std::move(gpt2);
    }
  } else {
    return unsupported("{}: pre-tokenizer type '{}' is not supported (supported: Sequence, Split, Digits, ByteLevel)",
                       where, type);
  }
  steps.push_back(std::move(step));
  return ok_status();
}

size_t char_len_at(std::string_view s, size_t i) {
  const uint8_t b = uint8_t(s[i]);
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

// Folds the matched segments as HF SplitDelimiterBehavior does; `removed` marks dropped ones.
void apply_behavior(SplitBehavior behavior, std::vector<Segment>& segs) {
  switch (behavior) {
    case SplitBehavior::kIsolated:
      return;
    case SplitBehavior::kRemoved:
      for (Segment& s : segs) s.removed = s.is_match;
      return;
    case SplitBehavior::kMergedWithPrevious:
    case SplitBehavior::kContiguous: {
      // MergedWithPrevious: a match joins the piece before it (unless it follows a match).
      // Contiguous: runs of equal kind join into one piece.
      size_t n_out = 0;
      bool previous_match = false;
      for (size_t i = 0; i < segs.size(); ++i) {
        const Segment s = segs[i];
        const bool join = behavior == SplitBehavior::kContiguous ? s.is_match == previous_match
                                                                  : s.is_match && !previous_match;
        if (join && n_out > 0) {
          segs[n_out - 1].end = s.end;
        } else {
          segs[n_out++] = s;
        }
        previous_match = s.is_match;
      }
      segs.resize(n_out);
      return;
    }
    case SplitBehavior::kMergedWithNext: {
      // A match joins the piece after it (unless it precedes a match): the mirror image.
      size_t n_out = segs.size();
      bool previous_match = false;
      for (size_t i = segs.size(); i-- > 0;) {
        const Segment s = segs[i];
        if (s.is_match && !previous_match && n_out < segs.size()) {
          segs[n_out].begin = s.begin;
        } else {
          segs[--n_out] = s;
        }
        previous_match = s.is_match;
      }
      segs.erase(segs.begin(), segs.begin() + ptrdiff_t(n_out));
      return;
    }
  }
}

}  // namespace

Result<PreTokenizer> PreTokenizer::from_json(const json& j) {
  PreTokenizer p;
  if (j.is_null()) return p;
  PG_TRY(parse_step(j, "pre_tokenizer", p.steps_));
  for (size_t i = 0; i + 1 < p.steps_.size(); ++i) {
    if (p.steps_[i].kind == PreTokenizerStep::Kind::kByteLevel)
      return unsupported("pre_tokenizer: ByteLevel must be the last step (it is step {} of {})", i + 1,
                         p.steps_.size());
  }
  return p;
}

Status PreTokenizer::split(const PreTokenizerStep& step, std::string_view piece, PreTokenizerScratch& scratch,
                           std::vector<Segment>& segs) const {
  segs.clear();
  size_t prev = 0, search = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (search <= piece.size()) {
    size_t b = 0, e = 0;
    const int rc = step.regex->find(scratch.match, piece, search, &b, &e, scratch.unicode_supplement);
    if (rc < 0) return Regex::error_status(rc, step.regex->pattern());
    if (rc == 0) break;
    if (b == e && have_last && last_end == e) {
      if (search >= piece.size()) break;
      search += char_len_at(piece, search);
      continue;
    }
    if (prev != b) segs.push_back({prev, b, false, false});
    segs.push_back({b, e, true, false});
    prev = e;
    search = e;
    last_end = e;
    have_last = true;
  }
  if (prev != piece.size()) segs.push_back({prev, piece.size(), false, false});
  if (step.invert)
    for (Segment& s : segs) s.is_match = !s.is_match;
  apply_behavior(step.behavior, segs);
  return ok_status();
}

Status PreTokenizer::run_from(size_t step_idx, std::string_view piece, PreTokenizerScratch& scratch,
                              PieceSink& sink) const {
  if (piece.empty()) return ok_status();
  if (step_idx == steps_.size()) return sink.on_piece(piece);
  const PreTokenizerStep& step = steps_[step_idx];
  if (step.kind == PreTokenizerStep::Kind::kByteLevel && step.add_prefix_space && piece[0] != ' ') {
    scratch.prefixed.emplace_back(" ");
    scratch.prefixed.back().append(piece);
    piece = scratch.prefixed.back();
  }
  if (!step.regex) return run_from(step_idx + 1, piece, scratch, sink);
  if (scratch.segments.size() <= step_idx) scratch.segments.resize(steps_.size());
  std::vector<Segment>& segs = scratch.segments[step_idx];
  PG_TRY(split(step, piece, scratch, segs));
  // Index loop: the recursion below never touches this depth's list.
  for (size_t i = 0; i < segs.size(); ++i) {
    const Segment s = segs[i];
    if (s.removed || s.begin == s.end) continue;
    PG_TRY(run_from(step_idx + 1, piece.substr(s.begin, s.end - s.begin), scratch, sink));
  }
  return ok_status();
}

Status PreTokenizer::run(std::string_view text, PreTokenizerScratch& scratch, PieceSink& sink) const {
  scratch.prefixed.clear();
  scratch.unicode_supplement = needs_unicode_supplement(text);
  return run_from(0, text, scratch, sink);
}

}  // namespace pg
