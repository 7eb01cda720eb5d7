// OpenAI request parsing: accepted shapes, every rejected shape with its param, limits, and
// the error object.
#include "server/openai_protocol.h"

#include <gtest/gtest.h>

namespace pg::server {
namespace {

RequestLimits limits() { return RequestLimits{}; }

ApiError chat_error(const std::string& body) {
  auto j = parse_json_body(body);
  if (!j.ok()) return j.error();
  auto r = parse_chat_request(j.value(), limits());
  EXPECT_FALSE(r.ok()) << body;
  return r.ok() ? ApiError{} : r.error();
}

ApiError completion_error(const std::string& body) {
  auto j = parse_json_body(body);
  if (!j.ok()) return j.error();
  auto r = parse_completion_request(j.value(), limits());
  EXPECT_FALSE(r.ok()) << body;
  return r.ok() ? ApiError{} : r.error();
}

TEST(Protocol, BodyChecks) {
  EXPECT_EQ(parse_json_body("{").error().status, 400);
  EXPECT_EQ(parse_json_body("[]").error().message, "the request body must be a JSON object");
  EXPECT_NE(parse_json_body("{\"a\":\"\xff\"}").error().message.find("UTF-8"), std::string::npos);
  EXPECT_NE(parse_json_body(std::string(100, '[') + std::string(100, ']')).error().message.find("nests"),
            std::string::npos);
  EXPECT_TRUE(parse_json_body("{\"a\": \"[[[[\"}").ok());  // brackets in strings do not nest
  EXPECT_FALSE(parse_json_body("{\"t\": NaN}").ok());
}

TEST(Protocol, ChatMessagesShapes) {
  EXPECT_EQ(chat_error("{\"messages\": null}").param, "messages");
  EXPECT_EQ(chat_error("{\"messages\": \"hi\"}").param, "messages");
  EXPECT_EQ(chat_error("{\"messages\": []}").param, "messages");
  EXPECT_EQ(chat_error("{\"messages\": [123]}").param, "messages[0]");
  EXPECT_EQ(chat_error("{\"messages\": [{}]}").param, "messages[0].role");
  EXPECT_EQ(chat_error("{\"messages\": [{\"role\": 123, \"content\": \"x\"}]}").param, "messages[0].role");
  EXPECT_EQ(chat_error("{\"messages\": [{\"role\": \"user\", \"content\": 123}]}").param, "messages[0].content");
  EXPECT_EQ(chat_error("{\"messages\": [{\"role\": \"user\"}]}").param, "messages[0].content");
  ApiError img = chat_error(
      "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {\"url\": \"x\"}}]}]}");
  EXPECT_NE(img.message.find("text only"), std::string::npos);
  EXPECT_EQ(chat_error("{\"messages\": [{\"role\": \"assistant\"}]}").param, "messages[0]");
}

TEST(Protocol, ChatAccepts) {
  auto j = parse_json_body(R"({"model": "m", "messages": [
      {"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": {"x": 1}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}],
    "max_tokens": 5, "max_completion_tokens": 7, "n": 2, "stream": true,
    "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 3,
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "separate_reasoning": false, "stop": "END", "seed": 9, "temperature": 0.5, "top_k": 4})");
  ASSERT_TRUE(j.ok());
  auto r = parse_chat_request(j.value(), limits());
  ASSERT_TRUE(r.ok()) << r.error().message;
  const ChatRequest& c = r.value();
  EXPECT_EQ(c.model, "m");
  ASSERT_EQ(c.messages.size(), 4u);
  EXPECT_EQ(*c.messages[1].content, "a\nb");
  EXPECT_FALSE(c.messages[2].content.has_value());
  ASSERT_EQ(c.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(c.messages[2].tool_calls[0].arguments, "{\"x\":1}");
  EXPECT_EQ(c.messages[3].tool_call_id, "c1");
  EXPECT_EQ(*c.sampling.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_EQ(c.n, 2);
  EXPECT_TRUE(c.stream && c.include_usage);
  EXPECT_EQ(c.sampling.n_logprobs, 3);
  EXPECT_EQ(c.tools.size(), 1u);
  EXPECT_EQ(c.separate_reasoning, false);
  EXPECT_EQ(c.sampling.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(*c.sampling.top_k, 4);
}

TEST(Protocol, ChatLimitsAndFlags) {
  RequestLimits l;
  l.max_messages = 2;
  l.max_n = 3;
  auto j = parse_json_body(R"({"messages": [{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"}]})");
  EXPECT_EQ(parse_chat_request(j.value(), l).error().param, "messages");
  j = parse_json_body(R"({"messages": [{"role":"user","content":"a"}], "n": 4})");
  EXPECT_EQ(parse_chat_request(j.value(), l).error().param, "n");
  EXPECT_EQ(chat_error(R"({"messages": [{"role":"user","content":"a"}], "top_logprobs": 2})").param, "top_logprobs");
  EXPECT_EQ(chat_error(R"({"messages": [{"role":"user","content":"a"}], "logprobs": true, "top_logprobs": 21})").param,
            "top_logprobs");
  EXPECT_EQ(chat_error(R"({"messages": [{"role":"user","content":"a"}], "chat_template": "x"})").param, "chat_template");
  EXPECT_EQ(chat_error(R"({"messages": [{"role":"user","content":"a"}], "temperature": "x"})").param, "temperature");
  EXPECT_EQ(chat_error(R"({"messages": [{"role":"user","content":"a"}], "temperature": 1e999})").status, 400);
  EXPECT_EQ(chat_error(R"({"messages": [{"role":"user","content":"a"}], "stream_options": {}})").param, "stream_options");
  EXPECT_EQ(chat_error(R"({"messages": [{"role":"user","content":"a"}], "max_tokens": 0})").param, "max_tokens");
  EXPECT_EQ(chat_error(R"({"messages": [{"role":"user","content":"a"}], "tools": [{"type":"function"}]})").param, "tools");
  EXPECT_EQ(chat_error(R"({"messages": [{"role":"user","content":"a"}], "response_format": {"type":"json_object"}})").param,
            "response_format");
}

