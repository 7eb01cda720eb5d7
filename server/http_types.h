// The HTTP request/response values the routes see, free of Boost types, so protocol code and its
// tests never include Beast. A PendingResponse is a body produced over time (a generation).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pg::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as sent
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;

  // The first value of header `name` (lower-case), or "" when absent.
  std::string_view header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k == name) return v;
    return {};
  }
  // The target without its query string.
  std::string_view path() const {
    std::string_view t = target;
    return t.substr(0, t.find('?'));
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (CORS, ...)
  std::string body;
};

// A body still being generated. The HTTP side calls set_wake() once, then poll() whenever woken
// (and on its own schedule); all calls come from one connection's strand.
class PendingResponse {
 public:
  virtual ~PendingResponse() = default;

  struct Poll {
    std::string data;  // streaming: bytes to send now; otherwise the whole body once done
    bool done = false;
    int status = 200;  // non-streaming only: the final status
  };

  // `wake` may be called from any thread, any number of times, when poll() may have more.
  virtual void set_wake(std::function<void()> wake) = 0;
  virtual Poll poll() = 0;
  // The client disconnected or stopped reading: cancel the work; nothing more will be sent.
  virtual void abandon() = 0;
  // true: an SSE stream (status 200, headers sent first); false: one body when done.
  virtual bool streaming() const = 0;
};

struct RouteResult {
  HttpResponse response;                     // the whole answer, or the headers of a stream
  std::shared_ptr<PendingResponse> pending;  // non-null: the body comes from here
};

using RouteHandler = std::function<RouteResult(const HttpRequest&)>;
// Builds an error answer for failures found by the HTTP layer itself (413, 431, 400).
using ErrorResponder = std::function<HttpResponse(int status, std::string_view message)>;

}  // namespace pg::server
