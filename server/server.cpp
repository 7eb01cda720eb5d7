// `peregrine serve` wiring (see server.h): model + tokenizer + chat template -> Engine (its own
// loop thread) -> Router -> HttpServer, and the drain sequence on SIGINT/SIGTERM.
#include "server/server.h"
#include "model/runner_factory.h"
#ifdef PG_WITH_CUDA
#include "engine/cuda/device_sampler_cuda.h"
#endif

#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include "model/deepseek_model.h"
#include "server/http_server.h"
#include "server/routes.h"
#include "tokenizer/tokenizer.h"

namespace pg::server {

namespace fs = std::filesystem;

int run_http(const ServeOptions& o, HttpStack stack) {
  ServerMetrics metrics;
  RouterConfig rc;
  rc.served_model_names = o.served_model_names;
  rc.api_key = o.api_key;
  rc.allowed_origins = o.allowed_origins;
  rc.limits.max_n = o.max_n;
  rc.limits.max_messages = o.max_messages;
  rc.reasoning_parser = o.reasoning_parser != "none";
  rc.add_bos_to_completions = stack.add_bos_to_completions;
  Router router(rc, *stack.backend, stack.tokenizer, stack.chat_template, metrics);

  HttpServerConfig hc;
  hc.host = o.host;
  hc.port = uint16_t(o.port);
  hc.n_threads = std::max(1, o.http_threads);
  hc.body_limit_bytes = o.max_body_bytes;
  hc.header_limit_bytes = o.max_header_bytes;
  hc.write_timeout = std::chrono::milliseconds(int64_t(o.write_timeout_s * 1000));
  auto http = HttpServer::create(
      hc, [&router](const HttpRequest& req) { return router.handle(req); },
      [&router](int status, std::string_view message) { return router.error_response(status, message); });
  if (!http.ok()) {
    std::fprintf(stderr, "peregrine serve: %s\n", http.status().message().c_str());
    stack.stop_backend(std::chrono::steady_clock::now());
    return 1;
  }
  std::mutex mu;
  std::condition_variable cv;
  int n_signals = 0;
  (*http)->on_signal([&](int sig) {
    std::lock_guard<std::mutex> lk(mu);
    if (++n_signals == 1)
      std::fprintf(stderr, "peregrine serve: signal %d: draining (up to %.0f s for requests in flight)\n", sig,
                   o.shutdown_timeout_s);
    cv.notify_all();
  });
  std::fprintf(stdout, "peregrine serve: listening on http://%s:%u (model '%s')\n", o.host.c_str(),
               unsigned((*http)->port()),
               o.served_model_names.empty() ? "peregrine" : o.served_model_names.front().c_str());
  std::fflush(stdout);
  std::thread io([&] { (*http)->run(); });
  {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return n_signals > 0; });
  }
  router.set_draining(true);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(o.shutdown_timeout_s * 1000));
  stack.stop_backend(deadline);  // returns once every request has ended (finished or aborted)
  // The final chunks are queued to their connections now; give them a moment to be written.
  (*http)->shutdown(std::chrono::milliseconds(5000));
  io.join();
  std::fprintf(stderr, "peregrine serve: stopped\n");
  return 0;
}

int serve(ServeOptions o) {
  const fs::path dir(o.model_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    std::fprintf(stderr, "peregrine serve: model folder '%s' does not exist\n", o.model_dir.c_str());
    return 1;
  }
  if (o.served_model_names.empty()) {
    const fs::path name = fs::weakly_canonical(dir, ec).filename();
    o.served_model_names.push_back(name.empty() ? "peregrine" : name.string());
  }
  auto tok = Tokenizer::load(dir);
  if (!tok.ok()) {
    std::fprintf(stderr, "peregrine serve: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  auto tokenizer = std::make_shared<const Tokenizer>(std::move(tok).value());
  std::unique_ptr<ChatTemplate> chat_template;
  if (auto t = ChatTemplate::load(o.model_dir, o.chat_template, tokenizer); t.ok()) {
    chat_template = std::move(t).value();
  } else if (!o.chat_template.empty() || t.status().code() != StatusCode::kNotFound) {
    std::fprintf(stderr, "peregrine serve: %s\n", t.status().to_string().c_str());
    return 1;
  } else {
    std::fprintf(stderr, "peregrine serve: no chat template in '%s'; /v1/chat/completions answers 400\n",
                 o.model_dir.c_str());
  }
  auto model = DeepseekModel::load(dir);
  if (!model.ok()) {
    std::fprintf(stderr, "peregrine serve: %s\n", model.status().to_string().c_str());
    return 1;
  }
  const int64_t vocab = (*model)->vocab_size();
  EngineConfig ec_cfg;
  ec_cfg.scheduler.max_num_seqs = o.max_num_seqs;
  ec_cfg.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  ec_cfg.scheduler.max_waiting = o.max_waiting;
  ec_cfg.kv_block_size = o.block_size;
  ec_cfg.kv_blocks = o.kv_blocks;
  ec_cfg.max_model_len = o.max_model_len;
  ec_cfg.n_threads = o.threads;
  ec_cfg.num_speculative_tokens = o.speculative_tokens;
  ec_cfg.speculative_adaptive = o.speculative_adaptive;
  ec_cfg.enable_prefix_caching = o.prefix_caching;
  RunnerOptions ro;
  ro.device = o.device;
  ro.kv_blocks = o.kv_blocks;
  ro.kv_block_size = o.block_size;
  ro.max_model_len = o.max_model_len;
  ro.max_num_seqs = o.max_num_seqs;
  ro.max_num_batched_tokens = o.max_num_batched_tokens;
  ro.gpu_memory_utilization = o.gpu_memory_utilization;
  ro.kv_cache_dtype = o.kv_cache_dtype;
  ro.cuda_graphs = o.cuda_graphs;
  ro.speculative = o.speculative_tokens > 0;
  ro.progress = true;
  auto runner = make_runner(std::move(model).value(), ro);
  if (!runner.ok()) {
    std::fprintf(stderr, "peregrine serve: %s\n", runner.status().to_string().c_str());
    return 1;
  }
  std::fprintf(stderr, "peregrine serve: model on %s\n", (*runner)->describe().c_str());
#ifdef PG_WITH_CUDA
  if ((*runner)->device_logits()) ec_cfg.device_sampler = make_cuda_device_sampler();
#endif
  auto engine = Engine::create(std::move(runner).value(), tokenizer, ec_cfg);
  if (!engine.ok()) {
    std::fprintf(stderr, "peregrine serve: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  (*engine)->start();
  EngineBackend backend(**engine, vocab);
  HttpStack stack;
  stack.backend = &backend;
  stack.tokenizer = tokenizer;
  stack.chat_template = chat_template.get();
  stack.add_bos_to_completions = tokenizer->add_bos_token();
  stack.stop_backend = [&](std::chrono::steady_clock::time_point deadline) { (*engine)->stop(deadline); };
  return run_http(o, std::move(stack));
}

}  // namespace pg::server
