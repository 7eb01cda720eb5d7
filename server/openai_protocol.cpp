// OpenAI request parsing and validation (see openai_protocol.h). Field rules follow OpenAI's API
// reference; vLLM's extra sampling fields (top_k, min_p, ...) are accepted as vLLM names them.
#include "server/openai_protocol.h"

#include <cmath>
#include <limits>

#include "tokenizer/utf8.h"

namespace pg::server {

#define PG_API_TRY(expr)                   \
  do {                                     \
    if (auto _pg_e = (expr)) return *_pg_e; \
  } while (0)

using MaybeError = std::optional<ApiError>;

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string error_body(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return dump_json(json{{"error", std::move(err)}});
}

ApiError api_error(const Status& s, std::string param) {
  ApiError e;
  e.message = s.message();
  e.param = std::move(param);
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnsupported:
      e.status = 400;
      break;
    case StatusCode::kOutOfRange:
      e.status = 400;
      e.code = "context_length_exceeded";
      break;
    case StatusCode::kNotFound:
      e.status = 404;
      e.type = "not_found_error";
      break;
    case StatusCode::kResourceExhausted:
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = "rate_limit_exceeded";
      break;
    case StatusCode::kFailedPrecondition:
      e.status = 503;
      e.type = "service_unavailable_error";
      break;
    default:
      e.status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

// Nesting depth of a JSON text (brackets outside strings); bounded before parsing so that
// pathological bodies cannot exhaust the stack anywhere later.
static int max_depth(std::string_view s) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

ApiResult<json> parse_json_body(std::string_view body) {
  constexpr int kMaxDepth = 64;  // OpenAI bodies nest ~6 deep (tool parameter schemas a few more)
  if (const size_t bad = utf8::first_invalid(body); bad != body.size())
    return bad_request(fmt::format("the request body is not valid UTF-8 (first bad byte at offset {})", bad));
  if (max_depth(body) > kMaxDepth)
    return bad_request(fmt::format("the request body nests deeper than {} levels", kMaxDepth));
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad_request("the request body is not valid JSON");
  if (!j.is_object()) return bad_request("the request body must be a JSON object");
  return j;
}

namespace {

const json* field(const json& o, const char* name) {
  auto it = o.find(name);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

ApiError type_error(const char* name, const char* expected) {
  return bad_request(fmt::format("'{}' must be {}", name, expected), name);
}

MaybeError get_double(const json& o, const char* name, std::optional<double>& out) {
  const json* v = field(o, name);
  if (!v) return {};
  if (!v->is_number()) return type_error(name, "a number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) return type_error(name, "a finite number");
  out = d;
  return {};
}

MaybeError get_int(const json& o, const char* name, std::optional<int64_t>& out) {
  const json* v = field(o, name);
  if (!v) return {};
  if (v->is_number_unsigned()) {
    if (v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) return type_error(name, "a smaller integer");
    out = int64_t(v->get<uint64_t>());
  } else if (v->is_number_integer()) {
    out = v->get<int64_t>();
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) return type_error(name, "an integer");
    out = int64_t(d);
  } else {
    return type_error(name, "an integer");
  }
  return {};
}

MaybeError get_bool(const json& o, const char* name, bool& out) {
  const json* v = field(o, name);
  if (!v) return {};
  if (!v->is_boolean()) return type_error(name, "a boolean");
  out = v->get<bool>();
  return {};
}

MaybeError get_string(const json& o, const char* name, std::string& out) {
  const json* v = field(o, name);
  if (!v) return {};
  if (!v->is_string()) return type_error(name, "a string");
  out = v->get<std::string>();
  return {};
}

MaybeError get_n(const json& o, const RequestLimits& limits, int& n) {
  std::optional<int64_t> v;
  PG_API_TRY(get_int(o, "n", v));
  if (!v) return {};
  if (*v < 1 || *v > limits.max_n)
    return bad_request(fmt::format("'n' must be between 1 and {} (the server's limit), got {}", limits.max_n, *v),
                       "n");
  n = int(*v);
  return {};
}

MaybeError get_stream(const json& o, bool& stream, bool& include_usage) {
  PG_API_TRY(get_bool(o, "stream", stream));
  const json* so = field(o, "stream_options");
  if (!so) return {};
  if (!so->is_object()) return type_error("stream_options", "an object");
  if (!stream) return bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
  if (const json* iu = field(*so, "include_usage")) {
    if (!iu->is_boolean()) return type_error("stream_options.include_usage", "a boolean");
    include_usage = iu->get<bool>();
  }
  return {};
}

// Fields both endpoints share. max_tokens is read by the caller (chat has two names for it).
MaybeError get_sampling(const json& o, const RequestLimits& limits, SamplingFields& s) {
  PG_API_TRY(get_double(o, "temperature", s.temperature));
  PG_API_TRY(get_double(o, "top_p", s.top_p));
  PG_API_TRY(get_double(o, "min_p", s.min_p));
  PG_API_TRY(get_double(o, "presence_penalty", s.presence_penalty));
  PG_API_TRY(get_double(o, "frequency_penalty", s.frequency_penalty));
  PG_API_TRY(get_double(o, "repetition_penalty", s.repetition_penalty));
  PG_API_TRY(get_int(o, "top_k", s.top_k));
  PG_API_TRY(get_int(o, "seed", s.seed));
  PG_API_TRY(get_bool(o, "ignore_eos", s.ignore_eos));
  if (const json* stop = field(o, "stop")) {
    if (stop->is_string()) {
      s.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& x : *stop) {
        if (!x.is_string()) return type_error("stop", "a string or a list of strings");
        s.stop.push_back(x.get<std::string>());
      }
    } else {
      return type_error("stop", "a string or a list of strings");
    }
    if (int(s.stop.size()) > limits.max_stop)
      return bad_request(fmt::format("'stop' holds {} strings; at most {} are allowed", s.stop.size(), limits.max_stop),
                         "stop");
    for (const auto& x : s.stop)
      if (x.empty()) return bad_request("'stop' strings must not be empty", "stop");
  }
  if (const json* ids = field(o, "stop_token_ids")) {
    if (!ids->is_array()) return type_error("stop_token_ids", "a list of token ids");
    for (const json& x : *ids) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > std::numeric_limits<int32_t>::max())
        return type_error("stop_token_ids", "a list of non-negative token ids");
      s.stop_token_ids.push_back(int32_t(x.get<int64_t>()));
    }
  }
  if (const json* lb = field(o, "logit_bias"); lb && !(lb->is_object() && lb->empty()))
    return bad_request("'logit_bias' is not supported by this server", "logit_bias");
  return {};
}

MaybeError check_max_tokens(const char* name, const std::optional<int64_t>& v) {
  if (v && *v < 1) return bad_request(fmt::format("'{}' must be at least 1, got {}", name, *v), name);
  return {};
}

MaybeError get_model(const json& o, std::string& model) { return get_string(o, "model", model); }

MaybeError token_ids(const json& arr, std::vector<int32_t>& out) {
  for (const json& x : arr) {
    if (!x.is_number_integer()) return type_error("prompt", "a string, a list of strings, or token ids");
    const int64_t id = x.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      return bad_request(fmt::format("prompt token id {} is out of range: ids are >= 0 and < the vocabulary size", id),
                         "prompt");
    out.push_back(int32_t(id));
  }
  return {};
}

MaybeError get_prompts(const json& o, const RequestLimits& limits, std::vector<PromptInput>& prompts) {
  const json* p = field(o, "prompt");
  if (!p) return bad_request("'prompt' is required", "prompt");
  constexpr const char* kExpected = "a string, a list of strings, a list of token ids or a list of lists of token ids";
  if (p->is_string()) {
    prompts.push_back({p->get<std::string>(), {}, false});
  } else if (p->is_array()) {
    if (p->empty()) return bad_request("'prompt' is empty", "prompt");
    const json& first = p->front();
    if (first.is_number()) {
      PromptInput in;
      in.is_ids = true;
      PG_API_TRY(token_ids(*p, in.ids));
      prompts.push_back(std::move(in));
    } else {
      for (const json& x : *p) {
        if (x.is_string()) {
          prompts.push_back({x.get<std::string>(), {}, false});
        } else if (x.is_array()) {
          PromptInput in;
          in.is_ids = true;
          PG_API_TRY(token_ids(x, in.ids));
          prompts.push_back(std::move(in));
        } else {
          return type_error("prompt", kExpected);
        }
      }
    }
  } else {
    return type_error("prompt", kExpected);
  }
  if (int(prompts.size()) > limits.max_prompts)
    return bad_request(fmt::format("'prompt' holds {} prompts; at most {} are allowed", prompts.size(),
                                   limits.max_prompts),
                       "prompt");
  for (const auto& in : prompts)
    if (in.is_ids ? in.ids.empty() : in.text.empty()) return bad_request("'prompt' is empty", "prompt");
  return {};
}

}  // namespace

