// `peregrine quantize SRC DST --format nvfp4`: a BF16 / F32 / DeepSeek FP8 checkpoint to NVIDIA
// ModelOpt NVFP4 (cli/quantize.h), with a progress bar, and with --calib a quality report of DST
// against SRC (the evaluation of `peregrine eval`, cli/eval_report.h).
#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "cli/eval_report.h"
#include "cli/progress.h"
#include "cli/quantize.h"
#include "core/thread_pool.h"
#include "formats/file_io.h"

namespace pg::cli {
namespace {

struct QuantizeCommandOptions {
  QuantizeOptions q;
  std::string calib, calib_device = "auto";
};

int fail(const Status& st) {
  std::fprintf(stderr, "peregrine quantize: %s\n", st.to_string().c_str());
  return st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kOutOfRange ? 2 : 1;
}

int run_quantize(const QuantizeCommandOptions& o) {
  // The text is checked before the long part, not after it.
  if (!o.calib.empty()) {
    auto text = read_file_to_string(o.calib);
    if (!text.ok()) return fail(invalid_argument("--calib: {}", text.status().message()));
    if (text->empty()) return fail(invalid_argument("--calib {}: the file is empty", o.calib));
  }
  std::optional<ProgressBar> bar;
  QuantizeCallbacks cb;
  cb.planned = [](const QuantizePlan& plan) {
    for (const std::string& w : plan.warnings) std::fprintf(stderr, "peregrine quantize: warning: %s\n", w.c_str());
  };
  cb.progress = [&](int64_t done, int64_t total, uint64_t bytes_done, uint64_t bytes_total) {
    if (!bar) bar.emplace("peregrine quantize", "tensors", total, bytes_total);
    bar->update(done, bytes_done);
  };
  auto res = quantize_checkpoint(o.q, cb);
  if (bar) bar->finish();
  if (!res.ok()) return fail(res.status());
  const QuantizePlan& plan = res->plan;
  std::fprintf(stderr,
               "peregrine quantize: wrote %s: %lld Linear weights in NVFP4, %zu shard%s, %s of tensors from %s "
               "(%.2fx smaller)\n",
               o.q.dst.c_str(), (long long)plan.n_quantized, res->shards.size(), res->shards.size() == 1 ? "" : "s",
               format_bytes(double(res->bytes_out)).c_str(), format_bytes(double(res->bytes_in)).c_str(),
               res->bytes_out > 0 ? double(res->bytes_in) / double(res->bytes_out) : 0.0);
  std::string excluded;
  for (const std::string& m : plan.exclude_modules) excluded += (excluded.empty() ? "" : ", ") + m;
  std::fprintf(stderr, "peregrine quantize: exclude_modules: %s\n", excluded.c_str());
  if (res->config_keeps_fp8)
    std::fprintf(stderr,
                 "peregrine quantize: note: %lld DeepSeek FP8 weights stay FP8 (excluded modules, MTP layer), so "
                 "config.json keeps its FP8 quantization_config to read them; hf_quant_config.json describes the "
                 "NVFP4 modules\n",
                 (long long)plan.n_fp8_kept);
  if (o.calib.empty()) return 0;

  if (o.q.threads > 0) ThreadPool::set_global_threads(o.q.threads);  // the CPU runner's pool, for the evaluation
  EvalOptions eo;
  eo.model_dir = o.q.dst.string();
  eo.reference_dir = o.q.src.string();
  eo.text_path = o.calib;
  eo.device = o.calib_device;
  eo.log_prefix = "peregrine quantize";
  auto report = run_eval(eo);
  if (!report.ok()) return fail(report.status().with_context("--calib evaluation of DST against SRC"));
  (*report)["quantization"] = {{"format", o.q.format},
                               {"mse", o.q.mse},
                               {"exclude_modules", plan.exclude_modules},
                               {"quantized_linears", plan.n_quantized}};
  const std::string text = report->dump(2) + "\n";
  const std::span<const uint8_t> part(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  if (Status st = write_file_atomic(o.q.dst / "quality_report.json", std::span(&part, 1)); !st.ok()) return fail(st);
  print_eval_report(*report);
  std::fprintf(stderr, "peregrine quantize: wrote %s\n", (o.q.dst / "quality_report.json").c_str());
  return 0;
}

}  // namespace

Command add_quantize(CLI::App& root) {
  auto o = std::make_shared<QuantizeCommandOptions>();
  CLI::App* app = root.add_subcommand(
      "quantize",
      "Quantize a BF16 / F32 / DeepSeek FP8 checkpoint to NVFP4 (NVIDIA ModelOpt layout, as nvidia/DeepSeek-R1-FP4).\n"
      "Quantized: every Linear of the decoder layers. Routed experts always; attention, dense MLPs and shared\n"
      "experts by default (--exclude '*self_attn*', '*shared_experts*' keeps them). Never: embeddings, norms,\n"
      "the router (mlp.gate), lm_head, the MTP layer(s). Weight-only: input_scale is written as 1.0.");
  app->add_option("SRC", o->q.src, "Hugging Face model folder (config.json + *.safetensors, single or sharded)")
      ->required();
  app->add_option("DST", o->q.dst, "new folder for the quantized model")->required();
  app->add_option("--format", o->q.format, "output format: nvfp4")->required();
  app->add_option("--exclude", o->q.exclude,
                  "keep modules matching this glob unquantized (repeatable; fnmatch on module names, e.g. "
                  "'*self_attn*', '*shared_experts*'); routed experts are always quantized")
      ->allow_extra_args(false);
  app->add_option("--calib", o->calib,
                  "after writing, evaluate DST against SRC on this text as `peregrine eval` does and write "
                  "DST/quality_report.json (NVFP4 here is weight-only: the text measures, it calibrates nothing)");
  app->add_option("--calib-device", o->calib_device, "device of the --calib evaluation: auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app->add_flag("--mse", o->q.mse, "search each block scale for the smallest squared error (slower)");
  app->add_option("--threads", o->q.threads, "CPU threads (0: all cores)")->check(CLI::NonNegativeNumber);
  app->add_option("--max-shard-size", o->q.max_shard_bytes, "largest output shard, e.g. 5GB, 500MB (default 5GB)")
      ->transform(CLI::AsSizeValue(true));
  app->add_flag("--force", o->q.force, "write into a non-empty DST (its *.safetensors are replaced)");
  return {app, [o] { return run_quantize(*o); }};
}

}  // namespace pg::cli
