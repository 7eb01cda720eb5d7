// CudaRunner: the DeepSeek-V3 family on one Hopper GPU. Weights are uploaded once (or made on the
// device at random for `peregrine bench --synthetic`), the paged latent KV cache and every
// activation buffer are allocated once from a memory plan, and each step is a fixed sequence of
// ops/cuda launches on one stream; decode steps of each batch-size bucket are captured once as a
// CUDA graph and replayed. The CPU model (model/deepseek_model.cpp) is the reference it is
// tested against; the order of operations per layer is the same.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "formats/model_config.h"
#include "ops/cuda/mla_attention.h"
#include "model/cuda/draft_head.h"
#include "model/deepseek_model.h"
#include "model/model_runner.h"
#include "model/step_layout.h"

namespace pg {

struct CudaRunnerOptions {
  double gpu_memory_utilization = 0.90;  // share of the GPU's memory the runner may hold in all
  int64_t kv_blocks = 0;                 // 0: as many as the memory plan leaves room for
  int64_t kv_block_size = 64;            // positions per KV block
  int64_t max_model_len = 0;             // 0: the model's max_position_embeddings
  int64_t max_num_seqs = 64;             // sequences in one step (largest graph bucket)
  int64_t max_tokens_per_step = 2048;    // new tokens in one step (prefill chunk); activations are sized by it
  bool use_graphs = true;                // decode steps replay captured CUDA graphs
  // The latent KV cache in bf16 (each [c_kv | k_pe] value rounded to nearest even as it is written)
  // instead of f32: half the cache's memory, so twice the tokens in it, and half the bytes the
  // attention reads a step (which grow with the context: moonlight's cache at 8K is ~20 MB a layer
  // in f32). The attention's arithmetic after the staging is the f32 pool's (ops/cuda/
  // mla_attention_common.cuh, KvBf16Stage). Off by default: on an H100 (session 47) it cost moonlight
  // NVFP4 1.6% at 1K context and gained V3 4L 1.4% at 8K (bench/RESULTS.md); its use is memory.
  // PEREGRINE_KV_CACHE=bf16|f32 overrides; never in exact mode.
  bool kv_bf16 = false;
  // The MTP layers draft through a quantized copy of their head (model/cuda/device_weights.h's
  // quantize_draft_heads): lossless (verification decides), a half (FP8) or ~0.28 (NVFP4) of the
  // bf16 head's bytes a draft step, at the cost of that copy's memory and of some acceptance.
  // make_runner sets kEngineDraftHead (draft_head.h: NVFP4) when the engine drafts. H200, 2026-12-05
  // (14ae117, bench_sweep draft1, 2 rounds alternating): the draft step at k = 1 FP8 -> NVFP4 moonlight
  // nvfp4 0.204 -> 0.168 ms, V3 4L nvfp4 0.580 -> 0.493 (FP8 against the bf16 head in session 35: V3
  // 0.759 -> 0.574); the embedded model's greedy acceptance bf16 / FP8 / NVFP4 head 81/106, 82/105,
  // 82/105 (k = 1) and 117/203, 117/203, 118/200 (k = 3). PEREGRINE_DRAFT_HEAD=model|fp8|nvfp4
  // overrides. Not in exact mode (always the model's head there).
  DraftHead draft_head = DraftHead::kModel;
  // With use_graphs, speculative steps replay graphs too: verify steps (every sequence carrying
  // q = 2..kMaxGraphTokens new tokens, all logits) per (bucket, q), and one-token MTP draft steps
  // per bucket. Off: they run eagerly (debugging; the GPU tests compare both). On since their GPU
  // tests passed on the H200 (2026-12-01, a8ec2b8). PEREGRINE_SPEC_GRAPHS=0 / =1 overrides.
  bool spec_graphs = true;
  // Debug: a step that would replay a graph enqueues the same padded launch sequence eagerly
  // instead, so tests can compare a replay with the launches it captured, bit for bit.
  bool debug_graphs_eager = false;
  // Debug mode: every projection on our f32-activation kernels (no bf16 rounding of activations
  // for the tensor-core GEMMs), so the results match the CPU reference to ~1e-5.
  bool exact = false;
  // Prefill steps of >= 64 tokens run the experts and the per-head products on tensor cores too
  // (else only the projections do). Off: for measuring what each bf16 path costs in accuracy.
  bool tensor_core_experts = true;
  // Prefill steps whose every sequence brings >= 64 tokens run the attention on tensor cores
  // (ops::cuda::mla_prefill) instead of the CUDA-core split-KV kernel: 8K-token prefill of
  // moonlight 5.6K -> 36.9K tok/s on the H200 (2026-12-01, a8ec2b8). Off: the CUDA-core kernel
  // (for measuring what the bf16 attention costs in accuracy). PEREGRINE_PREFILL_ATTENTION=0 / =1 overrides.
  bool tensor_core_attention = true;
  // The other steps (decode, verify, short prefill): which attention kernel. kAuto
  // (ops::cuda::mla_cores_for): the split-KV kernel on the tensor cores (bf16 mmas on split f32
  // operands, near-f32 results, so the CPU reference needs no emulation) where it wins, at V3's
  // 128 heads, verify steps and batches; on the CUDA cores' f32 FMAs at moonlight's batch 1 (12.9
  // vs 17.4 us at 1K). Exact mode: always the CUDA cores. PEREGRINE_DECODE_ATTENTION=cuda / auto
  // / tensor / twopass overrides (twopass: the two-pass kernels where they fit, faster only at
  // contexts up to ~1K: ops/cuda/mla_attention.h).
  ops::cuda::MlaCores decode_attention = ops::cuda::MlaCores::kAuto;
  // Decode-sized steps (<= 8 tokens) fold the layer's RMSNorms into the projections next to them
  // (ops/linear_norm.h): input_norm into q_kv_a's GEMV (each block normalizes x as it loads it),
  // q_a_norm into q_b's, post_norm into o_proj's (its last block normalizes the finished residual
  // rows): two to three launches fewer per layer, each where it pays (linear_norm_in_pays /
  // _out_pays in ops/cuda/linear_norm/params.h: moonlight at 1..8 tokens, V3's hidden-size norms
  // at 1..2). NVFP4 projections outside exact mode (the f16 tensor-core GEMV): at one token
  // (linear_norm_nvfp4_fits). Off: its GPU tests and goldens pass (H200, 2026-12-01, 9d5def8 and
  // 1a5e892), but decode ran slower with it: moonlight bf16 6% (372.6 vs 396.0 tok/s; layers
  // 85.5 / 92.8 vs 81.0 / 86.5 us: the fused GEMVs lose more than the launches save), moonlight
  // nvfp4 4.6% (468.9 vs 491.5). PEREGRINE_FUSED_NORMS=0 / =1 overrides.
  bool fused_norms = false;
  std::function<void(const std::string& what, double fraction)> progress;  // loading / filling
};

// Projections and experts of a synthetic model (router, embeddings, lm_head, W_UK / W_UV: bf16).
enum class SyntheticDtype { kBF16, kFp8, kNvfp4 };

// What one step streams from HBM, by part (bytes), for the roofline.
struct StepBytes {
  double attention = 0, router = 0, experts = 0, dense_mlp = 0, lm_head = 0, kv_cache = 0, other = 0;
  double total() const { return attention + router + experts + dense_mlp + lm_head + kv_cache + other; }
};

// Graphs captured so far (lazily, on a bucket's first step) and replays, by kind.
struct CudaGraphCounts {
  int64_t decode = 0, verify = 0, draft = 0, chain = 0;             // captured graphs
  int64_t decode_replays = 0, verify_replays = 0, draft_replays = 0, chain_replays = 0;
  // Draft chains kept on the device (draft_chain with a device picker) and what they cost the
  // host: stream synchronizations and device-to-host copies (the drafts, and the logits rows of
  // sampled rows). One chain: one synchronization and one token copy, whatever its depth.
  int64_t device_chains = 0, device_chain_syncs = 0, device_chain_token_copies = 0;
};

class CudaRunner final : public ModelRunner {
 public:
  // Verify steps of up to this many tokens per sequence (1 + drafts) replay graphs.
  static constexpr int64_t kMaxGraphTokens = 5;
  // Projections of at least this many rows (prefill) run on the bf16 tensor cores (cuBLASLt) in
  // the default mode; smaller ones (decode) on our f32-activation GEMV kernels.
  static constexpr int64_t kTensorCoreMinRows = 17;
  // Steps of at least this many tokens also run the experts and the per-head products on tensor
  // cores (ops/cuda/moe_experts_gemm.h, head_linear_gemm.h); below it their GEMV kernels win.
  static constexpr int64_t kTensorCoreExpertsMinRows = 64;

