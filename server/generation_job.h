// One HTTP generation request in flight: the choices it submitted to the engine, the events
// they send back (queued by the engine thread), and their translation into OpenAI responses:
// SSE chunks as they come, or one body at the end (chat.completion / text_completion).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/backend.h"
#include "server/http_types.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/reasoning_parser.h"
#include "server/tool_parser.h"

namespace pg {
class Tokenizer;
}

namespace pg::server {

struct JobOptions {
  bool chat = false;           // chat.completion(.chunk) vs text_completion
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string id;              // "chatcmpl-..." / "cmpl-..."
  std::string model;
  int64_t created = 0;         // unix seconds
  int n_logprobs = -1;         // -1: no logprobs; k: the chosen token and k alternatives
  bool parse_tools = false;    // chat: read DeepSeek tool-call markers into tool_calls
  bool split_reasoning = false;  // chat: <think> ... </think> into reasoning_content
};

// One choice, as the route sets it up.
struct ChoiceSetup {
  int index = 0;       // the choice's index in the response
  int prompt_idx = 0;  // which prompt of a /v1/completions batch it continues
  int64_t prompt_tokens = 0;
  bool starts_in_reasoning = false;
  std::string echo;                // completions echo: the prompt text, sent before the output
  std::vector<int32_t> echo_ids;   // ... and its tokens, for logprobs
};

class GenerationJob final : public PendingResponse, public std::enable_shared_from_this<GenerationJob> {
 public:
  GenerationJob(JobOptions opts, GenerationBackend& backend, const Tokenizer& tokenizer, ServerMetrics& metrics);

  // Submits one engine request per choice, in order. On the first refusal the choices already
  // submitted are cancelled and the refusal is returned (nothing has been sent yet).
  Status submit(std::vector<ChoiceSetup> setups, std::vector<GenerationRequest> requests);

  void set_wake(std::function<void()> wake) override;
  Poll poll() override;
  void abandon() override;
  bool streaming() const override { return opts_.stream; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Choice {
    ChoiceSetup setup;
    uint64_t engine_id = 0;
    bool submitted = false;
    bool finished = false;   // final event seen (engine thread: under mu_; strand: `done`)
    bool done = false;       // final event processed on the strand
    bool started = false;    // first chunk sent (chat: the role; completions: the echo)
    std::unique_ptr<ReasoningParser> reasoning;
    std::unique_ptr<ToolCallParser> tools;
    std::string text;        // content (chat) or text (completions, echo included)
    std::string reasoning_text;
    json logprobs;           // chat: [entries]; completions: {tokens, token_logprobs, ...}
    std::string finish_reason;
    int64_t completion_tokens = 0;
    Clock::time_point last_token{};
    bool got_token = false;
  };
  struct Item {
    size_t choice;
    GenerationEvent event;
  };

  void on_event(size_t k, GenerationEvent&& ev);      // engine thread
  void process(size_t k, GenerationEvent& ev, std::string& out);  // strand
  // Logprob entries for `tokens` appended to c.logprobs; returns those entries alone (for a chunk).
  json add_logprobs(Choice& c, const std::vector<TokenLogprob>& lps);
  json chunk(const Choice& c, json payload, const char* finish_reason) const;
  std::string final_body(int* status);
  json usage() const;

  JobOptions opts_;
  GenerationBackend& backend_;
  const Tokenizer& tokenizer_;
  ServerMetrics& metrics_;
  Clock::time_point arrival_ = Clock::now();

  std::vector<Choice> choices_;
  size_t n_done_ = 0;
  bool ended_ = false;  // the last byte (or the body) was produced
  std::optional<ApiError> error_;

  std::mutex mu_;  // guards queue_, wake_, abandoned_ and Choice::finished/got_token/last_token
  std::deque<Item> queue_;
  std::function<void()> wake_;
  bool abandoned_ = false;
};

// A random id with `prefix` ("chatcmpl-", "cmpl-", "call_") and 24 hex digits.
std::string random_id(std::string_view prefix);

}  // namespace pg::server
