// Prometheus rendering: names under peregrine:, histogram buckets cumulative with +Inf, label
// escaping, counters by finish reason.
#include "server/metrics.h"

#include <gtest/gtest.h>

namespace pg::server {
namespace {

double sample(const std::string& text, const std::string& key) {
  const size_t p = text.find("\n" + key + " ");
  if (p == std::string::npos) return -1;
  return std::stod(text.substr(p + key.size() + 2));
}

TEST(Metrics, RendersEngineGaugesAndCounters) {
  ServerMetrics m;
  EngineStats e;
  e.running = 3;
  e.waiting = 2;
  e.kv_usage = 0.25;
  e.kv_blocks_used = 4;
  e.kv_blocks_total = 16;
  e.prompt_tokens_total = 100;
  e.generation_tokens_total = 50;
  e.preemptions_total = 7;
  e.prefix_cache_queries_total = 300;
  e.prefix_cache_hits_total = 224;
  const std::string t = m.render(e, "tiny");
  const std::string l = "{model_name=\"tiny\"}";
  EXPECT_EQ(sample(t, "peregrine:num_requests_running" + l), 3);
  EXPECT_EQ(sample(t, "peregrine:num_requests_waiting" + l), 2);
  EXPECT_EQ(sample(t, "peregrine:kv_cache_usage_perc" + l), 0.25);
  EXPECT_EQ(sample(t, "peregrine:kv_cache_blocks_used" + l), 4);
  EXPECT_EQ(sample(t, "peregrine:prompt_tokens_total" + l), 100);
  EXPECT_EQ(sample(t, "peregrine:generation_tokens_total" + l), 50);
  EXPECT_EQ(sample(t, "peregrine:num_preemptions_total" + l), 7);
  EXPECT_EQ(sample(t, "peregrine:prefix_cache_queries_total" + l), 300);
  EXPECT_EQ(sample(t, "peregrine:prefix_cache_hits_total" + l), 224);
  EXPECT_NE(t.find("# TYPE peregrine:num_preemptions_total counter\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE peregrine:time_to_first_token_seconds histogram\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE peregrine:inter_token_latency_seconds histogram\n"), std::string::npos);
}

TEST(Metrics, HistogramIsCumulative) {
  ServerMetrics m;
  m.observe_time_to_first_token(0.003);
  m.observe_time_to_first_token(0.05);
  m.observe_time_to_first_token(1000);
  const std::string t = m.render(EngineStats{}, "x");
  const std::string name = "peregrine:time_to_first_token_seconds";
  EXPECT_EQ(sample(t, name + "_bucket{model_name=\"x\",le=\"0.001\"}"), 0);
  EXPECT_EQ(sample(t, name + "_bucket{model_name=\"x\",le=\"0.005\"}"), 1);
  EXPECT_EQ(sample(t, name + "_bucket{model_name=\"x\",le=\"0.06\"}"), 2);
  EXPECT_EQ(sample(t, name + "_bucket{model_name=\"x\",le=\"160\"}"), 2);
  EXPECT_EQ(sample(t, name + "_bucket{model_name=\"x\",le=\"+Inf\"}"), 3);
  EXPECT_EQ(sample(t, name + "_count{model_name=\"x\"}"), 3);
  EXPECT_NEAR(sample(t, name + "_sum{model_name=\"x\"}"), 1000.053, 1e-9);
}

TEST(Metrics, FinishReasonsAndEscaping) {
  ServerMetrics m;
  m.request_finished("stop");
  m.request_finished("stop");
  m.request_finished("abort");
  const std::string t = m.render(EngineStats{}, "a\"b\\c\nd");
  const std::string l = "model_name=\"a\\\"b\\\\c\\nd\"";
  EXPECT_EQ(sample(t, "peregrine:request_success_total{" + l + ",finished_reason=\"stop\"}"), 2);
  EXPECT_EQ(sample(t, "peregrine:request_success_total{" + l + ",finished_reason=\"abort\"}"), 1);
  EXPECT_EQ(sample(t, "peregrine:request_success_total{" + l + ",finished_reason=\"length\"}"), 0);
}

TEST(Metrics, EveryLineIsACommentOrASample) {
  ServerMetrics m;
  m.observe_inter_token_latency(0.01);
  m.http_response(200);
  const std::string t = m.render(EngineStats{}, "x");
  size_t start = 0;
  while (start < t.size()) {
    const size_t nl = t.find('\n', start);
    ASSERT_NE(nl, std::string::npos) << "the text ends with a newline";
    const std::string line = t.substr(start, nl - start);
    if (line[0] != '#') {
      EXPECT_EQ(line.rfind("peregrine:", 0), 0u) << line;
      EXPECT_NE(line.find("} "), std::string::npos) << line;
    }
    start = nl + 1;
  }
}

}  // namespace
}  // namespace pg::server