ApiResult<CompletionRequest> parse_completion_request(const json& o, const RequestLimits& limits) {
  CompletionRequest r;
  PG_API_TRY(get_model(o, r.model));
  PG_API_TRY(get_prompts(o, limits, r.prompts));
  PG_API_TRY(get_bool(o, "echo", r.echo));
  PG_API_TRY(get_n(o, limits, r.n));
  PG_API_TRY(get_stream(o, r.stream, r.include_usage));
  PG_API_TRY(get_sampling(o, limits, r.sampling));
  PG_API_TRY(get_int(o, "max_tokens", r.sampling.max_tokens));
  PG_API_TRY(check_max_tokens("max_tokens", r.sampling.max_tokens));
  if (!field(o, "max_tokens")) r.sampling.max_tokens = 16;  // OpenAI's default for completions
  if (const json* lp = field(o, "logprobs")) {
    if (!lp->is_number_integer()) return type_error("logprobs", "an integer");
    const int64_t k = lp->get<int64_t>();
    if (k < 0 || k > limits.max_top_logprobs)
      return bad_request(fmt::format("'logprobs' must be between 0 and {}, got {}", limits.max_top_logprobs, k),
                         "logprobs");
    r.sampling.n_logprobs = int(k);
  }
  if (const json* bo = field(o, "best_of"); bo && !(bo->is_number_integer() && bo->get<int64_t>() == r.n))
    return bad_request("'best_of' other than 'n' is not supported", "best_of");
  if (const json* sfx = field(o, "suffix"); sfx && !(sfx->is_string() && sfx->get<std::string>().empty()))
    return bad_request("'suffix' is not supported by this model", "suffix");
  return r;
}

