// The server's endpoints (see routes.h). Every answer is built here; every error is OpenAI's
// error object with the matching status, decided before any stream byte is sent.
#include "server/routes.h"

#include <chrono>

#include "server/auth.h"
#include "server/generation_job.h"
#include "server/sampling.h"
#include "server/tokens.h"

namespace pg::server {

namespace {

constexpr std::string_view kVersion = "0.1.0";

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ApiError not_found_route(const HttpRequest& req) {
  return ApiError{404, fmt::format("no route for {} {}", req.method, req.path()), "not_found_error", {}, {}};
}

ApiError draining_error() {
  return ApiError{503, "the server is shutting down and takes no new requests", "service_unavailable_error", {}, {}};
}

}  // namespace

Router::Router(RouterConfig cfg, GenerationBackend& backend, std::shared_ptr<const Tokenizer> tokenizer,
               const ChatTemplate* chat_template, ServerMetrics& metrics)
    : cfg_(std::move(cfg)),
      backend_(backend),
      tokenizer_(std::move(tokenizer)),
      chat_template_(chat_template),
      metrics_(metrics),
      created_(unix_now()) {
  if (cfg_.served_model_names.empty()) cfg_.served_model_names.push_back("peregrine");
}

HttpResponse Router::json_response(int status, const json& j) const {
  HttpResponse r;
  r.status = status;
  r.body = dump_json(j);
  return r;
}

HttpResponse Router::error_response(const ApiError& e) {
  HttpResponse r;
  r.status = e.status;
  r.body = error_body(e);
  if (e.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

HttpResponse Router::error_response(int status, std::string_view message) {
  ApiError e{status, std::string(message), "invalid_request_error", {}, {}};
  if (status == 413) e.code = "request_too_large";
  if (status == 431) e.code = "request_header_fields_too_large";
  if (status >= 500) e.type = "server_error";
  metrics_.http_response(status);
  return error_response(e);
}

std::optional<ApiError> Router::check_model(const std::string& model) const {
  if (model.empty()) return {};
  for (const auto& name : cfg_.served_model_names)
    if (name == model) return {};
  return ApiError{404, fmt::format("The model '{}' does not exist; this server serves '{}'", model, model_name()),
                  "invalid_request_error", "model", "model_not_found"};
}

RouteResult Router::handle(const HttpRequest& req) {
  RouteResult r = dispatch(req);
  // CORS: only for origins the operator allowed (--allowed-origins); off by default.
  const std::string_view origin = req.header("origin");
  if (!origin.empty() && !cfg_.allowed_origins.empty()) {
    bool any = false, listed = false;
    for (const auto& o : cfg_.allowed_origins) {
      any |= o == "*";
      listed |= o == origin;
    }
    if (any || listed) {
      r.response.headers.emplace_back("Access-Control-Allow-Origin", listed ? std::string(origin) : "*");
      r.response.headers.emplace_back("Vary", "Origin");
    }
  }
  metrics_.http_response(r.response.status);
  return r;
}

RouteResult Router::dispatch(const HttpRequest& req) {
  const std::string_view path = req.path();
  RouteResult r;
  if (req.method == "OPTIONS") {
    if (cfg_.allowed_origins.empty()) {
      r.response = error_response(ApiError{405, "CORS is not enabled on this server (see --allowed-origins)",
                                           "invalid_request_error", {}, {}});
      return r;
    }
    r.response.status = 204;
    r.response.content_type = "text/plain";
    r.response.headers = {{"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
                          {"Access-Control-Allow-Headers", "Authorization, Content-Type"},
                          {"Access-Control-Max-Age", "600"}};
    return r;
  }
  if (path == "/health") {
    r.response.content_type = "text/plain";
    r.response.status = draining_ ? 503 : 200;
    r.response.body = draining_ ? "draining\n" : "";
    return r;
  }
  if (!authorized(req.header("authorization"), cfg_.api_key)) {
    r.response = error_response(ApiError{401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'",
                                         "invalid_request_error", {}, "invalid_api_key"});
    return r;
  }
  struct Route {
    std::string_view method, path;
    int kind;
  };
  static constexpr Route kRoutes[] = {{"GET", "/v1/models", 0},          {"POST", "/v1/completions", 1},
                                      {"POST", "/v1/chat/completions", 2}, {"POST", "/tokenize", 3},
                                      {"POST", "/detokenize", 4},          {"GET", "/version", 5},
                                      {"GET", "/metrics", 6}};
  for (const Route& route : kRoutes) {
    if (route.path != path) continue;
    if (route.method != req.method) {
      r.response = error_response(ApiError{405, fmt::format("{} takes {}, not {}", path, route.method, req.method),
                                           "invalid_request_error", {}, {}});
      return r;
    }
    switch (route.kind) {
      case 0:
        r.response = models();
        return r;
      case 1:
        return completions(req);
      case 2:
        return chat(req);
      case 3:
        return tokenize(req);
      case 4:
        return detokenize(req);
      case 5:
        r.response = json_response(200, json{{"version", kVersion}});
        return r;
      default:
        r.response.content_type = "text/plain; version=0.0.4; charset=utf-8";
        r.response.body = metrics_.render(backend_.stats(), model_name());
        return r;
    }
  }
  r.response = error_response(not_found_route(req));
  return r;
}

HttpResponse Router::models() const {
  json data = json::array();
  for (const auto& name : cfg_.served_model_names)
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"created", created_},
                    {"owned_by", "peregrine"},
                    {"root", model_name()},
                    {"parent", nullptr},
                    {"max_model_len", backend_.max_model_len()}});
  return json_response(200, json{{"object", "list"}, {"data", std::move(data)}});
}

static std::optional<ApiError> check_ids(const std::vector<int32_t>& ids, int64_t vocab, const char* param) {
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      return bad_request(fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab), param);
  return {};
}

