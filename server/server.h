// `peregrine serve` as a library call: options (named as vLLM users know them), model loading,
// the engine's loop thread, the HTTP server, and the graceful drain on SIGINT/SIGTERM.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/backend.h"
#include "server/chat.h"

namespace pg::server {

struct ServeOptions {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;                           // empty: no auth
  std::vector<std::string> served_model_names;   // empty: the model folder's name
  std::vector<std::string> allowed_origins;      // CORS; empty: off
  std::string chat_template;                     // a file; empty: the model folder's template
  std::string reasoning_parser = "deepseek_r1";  // "deepseek_r1" or "none"
  int64_t max_model_len = 0;                     // 0: the model's
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 512;
  int64_t max_waiting = 1024;
  int64_t kv_blocks = 0;                         // 0: enough for max_num_seqs full sequences
  int64_t block_size = 16;
  int threads = 0;                               // engine CPU threads; 0: all hardware threads
  int64_t speculative_tokens = 0;                // MTP draft depth (0: off)
  bool speculative_adaptive = false;             // depth per step in 1..speculative_tokens from acceptance
  bool prefix_caching = true;                    // reuse the KV blocks of earlier requests' leading tokens
  std::string device = "auto";                   // auto (cuda when a GPU is present) | cpu | cuda
  double gpu_memory_utilization = 0.90;          // cuda: share of GPU memory (weights + KV + activations)
  std::string kv_cache_dtype = "auto";           // cuda: auto | f32 | bf16 (RunnerOptions::kv_cache_dtype)
  bool cuda_graphs = true;                       // cuda: replay decode steps as CUDA graphs
  int http_threads = 1;
  uint64_t max_body_bytes = 16u << 20;
  uint32_t max_header_bytes = 16u << 10;
  int max_messages = 1024;
  int max_n = 16;
  double shutdown_timeout_s = 30;                // in-flight requests get this long to finish
  double write_timeout_s = 30;                   // a client not reading this long is dropped
};

// What run_http needs besides the options.
struct HttpStack {
  GenerationBackend* backend = nullptr;
  std::shared_ptr<const Tokenizer> tokenizer;
  const ChatTemplate* chat_template = nullptr;
  bool add_bos_to_completions = true;
  // Drains the backend: no new work; in-flight work until the deadline, then aborted. Blocks.
  std::function<void(std::chrono::steady_clock::time_point)> stop_backend;
};

// Serves until SIGINT/SIGTERM, then drains (health 503, new work 503, in-flight finishes until
// --shutdown-timeout, the rest ends with finish_reason "abort"). Returns the exit code.
int run_http(const ServeOptions& opts, HttpStack stack);

// Loads the model folder, starts the engine and serves. Returns the exit code.
int serve(ServeOptions opts);

}  // namespace pg::server
