// OpenAI request parsing and validation for /v1/completions and /v1/chat/completions, and the
// OpenAI error object. Everything a request can get wrong is found here or in the engine's
// synchronous submit(), so errors go out as 4xx before any stream byte.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"
#include "server/tool_parser.h"

namespace pg::server {

using json = nlohmann::json;

// {"error": {"message", "type", "param", "code"}} with its HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" is sent as null
  std::string code;   // "" is sent as null
};

std::string error_body(const ApiError& e);
// A library Status as an API error: InvalidArgument/OutOfRange/Unsupported 400, NotFound 404,
// ResourceExhausted 429, FailedPrecondition 503, the rest 500.
ApiError api_error(const Status& s, std::string param = {});
inline ApiError bad_request(std::string message, std::string param = {}) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), {}};
}

// A value or an ApiError.
template <typename T>
class ApiResult {
 public:
  ApiResult(T v) : v_(std::move(v)) {}          // NOLINT: implicit by design
  ApiResult(ApiError e) : v_(std::move(e)) {}   // NOLINT
  bool ok() const { return v_.index() == 0; }
  T& value() { return std::get<0>(v_); }
  const ApiError& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, ApiError> v_;
};

// Server-side limits a request is checked against.
struct RequestLimits {
  int max_n = 16;              // choices per request
  int max_messages = 1024;     // chat messages per request
  int max_stop = 16;           // stop strings per request
  int max_top_logprobs = 20;
  int max_prompts = 64;        // prompts in one /v1/completions batch
};

// The sampling fields shared by both endpoints, as sent (unset when absent or null).
struct SamplingFields {
  std::optional<double> temperature, top_p, min_p, presence_penalty, frequency_penalty, repetition_penalty;
  std::optional<int64_t> top_k, seed, max_tokens;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int n_logprobs = -1;  // -1: none; k >= 0: the chosen token's logprob and k alternatives
};

// One prompt of /v1/completions: text or token ids.
struct PromptInput {
  std::string text;
  std::vector<int32_t> ids;
  bool is_ids = false;
};

struct CompletionRequest {
  std::string model;
  std::vector<PromptInput> prompts;
  bool echo = false;
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  SamplingFields sampling;
};

struct ChatMessage {
  std::string role;                     // system | developer | user | assistant | tool
  std::optional<std::string> content;   // text parts joined by '\n'; nullopt for null content
  std::optional<std::string> reasoning_content;
  std::vector<ToolCall> tool_calls;     // assistant
  std::string tool_call_id;             // tool
  std::string name;
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  json tools = json::array();           // [{type:"function", function:{name, description, parameters}}]
  std::string tool_choice = "auto";     // none | auto | required | <function name>
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  std::optional<bool> separate_reasoning;  // per-request switch of the reasoning split
  json chat_template_kwargs = json::object();
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  SamplingFields sampling;
};

// Parses a body (validated UTF-8, a JSON object) into a request. Checks types, ranges and
// server limits; token-id ranges and context length are checked against the model later.
ApiResult<json> parse_json_body(std::string_view body);
ApiResult<CompletionRequest> parse_completion_request(const json& body, const RequestLimits& limits);
ApiResult<ChatRequest> parse_chat_request(const json& body, const RequestLimits& limits);

// Serializes without ever throwing (invalid UTF-8 would be replaced, not thrown on).
std::string dump_json(const json& j);

}  // namespace pg::server