namespace {

// Message content: a string, or a list of text parts (joined with '\n'); other part types are
// rejected because this server reads text only.
MaybeError get_content(const json& m, size_t i, ChatMessage& out) {
  const std::string param = fmt::format("messages[{}].content", i);
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    if (out.role == "assistant") return {};  // content may be null next to tool_calls
    return bad_request(fmt::format("'{}' is required for a '{}' message", param, out.role), param);
  }
  if (it->is_string()) {
    out.content = it->get<std::string>();
    return {};
  }
  if (!it->is_array()) return bad_request(fmt::format("'{}' must be a string or a list of content parts", param), param);
  std::string text;
  bool first = true;
  for (const json& part : *it) {
    if (!part.is_object()) return bad_request(fmt::format("'{}' parts must be objects", param), param);
    const json* type = field(part, "type");
    if (!type || !type->is_string()) return bad_request(fmt::format("'{}' parts need a string 'type'", param), param);
    const std::string t = type->get<std::string>();
    if (t != "text") {
      const bool media = t == "image_url" || t == "input_image" || t == "image" || t == "input_audio" ||
                         t == "file" || t == "video_url" || t == "audio_url";
      return bad_request(media ? fmt::format("'{}' holds a '{}' part: this model reads text only", param, t)
                               : fmt::format("'{}' holds an unknown part type '{}'", param, t),
                         param);
    }
    const json* tx = field(part, "text");
    if (!tx || !tx->is_string()) return bad_request(fmt::format("'{}' text parts need a string 'text'", param), param);
    if (!first) text += '\n';
    text += tx->get<std::string>();
    first = false;
  }
  out.content = std::move(text);
  return {};
}

