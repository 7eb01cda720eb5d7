// HttpServer over real loopback sockets: keep-alive, Expect: 100-continue, 413/431 from the
// parser limits, disconnect detection and the write timeout (both abandon the pending work, so
// the engine frees its KV), SSE chunking, and shutdown closing idle connections.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace pg::server {
namespace {

using namespace std::chrono_literals;

// A generation stand-in: `chunks` pieces of `chunk_bytes` (forever when chunks < 0), woken by a
// ticker thread as an engine would wake it.
class FakePending final : public PendingResponse {
 public:
  FakePending(bool streaming, int chunks, size_t chunk_bytes)
      : streaming_(streaming), chunks_(chunks), chunk_bytes_(chunk_bytes) {}
  ~FakePending() override {
    stop_ = true;
    if (ticker_.joinable()) ticker_.join();
  }
  void set_wake(std::function<void()> wake) override {
    ticker_ = std::thread([this, wake] {
      while (!stop_) {
        wake();
        std::this_thread::sleep_for(1ms);
      }
    });
  }
  Poll poll() override {
    Poll p;
    if (abandoned_) return p;
    if (chunks_ == 0) {
      p.done = true;
      p.data = streaming_ ? "" : "{\"ok\":true}";
      return p;
    }
    if (chunks_ > 0) --chunks_;
    p.data = streaming_ ? "data: " + std::string(chunk_bytes_, 'x') + "\n\n" : "";
    return p;
  }
  void abandon() override { abandoned_ = true; }
  bool streaming() const override { return streaming_; }

  std::atomic<bool> abandoned_{false};

 private:
  bool streaming_;
  int chunks_;
  size_t chunk_bytes_;
  std::atomic<bool> stop_{false};
  std::thread ticker_;
};

struct HttpServerTest : ::testing::Test {
  void start(HttpServerConfig cfg = {}) {
    cfg.port = 0;
    auto s = HttpServer::create(
        cfg,
        [this](const HttpRequest& req) {
          RouteResult r;
          last_body = req.body;
          if (req.path() == "/stream") r.pending = pending = std::make_shared<FakePending>(true, n_chunks, chunk_bytes);
          else if (req.path() == "/wait") r.pending = pending = std::make_shared<FakePending>(false, -1, 0);
          else r.response.body = "{\"path\":\"" + std::string(req.path()) + "\"}";
          return r;
        },
        [](int status, std::string_view message) {
          HttpResponse r;
          r.status = status;
          r.body = std::string(message);
          return r;
        });
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server = std::move(s).value();
    io = std::thread([this] { server->run(); });
  }
  void TearDown() override {
    if (server) server->shutdown(2000ms);
    if (io.joinable()) io.join();
  }
  int connect_client(int rcvbuf = 0) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server->port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
  }
  static void send_all(int fd, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += size_t(n);
    }
  }
  // Reads until `until` appears in what was read (or EOF / timeout).
  static std::string recv_until(int fd, std::string_view until) {
    std::string out;
    char buf[65536];
    while (out.find(until) == std::string::npos) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, size_t(n));
    }
    return out;
  }
  template <typename F>
  static bool eventually(F f, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (f()) return true;
      std::this_thread::sleep_for(5ms);
    }
    return f();
  }

  std::unique_ptr<HttpServer> server;
  std::thread io;
  std::shared_ptr<FakePending> pending;
  std::string last_body;
  int n_chunks = 3;
  size_t chunk_bytes = 10;
};

TEST_F(HttpServerTest, KeepAliveServesSeveralRequests) {
  start();
  int fd = connect_client();
  send_all(fd, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(recv_until(fd, "{\"path\":\"/a\"}").find("200 OK"), std::string::npos);
  send_all(fd, "GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(recv_until(fd, "{\"path\":\"/b\"}").find("{\"path\":\"/b\"}"), std::string::npos);
  ::close(fd);
}

TEST_F(HttpServerTest, ExpectContinue) {
  start();
  int fd = connect_client();
  send_all(fd, "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_NE(recv_until(fd, "\r\n\r\n").find("100 Continue"), std::string::npos);
  send_all(fd, "hello");
  EXPECT_NE(recv_until(fd, "/p\"}").find("200 OK"), std::string::npos);
  EXPECT_EQ(last_body, "hello");
  ::close(fd);
}

TEST_F(HttpServerTest, LimitsGive413And431) {
  HttpServerConfig cfg;
  cfg.body_limit_bytes = 1000;
  cfg.header_limit_bytes = 2000;
  start(cfg);
  int fd = connect_client();
  send_all(fd, "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + std::string(5000, 'a'));
  std::string r = recv_until(fd, "bytes");
  EXPECT_NE(r.find("413"), std::string::npos) << r;
  ::close(fd);
  fd = connect_client();
  send_all(fd, "GET /p HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4000, 'b') + "\r\n\r\n");
  r = recv_until(fd, "bytes");
  EXPECT_NE(r.find("431"), std::string::npos) << r;
  ::close(fd);
  fd = connect_client();  // still serving
  send_all(fd, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(recv_until(fd, "/ok\"}").find("200 OK"), std::string::npos);
  ::close(fd);
}

TEST_F(HttpServerTest, SseIsChunkedAndEnds) {
  start();
  int fd = connect_client();
  send_all(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = recv_until(fd, "0\r\n\r\n");
  EXPECT_NE(r.find("Content-Type: text/event-stream"), std::string::npos) << r;
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos) << r;
  EXPECT_NE(r.find("data: xxxxxxxxxx\n\n"), std::string::npos) << r;
  ::close(fd);
}

TEST_F(HttpServerTest, DisconnectWhileWaitingAbandonsTheWork) {
  start();
  int fd = connect_client();
  send_all(fd, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(eventually([&] { return pending != nullptr; }, 2000ms));
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(pending->abandoned_);
  ::close(fd);
  EXPECT_TRUE(eventually([&] { return pending->abandoned_.load(); }, 1000ms)) << "the client's close is noticed";
}

TEST_F(HttpServerTest, StalledReaderHitsTheWriteTimeout) {
  HttpServerConfig cfg;
  cfg.write_timeout = 300ms;
  n_chunks = -1;  // endless
  chunk_bytes = 256 << 10;
  start(cfg);
  int fd = connect_client(/*rcvbuf=*/4096);
  send_all(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");  // and never read
  ASSERT_TRUE(eventually([&] { return pending != nullptr; }, 2000ms));
  EXPECT_TRUE(eventually([&] { return pending->abandoned_.load(); }, 10000ms)) << "a stalled reader is dropped";
  ::close(fd);
}

TEST_F(HttpServerTest, ShutdownClosesIdleConnections) {
  start();
  int fd = connect_client();
  send_all(fd, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  recv_until(fd, "/a\"}");
  EXPECT_EQ(server->n_connections(), 1);
  const auto t0 = std::chrono::steady_clock::now();
  server->shutdown(2000ms);
  io.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1000ms) << "an idle keep-alive connection does not hold shutdown";
  char b;
  EXPECT_EQ(::recv(fd, &b, 1, 0), 0) << "the server closed it";
  ::close(fd);
  server.reset();
}

}  // namespace
}  // namespace pg::server
