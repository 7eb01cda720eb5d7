// The evaluation behind `peregrine eval` and `peregrine quantize --calib` (eval_report.h): both
// models on the CPU or GPU runner, teacher-forced windows, greedy generations in lockstep.
#include "cli/eval_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>

#include "core/thread_pool.h"
#include "formats/file_io.h"
#include "model/deepseek_model.h"
#include "model/runner_factory.h"
#include "tokenizer/tokenizer.h"

namespace pg::cli {
namespace {

// The generation check: the prompt is the first kGenPrompt tokens of a window, then both models
// greedy-decode up to kGenTokens tokens.
constexpr int64_t kGenPrompt = 32;
constexpr int64_t kGenTokens = 128;
constexpr int64_t kBlockSize = 16;

// One model on its backend, with a KV cache for one sequence of up to max_len tokens.
struct Side {
  std::string dir;
  std::unique_ptr<ModelRunner> runner;
  std::vector<int32_t> block_table;  // blocks 0..n-1: every forward here is the only sequence
};

// Runs `tokens` at positions start_pos.. and returns the logits: [T, vocab] f32 with all_logits,
// else [1, vocab] (the last token's).
Result<std::vector<float>> forward(Side& s, std::span<const int32_t> tokens, int64_t start_pos, bool all_logits) {
  SeqStep step{tokens, start_pos, s.block_table, all_logits, false};
  StepOutput out;
  if (Status st = s.runner->forward(std::span(&step, 1), out); !st.ok()) return st.with_context(s.dir);
  return std::move(out.logits);
}

int32_t argmax(const float* x, int64_t n) { return int32_t(std::max_element(x, x + n) - x); }

// log(sum(exp(x))) in double, shifted by the max so no term overflows.
double log_sum_exp(const float* x, int64_t n) {
  const double m = *std::max_element(x, x + n);
  double s = 0;
  for (int64_t v = 0; v < n; ++v) s += std::exp(double(x[v]) - m);
  return m + std::log(s);
}

struct PositionStats {
  double kl = 0;  // KL(ref || model), nats
  bool agree = false;
  double nll_model = 0, nll_ref = 0;  // -log p(next token)
};

// One position: ref and model are [vocab] logits, `next` the token that follows in the text.
PositionStats compare_position(const float* ref, const float* model, int64_t vocab, int32_t next) {
  const double lse_r = log_sum_exp(ref, vocab), lse_m = log_sum_exp(model, vocab);
  double kl = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const double lr = double(ref[v]) - lse_r, lm = double(model[v]) - lse_m;
    kl += std::exp(lr) * (lr - lm);
  }
  PositionStats p;
  // KL >= 0; the rounding of a near-zero sum may leave a tiny negative.
  p.kl = std::max(0.0, kl);
  p.agree = argmax(ref, vocab) == argmax(model, vocab);
  p.nll_ref = lse_r - double(ref[next]);
  p.nll_model = lse_m - double(model[next]);
  return p;
}

// Nearest-rank quantile of sorted values, q in [0, 1].
double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const auto rank = int64_t(std::ceil(q * double(sorted.size())));
  return sorted[size_t(std::clamp<int64_t>(rank - 1, 0, int64_t(sorted.size()) - 1))];
}

// Greedy decoding of both models from the same prompt, in lockstep: the number of generated
// tokens equal before the first difference, or nullopt when all n_gen agree.
Result<std::optional<int64_t>> first_divergence(Side& model, Side& ref, std::span<const int32_t> prompt,
                                                int64_t n_gen, int64_t vocab) {
  PG_ASSIGN_OR_RETURN(std::vector<float> lm, forward(model, prompt, 0, false));
  PG_ASSIGN_OR_RETURN(std::vector<float> lr, forward(ref, prompt, 0, false));
  for (int64_t i = 0; i < n_gen; ++i) {
    const int32_t tm = argmax(lm.data(), vocab), tr = argmax(lr.data(), vocab);
    if (tm != tr) return std::optional<int64_t>(i);
    if (i + 1 == n_gen) break;
    const int64_t pos = int64_t(prompt.size()) + i;
    PG_ASSIGN_OR_RETURN(lm, forward(model, std::span(&tm, 1), pos, false));
    PG_ASSIGN_OR_RETURN(lr, forward(ref, std::span(&tr, 1), pos, false));
  }
  return std::optional<int64_t>();
}

}  // namespace

