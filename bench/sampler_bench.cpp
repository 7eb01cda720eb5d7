// CPU sampler on one DeepSeek-V3 logits row (vocab 129280): greedy, top-p 0.95 (the DeepSeek
// recommended setting, temperature 0.6), top-k 50, no filter, and with 20 top logprobs.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampler.h"

namespace {

constexpr int64_t kVocab = 129280;  // DeepSeek-V3 vocab_size

// Logits shaped like a language model's: a broad normal bulk plus a few strong candidates.
std::vector<float> make_logits(bool peaked) {
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> l(kVocab);
  for (float& v : l) v = normal(gen);
  if (peaked)
    for (int i = 0; i < 8; ++i) l[size_t(gen() % kVocab)] = 14.0f - float(i);
  return l;
}

void run(benchmark::State& state, const pg::SamplingParams& p, bool peaked) {
  const std::vector<float> logits = make_logits(peaked);
  pg::Sampler sampler;
  int64_t pos = 0;
  for (auto _ : state) {
    pg::SampledToken t = sampler.sample(logits, p, pg::RngPosition{7, 0, pos++});
    benchmark::DoNotOptimize(t);
  }
  state.SetItemsProcessed(state.iterations());  // items/s = sampled rows (tokens) per second
}

pg::SamplingParams params(double temperature, double top_p, int64_t top_k, int64_t top_logprobs = 0) {
  pg::SamplingParams p;
  p.temperature = temperature;
  p.top_p = top_p;
  p.top_k = top_k;
  p.logprobs = top_logprobs > 0;
  p.top_logprobs = top_logprobs;
  return p;
}

void BM_Greedy(benchmark::State& s) { run(s, params(0.0, 1.0, -1), true); }
void BM_TopP095_T06(benchmark::State& s) { run(s, params(0.6, 0.95, -1), s.range(0) != 0); }
void BM_TopP095_T1(benchmark::State& s) { run(s, params(1.0, 0.95, -1), s.range(0) != 0); }
void BM_TopK50(benchmark::State& s) { run(s, params(1.0, 1.0, 50), true); }
void BM_NoFilter(benchmark::State& s) { run(s, params(1.0, 1.0, -1), true); }
void BM_TopP095_Logprobs20(benchmark::State& s) { run(s, params(0.6, 0.95, -1, 20), true); }

BENCHMARK(BM_Greedy)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP095_T06)->Arg(0)->Arg(1)->ArgName("peaked")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP095_T1)->Arg(0)->Arg(1)->ArgName("peaked")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopK50)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_NoFilter)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP095_Logprobs20)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
