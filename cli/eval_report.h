// The quality comparison behind `peregrine eval` and `peregrine quantize --calib`: a model (e.g.
// quantized) against a higher-precision reference on the same text (benchmarks.md, "Quality").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace pg {
class Tokenizer;
}

namespace pg::cli {

struct EvalOptions {
  std::string model_dir, reference_dir, text_path;
  std::string device = "auto";
  int64_t generations = 4;
  int64_t max_tokens = 8192;  // text tokens taken from the file, in all
  int64_t context = 512;      // tokens per window (BOS included); cut to the models' context
  std::string log_prefix = "peregrine eval";  // progress lines on stderr: "<prefix>: window 1/3 done"
  // "e4m3": the model under test's NVFP4 projections and experts take their inputs rounded to e4m3
  // with an f32 scale per token (DeepseekModel::set_e4m3_activations: a W4A8 quality probe, CPU
  // only); "f32": as loaded.
  std::string activations = "f32";
  // The model under test's latent KV cache (auto | f32 | bf16: RunnerOptions::kv_cache_dtype); the
  // reference's is f32.
  std::string kv_cache_dtype = "auto";
};

// A text's teacher-forced windows, as eval and GPTQ's calibration take them: its tokens (plain text:
// added tokens are not special), the first max_tokens, cut into windows of `context` tokens that
// each start with BOS when the tokenizer adds one; a last window of one token is dropped.
// Errors: context < 2, the tokenizer's, and a text of fewer than 2 tokens ("too short").
Result<std::vector<std::vector<int32_t>>> text_windows(const Tokenizer& tok, const std::string& text, int64_t context,
                                                       int64_t max_tokens);

// Per-token KL(ref || model), top-1 agreement, perplexity of both on teacher-forced windows of the
// text, and where greedy generations of the two first diverge. Returns the report:
//   {model, reference, text, device {model, reference}, context, windows, tokens_evaluated,
//    activations, kl {mean, median, p99, max} (nats), top1_agreement_pct, perplexity {model, reference, delta},
//    generation {prompt_tokens, generated_tokens, runs [{window, first_divergence|null}],
//                mean_first_divergence|null}}
// Errors: InvalidArgument for bad options or an unusable text (empty, too short, vocabularies
// that differ), the loaders' errors otherwise.
Result<nlohmann::json> run_eval(EvalOptions o);

// The report as the table `peregrine eval` prints on stdout.
void print_eval_report(const nlohmann::json& report);

}  // namespace pg::cli
