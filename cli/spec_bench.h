// `peregrine bench MODEL_DIR --speculative-tokens 0,1,2,3,adaptive`: speculation end to end through
// the real Engine, one request at a time (the per-user figure), per draft-depth mode. Issue 7.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg::cli {

struct SpecBenchOptions {
  std::string model_dir;
  std::string device = "cpu";           // cpu | cuda (the same runners as generate and serve)
  std::vector<std::string> modes;       // "0" (no speculation) .. "8", "adaptive" (1..the largest k given)
  std::string prompts_file;             // one prompt per line; empty: the built-in English prompts
  bool raw_prompts = false;             // no chat template even when the model has one
  int64_t decode_tokens = 128;          // generated per prompt (EOS ignored)
  int repeats = 3;                      // passes over the prompts; the median pass is reported
  int threads = 0;                      // CPU threads (0: all)
  double temperature = 0;               // 0: greedy, and the outputs must agree across modes
  int64_t seed = 1;                     // sampled: prompt i uses seed + i in every mode
  std::optional<double> draft_cost;     // EngineConfig::speculative_draft_cost (unset: the engine's)
  bool draft_cost_auto = false;         // adaptive: the cost fitted from this pass's fixed-k steps
  double gpu_memory_utilization = 0.90;
  std::string kv_cache_dtype = "auto";  // cuda: auto | f32 | bf16
  bool graphs = true;
  bool json = false;                    // print JSON instead of the table
  std::string json_out;                 // also write the JSON report here
};

int run_spec_bench(const SpecBenchOptions& o);

}  // namespace pg::cli
