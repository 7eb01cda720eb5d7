// Streaming parser for DeepSeek tool calls in generated text. V3/R1 write
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
// (calls separated by '\n'); V3.1 writes <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>. Both are read.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pg::server {

inline constexpr std::string_view kToolCallsBegin = "<｜tool▁calls▁begin｜>";
inline constexpr std::string_view kToolCallsEnd = "<｜tool▁calls▁end｜>";
inline constexpr std::string_view kToolCallBegin = "<｜tool▁call▁begin｜>";
inline constexpr std::string_view kToolCallEnd = "<｜tool▁call▁end｜>";
inline constexpr std::string_view kToolSep = "<｜tool▁sep｜>";

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text, as the model wrote it
};

// One streamed piece of a call. The first delta of a call carries id and name; later ones only
// argument text (OpenAI's delta.tool_calls[i] shape).
struct ToolCallDelta {
  int index = 0;
  std::string id;
  std::string name;
  std::string arguments;
};

struct ToolParseDelta {
  std::string content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

// Feed text as it arrives (markers may be split anywhere); text that might still turn out to be
// part of a marker is held back until it is decided. finish() flushes at the end of generation.
class ToolCallParser {
 public:
  // Call ids are `id_prefix` followed by the call's index.
  explicit ToolCallParser(std::string id_prefix) : id_prefix_(std::move(id_prefix)) {}

  ToolParseDelta feed(std::string_view text);
  ToolParseDelta finish();

  const std::vector<ToolCall>& calls() const { return calls_; }

 private:
  enum class State { kContent, kBetweenCalls, kHeader, kAfterSep, kFence, kArgs };
  // Runs the state machine over buf_; `final` means no more text will come.
  void run(ToolParseDelta& out, bool final);
  void start_call(ToolParseDelta& out, std::string name);
  void emit_args(ToolParseDelta& out, std::string_view args);

  std::string id_prefix_;
  State state_ = State::kContent;
  std::string buf_;     // unconsumed text
  std::string header_;  // text between call-begin and the separator
  std::vector<ToolCall> calls_;
};

// Longest suffix of `text` that is a proper, non-empty prefix of `marker` (0 if none): the bytes
// a streaming parser must hold back because the marker may be completed by the next delta.
size_t partial_marker_suffix(std::string_view text, std::string_view marker);

}  // namespace pg::server
