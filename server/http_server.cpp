// HTTP/1.1 server on Boost.Beast + Asio C++20 coroutines (see http_server.h). The only file that
// includes Beast: each connection is one coroutine on its own strand; timeouts race the I/O
// against a timer; a pending generation wakes its connection through a posted timer cancel.
#include "server/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <map>
#include <mutex>
#include <thread>

namespace pg::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using namespace asio::experimental::awaitable_operators;
using error_code = boost::system::error_code;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

namespace {

struct Conn {
  explicit Conn(tcp::socket s) : sock(std::move(s)) {}
  tcp::socket sock;
  bool idle = true;  // waiting for the next request (strand only)
};

// Lets engine threads wake a connection while the io_context lives, and never after.
struct WakeGuard {
  std::mutex mu;
  bool alive = true;
};

// Runs `op` (an awaitable yielding a tuple) against a timer; nullopt when the timer won.
template <typename T>
awaitable<std::optional<T>> timed(awaitable<T> op, std::chrono::milliseconds limit) {
  asio::steady_timer timer(co_await asio::this_coro::executor, limit);
  auto res = co_await (std::move(op) || timer.async_wait(kTuple));
  if (res.index() == 0) co_return std::get<0>(std::move(res));
  co_return std::nullopt;
}

bool is_disconnect(const error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::operation_aborted || ec == asio::error::broken_pipe || ec == asio::error::bad_descriptor;
}

}  // namespace

struct HttpServer::Impl {
  HttpServerConfig cfg;
  RouteHandler handler;
  ErrorResponder on_error;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::signal_set signals{ioc, SIGINT, SIGTERM};
  std::function<void(int)> signal_fn;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> n_conn{0};
  std::shared_ptr<WakeGuard> wake_guard = std::make_shared<WakeGuard>();
  std::mutex mu;
  uint64_t next_conn_id = 0;
  std::map<uint64_t, std::weak_ptr<Conn>> conns;

  ~Impl() {
    std::lock_guard<std::mutex> lk(wake_guard->mu);
    wake_guard->alive = false;
  }

