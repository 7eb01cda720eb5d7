// The server's endpoints: /v1/models, /v1/completions, /v1/chat/completions, /tokenize,
// /detokenize, /version, /health, /metrics; plus auth, CORS and the draining switch. Free of
// Beast: it maps an HttpRequest to a response or a pending generation.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "server/backend.h"
#include "server/chat.h"
#include "server/http_types.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"

namespace pg {
class Tokenizer;
}

namespace pg::server {

struct RouterConfig {
  std::vector<std::string> served_model_names;  // the first is reported in responses
  std::string api_key;                          // empty: no auth
  std::vector<std::string> allowed_origins;     // CORS; empty: off; "*": any origin
  RequestLimits limits;
  bool reasoning_parser = true;                 // split <think> blocks into reasoning_content
  bool add_bos_to_completions = true;           // tokenizer_config's add_bos_token
};

class Router {
 public:
  Router(RouterConfig cfg, GenerationBackend& backend, std::shared_ptr<const Tokenizer> tokenizer,
         const ChatTemplate* chat_template, ServerMetrics& metrics);

  RouteResult handle(const HttpRequest& req);
  // An OpenAI error answer (also used by the HTTP layer for 413/431/400).
  HttpResponse error_response(const ApiError& e);
  HttpResponse error_response(int status, std::string_view message);

  // Draining: /health answers 503 and generation endpoints refuse new work with 503.
  void set_draining(bool draining) { draining_ = draining; }
  bool draining() const { return draining_; }

 private:
  RouteResult dispatch(const HttpRequest& req);
  RouteResult completions(const HttpRequest& req);
  RouteResult chat(const HttpRequest& req);
  RouteResult tokenize(const HttpRequest& req);
  RouteResult detokenize(const HttpRequest& req);
  HttpResponse models() const;
  HttpResponse json_response(int status, const json& j) const;
  // Empty when `model` is absent or served; else a 404 model_not_found.
  std::optional<ApiError> check_model(const std::string& model) const;
  const std::string& model_name() const { return cfg_.served_model_names.front(); }
  RouteResult respond(RouteResult r, const HttpRequest& req);

  RouterConfig cfg_;
  GenerationBackend& backend_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  const ChatTemplate* chat_template_;
  ServerMetrics& metrics_;
  std::atomic<bool> draining_{false};
  int64_t created_ = 0;
};

}  // namespace pg::server
