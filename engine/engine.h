// Engine: owns a model, its KV cache, the scheduler and the sampler, and runs the step loop on
// its own thread. Any thread may submit or cancel requests; results come back as events on the
// engine thread (the sink must not block: hand them to the HTTP side and return).
// This header is the contract between the server / CLI and the engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/sampling_params.h"
#include "engine/scheduler.h"

namespace pg {

class DeepseekModel;
class ModelRunner;
class DeviceSampler;
struct ModelConfig;
class Tokenizer;

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0;                              // of the chosen token
  std::vector<std::pair<int32_t, float>> top;     // top_logprobs alternatives, best first
};

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  // The request is aborted (finish_reason "abort") when this passes.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Which of a request's n choices this is: choices share the seed and differ by this index in
  // the random stream (sampler.h, RngPosition).
  uint32_t choice_idx = 0;
  // Drop special tokens (special: true in tokenizer.json) from the text, as vLLM does by default.
  bool skip_special_tokens = true;
};

// One update of a request, delivered in order. The last one has finished = true.
struct GenerationEvent {
  std::vector<int32_t> token_ids;     // tokens generated since the previous event
  std::string text;                   // text that became safe to show (complete UTF-8; never
                                      // past or into a stop string)
  std::vector<TokenLogprob> logprobs; // one per token in token_ids, when requested
  bool finished = false;
  std::string finish_reason;          // when finished: "stop" | "length" | "abort" | "error"
  std::optional<std::string> stop_string;  // the stop string that ended it, if any
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;      // total so far
  Status error;                       // finish_reason "error"
};

using EventSink = std::function<void(GenerationEvent&&)>;

struct EngineConfig {
  SchedulerConfig scheduler;
  int64_t kv_block_size = 16;
  int64_t kv_blocks = 0;      // 0: enough for max_num_seqs sequences of max_model_len
  int64_t max_model_len = 0;  // 0: the model's max_position_embeddings
  int n_threads = 0;          // CPU backend threads; 0: one per hardware thread
  // Speculative decoding with the model's MTP head: draft depth k (0: off). Models without MTP
  // weights run without speculation.
  int64_t num_speculative_tokens = 0;
  // Adaptive depth: each request drafts k in 1..num_speculative_tokens per step, chosen from its
  // recent acceptance (engine/adaptive_depth.h) with one more draft costing
  // speculative_draft_cost of a decode step.
  bool speculative_adaptive = false;
  // Unset: the runner's typical cost (ModelRunner::draft_cost_hint: 0.25 on a GPU, 0.75 on the CPU).
  std::optional<double> speculative_draft_cost;
  // Prefix caching: a request whose leading tokens fill whole KV blocks that an earlier request
  // computed takes those blocks and computes from there (engine/block_manager.h). Outputs are the
  // same as without it on the CPU reference; on a GPU, cached positions may have been computed by
  // other kernels (a decode step's instead of a prefill's), as with chunked prefill.
  bool enable_prefix_caching = true;
  // Draws tokens where the runner's logits live (CUDA: engine/cuda/device_sampler_cuda.h), for
  // steps without speculative rows; null: every row is sampled on the host.
  std::shared_ptr<DeviceSampler> device_sampler;
};

inline constexpr int64_t kMaxSpeculativeTokens = 8;

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0;
  double kv_usage = 0;                  // used / total, in [0, 1]
  int64_t prompt_tokens_total = 0;      // prompt tokens computed (recomputation included)
  int64_t prefix_cache_queries_total = 0;  // final tokens of admitted sequences looked up in the prefix cache
  int64_t prefix_cache_hits_total = 0;     // of those, positions found cached (not computed)
  int64_t generation_tokens_total = 0;
  int64_t preemptions_total = 0;
  int64_t requests_finished_total = 0;
  int64_t steps_total = 0;
  int64_t spec_verify_steps_total = 0;     // sequence-steps that verified drafts
  int64_t spec_draft_tokens_total = 0;     // drafts verified
  int64_t spec_accepted_tokens_total = 0;  // drafts accepted
  int64_t speculative_tokens = 0;          // the draft depth in use
};

class Engine {
 public:
  // On a runner (CPU or CUDA): the KV geometry (kv_blocks, kv_block_size) is the runner's.
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<ModelRunner> model,
                                                std::shared_ptr<const Tokenizer> tokenizer, EngineConfig cfg);
  // On the CPU reference model, with a KV cache of cfg.kv_blocks (0: default_kv_blocks).
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<DeepseekModel> model,
                                                std::shared_ptr<const Tokenizer> tokenizer, EngineConfig cfg);
  // max_num_seqs full-length sequences' worth of blocks, unless cfg.kv_blocks says otherwise.
  static int64_t default_kv_blocks(const ModelConfig& mc, const EngineConfig& cfg);
  ~Engine();

  // Validates and queues a request. Errors: InvalidArgument (bad ids or params), OutOfRange
  // (prompt, or prompt + max_tokens, past max_model_len), ResourceExhausted (queue full),
  // FailedPrecondition (draining). Returns the request id.
  Result<uint64_t> submit(GenerationRequest req, EventSink sink);
  // The request ends with finish_reason "abort" at the next step; its KV blocks are freed.
  void cancel(uint64_t request_id);

  // The engine thread. stop() drains: no new requests; in-flight ones run until `deadline`,
  // then the rest are aborted; returns when the thread has exited.
  void start();
  void stop(std::chrono::steady_clock::time_point deadline);

  // Synchronous use (CLI, tests): one scheduler step on the calling thread; false when idle.
  bool step();

  EngineStats stats() const;
  // The adaptive depth's cost of one more draft in use (EngineConfig::speculative_draft_cost, or the
  // runner's hint).
  double speculative_draft_cost() const;
  const ModelRunner& model() const;
  const Tokenizer& tokenizer() const;
  int64_t max_model_len() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pg
