// `peregrine quantize SRC DST --format nvfp4`: a BF16 / F32 / DeepSeek FP8 checkpoint to NVIDIA
// ModelOpt NVFP4 (cli/quantize.h), with a progress bar; --gptq rounds with GPTQ calibrated on the
// --calib text (cli/gptq.h); --calib writes a quality report of DST against SRC (the evaluation of
// `peregrine eval`, cli/eval_report.h) on that text or on --report-text.
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
  bool gptq = false;
  std::string report_text;  // the quality report's text (default: --calib's)
};

int fail(const Status& st) {
  std::fprintf(stderr, "peregrine quantize: %s\n", st.to_string().c_str());
  return st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kOutOfRange ? 2 : 1;
}

int run_quantize(const QuantizeCommandOptions& o) {
  if (o.gptq && o.calib.empty())
    return fail(invalid_argument("--gptq calibrates on the text of --calib: add --calib TEXT_FILE"));
  if (!o.report_text.empty() && o.calib.empty())
    return fail(invalid_argument("--report-text sets the text of --calib's quality report: add --calib TEXT_FILE"));
  // The texts are checked before the long part, not after it.
  for (const auto& [flag, path] : {std::pair{"--calib", o.calib}, std::pair{"--report-text", o.report_text}}) {
    if (path.empty()) continue;
    auto text = read_file_to_string(path);
    if (!text.ok()) return fail(invalid_argument("{}: {}", flag, text.status().message()));
    if (text->empty()) return fail(invalid_argument("{} {}: the file is empty", flag, path));
  }
  QuantizeOptions q = o.q;
  if (o.gptq) q.gptq_text = o.calib;
  std::optional<ProgressBar> bar;
  QuantizeCallbacks cb;
  cb.planned = [](const QuantizePlan& plan) {
    for (const std::string& w : plan.warnings) std::fprintf(stderr, "peregrine quantize: warning: %s\n", w.c_str());
  };
  cb.progress = [&](int64_t done, int64_t total, uint64_t bytes_done, uint64_t bytes_total) {
    if (!bar) bar.emplace("peregrine quantize", "tensors", total, bytes_total);
    bar->update(done, bytes_done);
  };
  cb.log = [&](const std::string& line) {
    if (bar) return bar->note("peregrine quantize: " + line);
    std::fprintf(stderr, "peregrine quantize: %s\n", line.c_str());
  };
  auto res = quantize_checkpoint(q, cb);
  if (bar) bar->finish();
  if (!res.ok()) return fail(res.status());
  const QuantizePlan& plan = res->plan;
  std::fprintf(stderr,
               "peregrine quantize: wrote %s: %lld Linear weights in NVFP4, %zu shard%s, %s of tensors from %s "
               "(%.2fx smaller)\n",
               o.q.dst.c_str(), (long long)plan.n_quantized, res->shards.size(), res->shards.size() == 1 ? "" : "s",
               format_bytes(double(res->bytes_out)).c_str(), format_bytes(double(res->bytes_in)).c_str(),
               res->bytes_out > 0 ? double(res->bytes_in) / double(res->bytes_out) : 0.0);
  if (res->gptq_passes > 0)
    std::fprintf(stderr,
                 "peregrine quantize: gptq: %lld calibration pass%s over %lld tokens of %s; damping up to %g of the "
                 "mean diagonal\n",
                 (long long)res->gptq_passes, res->gptq_passes == 1 ? "" : "es", (long long)res->gptq_tokens,
                 o.calib.c_str(), res->gptq_max_damp);
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
  eo.text_path = o.report_text.empty() ? o.calib : o.report_text;
  eo.device = o.calib_device;
  eo.log_prefix = "peregrine quantize";
  auto report = run_eval(eo);
  if (!report.ok()) return fail(report.status().with_context("--calib evaluation of DST against SRC"));
  (*report)["quantization"] = {{"format", o.q.format},
                               {"mse", o.q.mse},
                               {"method", o.gptq ? "gptq" : "round to nearest"},
                               {"calibration_text", o.gptq ? o.calib : std::string()},
                               {"gptq_damp", o.gptq ? o.q.gptq_damp : 0.0},
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
                  "calibration text: with --gptq the Linears' inputs on it steer the rounding; after writing, DST "
                  "is evaluated against SRC as `peregrine eval` does (on --report-text if given) into "
                  "DST/quality_report.json");
  app->add_flag("--gptq", o->gptq,
                "GPTQ: round each Linear a column at a time, moving the error onto the columns left, weighted by "
                "the Hessian of its inputs on the --calib text (best with --mse; the source model runs on the "
                "CPU: practical up to Moonlight / V2-Lite sizes on a many-core machine)");
  app->add_option("--gptq-damp", o->q.gptq_damp, "GPTQ's damping, a fraction of the Hessian's mean diagonal (default 0.1)")
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--gptq-memory", o->q.gptq_max_hessian_bytes,
                  "the Hessians of one GPTQ calibration pass at most, e.g. 8GB (more passes when the model's "
                  "exceed it; default 8GiB)")
      ->transform(CLI::AsSizeValue(false));
  app->add_option("--report-text", o->report_text,
                  "the text of --calib's quality report, when it should not be the calibration text");
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
