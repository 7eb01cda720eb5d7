// `peregrine serve [MODEL_DIR]`: the OpenAI-compatible HTTP server. Flags are named as vLLM's
// (`vllm serve`) where one exists; the work is done by server/server.h.
#include <cstdio>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "server/server.h"

namespace pg::cli {

Command add_serve(CLI::App& root) {
  auto opts = std::make_shared<server::ServeOptions>();
  CLI::App* app = root.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  app->add_option("model_dir", opts->model_dir,
                  "Model folder (config.json, safetensors, tokenizer); default: the embedded models/peregrine-tiny");
  app->add_option("--host", opts->host, "Address to listen on")->capture_default_str();
  app->add_option("--port", opts->port, "Port to listen on (0: any free port)")->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app->add_option("--api-key", opts->api_key,
                  "Require 'Authorization: Bearer KEY' on every route but /health (or env PEREGRINE_API_KEY)")
      ->envname("PEREGRINE_API_KEY");
  app->add_option("--served-model-name", opts->served_model_names,
                  "Model name the API answers to (repeat or comma-separate for aliases; the first is reported; "
                  "default: the folder name)")
      ->allow_extra_args(false)->take_all()->delimiter(',');
  app->add_option("--chat-template", opts->chat_template,
                  "Chat template file (Jinja); default: the model folder's. Never taken from requests");
  app->add_option("--reasoning-parser", opts->reasoning_parser,
                  "Split <think> blocks into reasoning_content: deepseek_r1 or none")
      ->capture_default_str()->check(CLI::IsMember({"deepseek_r1", "none"}));
  app->add_option("--allowed-origins", opts->allowed_origins,
                  "CORS origins to allow (repeat or comma-separate; '*': any); default: CORS off")
      ->allow_extra_args(false)->take_all()->delimiter(',');
  app->add_option("--max-model-len", opts->max_model_len, "Context length (0: the model's)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--max-num-seqs", opts->max_num_seqs, "Sequences running at once")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--max-num-batched-tokens", opts->max_num_batched_tokens, "Tokens per engine step")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--max-waiting", opts->max_waiting, "Queued requests before answering 429")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--kv-blocks", opts->kv_blocks,
                  "KV-cache blocks in the pool (0: enough for max-num-seqs full-length sequences)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--block-size", opts->block_size, "Tokens per KV-cache block")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--device", opts->device, "auto (cuda when a GPU is present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  app->add_option("--gpu-memory-utilization", opts->gpu_memory_utilization,
                  "cuda: share of GPU memory for weights, KV cache and activations")
      ->check(CLI::Range(0.05, 0.99))->capture_default_str();
  app->add_option("--kv-cache-dtype", opts->kv_cache_dtype,
                  "the latent KV cache's values: f32, or bf16 (half the memory and the attention's bytes; "
                  "auto: f32)")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}))->capture_default_str();
  app->add_flag("!--no-cuda-graphs", opts->cuda_graphs, "cuda: launch decode steps kernel by kernel");
  app->add_option("--threads", opts->threads, "CPU threads for the engine (0: all hardware threads)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--speculative-tokens", opts->speculative_tokens,
                  "Draft depth k of speculative decoding with the model's MTP head (0: off)")
      ->capture_default_str()->check(CLI::Range(0, 8));
  app->add_flag("!--no-prefix-caching", opts->prefix_caching,
                "compute every prompt in full (by default a request reuses the KV blocks an earlier request "
                "computed for the same leading tokens)");
  app->add_flag("--speculative-adaptive", opts->speculative_adaptive,
                "Pick the draft depth per step in 1..--speculative-tokens from recent acceptance");
  app->add_option("--http-threads", opts->http_threads, "Threads serving HTTP connections")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--max-body-bytes", opts->max_body_bytes, "Largest request body (larger: 413)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--max-header-bytes", opts->max_header_bytes, "Largest request header block (larger: 431)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--max-messages", opts->max_messages, "Most chat messages per request")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--max-n", opts->max_n, "Most choices (n) per request")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--shutdown-timeout", opts->shutdown_timeout_s,
                  "Seconds in-flight requests get to finish after SIGINT/SIGTERM; then they are aborted")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app->add_option("--write-timeout", opts->write_timeout_s,
                  "Seconds a client may stall reading a response before it is dropped and its request cancelled")
      ->capture_default_str()->check(CLI::PositiveNumber);
  return {app, [opts] {
            if (opts->model_dir.empty()) {
              auto dir = default_model_dir();
              if (!dir.ok()) {
                std::fprintf(stderr, "peregrine serve: %s\n", dir.status().message().c_str());
                return 1;
              }
              opts->model_dir = dir->string();
            }
            return server::serve(*opts);
          }};
}

}  // namespace pg::cli
