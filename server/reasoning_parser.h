// Streaming split of DeepSeek-R1-style output into reasoning and content: text inside
// <think> ... </think> is reasoning. When the chat template's generation prompt already opened
// the block (R1 ends it with "<think>\n"), the output starts inside the reasoning.
#pragma once

#include <string>
#include <string_view>

namespace pg::server {

inline constexpr std::string_view kThinkBegin = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

// Markers may arrive split across deltas; undecided bytes are held back until the next feed().
class ReasoningParser {
 public:
  explicit ReasoningParser(bool starts_in_reasoning) : starts_in_reasoning_(starts_in_reasoning) {}

  ReasoningDelta feed(std::string_view text);
  ReasoningDelta finish();

  bool in_reasoning() const { return state_ == State::kReasoning; }

 private:
  enum class State { kStart, kReasoning, kContent };
  void run(ReasoningDelta& out, bool final);

  bool starts_in_reasoning_;
  State state_ = State::kStart;
  std::string buf_;
};

// True when the rendered prompt leaves the model inside an open <think> block (its tail, after
// trailing whitespace, is "<think>").
bool prompt_opens_reasoning(std::string_view rendered_prompt);

}  // namespace pg::server
