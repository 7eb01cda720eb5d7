// Streaming reasoning/content split (see reasoning_parser.h).
#include "server/reasoning_parser.h"

#include "server/tool_parser.h"

namespace pg::server {

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

bool prompt_opens_reasoning(std::string_view p) {
  while (!p.empty() && is_space(p.back())) p.remove_suffix(1);
  return p.ends_with(kThinkBegin);
}

ReasoningDelta ReasoningParser::feed(std::string_view text) {
  ReasoningDelta out;
  buf_.append(text);
  run(out, false);
  return out;
}

ReasoningDelta ReasoningParser::finish() {
  ReasoningDelta out;
  run(out, true);
  return out;
}

void ReasoningParser::run(ReasoningDelta& out, bool final) {
  while (true) {
    std::string_view b = buf_;
    switch (state_) {
      case State::kStart: {
        // An opening <think> at the very start (after whitespace) is consumed, even when the
        // template opened the block already (older R1 templates left it to the model).
        size_t i = 0;
        while (i < b.size() && is_space(b[i])) ++i;
        std::string_view rest = b.substr(i);
        if (rest.starts_with(kThinkBegin)) {
          buf_.erase(0, i + kThinkBegin.size());
          state_ = State::kReasoning;
          continue;
        }
        if (!final && kThinkBegin.starts_with(rest)) return;  // undecided (rest may be empty)
        state_ = starts_in_reasoning_ ? State::kReasoning : State::kContent;
        continue;
      }
      case State::kReasoning: {
        const size_t p = b.find(kThinkEnd);
        if (p != std::string_view::npos) {
          out.reasoning.append(b.substr(0, p));
          buf_.erase(0, p + kThinkEnd.size());
          state_ = State::kContent;
          continue;
        }
        const size_t hold = final ? 0 : partial_marker_suffix(b, kThinkEnd);
        out.reasoning.append(b.substr(0, b.size() - hold));
        buf_.erase(0, b.size() - hold);
        return;
      }
      case State::kContent:
        out.content.append(b);
        buf_.clear();
        return;
    }
  }
}

}  // namespace pg::server
