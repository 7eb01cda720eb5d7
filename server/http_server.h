// The HTTP/1.1 server: Boost.Beast over Asio with C++20 coroutines (one coroutine per connection;
// an open stream costs a coroutine, not a thread). It parses with header and body limits, hands
// requests to a RouteHandler, writes answers and SSE streams, and watches for disconnects.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "server/http_types.h"

namespace pg::server {

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;                    // 0: an ephemeral port (see HttpServer::port())
  int n_threads = 1;                       // I/O threads
  uint64_t body_limit_bytes = 16u << 20;   // larger bodies: 413
  uint32_t header_limit_bytes = 16u << 10; // larger headers: 431
  std::chrono::milliseconds idle_timeout{60000};   // waiting for (the rest of) a request
  std::chrono::milliseconds write_timeout{30000};  // one write stalled this long: the client is gone
};

class HttpServer {
 public:
  static Result<std::unique_ptr<HttpServer>> create(HttpServerConfig cfg, RouteHandler handler,
                                                    ErrorResponder on_error);
  ~HttpServer();

  uint16_t port() const;
  // Called (on an I/O thread) for each SIGINT/SIGTERM received while run() is active.
  void on_signal(std::function<void(int)> fn);
  // Runs the I/O threads; returns after stop().
  void run();
  // Stops accepting, closes idle keep-alive connections, lets answers in progress finish, and
  // returns once all connections are closed or `grace` has passed; then run() returns.
  void shutdown(std::chrono::milliseconds grace);
  int64_t n_connections() const;

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pg::server
