// `peregrine bench MODEL_DIR`: per-user decode speed on the CPU backend — prefill a prompt of
// random token ids, then greedy-decode, timing each phase; median over repeats; table and JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/deepseek_model.h"

namespace pg::cli {
namespace {

struct BenchOptions {
  std::string model_dir;
  int64_t prompt_tokens = 128;
  int64_t decode_tokens = 64;
  int repeats = 3;
  int threads = 0;
  bool json = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int run_bench(const BenchOptions& o) {
  auto loaded = DeepseekModel::load(o.model_dir);
  if (!loaded.ok()) {
    std::fprintf(stderr, "peregrine bench: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  auto model = std::move(loaded).value();
  ThreadPool pool(o.threads);
  model->set_thread_pool(&pool);
  const ModelConfig& c = model->config();
  const int64_t total = o.prompt_tokens + o.decode_tokens;
  if (total > c.max_position_embeddings) {
    std::fprintf(stderr, "peregrine bench: prompt + decode = %lld tokens exceeds the context of %lld\n",
                 (long long)total, (long long)c.max_position_embeddings);
    return 2;
  }
  const int64_t bs = 16, n_blocks = (total + bs - 1) / bs;
  std::mt19937 rng(1);
  std::vector<int32_t> prompt(size_t(o.prompt_tokens));
  for (auto& t : prompt) t = int32_t(rng() % uint32_t(c.vocab_size));
  std::vector<double> prefill_s, decode_s;
  for (int rep = 0; rep < o.repeats; ++rep) {
    KvCache cache = model->make_cache(n_blocks, bs);
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    std::iota(table.begin(), table.end(), 0);
    StepOutput out;
    SeqStep s{prompt, 0, table, false};
    auto t0 = std::chrono::steady_clock::now();
    if (Status st = model->forward(std::span(&s, 1), cache, out); !st.ok()) {
      std::fprintf(stderr, "peregrine bench: %s\n", st.to_string().c_str());
      return 1;
    }
    auto t1 = std::chrono::steady_clock::now();
    std::vector<int32_t> tok(1);
    for (int64_t i = 0; i < o.decode_tokens; ++i) {
      tok[0] = int32_t(std::max_element(out.logits.begin(), out.logits.end()) - out.logits.begin());
      SeqStep d{tok, o.prompt_tokens + i, table, false};
      if (Status st = model->forward(std::span(&d, 1), cache, out); !st.ok()) {
        std::fprintf(stderr, "peregrine bench: %s\n", st.to_string().c_str());
        return 1;
      }
    }
    auto t2 = std::chrono::steady_clock::now();
    prefill_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    decode_s.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  const double pf = median(prefill_s), dc = median(decode_s);
  const double prefill_tps = double(o.prompt_tokens) / pf, decode_tps = double(o.decode_tokens) / dc;
  nlohmann::json j = {{"model", o.model_dir}, {"device", "cpu"}, {"threads", pool.size()},
                      {"prompt_tokens", o.prompt_tokens}, {"decode_tokens", o.decode_tokens},
                      {"repeats", o.repeats}, {"prefill_tokens_per_s", prefill_tps},
                      {"decode_tokens_per_s", decode_tps}, {"decode_ms_per_token", 1e3 * dc / double(o.decode_tokens)}};
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("model            %s\n", o.model_dir.c_str());
    std::printf("device           cpu, %d threads\n", pool.size());
    std::printf("prefill          %lld tokens: %.1f tokens/s (median of %d)\n", (long long)o.prompt_tokens, prefill_tps,
                o.repeats);
    std::printf("decode, batch 1  %lld tokens after the prompt: %.1f tokens/s (%.2f ms/token)\n",
                (long long)o.decode_tokens, decode_tps, 1e3 * dc / double(o.decode_tokens));
  }
  return 0;
}

}  // namespace

Command add_bench(CLI::App& root) {
  auto opts = std::make_shared<BenchOptions>();
  CLI::App* app = root.add_subcommand("bench", "Measure prefill and per-user decode speed");
  app->add_option("model_dir", opts->model_dir, "Hugging Face model folder")->required()->check(CLI::ExistingDirectory);
  app->add_option("--prompt-tokens", opts->prompt_tokens, "prompt length")->check(CLI::PositiveNumber);
  app->add_option("--decode-tokens", opts->decode_tokens, "tokens to generate")->check(CLI::PositiveNumber);
  app->add_option("--repeats", opts->repeats, "runs; the median is reported")->check(CLI::PositiveNumber);
  app->add_option("--threads", opts->threads, "CPU threads (0: all)");
  app->add_flag("--json", opts->json, "print JSON");
  return {app, [opts] { return run_bench(*opts); }};
}

}  // namespace pg::cli