MaybeError get_tool_calls(const json& m, size_t i, ChatMessage& out) {
  const json* tc = field(m, "tool_calls");
  if (!tc) return {};
  const std::string param = fmt::format("messages[{}].tool_calls", i);
  if (!tc->is_array()) return bad_request(fmt::format("'{}' must be a list", param), param);
  for (const json& c : *tc) {
    const json* fn = c.is_object() ? field(c, "function") : nullptr;
    const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
    if (!name || !name->is_string())
      return bad_request(fmt::format("'{}' entries need a 'function' with a string 'name'", param), param);
    ToolCall call;
    call.name = name->get<std::string>();
    if (const json* id = field(c, "id"); id && id->is_string()) call.id = id->get<std::string>();
    if (const json* args = field(*fn, "arguments")) call.arguments = args->is_string() ? args->get<std::string>() : dump_json(*args);
    out.tool_calls.push_back(std::move(call));
  }
  return {};
}

MaybeError get_messages(const json& o, const RequestLimits& limits, std::vector<ChatMessage>& out) {
  auto it = o.find("messages");
  if (it == o.end()) return bad_request("'messages' is required", "messages");
  if (!it->is_array()) return type_error("messages", "a list of message objects");
  if (it->empty()) return bad_request("'messages' is empty: at least one message is needed", "messages");
  if (int(it->size()) > limits.max_messages)
    return bad_request(fmt::format("'messages' holds {} messages; at most {} are allowed", it->size(),
                                   limits.max_messages),
                       "messages");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) return bad_request(fmt::format("'{}' must be an object", param), param);
    ChatMessage msg;
    const json* role = field(m, "role");
    if (!role || !role->is_string())
      return bad_request(fmt::format("'{}.role' must be a string", param), param + ".role");
    msg.role = role->get<std::string>();
    if (msg.role != "system" && msg.role != "developer" && msg.role != "user" && msg.role != "assistant" &&
        msg.role != "tool")
      return bad_request(fmt::format("'{}.role' must be one of system, developer, user, assistant, tool; got '{}'",
                                     param, msg.role),
                         param + ".role");
    PG_API_TRY(get_content(m, i, msg));
    PG_API_TRY(get_tool_calls(m, i, msg));
    if (msg.role == "assistant" && !msg.content && msg.tool_calls.empty())
      return bad_request(fmt::format("'{}' (assistant) needs 'content' or 'tool_calls'", param), param);
    for (auto [key, dst] : {std::pair{"tool_call_id", &msg.tool_call_id}, std::pair{"name", &msg.name}}) {
      if (const json* v = field(m, key)) {
        if (!v->is_string()) return bad_request(fmt::format("'{}.{}' must be a string", param, key), param + "." + key);
        *dst = v->get<std::string>();
      }
    }
    if (const json* rc = field(m, "reasoning_content")) {
      if (!rc->is_string()) return bad_request(fmt::format("'{}.reasoning_content' must be a string", param), param);
      msg.reasoning_content = rc->get<std::string>();
    }
    out.push_back(std::move(msg));
  }
  return {};
}