  ~CudaRunner() override;

  // Uploads the weights of a loaded (memory-mapped) checkpoint.
  static Result<std::unique_ptr<CudaRunner>> create(std::unique_ptr<DeepseekModel> host, CudaRunnerOptions opt);
  // The options a runner created with `opt` uses: the environment's overrides applied
  // (PEREGRINE_SPEC_GRAPHS, PEREGRINE_PREFILL_ATTENTION, PEREGRINE_FUSED_NORMS: 1 on, 0 off;
  // PEREGRINE_DECODE_ATTENTION: cuda, auto, tensor or twopass).
  static CudaRunnerOptions effective_options(CudaRunnerOptions opt);
  // Random weights at cfg's shapes, made on the GPU (no checkpoint): for benchmarks.
  static Result<std::unique_ptr<CudaRunner>> synthetic(const ModelConfig& cfg, SyntheticDtype dtype, uint64_t seed,
                                                       CudaRunnerOptions opt);

  const ModelConfig& config() const override { return cfg_; }
  int64_t n_mtp_layers() const override;
  int64_t n_kv_blocks() const override { return n_blocks_; }
  int64_t kv_block_size() const override { return block_size_; }
  Status forward(std::span<const SeqStep> seqs, StepOutput& out) override;
  Status forward_mtp(int64_t mtp_idx, std::span<const SeqStep> seqs, std::span<const float> prev_hidden,
                     StepOutput& out) override;
  // On the device when picker.device() is set: the catch-up pass, then depths 1..k-1 each an MTP
  // step whose input token is the previous depth's pick, chained in device memory; the whole
  // chain is one graph per (batch bucket, k). Drafts (and sampled rows' logits) come back in one
  // synchronization at the end. Without a device picker: the host loop of ModelRunner.
  Status draft_chain(int64_t mtp_idx, std::span<const SeqStep> seqs, std::span<const float> prev_hidden,
                     std::span<const DraftRow> rows, DraftPicker& picker, DraftOutput& out) override;
  std::string describe() const override;
  // Whether forward() copies the final hidden state of every token to the host (the MTP input).
  void set_need_hidden_all(bool on) override { copy_hidden_all_ = on; }
  const float* device_logits() const override;
  void* device_stream() const override { return stream(); }
  void set_logits_to_host(bool on) override { logits_to_host_ = on; }