RouteResult Router::completions(const HttpRequest& req) {
  RouteResult r;
  auto fail = [&](const ApiError& e) {
    r.response = error_response(e);
    return r;
  };
  if (draining_) return fail(draining_error());
  auto body = parse_json_body(req.body);
  if (!body.ok()) return fail(body.error());
  auto cr = parse_completion_request(body.value(), cfg_.limits);
  if (!cr.ok()) return fail(cr.error());
  CompletionRequest& c = cr.value();
  if (auto e = check_model(c.model)) return fail(*e);
  const int64_t vocab = backend_.vocab_size();

  JobOptions opts;
  opts.chat = false;
  opts.stream = c.stream;
  opts.include_usage = c.include_usage;
  opts.id = random_id("cmpl-");
  opts.model = model_name();
  opts.created = unix_now();
  opts.n_logprobs = c.sampling.n_logprobs;
  std::vector<ChoiceSetup> setups;
  std::vector<GenerationRequest> requests;
  for (size_t pi = 0; pi < c.prompts.size(); ++pi) {
    const PromptInput& p = c.prompts[pi];
    std::vector<int32_t> ids = p.is_ids ? p.ids : encode_prompt(*tokenizer_, p.text, cfg_.add_bos_to_completions);
    if (auto e = check_ids(ids, vocab, "prompt")) return fail(*e);
    for (int i = 0; i < c.n; ++i) {
      auto sp = to_sampling_params(c.sampling, i, vocab);
      if (!sp.ok()) return fail(sp.error());
      ChoiceSetup s;
      s.index = int(pi) * c.n + i;
      s.prompt_idx = int(pi);
      s.prompt_tokens = int64_t(ids.size());
      if (c.echo) {
        s.echo = p.is_ids ? decode_ids(*tokenizer_, ids) : p.text;
        if (c.sampling.n_logprobs >= 0) s.echo_ids = ids;
      }
      setups.push_back(std::move(s));
      requests.push_back(GenerationRequest{ids, std::move(sp.value()), std::nullopt});
    }
  }
  auto job = std::make_shared<GenerationJob>(std::move(opts), backend_, *tokenizer_, metrics_);
  if (Status st = job->submit(std::move(setups), std::move(requests)); !st.ok())
    return fail(api_error(st, st.code() == StatusCode::kOutOfRange ? "prompt" : ""));
  r.pending = std::move(job);
  return r;
}