Result<std::vector<std::vector<int32_t>>> text_windows(const Tokenizer& tok, const std::string& text, int64_t context,
                                                       int64_t max_tokens) {
  if (context < 2) return invalid_argument("windows must hold at least 2 tokens, got {}", context);
  // Plain text: added tokens in it are not special. Each window starts with BOS when the
  // tokenizer adds one, as every sequence did in training.
  EncodeOptions eo;
  eo.parse_special = false;
  eo.add_bos = false;
  eo.add_eos = false;
  auto ids = tok.encode(text, eo);
  if (!ids.ok()) return ids.status();
  if (int64_t(ids->size()) > max_tokens) ids->resize(size_t(max_tokens));
  const std::optional<int32_t> bos = tok.add_bos_token() ? tok.bos_id() : std::nullopt;
  const int64_t per_window = context - (bos ? 1 : 0);
  std::vector<std::vector<int32_t>> windows;
  for (size_t i = 0; i < ids->size(); i += size_t(per_window)) {
    std::vector<int32_t> w;
    if (bos) w.push_back(*bos);
    w.insert(w.end(), ids->begin() + std::ptrdiff_t(i),
             ids->begin() + std::ptrdiff_t(std::min(ids->size(), i + size_t(per_window))));
    if (w.size() >= 2) windows.push_back(std::move(w));  // one token predicts nothing
  }
  if (windows.empty()) return invalid_argument("too short ({} tokens); at least 2 are needed", ids->size());
  return windows;
}