  awaitable<void> accept_loop();
  awaitable<void> session(std::shared_ptr<Conn> c);
  awaitable<void> serve(Conn& c);
  awaitable<bool> write_plain(Conn& c, const HttpResponse& r, unsigned version, bool keep_alive);
  awaitable<bool> drive(Conn& c, PendingResponse& p, const HttpResponse& head, unsigned version, bool keep_alive);
  void arm_signals();
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

Result<std::unique_ptr<HttpServer>> HttpServer::create(HttpServerConfig cfg, RouteHandler handler,
                                                       ErrorResponder on_error) {
  auto impl = std::make_unique<Impl>();
  impl->cfg = std::move(cfg);
  impl->handler = std::move(handler);
  impl->on_error = std::move(on_error);
  error_code ec;
  tcp::resolver resolver(impl->ioc);
  auto endpoints = resolver.resolve(impl->cfg.host, std::to_string(impl->cfg.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty())
    return invalid_argument("cannot resolve --host '{}': {}", impl->cfg.host, ec ? ec.message() : "no address");
  const tcp::endpoint ep = endpoints.begin()->endpoint();
  auto& a = impl->acceptor;
  if (a.open(ep.protocol(), ec); ec) return io_error("socket: {}", ec.message());
  if (a.set_option(asio::socket_base::reuse_address(true), ec); ec) return io_error("SO_REUSEADDR: {}", ec.message());
  if (a.bind(ep, ec); ec)
    return io_error("cannot listen on {}:{}: {}", impl->cfg.host, impl->cfg.port, ec.message());
  if (a.listen(asio::socket_base::max_listen_connections, ec); ec) return io_error("listen: {}", ec.message());
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

uint16_t HttpServer::port() const {
  error_code ec;
  auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

void HttpServer::on_signal(std::function<void(int)> fn) { impl_->signal_fn = std::move(fn); }

int64_t HttpServer::n_connections() const { return impl_->n_conn.load(); }

void HttpServer::Impl::arm_signals() {
  signals.async_wait([this](const error_code& ec, int sig) {
    if (ec) return;
    if (signal_fn) signal_fn(sig);
    arm_signals();
  });
}

void HttpServer::run() {
  Impl& m = *impl_;
  auto guard = asio::make_work_guard(m.ioc);
  m.arm_signals();
  asio::co_spawn(m.ioc, m.accept_loop(), asio::detached);
  std::vector<std::thread> extra;
  for (int i = 1; i < std::max(1, m.cfg.n_threads); ++i) extra.emplace_back([&m] { m.ioc.run(); });
  m.ioc.run();
  for (auto& t : extra) t.join();
}

void HttpServer::shutdown(std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  asio::post(m.ioc, [&m] {
    m.stopping = true;
    error_code ec;
    m.acceptor.close(ec);
    m.signals.cancel(ec);
    std::lock_guard<std::mutex> lk(m.mu);
    for (auto& [id, weak] : m.conns) {
      auto c = weak.lock();
      if (!c) continue;
      asio::post(c->sock.get_executor(), [c] {
        error_code ec2;
        if (c->idle) c->sock.close(ec2);
      });
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (m.n_conn.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  m.ioc.stop();
}

awaitable<void> HttpServer::Impl::accept_loop() {
  while (!stopping) {
    auto [ec, sock] = co_await acceptor.async_accept(asio::make_strand(ioc), kTuple);
    if (ec) {
      if (stopping || ec == asio::error::operation_aborted) break;
      continue;  // e.g. EMFILE or a connection reset before accept: keep serving
    }
    error_code ignored;
    sock.set_option(tcp::no_delay(true), ignored);
    auto c = std::make_shared<Conn>(std::move(sock));
    auto ex = c->sock.get_executor();
    asio::co_spawn(ex, session(std::move(c)), asio::detached);
  }
}

awaitable<void> HttpServer::Impl::session(std::shared_ptr<Conn> c) {
  ++n_conn;
  uint64_t id;
  {
    std::lock_guard<std::mutex> lk(mu);
    id = next_conn_id++;
    conns[id] = c;
  }
  try {
    co_await serve(*c);
  } catch (...) {
    // Library code does not throw; anything here (bad_alloc) ends only this connection.
  }
  error_code ec;
  c->sock.shutdown(tcp::socket::shutdown_both, ec);
  c->sock.close(ec);
  {
    std::lock_guard<std::mutex> lk(mu);
    conns.erase(id);
  }
  --n_conn;
}

static std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

awaitable<bool> HttpServer::Impl::write_plain(Conn& c, const HttpResponse& r, unsigned version, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), version};
  res.set(http::field::server, "peregrine");
  res.set(http::field::content_type, r.content_type);
  for (const auto& [k, v] : r.headers) res.set(k, v);
  res.body() = r.body;
  res.keep_alive(keep_alive);
  res.prepare_payload();
  auto w = co_await timed(http::async_write(c.sock, res, kTuple), cfg.write_timeout);
  co_return w && !std::get<0>(*w);
}

awaitable<void> HttpServer::Impl::serve(Conn& c) {
  beast::flat_buffer buf;
  while (!stopping) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(cfg.header_limit_bytes);
    parser.body_limit(cfg.body_limit_bytes);
    c.idle = true;
    auto hr = co_await timed(http::async_read_header(c.sock, buf, parser, kTuple), cfg.idle_timeout);
    c.idle = false;
    if (!hr) co_return;  // idle too long
    error_code ec = std::get<0>(*hr);
    if (!ec && !parser.is_done()) {
      if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        auto w = co_await timed(asio::async_write(c.sock, asio::buffer(kContinue), kTuple), cfg.write_timeout);
        if (!w || std::get<0>(*w)) co_return;
      }
      auto br = co_await timed(http::async_read(c.sock, buf, parser, kTuple), cfg.idle_timeout);
      if (!br) co_return;
      ec = std::get<0>(*br);
    }
    if (ec) {
      if (is_disconnect(ec) || stopping) co_return;
      int status = 400;
      std::string message = "malformed HTTP request: " + ec.message();
      if (ec == http::error::header_limit) {
        status = 431;
        message = fmt::format("request headers are larger than the limit of {} bytes", cfg.header_limit_bytes);
      } else if (ec == http::error::body_limit) {
        status = 413;
        message = fmt::format("request body is larger than the limit of {} bytes", cfg.body_limit_bytes);
      }
      co_await write_plain(c, on_error(status, message), 11, false);
      co_return;
    }

    auto& msg = parser.get();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    for (const auto& f : msg) req.headers.emplace_back(lower(f.name_string()), std::string(f.value()));
    req.body = std::move(msg.body());
    const unsigned version = msg.version();
    const bool keep_alive = msg.keep_alive();

    RouteResult result;
    try {
      result = handler(req);
    } catch (...) {
      result.response = on_error(500, "internal error while handling the request");
      result.pending.reset();
    }
    bool ok;
    if (result.pending)
      ok = co_await drive(c, *result.pending, result.response, version, keep_alive && !stopping);
    else
      ok = co_await write_plain(c, result.response, version, keep_alive && !stopping);
    if (!ok || !keep_alive) co_return;
  }
}

// Streams (or waits for) a pending generation; false when the connection must close.
awaitable<bool> HttpServer::Impl::drive(Conn& c, PendingResponse& p, const HttpResponse& head, unsigned version,
                                        bool keep_alive) {
  auto ex = co_await asio::this_coro::executor;
  auto timer = std::make_shared<asio::steady_timer>(ex);
  std::weak_ptr<asio::steady_timer> weak_timer = timer;
  p.set_wake([ex, weak_timer, guard = wake_guard] {
    std::lock_guard<std::mutex> lk(guard->mu);
    if (!guard->alive) return;
    asio::post(ex, [weak_timer] {
      if (auto t = weak_timer.lock()) t->cancel();
    });
  });

  // Disconnect watch: the socket turning readable with nothing to read means the peer closed.
  auto gone = std::make_shared<bool>(false);
  auto watch_ptr = std::make_shared<std::function<void(const error_code&)>>();
  *watch_ptr = [&sock = c.sock, gone, weak_timer, w = std::weak_ptr(watch_ptr)](const error_code& ec) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      char byte;
      const ssize_t n = ::recv(sock.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) return;  // a pipelined request, not a disconnect
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (auto again = w.lock()) sock.async_wait(tcp::socket::wait_read, *again);
        return;
      }
    }
    *gone = true;
    if (auto t = weak_timer.lock()) t->cancel();
  };
  c.sock.async_wait(tcp::socket::wait_read, *watch_ptr);

  const bool streaming = p.streaming();
  std::optional<http::response<http::empty_body>> res;
  std::optional<http::response_serializer<http::empty_body>> sr;
  if (streaming) {
    res.emplace(static_cast<http::status>(head.status), version);
    res->set(http::field::server, "peregrine");
    res->set(http::field::content_type, "text/event-stream");
    res->set(http::field::cache_control, "no-cache");
    for (const auto& [k, v] : head.headers) res->set(k, v);
    res->keep_alive(keep_alive);
    res->chunked(true);
    sr.emplace(*res);
    auto w = co_await timed(http::async_write_header(c.sock, *sr, kTuple), cfg.write_timeout);
    if (!w || std::get<0>(*w)) {
      p.abandon();
      co_return false;
    }
  }
  bool ok = true;
  while (true) {
    PendingResponse::Poll out = p.poll();
    if (streaming && !out.data.empty()) {
      auto w = co_await timed(asio::async_write(c.sock, http::make_chunk(asio::buffer(out.data)), kTuple),
                              cfg.write_timeout);
      if (!w || std::get<0>(*w)) {  // stalled or gone: free the engine's KV now
        p.abandon();
        ok = false;
        break;
      }
    }
    if (out.done) {
      if (streaming) {
        auto w = co_await timed(asio::async_write(c.sock, http::make_chunk_last(), kTuple), cfg.write_timeout);
        ok = w && !std::get<0>(*w);
      } else {
        HttpResponse r = head;
        r.status = out.status;
        r.body = std::move(out.data);
        ok = co_await write_plain(c, r, version, keep_alive);
      }
      break;
    }
    if (*gone) {
      p.abandon();
      ok = false;
      break;
    }
    // Woken early by the engine (the timer is cancelled); the period is only a safety net.
    timer->expires_after(std::chrono::seconds(1));
    co_await timer->async_wait(kTuple);
  }
  error_code ec;
  c.sock.cancel(ec);  // ends the disconnect watch
  watch_ptr.reset();
  co_return ok;
}

}  // namespace pg::server