RouteResult Router::chat(const HttpRequest& req) {
  RouteResult r;
  auto fail = [&](const ApiError& e) {
    r.response = error_response(e);
    return r;
  };
  if (draining_) return fail(draining_error());
  auto body = parse_json_body(req.body);
  if (!body.ok()) return fail(body.error());
  auto cr = parse_chat_request(body.value(), cfg_.limits);
  if (!cr.ok()) return fail(cr.error());
  ChatRequest& c = cr.value();
  if (auto e = check_model(c.model)) return fail(*e);
  if (!chat_template_)
    return fail(bad_request("this model has no chat template; start the server with --chat-template FILE"));
  auto prompt = chat_template_->render(c);
  if (!prompt.ok()) return fail(api_error(prompt.status(), "messages"));
  const int64_t vocab = backend_.vocab_size();

  JobOptions opts;
  opts.chat = true;
  opts.stream = c.stream;
  opts.include_usage = c.include_usage;
  opts.id = random_id("chatcmpl-");
  opts.model = model_name();
  opts.created = unix_now();
  opts.n_logprobs = c.sampling.n_logprobs;
  opts.parse_tools = !c.tools.empty() && c.tool_choice != "none";
  opts.split_reasoning = cfg_.reasoning_parser && c.separate_reasoning.value_or(true);
  std::vector<ChoiceSetup> setups;
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < c.n; ++i) {
    // DeepSeek's tool-call markers are added tokens marked special=false: they reach the text.
    auto sp = to_sampling_params(c.sampling, i, vocab);
    if (!sp.ok()) return fail(sp.error());
    ChoiceSetup s;
    s.index = i;
    s.prompt_tokens = int64_t(prompt->ids.size());
    s.starts_in_reasoning = prompt->opens_reasoning;
    setups.push_back(std::move(s));
    requests.push_back(GenerationRequest{prompt->ids, std::move(sp.value()), std::nullopt});
  }
  auto job = std::make_shared<GenerationJob>(std::move(opts), backend_, *tokenizer_, metrics_);
  if (Status st = job->submit(std::move(setups), std::move(requests)); !st.ok())
    return fail(api_error(st, st.code() == StatusCode::kOutOfRange ? "messages" : ""));
  r.pending = std::move(job);
  return r;
}

RouteResult Router::tokenize(const HttpRequest& req) {
  RouteResult r;
  auto fail = [&](const ApiError& e) {
    r.response = error_response(e);
    return r;
  };
  auto body = parse_json_body(req.body);
  if (!body.ok()) return fail(body.error());
  const json& b = body.value();
  std::string model;
  if (auto it = b.find("model"); it != b.end() && !it->is_null()) {
    if (!it->is_string()) return fail(bad_request("'model' must be a string", "model"));
    model = it->get<std::string>();
  }
  if (auto e = check_model(model)) return fail(*e);
  std::vector<int32_t> ids;
  if (b.contains("messages")) {
    auto cr = parse_chat_request(b, cfg_.limits);
    if (!cr.ok()) return fail(cr.error());
    if (!chat_template_) return fail(bad_request("this model has no chat template"));
    auto prompt = chat_template_->render(cr.value());
    if (!prompt.ok()) return fail(api_error(prompt.status(), "messages"));
    ids = std::move(prompt->ids);
  } else {
    auto it = b.find("prompt");
    if (it == b.end() || !it->is_string()) return fail(bad_request("'prompt' must be a string", "prompt"));
    bool add_special = true;
    if (auto as = b.find("add_special_tokens"); as != b.end() && !as->is_null()) {
      if (!as->is_boolean()) return fail(bad_request("'add_special_tokens' must be a boolean", "add_special_tokens"));
      add_special = as->get<bool>();
    }
    ids = encode_prompt(*tokenizer_, it->get<std::string>(), add_special && cfg_.add_bos_to_completions);
  }
  json out = {{"count", ids.size()}, {"max_model_len", backend_.max_model_len()}, {"tokens", ids}};
  if (auto ts = b.find("return_token_strs"); ts != b.end() && ts->is_boolean() && ts->get<bool>()) {
    json strs = json::array();
    for (int32_t id : ids) strs.push_back(lossy_text(token_bytes(*tokenizer_, id)));
    out["token_strs"] = std::move(strs);
  } else {
    out["token_strs"] = nullptr;
  }
  r.response = json_response(200, out);
  return r;
}

RouteResult Router::detokenize(const HttpRequest& req) {
  RouteResult r;
  auto fail = [&](const ApiError& e) {
    r.response = error_response(e);
    return r;
  };
  auto body = parse_json_body(req.body);
  if (!body.ok()) return fail(body.error());
  const json& b = body.value();
  if (auto it = b.find("model"); it != b.end() && !it->is_null()) {
    if (!it->is_string()) return fail(bad_request("'model' must be a string", "model"));
    if (auto e = check_model(it->get<std::string>())) return fail(*e);
  }
  auto it = b.find("tokens");
  if (it == b.end() || !it->is_array()) return fail(bad_request("'tokens' must be a list of token ids", "tokens"));
  std::vector<int32_t> ids;
  for (const json& x : *it) {
    if (!x.is_number_integer()) return fail(bad_request("'tokens' must be a list of token ids", "tokens"));
    const int64_t id = x.get<int64_t>();
    if (id < 0 || id >= backend_.vocab_size())
      return fail(bad_request(fmt::format("token id {} is outside the vocabulary [0, {})", id, backend_.vocab_size()),
                              "tokens"));
    ids.push_back(int32_t(id));
  }
  r.response = json_response(200, json{{"prompt", decode_ids(*tokenizer_, ids)}});
  return r;
}

}  // namespace pg::server