Result<nlohmann::json> run_eval(EvalOptions o) {
  if (o.context < 2) return invalid_argument("--context must be at least 2 tokens, got {}", o.context);
  if (o.activations != "f32" && o.activations != "e4m3")
    return invalid_argument("--activations must be f32 or e4m3, got '{}'", o.activations);
  if (o.activations == "e4m3" && o.device != "cpu")
    return invalid_argument("--activations e4m3 is emulated on the CPU only (no CUDA kernel takes e4m3 activations "
                            "yet): add --device cpu");
  auto text = read_file_to_string(o.text_path);
  if (!text.ok()) return text.status().with_context("--text");
  if (text->empty()) return invalid_argument("--text {}: the file is empty", o.text_path);
  auto tok = Tokenizer::load(o.model_dir);
  if (!tok.ok()) return tok.status();

  // Load both (memory-mapped, cheap) and check they can be compared before any upload to a GPU.
  auto model = DeepseekModel::load(o.model_dir);
  if (!model.ok()) return model.status().with_context(o.model_dir);
  auto ref = DeepseekModel::load(o.reference_dir);
  if (!ref.ok()) return ref.status().with_context(o.reference_dir);
  (*model)->set_e4m3_activations(o.activations == "e4m3");
  const int64_t vocab = (*model)->vocab_size();
  if ((*ref)->vocab_size() != vocab)
    return invalid_argument("vocabulary sizes differ: {} has {}, the reference {} has {}; eval compares "
                                 "distributions over the same vocabulary",
                                 o.model_dir, vocab, o.reference_dir, (*ref)->vocab_size());
  const int64_t max_pos =
      std::min((*model)->config().max_position_embeddings, (*ref)->config().max_position_embeddings);
  if (o.context > max_pos) {
    std::fprintf(stderr, "%s: --context %lld exceeds the models' context; using %lld\n", o.log_prefix.c_str(),
                 (long long)o.context, (long long)max_pos);
    o.context = max_pos;
  }

  auto windows_or = text_windows(*tok, *text, o.context, o.max_tokens);
  if (!windows_or.ok()) return windows_or.status().with_context("--text " + o.text_path);
  const std::vector<std::vector<int32_t>>& windows = *windows_or;

  const int64_t gen_len = std::clamp<int64_t>(max_pos - kGenPrompt, 0, kGenTokens);
  const int64_t n_gen_windows = gen_len > 0 ? std::min<int64_t>(o.generations, int64_t(windows.size())) : 0;
  const int64_t max_len = std::max(o.context, n_gen_windows > 0 ? kGenPrompt + gen_len : 0);
  RunnerOptions ro;
  ro.device = o.device;
  ro.max_num_seqs = 1;
  ro.max_num_batched_tokens = o.context;
  ro.max_model_len = max_len;
  ro.kv_block_size = kBlockSize;
  ro.kv_blocks = (max_len + kBlockSize - 1) / kBlockSize;  // one sequence: both models share a GPU
  Side sm{o.model_dir, nullptr, {}}, sr{o.reference_dir, nullptr, {}};
  for (auto [side, loaded] : {std::pair{&sm, &model}, std::pair{&sr, &ref}}) {
    ro.kv_cache_dtype = side == &sm ? o.kv_cache_dtype : "f32";
    auto runner = make_runner(std::move(*loaded).value(), ro);
    if (!runner.ok()) return runner.status().with_context(side->dir);
    side->runner = std::move(runner).value();
    side->block_table.resize(size_t(ro.kv_blocks));
    std::iota(side->block_table.begin(), side->block_table.end(), 0);
  }

  // Teacher-forced windows: position t of a window predicts token t + 1 of the same window.
  std::vector<double> kl;
  int64_t n_agree = 0;
  double nll_model = 0, nll_ref = 0;
  for (size_t w = 0; w < windows.size(); ++w) {
    const std::vector<int32_t>& win = windows[w];
    auto lm = forward(sm, win, 0, true);  // [T, vocab] f32
    if (!lm.ok()) return lm.status();
    auto lr = forward(sr, win, 0, true);  // [T, vocab] f32
    if (!lr.ok()) return lr.status();
    const int64_t n = int64_t(win.size()) - 1;
    std::vector<PositionStats> stats(static_cast<size_t>(n));
    ThreadPool::global().parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        stats[size_t(t)] = compare_position(lr->data() + t * vocab, lm->data() + t * vocab, vocab, win[size_t(t) + 1]);
    });
    for (const PositionStats& p : stats) {  // reduced in position order: independent of the threads
      kl.push_back(p.kl);
      n_agree += p.agree;
      nll_model += p.nll_model;
      nll_ref += p.nll_ref;
    }
    std::fprintf(stderr, "%s: window %zu/%zu done\n", o.log_prefix.c_str(), w + 1, windows.size());
  }

  std::vector<std::optional<int64_t>> divergence;
  for (int64_t g = 0; g < n_gen_windows; ++g) {
    const auto& win = windows[size_t(g)];
    const auto prompt = std::span(win).first(size_t(std::min<int64_t>(kGenPrompt, int64_t(win.size()))));
    auto d = first_divergence(sm, sr, prompt, gen_len, vocab);
    if (!d.ok()) return d.status();
    divergence.push_back(*d);
    std::fprintf(stderr, "%s: generation %lld/%lld done\n", o.log_prefix.c_str(), (long long)g + 1,
                 (long long)n_gen_windows);
  }

  const auto n_eval = int64_t(kl.size());
  const double kl_mean = std::accumulate(kl.begin(), kl.end(), 0.0) / double(n_eval);
  std::vector<double> sorted = kl;
  std::sort(sorted.begin(), sorted.end());
  const double kl_median = quantile(sorted, 0.5), kl_p99 = quantile(sorted, 0.99), kl_max = sorted.back();
  const double top1 = 100.0 * double(n_agree) / double(n_eval);
  const double ppl_model = std::exp(nll_model / double(n_eval)), ppl_ref = std::exp(nll_ref / double(n_eval));
  // Mean of the equal prefix lengths, a generation that never diverged counting as gen_len.
  double div_mean = 0;
  for (const auto& d : divergence) div_mean += double(d.value_or(gen_len));
  if (!divergence.empty()) div_mean /= double(divergence.size());

  nlohmann::json gens = nlohmann::json::array();
  for (size_t g = 0; g < divergence.size(); ++g)
    gens.push_back({{"window", g},
                    {"first_divergence", divergence[g] ? nlohmann::json(*divergence[g]) : nlohmann::json(nullptr)}});
  nlohmann::json j = {
      {"model", o.model_dir},
      {"reference", o.reference_dir},
      {"text", o.text_path},
      {"device", {{"model", sm.runner->describe()}, {"reference", sr.runner->describe()}}},
      {"context", o.context},
      {"activations", o.activations},
      {"windows", windows.size()},
      {"tokens_evaluated", n_eval},
      {"kl", {{"mean", kl_mean}, {"median", kl_median}, {"p99", kl_p99}, {"max", kl_max}}},
      {"top1_agreement_pct", top1},
      {"perplexity", {{"model", ppl_model}, {"reference", ppl_ref}, {"delta", ppl_model - ppl_ref}}},
      {"generation",
       {{"prompt_tokens", kGenPrompt},
        {"generated_tokens", gen_len},
        {"runs", gens},
        {"mean_first_divergence", divergence.empty() ? nlohmann::json(nullptr) : nlohmann::json(div_mean)}}},
  };
  return j;
}

