// The engine half of `peregrine bench` (cli/spec_bench.h): each speculation mode gets a fresh Engine
// built as `peregrine generate` builds one (make_runner; on CUDA the device sampler), runs a fixed
// set of natural-language prompts one at a time, and reports decode tokens/s with the draft
// statistics; greedy outputs must be identical across modes (speculation is lossless).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/spec_bench.h"
#include "engine/adaptive_depth.h"
#include "engine/engine.h"
#include "model/deepseek_model.h"
#include "model/runner_factory.h"
#include "server/chat.h"
#include "tokenizer/tokenizer.h"
#ifdef PG_WITH_CUDA
#include "engine/cuda/device_sampler_cuda.h"
#endif

namespace pg::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// Varied English: narrative, technical, factual, instructions, dialogue, lists, code talk.
const std::vector<std::string> kBuiltinPrompts = {
    "The history of the English language",
    "She walked into the room and",
    "The Debian package manager is a tool that",
    "In the beginning of the twentieth century, scientists",
    "The best way to learn a new programming language is",
    "Write a short letter to a friend about a trip to the mountains.",
    "Explain how a hash table works and when it is slower than a sorted array.",
    "List three reasons why cities plant trees along their streets.",
};

struct Mode {
  std::string name;  // as given: "0", "2", "adaptive"
  int64_t k = 0;     // draft depth; adaptive: the largest k given
  bool adaptive = false;
};

struct ModeResult {
  Mode mode;
  std::vector<double> decode_tps;              // per pass: decode tokens / decode seconds, all prompts
  std::vector<double> step_s;                  // per pass: decode seconds per verify step
  std::vector<double> draft_cost;              // adaptive, per pass: the cost it ran with
  double ttft_s = 0;                           // summed over prompts and passes
  int64_t prompt_tokens = 0, generated = 0, n_requests = 0;
  int64_t verify_steps = 0, drafted = 0, accepted = 0;
  std::vector<std::vector<int32_t>> outputs;   // first pass, per prompt
};

Result<std::vector<Mode>> parse_modes(const std::vector<std::string>& items) {
  std::vector<Mode> modes;
  int64_t max_k = 0;
  bool adaptive = false;
  for (const std::string& s : items) {
    if (s == "adaptive") {
      adaptive = true;
      continue;
    }
    size_t used = 0;
    int64_t k = -1;
    try {
      k = std::stoll(s, &used);
    } catch (...) {
      used = 0;
    }
    if (used != s.size() || k < 0 || k > kMaxSpeculativeTokens)
      return invalid_argument("--speculative-tokens: '{}' is neither a draft depth in 0..{} nor 'adaptive'", s,
                              kMaxSpeculativeTokens);
    if (std::any_of(modes.begin(), modes.end(), [&](const Mode& m) { return m.k == k; }))
      return invalid_argument("--speculative-tokens: k = {} given twice", k);
    modes.push_back({s, k, false});
    max_k = std::max(max_k, k);
  }
  if (adaptive) {
    if (max_k == 0) return invalid_argument("--speculative-tokens: 'adaptive' needs a k >= 1 to adapt up to");
    modes.push_back({"adaptive", max_k, true});
  }
  return modes;
}

Result<std::vector<std::string>> load_prompts(const std::string& path) {
  if (path.empty()) return kBuiltinPrompts;
  std::ifstream in(path);
  if (!in) return not_found("cannot read prompts file '{}'", path);
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) prompts.push_back(line);
  }
  if (prompts.empty()) return invalid_argument("prompts file '{}' has no prompt (one per line)", path);
  return prompts;
}