TEST(Protocol, CompletionPrompts) {
  auto parse = [](const std::string& body) {
    auto j = parse_json_body(body);
    return parse_completion_request(j.value(), limits());
  };
  auto r = parse(R"({"prompt": "hi"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().prompts.size(), 1u);
  EXPECT_EQ(*r.value().sampling.max_tokens, 16);  // OpenAI's default
  r = parse(R"({"prompt": ["a", "b"], "echo": true, "logprobs": 2, "max_tokens": 3})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().prompts.size(), 2u);
  EXPECT_TRUE(r.value().echo);
  EXPECT_EQ(r.value().sampling.n_logprobs, 2);
  r = parse(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.value().prompts.size(), 1u);
  EXPECT_TRUE(r.value().prompts[0].is_ids);
  EXPECT_EQ(r.value().prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  r = parse(R"({"prompt": [[1, 2], [3]]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().prompts.size(), 2u);
  EXPECT_EQ(completion_error(R"({"prompt": ""})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": []})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": [[]]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": [1, -1]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": [1, "a"]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": 5})").param, "prompt");
  EXPECT_EQ(completion_error(R"({})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": "a", "logprobs": 21})").param, "logprobs");
  EXPECT_EQ(completion_error(R"({"prompt": "a", "logprobs": true})").param, "logprobs");
  EXPECT_EQ(completion_error(R"({"prompt": "a", "stop": ["", "x"]})").param, "stop");
  EXPECT_EQ(completion_error(R"({"prompt": "a", "best_of": 3})").param, "best_of");
  EXPECT_EQ(completion_error(R"({"prompt": "a", "logit_bias": {"1": 5}})").param, "logit_bias");
}

TEST(Protocol, ErrorObject) {
  ApiError e{404, "no such model", "invalid_request_error", "model", "model_not_found"};
  auto j = json::parse(error_body(e));
  EXPECT_EQ(j["error"]["message"], "no such model");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "model");
  EXPECT_EQ(j["error"]["code"], "model_not_found");
  auto n = json::parse(error_body(bad_request("x")));
  EXPECT_TRUE(n["error"]["param"].is_null());
  EXPECT_TRUE(n["error"]["code"].is_null());
  EXPECT_EQ(api_error(out_of_range("long")).status, 400);
  EXPECT_EQ(api_error(resource_exhausted("full")).status, 429);
  EXPECT_EQ(api_error(failed_precondition("draining")).status, 503);
  EXPECT_EQ(api_error(internal_error("x")).status, 500);
}

}  // namespace
}  // namespace pg::server