  // ---- device-side API (benchmarks; GPU sampling) ----
  // Runs one step and leaves logits [n_rows, vocab] f32 in device_logits(); nothing is copied
  // back and the host does not wait. Decode steps (one token per sequence) replay a graph.
  Status step_async(std::span<const SeqStep> seqs);
  cudaStream_t stream() const;
  Status synchronize();
  // Replays a graph of layer `layer` alone at batch `batch` `iters` times; returns the median µs
  // per layer of `reps` timed repetitions. Each sequence has `ctx` positions of which the last
  // `q` are the step's new tokens (q = 1: a decode step; q = k + 1: a verify step of k drafts).
  Result<double> time_layer(int64_t layer, int64_t batch, int64_t ctx, int iters, int reps, int64_t q = 1);
  // Runs layer `layer` eagerly with an event after each op (inputs as time_layer's); the median
  // µs of each op over `reps` runs, in launch order (gaps between kernels count to the op that
  // follows).
  Result<std::vector<std::pair<std::string, double>>> profile_layer(int64_t layer, int64_t batch, int64_t ctx, int reps,
                                                                    int64_t q = 1);
  // Bytes one decode step at `batch` sequences of context `ctx` reads (expected distinct experts).
  StepBytes step_bytes(int64_t batch, int64_t ctx) const;
  // Bytes of one routed expert (gate_up + down), averaged over the MoE layers; 0 without.
  double routed_expert_bytes() const;
  CudaGraphCounts graph_counts() const;
  // Debug (benchmarks): while on, steps run eagerly (no graph) and each MoE layer's expert ids
  // are kept on the device; last_routing() copies them to the host after a step (it waits for
  // the stream): per cache layer (main layers, then MTP layers), [T, num_experts_per_tok] int32
  // of the last step that ran that layer, empty for dense layers. Off by default; never time a
  // step with it on.
  void set_record_routing(bool on);
  Result<std::vector<std::vector<int32_t>>> last_routing();
  size_t weight_bytes() const;
  size_t kv_cache_bytes() const;

 private:
  struct Impl;
  explicit CudaRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  ModelConfig cfg_;
  int64_t n_blocks_ = 0, block_size_ = 0;
  bool copy_hidden_all_ = true;
  bool logits_to_host_ = true;
};

}  // namespace pg
