// `peregrine eval MODEL_DIR --reference REF_DIR --text FILE`: a model (e.g. quantized) against a
// higher-precision reference on the same text (benchmarks.md, "Quality"): per-token KL(ref || model),
// top-1 agreement, perplexity of both, and where greedy generations of the two first diverge.
// The evaluation itself lives in eval_report.h (shared with `peregrine quantize --calib`).
#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "cli/eval_report.h"

namespace pg::cli {
namespace {

struct EvalCommandOptions {
  EvalOptions eval;
  std::string json_out;
};

int fail(const Status& st) {
  std::fprintf(stderr, "peregrine eval: %s\n", st.to_string().c_str());
  return st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kOutOfRange ? 2 : 1;
}

int run_eval_command(const EvalCommandOptions& o) {
  auto report = run_eval(o.eval);
  if (!report.ok()) return fail(report.status());
  print_eval_report(*report);
  if (!o.json_out.empty()) {
    std::ofstream f(o.json_out);
    f << report->dump(2) << "\n";
    if (!f) return fail(io_error("cannot write --json-out {}", o.json_out));
  }
  return 0;
}

}  // namespace

Command add_eval(CLI::App& root) {
  auto o = std::make_shared<EvalCommandOptions>();
  CLI::App* app = root.add_subcommand("eval", "Compare a model against a higher-precision reference on a text");
  app->add_option("model_dir", o->eval.model_dir, "the model under test (Hugging Face folder; its tokenizer is used)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app->add_option("--reference", o->eval.reference_dir, "the reference model folder (same vocabulary)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app->add_option("--text", o->eval.text_path, "UTF-8 text file to evaluate on")->required();
  app->add_option("--generations", o->eval.generations, "greedy continuations compared (0: none)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--max-tokens", o->eval.max_tokens, "text tokens evaluated at most")->check(CLI::PositiveNumber);
  app->add_option("--context", o->eval.context, "tokens per window (the models' context at most)")
      ->check(CLI::PositiveNumber);
  app->add_option("--device", o->eval.device, "auto (cuda when a GPU is present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app->add_option("--activations", o->eval.activations,
                  "f32, or e4m3: the model's NVFP4 projections take e4m3 inputs with a scale per token "
                  "(a W4A8 quality probe; CPU only)")
      ->check(CLI::IsMember({"f32", "e4m3"}));
  app->add_option("--kv-cache-dtype", o->eval.kv_cache_dtype,
                  "the model under test's latent KV cache: f32 or bf16 (the reference's is f32)")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
  app->add_option("--json-out", o->json_out, "write the report as JSON to this file");
  return {app, [o] { return run_eval_command(*o); }};
}

}  // namespace pg::cli
