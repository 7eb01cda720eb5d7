// Server metrics in the Prometheus text exposition format (version 0.0.4). Names follow vLLM's
// (`vllm:num_requests_running` ...) under a `peregrine:` prefix, so existing dashboards map 1:1.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace pg::server {

// A cumulative histogram with fixed upper bounds (seconds). Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends `# HELP`, `# TYPE` and the _bucket/_sum/_count samples of `name`.
  void render(std::string& out, std::string_view name, std::string_view help, std::string_view labels) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last one is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What the HTTP side measures itself; the engine's gauges and counters come from EngineStats.
class ServerMetrics {
 public:
  ServerMetrics();
  void observe_time_to_first_token(double seconds) { ttft_.observe(seconds); }
  void observe_inter_token_latency(double seconds) { itl_.observe(seconds); }
  void observe_request_latency(double seconds) { e2e_.observe(seconds); }
  // One finished generation (one choice), by finish_reason: stop, length, abort, error, tool_calls.
  void request_finished(std::string_view finish_reason);
  // One HTTP request answered, by status code.
  void http_response(int status);

  std::string render(const EngineStats& engine, std::string_view model_name) const;

 private:
  Histogram ttft_, itl_, e2e_;
  mutable std::mutex mu_;
  std::map<std::string, uint64_t, std::less<>> finished_;
  std::map<int, uint64_t> http_;
};

// `s` escaped for a Prometheus label value (backslash, double quote, newline).
std::string prometheus_escape(std::string_view s);

}  // namespace pg::server
