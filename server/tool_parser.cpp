// Streaming DeepSeek tool-call parser (see tool_parser.h).
#include "server/tool_parser.h"

#include <algorithm>

namespace pg::server {

size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  const size_t max_len = std::min(text.size(), marker.size() - 1);
  for (size_t len = max_len; len > 0; --len)
    if (text.substr(text.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Arguments as written, without V3's closing "\n```" fence and surrounding whitespace.
static std::string_view strip_fence(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  if (s.size() >= 3 && s.substr(s.size() - 3) == "```") s.remove_suffix(3);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

ToolParseDelta ToolCallParser::feed(std::string_view text) {
  ToolParseDelta out;
  buf_.append(text);
  run(out, false);
  return out;
}

ToolParseDelta ToolCallParser::finish() {
  ToolParseDelta out;
  run(out, true);
  return out;
}

void ToolCallParser::start_call(ToolParseDelta& out, std::string name) {
  ToolCall call;
  call.id = id_prefix_ + std::to_string(calls_.size());
  call.name = std::move(name);
  ToolCallDelta d;
  d.index = int(calls_.size());
  d.id = call.id;
  d.name = call.name;
  out.calls.push_back(std::move(d));
  calls_.push_back(std::move(call));
}

void ToolCallParser::emit_args(ToolParseDelta& out, std::string_view args) {
  if (args.empty()) return;
  calls_.back().arguments.append(args);
  const int idx = int(calls_.size()) - 1;
  if (!out.calls.empty() && out.calls.back().index == idx) {
    out.calls.back().arguments.append(args);
    return;
  }
  ToolCallDelta d;
  d.index = idx;
  d.arguments = std::string(args);
  out.calls.push_back(std::move(d));
}

void ToolCallParser::run(ToolParseDelta& out, bool final) {
  while (true) {
    std::string_view b = buf_;
    switch (state_) {
      case State::kContent: {
        const size_t p_calls = b.find(kToolCallsBegin);
        const size_t p_call = b.find(kToolCallBegin);
        if (p_calls != std::string_view::npos && (p_call == std::string_view::npos || p_calls < p_call)) {
          out.content.append(b.substr(0, p_calls));
          buf_.erase(0, p_calls + kToolCallsBegin.size());
          state_ = State::kBetweenCalls;
          continue;
        }
        if (p_call != std::string_view::npos) {  // a call without the outer begin marker
          out.content.append(b.substr(0, p_call));
          buf_.erase(0, p_call + kToolCallBegin.size());
          header_.clear();
          state_ = State::kHeader;
          continue;
        }
        const size_t hold =
            final ? 0 : std::max(partial_marker_suffix(b, kToolCallsBegin), partial_marker_suffix(b, kToolCallBegin));
        out.content.append(b.substr(0, b.size() - hold));
        buf_.erase(0, b.size() - hold);
        return;
      }
      case State::kBetweenCalls: {
        size_t i = 0;
        while (i < b.size() && is_space(b[i])) ++i;
        std::string_view rest = b.substr(i);
        if (rest.starts_with(kToolCallBegin)) {
          buf_.erase(0, i + kToolCallBegin.size());
          header_.clear();
          state_ = State::kHeader;
          continue;
        }
        if (rest.starts_with(kToolCallsEnd)) {
          buf_.erase(0, i + kToolCallsEnd.size());
          state_ = State::kContent;
          continue;
        }
        if (final) {  // unterminated block: trailing whitespace is dropped, anything else is content
          out.content.append(rest);
          buf_.clear();
          return;
        }
        if (rest.empty() || kToolCallBegin.starts_with(rest) || kToolCallsEnd.starts_with(rest)) return;
        state_ = State::kContent;  // not a call after all: the text is content
        buf_.erase(0, i);
        continue;
      }
      case State::kHeader: {
        const size_t p = b.find(kToolSep);
        if (p == std::string_view::npos) {
          if (final) buf_.clear();  // cut off inside a call header: no call to report
          return;
        }
        header_ = std::string(trim(b.substr(0, p)));
        buf_.erase(0, p + kToolSep.size());
        state_ = State::kAfterSep;
        continue;
      }
      case State::kAfterSep: {
        if (header_ != "function") {  // V3.1: the header is the name, arguments follow directly
          start_call(out, header_);
          state_ = State::kArgs;
          continue;
        }
        size_t i = 0;
        while (i < b.size() && is_space(b[i])) ++i;
        if (i < b.size() && (b[i] == '{' || b[i] == '[')) {  // V3.1 with a function named "function"
          start_call(out, header_);
          state_ = State::kArgs;
          continue;
        }
        const size_t nl = b.find('\n', i);
        if (nl == std::string_view::npos) {
          if (final) {
            if (!trim(b).empty()) start_call(out, std::string(trim(b)));
            buf_.clear();
          }
          return;
        }
        start_call(out, std::string(trim(b.substr(0, nl))));
        buf_.erase(0, nl + 1);
        state_ = State::kFence;
        continue;
      }
      case State::kFence: {
        if (b.starts_with("```")) {
          const size_t nl = b.find('\n');
          if (nl == std::string_view::npos && !final) return;
          buf_.erase(0, nl == std::string_view::npos ? b.size() : nl + 1);
          state_ = State::kArgs;
          continue;
        }
        if (!final && std::string_view("```").starts_with(b)) return;
        state_ = State::kArgs;
        continue;
      }
      case State::kArgs: {
        const size_t p = b.find(kToolCallEnd);
        if (p != std::string_view::npos) {
          emit_args(out, strip_fence(b.substr(0, p)));
          buf_.erase(0, p + kToolCallEnd.size());
          state_ = State::kBetweenCalls;
          continue;
        }
        if (final) {
          emit_args(out, strip_fence(b));
          buf_.clear();
          return;
        }
        // Hold back what may belong to the terminator: whitespace and backticks ("\n```")
        // followed by a partial <｜tool▁call▁end｜>.
        size_t keep = b.size() - partial_marker_suffix(b, kToolCallEnd);
        while (keep > 0 && (is_space(b[keep - 1]) || b[keep - 1] == '`')) --keep;
        emit_args(out, b.substr(0, keep));
        buf_.erase(0, keep);
        return;
      }
    }
  }
}

}  // namespace pg::server
