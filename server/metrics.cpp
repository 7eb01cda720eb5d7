// Prometheus text rendering of the server's and the engine's metrics (see metrics.h).
#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace pg::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t idx = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  std::lock_guard<std::mutex> lk(mu_);
  ++counts_[idx];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, std::string_view name, std::string_view help,
                       std::string_view labels) const {
  std::lock_guard<std::mutex> lk(mu_);
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, bounds_[i], cumulative);
  }
  cumulative += counts_.back();
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, cumulative);
  out += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, sum_, name, labels, count_);
}

// Bucket bounds in seconds. Time to first token spans a millisecond (a warm tiny model) to
// minutes (a long prefill queued behind others); inter-token latency spans 1 ms to seconds.
ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
             40.0, 80.0, 160.0}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
            10.0}),
      e2e_({0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
            240.0, 480.0}) {}

void ServerMetrics::request_finished(std::string_view finish_reason) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = finished_.find(finish_reason);
  if (it == finished_.end()) it = finished_.emplace(std::string(finish_reason), 0).first;
  ++it->second;
}

void ServerMetrics::http_response(int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++http_[status];
}

std::string prometheus_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

static void scalar(std::string& out, std::string_view name, std::string_view type, std::string_view help,
                   std::string_view labels, double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{{{}}} {}\n", name, help, name, type, name, labels, value);
}

std::string ServerMetrics::render(const EngineStats& e, std::string_view model_name) const {
  const std::string labels = fmt::format("model_name=\"{}\"", prometheus_escape(model_name));
  std::string out;
  out.reserve(8192);
  scalar(out, "peregrine:num_requests_running", "gauge", "Number of requests in model execution batches.", labels,
         double(e.running));
  scalar(out, "peregrine:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", labels,
         double(e.waiting));
  scalar(out, "peregrine:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", labels,
         e.kv_usage);
  scalar(out, "peregrine:kv_cache_blocks_used", "gauge", "KV-cache blocks held by requests.", labels,
         double(e.kv_blocks_used));
  scalar(out, "peregrine:kv_cache_blocks_total", "gauge", "KV-cache blocks in the pool.", labels,
         double(e.kv_blocks_total));
  scalar(out, "peregrine:num_preemptions_total", "counter", "Cumulative number of preemptions.", labels,
         double(e.preemptions_total));
  scalar(out, "peregrine:prompt_tokens_total", "counter", "Number of prefill tokens processed.", labels,
         double(e.prompt_tokens_total));
  scalar(out, "peregrine:prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache at admission.", labels, double(e.prefix_cache_queries_total));
  scalar(out, "peregrine:prefix_cache_hits_total", "counter",
         "Prompt tokens found in the prefix cache (their KV reused, not computed).", labels,
         double(e.prefix_cache_hits_total));
  scalar(out, "peregrine:generation_tokens_total", "counter", "Number of generation tokens processed.", labels,
         double(e.generation_tokens_total));
  scalar(out, "peregrine:engine_steps_total", "counter", "Number of engine steps run.", labels,
         double(e.steps_total));
  scalar(out, "peregrine:spec_decode_num_drafts_total", "counter", "Number of verify steps with MTP drafts.", labels,
         double(e.spec_verify_steps_total));
  scalar(out, "peregrine:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens verified.", labels,
         double(e.spec_draft_tokens_total));
  scalar(out, "peregrine:spec_decode_num_accepted_tokens_total", "counter", "Number of draft tokens accepted.",
         labels, double(e.spec_accepted_tokens_total));
  ttft_.render(out, "peregrine:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels);
  itl_.render(out, "peregrine:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", labels);
  e2e_.render(out, "peregrine:e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds.",
              labels);
  std::lock_guard<std::mutex> lk(mu_);
  out += "# HELP peregrine:request_success_total Count of finished requests by finish reason.\n"
         "# TYPE peregrine:request_success_total counter\n";
  for (std::string_view reason : {"stop", "length", "abort", "tool_calls", "error"}) {
    auto it = finished_.find(reason);
    out += fmt::format("peregrine:request_success_total{{{},finished_reason=\"{}\"}} {}\n", labels, reason,
                       it == finished_.end() ? 0 : it->second);
  }
  out += "# HELP peregrine:http_responses_total Count of HTTP responses by status code.\n"
         "# TYPE peregrine:http_responses_total counter\n";
  for (const auto& [status, count] : http_)
    out += fmt::format("peregrine:http_responses_total{{{},status=\"{}\"}} {}\n", labels, status, count);
  return out;
}

}  // namespace pg::server