// Each prompt as one user message through the model's chat template (the server's path), or its
// plain tokens when the model has no template or raw prompts were asked for.
Result<std::vector<std::vector<int32_t>>> encode_prompts(const std::vector<std::string>& prompts,
                                                         const SpecBenchOptions& o,
                                                         const std::shared_ptr<const Tokenizer>& tok, bool* chat) {
  std::unique_ptr<server::ChatTemplate> tmpl;
  if (!o.raw_prompts) {
    auto t = server::ChatTemplate::load(o.model_dir, "", tok);
    if (t.ok()) tmpl = std::move(t).value();
    else if (t.status().code() != StatusCode::kNotFound) return t.status();
  }
  *chat = tmpl != nullptr;
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& p : prompts) {
    if (tmpl) {
      server::ChatRequest req;
      server::ChatMessage msg;
      msg.role = "user";
      msg.content = p;
      req.messages.push_back(std::move(msg));
      PG_ASSIGN_OR_RETURN(server::ChatPrompt rendered, tmpl->render(req));
      ids.push_back(std::move(rendered.ids));
    } else {
      PG_ASSIGN_OR_RETURN(auto enc, tok->encode(p));
      ids.push_back(std::move(enc));
    }
  }
  return ids;
}

Result<std::unique_ptr<Engine>> make_engine(const SpecBenchOptions& o, const Mode& m, std::optional<double> draft_cost,
                                            const std::shared_ptr<const Tokenizer>& tok) {
  PG_ASSIGN_OR_RETURN(auto model, DeepseekModel::load(o.model_dir));
  EngineConfig ec;
  ec.enable_prefix_caching = false;  // the same prompts run in every mode: each computes them
  ec.scheduler.max_num_seqs = 1;  // one request at a time: the per-user figure
  ec.scheduler.max_num_batched_tokens = 8192;
  ec.n_threads = o.threads;
  ec.num_speculative_tokens = m.k;
  ec.speculative_adaptive = m.adaptive;
  if (draft_cost) ec.speculative_draft_cost = *draft_cost;
  RunnerOptions ro;
  ro.device = o.device;
  ro.max_num_seqs = 1;
  ro.max_num_batched_tokens = ec.scheduler.max_num_batched_tokens;
  ro.gpu_memory_utilization = o.gpu_memory_utilization;
  ro.kv_cache_dtype = o.kv_cache_dtype;
  ro.cuda_graphs = o.graphs;
  ro.speculative = m.k > 0 || m.adaptive;
  PG_ASSIGN_OR_RETURN(auto runner, make_runner(std::move(model), ro));
#ifdef PG_WITH_CUDA
  if (runner->device_logits()) ec.device_sampler = make_cuda_device_sampler();
#endif
  PG_ASSIGN_OR_RETURN(auto engine, Engine::create(std::move(runner), tok, ec));
  if (m.k > 0 && engine->stats().speculative_tokens != m.k)
    return failed_precondition("'{}' has no MTP layer: speculative decoding needs one", o.model_dir);
  return engine;
}

struct RequestRun {
  std::vector<int32_t> ids;
  double ttft_s = 0, decode_s = 0;  // submit -> first token; first token -> last
  int64_t prompt_tokens = 0;
};

// One request, stepped on this thread until it finishes.
Result<RequestRun> run_request(Engine& e, const std::vector<int32_t>& prompt, const SamplingParams& params) {
  GenerationRequest req;
  req.prompt_ids = prompt;
  req.params = params;
  RequestRun run;
  bool done = false;
  Status error;
  Clock::time_point t_first{};
  const auto t0 = Clock::now();
  PG_ASSIGN_OR_RETURN(uint64_t id, e.submit(std::move(req), [&](GenerationEvent&& ev) {
    if (run.ids.empty() && !ev.token_ids.empty()) t_first = Clock::now();
    run.ids.insert(run.ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finished) {
      done = true;
      error = ev.error;
      run.prompt_tokens = ev.prompt_tokens;
    }
  }));
  (void)id;
  while (!done && e.step()) {
  }
  const auto t1 = Clock::now();
  if (!error.ok()) return error;
  if (!done) return internal_error("the engine went idle before the request finished");
  run.ttft_s = std::chrono::duration<double>(t_first - t0).count();
  run.decode_s = std::chrono::duration<double>(t1 - t_first).count();
  return run;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int fail(const Status& st) {
  std::fprintf(stderr, "peregrine bench: %s\n", st.to_string().c_str());
  return st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kOutOfRange ? 2 : 1;
}

}  // namespace

