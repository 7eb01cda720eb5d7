// `peregrine bench MODEL_DIR`: per-user decode speed on the CPU backend — prefill a prompt of
// random token ids, then greedy-decode, timing each phase; median over repeats; table and JSON.
// With --speculative-tokens, MODEL_DIR runs through the Engine per draft depth (cmd_bench_spec.cpp);
// --synthetic hands over to the CUDA step timings (cuda_bench.cpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/spec_bench.h"
#include "model/deepseek_model.h"
#include "ops/cpu/simd.h"
#ifdef PG_WITH_CUDA
#include "cli/cuda_bench.h"
#endif

namespace pg::cli {
namespace {

// Per-draft acceptance assumed for the synthetic models' effective tokens/s: the embedded model's
// sampled rate at k = 1 (temperature 0.6, top-p 0.95: 54.5% over 5 English prompts; greedy reaches
// 87.0%, its continuations loop; bench/RESULTS.md, "MTP draft-chain positions"). A real model's
// rates come from `peregrine bench MODEL_DIR --speculative-tokens 0,1,2,3,adaptive`.
constexpr double kEmbeddedModelAcceptance = 0.545;

struct BenchOptions {
  std::string model_dir;
  std::string device = "auto";  // auto: cuda for --synthetic, else cpu
  std::string synthetic, dtype = "bf16", json_out;
  int64_t layers = 0, long_prefill = 8192;
  std::vector<int64_t> batches = {8, 16, 32, 64};
  double gpu_memory_utilization = 0.90;
  std::string kv_cache_dtype = "auto";  // cuda: auto | f32 | bf16
  bool no_graphs = false;
  int64_t prompt_tokens = 0;  // 0: 128 on the CPU, 1024 on CUDA (benchmarks.md's 1K context)
  int64_t decode_tokens = 0;  // 0: 64 on the CPU, 256 on CUDA
  int repeats = 3;
  int threads = 0;
  bool json = false;
  // MODEL_DIR: engine modes "0".."8" and "adaptive" (cli/spec_bench.h); --synthetic: the draft
  // depths k in 1..4 whose verify/draft step costs are timed.
  std::vector<std::string> speculative_tokens;
  double acceptance_rate = kEmbeddedModelAcceptance;
  // The engine modes only.
  std::string prompts_file;
  bool raw_prompts = false;
  double temperature = 0;
  int64_t seed = 1;
  std::string draft_cost;  // a number, or "auto"; empty: the engine's default
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int run_bench_cpu(const BenchOptions& o);

int run_bench(BenchOptions o) {
  const bool cuda = o.device == "cuda" || (o.device == "auto" && !o.synthetic.empty());
  if (o.model_dir.empty() == o.synthetic.empty()) {
    std::fprintf(stderr, "peregrine bench: give a MODEL_DIR or --synthetic NAME (one of them)\n");
    return 2;
  }
  if (!o.model_dir.empty() && !o.speculative_tokens.empty()) {
    SpecBenchOptions s;
    s.model_dir = o.model_dir, s.device = cuda ? "cuda" : "cpu", s.modes = o.speculative_tokens;
    s.prompts_file = o.prompts_file, s.raw_prompts = o.raw_prompts;
    s.decode_tokens = o.decode_tokens > 0 ? o.decode_tokens : 128;
    s.repeats = o.repeats, s.threads = o.threads, s.temperature = o.temperature, s.seed = o.seed;
    if (o.draft_cost == "auto") {
      s.draft_cost_auto = true;
    } else if (!o.draft_cost.empty()) {
      char* end = nullptr;
      const double c = std::strtod(o.draft_cost.c_str(), &end);
      if (*end != '\0' || !(c >= 0 && c <= 10)) {
        std::fprintf(stderr, "peregrine bench: --speculative-draft-cost takes a number in [0, 10] or 'auto'\n");
        return 2;
      }
      s.draft_cost = c;
    }
    s.gpu_memory_utilization = o.gpu_memory_utilization, s.graphs = !o.no_graphs, s.kv_cache_dtype = o.kv_cache_dtype;
    s.json = o.json, s.json_out = o.json_out;
    return run_spec_bench(s);
  }
  for (const std::string& k : o.speculative_tokens)
    if (k.size() != 1 || k[0] < '1' || k[0] > '4') {
      std::fprintf(stderr, "peregrine bench: --synthetic times draft depths k in 1..4, got '%s'\n", k.c_str());
      return 2;
    }
  if (o.prompt_tokens == 0) o.prompt_tokens = cuda ? 1024 : 128;
  if (o.decode_tokens == 0) o.decode_tokens = cuda ? 256 : 64;
  if (!cuda) {
    if (!o.synthetic.empty()) {
      std::fprintf(stderr, "peregrine bench: --synthetic runs on the GPU (--device cuda)\n");
      return 2;
    }
    return run_bench_cpu(o);
  }
#ifdef PG_WITH_CUDA
  CudaBenchOptions c;
  c.model_dir = o.model_dir, c.synthetic = o.synthetic, c.layers = o.layers, c.dtype = o.dtype;
  c.context = o.prompt_tokens, c.decode_tokens = o.decode_tokens, c.repeats = o.repeats, c.batches = o.batches;
  c.long_prefill = o.long_prefill, c.gpu_memory_utilization = o.gpu_memory_utilization, c.graphs = !o.no_graphs;
  c.json_path = o.json_out, c.json = o.json, c.kv_cache_dtype = o.kv_cache_dtype;
  for (const std::string& k : o.speculative_tokens) c.speculative_tokens.push_back(k[0] - '0');
  c.acceptance_rate = o.acceptance_rate;
  return run_cuda_bench(c);
#else
  std::fprintf(stderr, "peregrine bench: this build has no CUDA backend (configure with -DPEREGRINE_CUDA=ON)\n");
  return 2;
#endif
}

int run_bench_cpu(const BenchOptions& o) {
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
  nlohmann::json j = {{"model", o.model_dir}, {"device", "cpu"}, {"cpu_loops", ops::cpu::simd_level()}, {"threads", pool.size()},
                      {"prompt_tokens", o.prompt_tokens}, {"decode_tokens", o.decode_tokens},
                      {"repeats", o.repeats}, {"prefill_tokens_per_s", prefill_tps},
                      {"decode_tokens_per_s", decode_tps}, {"decode_ms_per_token", 1e3 * dc / double(o.decode_tokens)}};
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("model            %s\n", o.model_dir.c_str());
    std::printf("device           cpu (%s loops), %d threads\n", ops::cpu::simd_level(), pool.size());
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
  app->add_option("model_dir", opts->model_dir, "Hugging Face model folder")->check(CLI::ExistingDirectory);
  app->add_option("--device", opts->device, "cpu | cuda (default: cuda for --synthetic, else cpu)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app->add_option("--synthetic", opts->synthetic,
                  "random weights at a real model's shapes, made on the GPU: moonlight-16b-a3b, deepseek-v2-lite, "
                  "deepseek-v3");
  app->add_option("--layers", opts->layers, "synthetic: keep the first N layers")->check(CLI::PositiveNumber);
  app->add_option("--dtype", opts->dtype, "synthetic weights: bf16 | fp8 | nvfp4 (projections and experts)")
      ->check(CLI::IsMember({"bf16", "fp8", "nvfp4"}));
  app->add_option("--batches", opts->batches, "cuda: decode throughput at these batch sizes")->delimiter(',');
  app->add_option("--long-prefill", opts->long_prefill, "cuda: also time a prefill of this many tokens (0: no)");
  app->add_option("--gpu-memory-utilization", opts->gpu_memory_utilization, "cuda: share of GPU memory to use")
      ->check(CLI::Range(0.05, 0.99));
  app->add_flag("--no-graphs", opts->no_graphs, "cuda: launch kernels one by one (no CUDA graphs)");
  app->add_option("--kv-cache-dtype", opts->kv_cache_dtype, "cuda: the latent KV cache's values (auto: f32)")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
  app->add_option("--json-out", opts->json_out, "also write the JSON report to this file (cuda, speculation)");
  app->add_option("--prompt-tokens,--context", opts->prompt_tokens, "prompt length (cuda default 1024)")
      ->check(CLI::PositiveNumber);
  app->add_option("--decode-tokens", opts->decode_tokens, "tokens to generate")->check(CLI::PositiveNumber);
  app->add_option("--repeats", opts->repeats, "runs; the median is reported")->check(CLI::PositiveNumber);
  app->add_option("--threads", opts->threads, "CPU threads (0: all)");
  app->add_flag("--json", opts->json, "print JSON");
  app->add_option("--speculative-tokens", opts->speculative_tokens,
                  "MODEL_DIR: run the engine per mode, one request at a time, over natural-language prompts "
                  "(e.g. 0,1,2,3,adaptive; 0: no speculation; adaptive: 1..the largest k); --synthetic: time "
                  "verify steps of 1 + k tokens and k chained MTP draft steps at batch 1, per k in 1..4")
      ->delimiter(',');
  app->add_option("--prompts", opts->prompts_file,
                  "speculation: prompts file, one per line (default: 8 built-in English prompts)")
      ->check(CLI::ExistingFile);
  app->add_flag("--raw-prompts", opts->raw_prompts, "speculation: no chat template even if the model has one");
  app->add_option("--temperature", opts->temperature, "speculation: 0 = greedy (outputs must agree across modes)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--seed", opts->seed, "speculation, sampled: prompt i is seeded seed + i in every mode");
  app->add_option("--speculative-draft-cost", opts->draft_cost,
                  "speculation: one more draft's cost relative to a decode step, for the adaptive depth "
                  "(default: the backend's, 0.25 on a GPU and 0.75 on the CPU; auto: fitted from the fixed k's step "
                  "times)");
  app->add_option("--acceptance-rate", opts->acceptance_rate,
                  "cuda: per-draft acceptance for the effective tokens/s of --speculative-tokens (default: the "
                  "embedded model's measured 0.564)")
      ->check(CLI::Range(0.0, 1.0));
  return {app, [opts] { return run_bench(*opts); }};
}

}  // namespace pg::cli