void print_eval_report(const nlohmann::json& j) {
  const auto str = [&](const nlohmann::json& v) { return v.get<std::string>(); };
  std::printf("model              %s\n", str(j["model"]).c_str());
  std::printf("reference          %s\n", str(j["reference"]).c_str());
  std::printf("device             %s | %s\n", str(j["device"]["model"]).c_str(), str(j["device"]["reference"]).c_str());
  if (j.value("activations", std::string("f32")) != "f32")
    std::printf("activations        %s (the model's NVFP4 inputs, emulated)\n", str(j["activations"]).c_str());
  std::printf("tokens evaluated   %lld in %zu windows of <= %lld\n", j["tokens_evaluated"].get<long long>(),
              j["windows"].get<size_t>(), j["context"].get<long long>());
  const nlohmann::json& kl = j["kl"];
  std::printf("KL(ref || model)   mean %.6g  median %.6g  p99 %.6g  max %.6g nats\n", kl["mean"].get<double>(),
              kl["median"].get<double>(), kl["p99"].get<double>(), kl["max"].get<double>());
  std::printf("top-1 agreement    %.2f%%\n", j["top1_agreement_pct"].get<double>());
  const double ppl_model = j["perplexity"]["model"].get<double>(), ppl_ref = j["perplexity"]["reference"].get<double>();
  std::printf("perplexity         model %.6f  reference %.6f  delta %+.6f (%+.3f%%)\n", ppl_model, ppl_ref,
              ppl_model - ppl_ref, 100.0 * (ppl_model / ppl_ref - 1.0));
  const nlohmann::json& gen = j["generation"];
  const nlohmann::json& runs = gen["runs"];
  if (!runs.empty()) {
    const auto gen_len = gen["generated_tokens"].get<long long>();
    std::printf("greedy divergence  (%lld-token prompts, %lld generated; equal tokens before the first difference)\n",
                gen["prompt_tokens"].get<long long>(), gen_len);
    for (const nlohmann::json& r : runs) {
      const auto w = r["window"].get<size_t>();
      if (r["first_divergence"].is_null())
        std::printf("  window %-4zu     none\n", w);
      else
        std::printf("  window %-4zu     %lld\n", w, r["first_divergence"].get<long long>());
    }
    std::printf("  mean             %.1f (none counts as %lld)\n", gen["mean_first_divergence"].get<double>(), gen_len);
  }
}

}  // namespace pg::cli