int run_spec_bench(const SpecBenchOptions& o) {
  auto modes = parse_modes(o.modes);
  if (!modes.ok()) return fail(modes.status());
  auto prompts = load_prompts(o.prompts_file);
  if (!prompts.ok()) return fail(prompts.status());
  auto tok_loaded = Tokenizer::load(o.model_dir);
  if (!tok_loaded.ok()) return fail(tok_loaded.status());
  const auto tok = std::make_shared<const Tokenizer>(std::move(tok_loaded).value());
  bool chat = false;
  auto encoded = encode_prompts(*prompts, o, tok, &chat);
  if (!encoded.ok()) return fail(encoded.status());
  const auto& prompt_ids = *encoded;
  const bool greedy = o.temperature < kGreedyTemperature;

  std::vector<ModeResult> results(modes->size());
  for (size_t i = 0; i < modes->size(); ++i) results[i].mode = (*modes)[i];
  size_t n_fixed_spec = 0;
  for (const Mode& m : *modes) n_fixed_spec += !m.adaptive && m.k > 0;
  if (o.draft_cost_auto && n_fixed_spec < 2)
    return fail(invalid_argument("--speculative-draft-cost auto fits the cost from two or more fixed k >= 1"));
  std::optional<double> engine_cost;  // the cost the engines ran adaptive with when none was given
  std::vector<double> fitted_costs;  // per pass
  // Passes outside, modes inside: load drifts on a shared machine reach every mode alike. The
  // adaptive mode comes last, after the fixed k whose step times fit its draft cost.
  for (int pass = 0; pass < o.repeats; ++pass) {
    DraftCostFit fit;
    for (ModeResult& res : results) {
      std::optional<double> cost = o.draft_cost;
      if (res.mode.adaptive) {
        if (fit.cost()) fitted_costs.push_back(*fit.cost());
        if (o.draft_cost_auto) {
          if (!fit.cost()) return fail(internal_error("no draft cost could be fitted from the fixed-k steps"));
          cost = *fit.cost();
        }
      }
      auto engine = make_engine(o, res.mode, cost, tok);
      if (!engine.ok()) return fail(engine.status());
      if (res.mode.adaptive) {
        res.draft_cost.push_back((*engine)->speculative_draft_cost());
        if (!cost) engine_cost = (*engine)->speculative_draft_cost();
      }
      SamplingParams params;
      params.temperature = o.temperature;
      params.ignore_eos = true;
      // Warm-up (not counted): first-use allocations, CUDA graph capture of the decode buckets.
      params.max_tokens = std::min<int64_t>(o.decode_tokens, 16);
      params.seed = o.seed;
      if (auto w = run_request(**engine, prompt_ids[0], params); !w.ok()) return fail(w.status());
      const EngineStats before = (*engine)->stats();
      params.max_tokens = o.decode_tokens;
      double decode_s = 0;
      int64_t decode_tokens = 0;
      for (size_t p = 0; p < prompt_ids.size(); ++p) {
        params.seed = o.seed + int64_t(p);
        auto run = run_request(**engine, prompt_ids[p], params);
        if (!run.ok()) return fail(run.status());
        decode_s += run->decode_s;
        decode_tokens += int64_t(run->ids.size()) - 1;  // the first token comes from the prefill
        res.ttft_s += run->ttft_s;
        res.prompt_tokens += run->prompt_tokens;
        res.generated += int64_t(run->ids.size());
        ++res.n_requests;
        if (pass == 0) res.outputs.push_back(std::move(run->ids));
      }
      const EngineStats after = (*engine)->stats();
      res.verify_steps += after.spec_verify_steps_total - before.spec_verify_steps_total;
      res.drafted += after.spec_draft_tokens_total - before.spec_draft_tokens_total;
      res.accepted += after.spec_accepted_tokens_total - before.spec_accepted_tokens_total;
      res.decode_tps.push_back(decode_s > 0 ? double(decode_tokens) / decode_s : 0.0);
      const int64_t steps = after.spec_verify_steps_total - before.spec_verify_steps_total;
      if (steps > 0) {
        res.step_s.push_back(decode_s / double(steps));
        if (!res.mode.adaptive) fit.add(res.mode.k, res.step_s.back());
      }
      std::fprintf(stderr, "[bench] pass %d/%d, %s: %.1f decode tokens/s\n", pass + 1, o.repeats,
                   res.mode.name.c_str(), res.decode_tps.back());
    }
  }

  // Losslessness: greedy outputs of every mode equal the first mode's, token for token.
  Json mismatch = nullptr;
  if (greedy)
    for (size_t i = 1; i < results.size() && mismatch.is_null(); ++i)
      for (size_t p = 0; p < prompt_ids.size() && mismatch.is_null(); ++p) {
        const auto& a = results[0].outputs[p];
        const auto& b = results[i].outputs[p];
        if (a == b) continue;
        const size_t at = size_t(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
        mismatch = {{"mode", results[i].mode.name}, {"reference_mode", results[0].mode.name},
                    {"prompt", p}, {"token_index", at}};
      }

  const ModeResult* plain = nullptr;
  const ModeResult* best_fixed = nullptr;
  const ModeResult* adaptive = nullptr;
  for (const ModeResult& r : results) {
    if (r.mode.adaptive) adaptive = &r;
    else if (r.mode.k == 0) plain = &r;
    else if (!best_fixed || median(r.decode_tps) > median(best_fixed->decode_tps)) best_fixed = &r;
  }
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  Json j = {{"model", o.model_dir},
            {"device", o.device},
            {"threads", threads},
            {"prompts", prompt_ids.size()},
            {"chat_template", chat},
            {"decode_tokens", o.decode_tokens},
            {"repeats", o.repeats},
            {"temperature", o.temperature},
            {"seed", o.seed},
            {"speculative_draft_cost", o.draft_cost_auto ? Json("auto")
                                       : o.draft_cost    ? Json(*o.draft_cost)
                                       : engine_cost     ? Json(*engine_cost)
                                                         : Json(nullptr)},
            {"modes", Json::array()}};
  for (const ModeResult& r : results) {
    const double tps = median(r.decode_tps);
    Json m = {{"mode", r.mode.name},
              {"k", r.mode.k},
              {"adaptive", r.mode.adaptive},
              {"decode_tokens_per_s", tps},
              {"decode_tokens_per_s_passes", r.decode_tps},
              {"ttft_ms_mean", 1e3 * r.ttft_s / double(std::max<int64_t>(1, r.n_requests))},
              {"prompt_tokens", r.prompt_tokens},
              {"generated_tokens", r.generated},
              {"verify_steps", r.verify_steps},
              {"drafted", r.drafted},
              {"accepted", r.accepted}};
    if (!r.step_s.empty()) m["ms_per_verify_step"] = 1e3 * median(r.step_s);
    if (r.mode.adaptive) m["draft_cost"] = median(r.draft_cost);
    if (r.drafted > 0) {
      const double steps = double(std::max<int64_t>(1, r.verify_steps));
      m["acceptance_rate"] = double(r.accepted) / double(r.drafted);
      m["mean_accepted_length"] = 1.0 + double(r.accepted) / steps;  // tokens emitted per verify step
      m["mean_k"] = double(r.drafted) / steps;                         // drafts per verify step
    }
    if (plain && median(plain->decode_tps) > 0) m["speedup_vs_no_speculation"] = tps / median(plain->decode_tps);
    j["modes"].push_back(m);
  }
  if (greedy) {
    j["greedy_identical"] = mismatch.is_null();
    if (!mismatch.is_null()) j["mismatch"] = mismatch;
  }
  // c of AdaptiveDepth from the fixed k's step times (t(k) = alpha + beta k, c = beta / alpha).
  if (!fitted_costs.empty()) j["fitted_draft_cost"] = median(fitted_costs);
  double adaptive_pct = 0;
  if (adaptive && best_fixed) {
    adaptive_pct = 100.0 * (median(adaptive->decode_tps) / median(best_fixed->decode_tps) - 1.0);
    j["adaptive_vs_best_fixed"] = {{"best_fixed_k", best_fixed->mode.k}, {"pct", adaptive_pct},
                                   {"target_pct", -5.0}, {"met", adaptive_pct >= -5.0}};
  }

  if (!o.json_out.empty()) {
    std::ofstream f(o.json_out);
    f << j.dump(2) << "\n";
    if (!f) return fail(internal_error("cannot write '{}'", o.json_out));
  }
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("model     %s (%s, threads %d)\n", o.model_dir.c_str(), o.device.c_str(), threads);
    char sampling[64] = "greedy";
    if (!greedy) std::snprintf(sampling, sizeof sampling, "temperature %g, seed %lld", o.temperature, (long long)o.seed);
    std::printf("requests  %zu prompts (%s) x %lld tokens, one at a time, %s; median of %d passes\n",
                prompt_ids.size(), chat ? "chat template" : "raw", (long long)o.decode_tokens, sampling, o.repeats);
    std::printf("\n%-10s %12s %8s %8s %8s %9s %8s %11s %7s\n", "mode", "decode tok/s", "vs k=0", "TTFT ms",
                "drafted", "accepted", "accept%", "len/verify", "mean k");
    for (const Json& m : j["modes"]) {
      std::printf("%-10s %12.1f ", m["mode"].get<std::string>().c_str(), m["decode_tokens_per_s"].get<double>());
      if (m.contains("speedup_vs_no_speculation")) std::printf("%7.2fx ", m["speedup_vs_no_speculation"].get<double>());
      else std::printf("%8s ", "-");
      std::printf("%8.1f ", m["ttft_ms_mean"].get<double>());
      if (m.contains("acceptance_rate"))
        std::printf("%8lld %9lld %7.1f%% %11.2f %7.2f\n", (long long)m["drafted"].get<int64_t>(),
                    (long long)m["accepted"].get<int64_t>(), 100.0 * m["acceptance_rate"].get<double>(),
                    m["mean_accepted_length"].get<double>(), m["mean_k"].get<double>());
      else
        std::printf("%8s %9s %8s %11s %7s\n", "-", "-", "-", "-", "-");
    }
    std::printf("\n");
    if (j.contains("fitted_draft_cost"))
      std::printf("draft cost c fitted from the fixed k's step times: %.2f of a step; adaptive ran with %.2f%s\n",
                  j["fitted_draft_cost"].get<double>(), median(adaptive->draft_cost),
                  o.draft_cost_auto ? " (auto)" : o.draft_cost ? "" : " (the backend's default)");
    if (adaptive && best_fixed)
      std::printf("adaptive vs best fixed k (k=%lld): %+.1f%% (target >= -5%%): %s\n", (long long)best_fixed->mode.k,
                  adaptive_pct, adaptive_pct >= -5.0 ? "met" : "MISSED");
    if (greedy)
      std::printf("greedy outputs identical across modes: %s\n", mismatch.is_null() ? "yes" : "NO");
  }
  if (!mismatch.is_null()) {
    std::fprintf(stderr,
                 "peregrine bench: greedy output of mode %s differs from mode %s (prompt %lld, token %lld): "
                 "speculation must be lossless\n",
                 mismatch["mode"].get<std::string>().c_str(), mismatch["reference_mode"].get<std::string>().c_str(),
                 (long long)mismatch["prompt"].get<int64_t>(), (long long)mismatch["token_index"].get<int64_t>());
    return 1;
  }
  return 0;
}

}  // namespace pg::cli
