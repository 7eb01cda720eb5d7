// `peregrine generate [MODEL_DIR] -p PROMPT`: one request through the engine; the generated
// text streams to stdout (exactly the text), statistics go to stderr.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>

#include "cli/commands.h"
#include "model/runner_factory.h"
#ifdef PG_WITH_CUDA
#include "engine/cuda/device_sampler_cuda.h"
#endif
#include "cli/default_model.h"
#include "engine/engine.h"
#include "model/deepseek_model.h"
#include "server/chat.h"
#include "tokenizer/tokenizer.h"

namespace pg::cli {
namespace {

struct GenerateOptions {
  std::string model_dir;
  std::string prompt;
  bool chat = false;
  bool ignore_eos = false;
  bool quiet = false;
  int threads = 0;
  std::string device = "auto";
  std::string kv_cache_dtype = "auto";
  bool exact = false;
  int64_t speculative_tokens = 0;
  bool speculative_adaptive = false;
  SamplingParams params;
  int64_t max_tokens = 128;
  int64_t seed = -1;
};

// The prompt as one user message through the model's chat template.
Result<std::vector<int32_t>> render_chat_prompt(const std::string& model_dir, const std::string& prompt,
                                                const Tokenizer& tok);

int fail(const Status& st) {
  std::fprintf(stderr, "peregrine generate: %s\n", st.to_string().c_str());
  return st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kOutOfRange ? 2 : 1;
}

int run_generate(GenerateOptions o) {
  using Clock = std::chrono::steady_clock;
  if (o.model_dir.empty()) {
    auto d = default_model_dir();
    if (!d.ok()) return fail(d.status());
    o.model_dir = d->string();
  }
  if (o.prompt.empty() && !std::cin.eof()) o.prompt.assign(std::istreambuf_iterator<char>(std::cin), {});
  const auto t_load = Clock::now();
  auto tok = Tokenizer::load(o.model_dir);
  if (!tok.ok()) return fail(tok.status());
  auto model = DeepseekModel::load(o.model_dir);
  if (!model.ok()) return fail(model.status());
  std::vector<int32_t> ids;
  if (o.chat) {
    auto rendered = render_chat_prompt(o.model_dir, o.prompt, *tok);
    if (!rendered.ok()) return fail(rendered.status());
    ids = std::move(rendered).value();
  } else {
    auto enc = tok->encode(o.prompt);
    if (!enc.ok()) return fail(enc.status());
    ids = std::move(enc).value();
  }
  o.params.max_tokens = o.max_tokens;
  o.params.ignore_eos = o.ignore_eos;
  if (o.seed >= 0) o.params.seed = o.seed;
  EngineConfig ec;
  ec.scheduler.max_num_seqs = 1;
  ec.scheduler.max_num_batched_tokens = 8192;
  ec.n_threads = o.threads;
  ec.num_speculative_tokens = o.speculative_tokens;
  ec.speculative_adaptive = o.speculative_adaptive;
  ec.kv_blocks = 0;
  RunnerOptions ro;
  ro.device = o.device;
  ro.max_num_seqs = 1;
  ro.max_num_batched_tokens = ec.scheduler.max_num_batched_tokens;
  ro.exact = o.exact;
  ro.kv_cache_dtype = o.kv_cache_dtype;
  ro.speculative = o.speculative_tokens > 0;
  auto runner = make_runner(std::move(model).value(), ro);
  if (!runner.ok()) return fail(runner.status());
#ifdef PG_WITH_CUDA
  if ((*runner)->device_logits()) ec.device_sampler = make_cuda_device_sampler();
#endif
  auto engine = Engine::create(std::move(runner).value(), std::make_shared<Tokenizer>(*tok), ec);
  if (!engine.ok()) return fail(engine.status());
  GenerationRequest req;
  req.prompt_ids = ids;
  req.params = o.params;
  const auto t_start = Clock::now();
  Clock::time_point t_first{};
  bool done = false, first = true;
  GenerationEvent last;
  auto sub = (*engine)->submit(std::move(req), [&](GenerationEvent&& ev) {
    if (first && !ev.token_ids.empty()) {
      t_first = Clock::now();
      first = false;
    }
    std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
    std::fflush(stdout);
    if (ev.finished) {
      done = true;
      last = std::move(ev);
    }
  });
  if (!sub.ok()) return fail(sub.status());
  while (!done && (*engine)->step()) {
  }
  const auto t_end = Clock::now();
  if (!last.error.ok()) return fail(last.error);
  if (!o.quiet) {
    const double load_s = std::chrono::duration<double>(t_start - t_load).count();
    const double prefill_s = std::chrono::duration<double>(t_first - t_start).count();
    const double decode_s = std::chrono::duration<double>(t_end - t_first).count();
    const int64_t n_decode = std::max<int64_t>(0, last.completion_tokens - 1);
    std::fprintf(stderr,
                 "\n[peregrine] %s | load %.2f s | prompt %lld tokens, prefill %.1f tokens/s | "
                 "%lld generated, decode %.1f tokens/s | finish_reason %s\n",
                 o.model_dir.c_str(), load_s, (long long)last.prompt_tokens,
                 prefill_s > 0 ? double(last.prompt_tokens) / prefill_s : 0.0, (long long)last.completion_tokens,
                 decode_s > 0 ? double(n_decode) / decode_s : 0.0, last.finish_reason.c_str());
    const EngineStats st = (*engine)->stats();
    if (st.speculative_tokens > 0 && st.spec_draft_tokens_total > 0) {
      const double steps = double(std::max<int64_t>(1, st.spec_verify_steps_total));
      std::fprintf(stderr, "[peregrine] speculation k=%s%lld: %lld drafted (%.2f per verify step), %lld accepted (%.1f%%), "
                   "mean accepted length %.2f tokens per verify step\n",
                   o.speculative_adaptive ? "adaptive 1.." : "", (long long)st.speculative_tokens,
                   (long long)st.spec_draft_tokens_total, double(st.spec_draft_tokens_total) / steps,
                   (long long)st.spec_accepted_tokens_total,
                   100.0 * double(st.spec_accepted_tokens_total) / double(st.spec_draft_tokens_total),
                   1.0 + double(st.spec_accepted_tokens_total) / steps);
    }
  }
  return 0;
}

Result<std::vector<int32_t>> render_chat_prompt(const std::string& model_dir, const std::string& prompt,
                                                const Tokenizer& tok) {
  // The same path as the server's /v1/chat/completions: the model folder's template, and
  // only the template's own literals may become special tokens.
  PG_ASSIGN_OR_RETURN(auto tmpl, server::ChatTemplate::load(model_dir, "", std::make_shared<Tokenizer>(tok)));
  server::ChatRequest req;
  server::ChatMessage msg;
  msg.role = "user";
  msg.content = prompt;
  req.messages.push_back(std::move(msg));
  PG_ASSIGN_OR_RETURN(server::ChatPrompt rendered, tmpl->render(req));
  return rendered.ids;
}

}  // namespace

Command add_generate(CLI::App& root) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* app = root.add_subcommand("generate", "Generate text from a prompt (streams to stdout)");
  app->add_option("model_dir", o->model_dir, "Hugging Face model folder (default: the embedded model)")
      ->check(CLI::ExistingDirectory);
  app->add_option("-p,--prompt", o->prompt, "the prompt (default: read stdin)");
  app->add_flag("--chat", o->chat, "wrap the prompt as a user message with the model's chat template");
  app->add_option("--max-tokens", o->max_tokens, "tokens to generate at most")->check(CLI::PositiveNumber);
  app->add_option("--temperature", o->params.temperature, "0 = greedy");
  app->add_option("--top-p", o->params.top_p, "nucleus sampling mass, (0, 1]");
  app->add_option("--top-k", o->params.top_k, "keep the k most likely tokens (-1: off)");
  app->add_option("--min-p", o->params.min_p, "drop tokens below min_p * p_max");
  app->add_option("--presence-penalty", o->params.presence_penalty, "[-2, 2]");
  app->add_option("--frequency-penalty", o->params.frequency_penalty, "[-2, 2]");
  app->add_option("--repetition-penalty", o->params.repetition_penalty, "> 0, 1 = off");
  app->add_option("--seed", o->seed, "seed for reproducible sampling");
  app->add_option("--stop", o->params.stop, "stop string (repeatable)");
  app->add_flag("--ignore-eos", o->ignore_eos, "keep generating past the end-of-sequence token");
  app->add_option("--threads", o->threads, "CPU threads (0: all)");
  app->add_option("--device", o->device, "auto (cuda when a GPU is present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app->add_flag("--exact", o->exact, "cuda: f32 activations in every projection (debug; matches the CPU)");
  app->add_option("--kv-cache-dtype", o->kv_cache_dtype,
                  "the latent KV cache's values: f32, or bf16 (half the memory; auto: f32)")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
  app->add_option("--speculative-tokens", o->speculative_tokens,
                  "draft depth k of MTP speculative decoding (0: off; needs MTP weights)");
  app->add_flag("--speculative-adaptive", o->speculative_adaptive,
                "pick the draft depth per step in 1..--speculative-tokens from recent acceptance");
  app->add_flag("-q,--quiet", o->quiet, "no statistics on stderr");
  return {app, [o] { return run_generate(*o); }};
}

}  // namespace pg::cli