MaybeError get_tools(const json& o, ChatRequest& r) {
  if (const json* tools = field(o, "tools")) {
    if (!tools->is_array()) return type_error("tools", "a list of tools");
    for (const json& t : *tools) {
      const json* fn = t.is_object() ? field(t, "function") : nullptr;
      const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
      if (!name || !name->is_string() || name->get<std::string>().empty())
        return bad_request("'tools' entries need a 'function' with a non-empty string 'name'", "tools");
      if (const json* type = field(t, "type"); type && !(type->is_string() && type->get<std::string>() == "function"))
        return bad_request("'tools' entries must have type 'function'", "tools");
    }
    r.tools = *tools;
  }
  if (const json* tc = field(o, "tool_choice")) {
    if (tc->is_string()) {
      r.tool_choice = tc->get<std::string>();
      if (r.tool_choice != "none" && r.tool_choice != "auto" && r.tool_choice != "required")
        return bad_request("'tool_choice' must be none, auto, required or a function", "tool_choice");
    } else if (tc->is_object() && field(*tc, "function") && field(*tc, "function")->is_object() &&
               field(*field(*tc, "function"), "name") && field(*field(*tc, "function"), "name")->is_string()) {
      r.tool_choice = (*tc)["function"]["name"].get<std::string>();
    } else {
      return type_error("tool_choice", "none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
  }
  return {};
}

}  // namespace

ApiResult<ChatRequest> parse_chat_request(const json& o, const RequestLimits& limits) {
  ChatRequest r;
  PG_API_TRY(get_model(o, r.model));
  PG_API_TRY(get_messages(o, limits, r.messages));
  PG_API_TRY(get_n(o, limits, r.n));
  PG_API_TRY(get_stream(o, r.stream, r.include_usage));
  PG_API_TRY(get_sampling(o, limits, r.sampling));
  std::optional<int64_t> max_tokens, max_completion_tokens;
  PG_API_TRY(get_int(o, "max_tokens", max_tokens));
  PG_API_TRY(get_int(o, "max_completion_tokens", max_completion_tokens));
  PG_API_TRY(check_max_tokens("max_tokens", max_tokens));
  PG_API_TRY(check_max_tokens("max_completion_tokens", max_completion_tokens));
  r.sampling.max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;
  PG_API_TRY(get_bool(o, "logprobs", r.logprobs));
  std::optional<int64_t> top_logprobs;
  PG_API_TRY(get_int(o, "top_logprobs", top_logprobs));
  if (top_logprobs) {
    if (*top_logprobs < 0 || *top_logprobs > limits.max_top_logprobs)
      return bad_request(fmt::format("'top_logprobs' must be between 0 and {}, got {}", limits.max_top_logprobs,
                                     *top_logprobs),
                         "top_logprobs");
    if (!r.logprobs) return bad_request("'top_logprobs' needs 'logprobs' set to true", "top_logprobs");
  }
  if (r.logprobs) r.sampling.n_logprobs = int(top_logprobs.value_or(0));
  PG_API_TRY(get_tools(o, r));
  if (const json* sr = field(o, "separate_reasoning")) {
    if (!sr->is_boolean()) return type_error("separate_reasoning", "a boolean");
    r.separate_reasoning = sr->get<bool>();
  }
  if (const json* kw = field(o, "chat_template_kwargs")) {
    if (!kw->is_object()) return type_error("chat_template_kwargs", "an object");
    r.chat_template_kwargs = *kw;
  }
  PG_API_TRY(get_bool(o, "add_generation_prompt", r.add_generation_prompt));
  PG_API_TRY(get_bool(o, "continue_final_message", r.continue_final_message));
  if (r.continue_final_message) {
    if (r.messages.back().role != "assistant")
      return bad_request("'continue_final_message' needs the last message to be from the assistant",
                         "continue_final_message");
    r.add_generation_prompt = false;
  }
  if (field(o, "chat_template"))
    return bad_request("'chat_template' is not accepted from requests; the server uses the model's template "
                       "(or --chat-template)",
                       "chat_template");
  if (const json* rf = field(o, "response_format")) {
    const json* type = rf->is_object() ? field(*rf, "type") : nullptr;
    if (!type || !type->is_string() || type->get<std::string>() != "text")
      return bad_request("only 'response_format' {\"type\": \"text\"} is supported", "response_format");
  }
  return r;
}

}  // namespace pg::server
