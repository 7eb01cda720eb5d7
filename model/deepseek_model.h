// DeepseekModel: the DeepSeek-V3 family's forward pass (design.md, "The model, precisely"),
// written once over the op contracts; this first backend runs the CPU reference ops.
// One call runs a step for several sequences at once (continuous batching): each brings its
// new tokens, the position of the first, and the block table of its KV cache.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "formats/model_config.h"
#include "formats/safetensors.h"
#include "model/deepseek_weights.h"
#include "model/kv_cache.h"
#include "model/step_layout.h"
#include "ops/rope.h"

namespace pg {

struct SeqStep {
  std::span<const int32_t> tokens;       // the new tokens of this sequence
  int64_t start_pos = 0;                 // position of tokens[0]; earlier positions are cached
  std::span<const int32_t> block_table;  // physical KV blocks covering start_pos + tokens.size()
  bool all_logits = false;               // logits for every new token, else for the last only
  bool no_logits = false;                // no logits at all (a prefill chunk that samples nothing)
};

// Sees the input of every Linear the forward pass applies, as it applies it: calibration (GPTQ's
// Hessians, cli/gptq.h). x: m rows of w.cols values, row stride x_stride (0: w.cols). Called on the
// calling thread, between the ops; `w.data` identifies the weight (it points into the checkpoint's
// mapping: DeepseekModel::checkpoint()). kv_b_proj, which the forward pass applies absorbed (W_UK,
// W_UV), is observed with the normalized c_kv rows it would project.
class LinearObserver {
 public:
  virtual ~LinearObserver() = default;
  virtual void observe(const ops::Matrix& w, const float* x, int64_t m, int64_t x_stride) = 0;
};

struct StepOutput {
  // Rows in order: for each sequence, its new tokens (all), its last token, or none (no_logits).
  std::vector<float> logits;  // [n_rows, vocab_size] f32
  std::vector<float> hidden;  // [n_rows, hidden_size] f32: final-RMSNorm output (MTP input)
  int64_t n_rows = 0;
  // forward(): the final-RMSNorm output of every new token, in step order [T, hidden_size]
  // (what the MTP module takes at every position). Empty from forward_mtp().
  std::vector<float> hidden_all;
};

class DeepseekModel {
 public:
  // Loads config.json and the safetensors checkpoint of `model_dir` (memory-mapped).
  static Result<std::unique_ptr<DeepseekModel>> load(const std::filesystem::path& model_dir);

  const ModelConfig& config() const { return cfg_; }
  const ModelWeights& weights() const { return w_; }
  const Checkpoint& checkpoint() const { return ckpt_; }
  int64_t vocab_size() const { return cfg_.vocab_size; }
  // Values per token per layer in the KV cache: kv_lora_rank + qk_rope_head_dim.
  int64_t kv_row_dim() const { return cfg_.kv_lora_rank + cfg_.qk_rope_head_dim; }
  // Layers that own KV cache: the main layers, then the MTP layers.
  int64_t n_cache_layers() const { return cfg_.num_hidden_layers + int64_t(w_.mtp.size()); }

  KvCache make_cache(int64_t n_blocks, int64_t block_size, bool bf16 = false) const {
    return KvCache(n_cache_layers(), n_blocks, block_size, kv_row_dim(), bf16);
  }

  // One forward step. Writes the new tokens' KV into `cache` and fills `out`.
  Status forward(std::span<const SeqStep> seqs, KvCache& cache, StepOutput& out) const;

  // MTP layers present in the checkpoint (0: no speculation).
  int64_t n_mtp_layers() const { return int64_t(w_.mtp.size()); }
  // One step of MTP module `mtp_idx` (DeepSeek-V3 layer num_hidden_layers + mtp_idx). Token t of
  // `seqs` at position p is the token at p + 1 and prev_hidden[t] ([T, H] f32) the hidden state
  // at p: the main model's final-RMSNorm output, or at deeper drafts the previous MTP output.
  // Writes the MTP layer's KV at p; out.logits predict the token at p + 2; out.hidden is the
  // MTP block's output (before shared_head.norm), which chains to the next depth.
  Status forward_mtp(int64_t mtp_idx, std::span<const SeqStep> seqs, std::span<const float> prev_hidden,
                     KvCache& cache, StepOutput& out) const;

  // Emulation of a backend's bf16 tensor-core paths (CudaRunner's default mode), so tests can
  // derive from the CPU how far bf16 activations alone move the outputs: from
  // projection_min_rows rows on, the attention / head projections (not the router) round their
  // input and weight to bf16; in steps of at least expert_min_rows tokens so do the experts (x, the
  // weights and h) and the per-head W_UK / W_UV products; where every sequence of the step brings
  // at least attention_min_rows tokens, the attention (scaled q, cache rows and softmax weights:
  // the tensor-core prefill attention, ops::cuda::mla_prefill). 0: off (the f32 reference, default).
  // Below those sizes the NVFP4 and FP8 GEMVs run on f16 tensor cores (LinearArgs / MoeExpertsArgs::
  // f16_activations): with projection_min_rows set, NVFP4 and FP8 projections of fewer rows round x
  // to f16 where CUDA's linear takes that kernel (ops::f16_mma_gemv); with expert_min_rows set,
  // NVFP4 experts in smaller steps round x (gate/up) and h (down) to f16 (their K a multiple of 32),
  // and FP8 experts likewise where ops::fp8_experts_mma accepts the stack.
  struct Bf16Emulation {
    int64_t projection_min_rows = 0;
    int64_t expert_min_rows = 0;
    int64_t attention_min_rows = 0;
  };
  void set_bf16_emulation(Bf16Emulation e) { emul_ = e; }

  // A W4A8 quality probe: every NVFP4 projection and expert takes its input rounded to e4m3 with an
  // f32 scale per token row (round_rows_e4m3), at every step size, instead of the emulation above.
  // Off by default; no CUDA kernel does this yet.
  void set_e4m3_activations(bool on) { e4m3_x_ = on; }

  // Calibration: every Linear's input goes to `o` (nullptr: none, the default).
  void set_linear_observer(LinearObserver* o) { observer_ = o; }

  // The pool CPU ops run on (default: ThreadPool::global()).
  void set_thread_pool(ThreadPool* pool) { pool_ = pool; }
  ThreadPool& thread_pool() const { return pool_ ? *pool_ : ThreadPool::global(); }

 private:
  Status check_cache(const KvCache& cache) const;
  DeepseekModel(ModelConfig cfg, Checkpoint ckpt);
  // One decoder layer over T tokens, x [T, H] updated in place.
  void layer_forward(const LayerWeights& L, int64_t cache_layer, float* x, int64_t T, const int64_t* positions,
                     const int32_t* token_seq, const int64_t* ctx_len, const int32_t* block_tables,
                     int64_t max_blocks, KvCache& cache) const;
  // f16_inter > 0: the f16-activation emulation, f16_inter the CUDA kernel's per-expert inter.
  void mlp_forward(const MlpWeights& w, const float* x, int64_t T, int64_t inter, float* y, bool accumulate,
                   bool bf16 = false, int64_t f16_inter = 0) const;
  void proj(const float* x, const ops::Matrix& w, float* y, int64_t m, bool accumulate = false) const;
  bool experts_bf16(int64_t T) const { return emul_.expert_min_rows > 0 && T >= emul_.expert_min_rows; }
  bool experts_f16(int64_t T) const { return emul_.expert_min_rows > 0 && T < emul_.expert_min_rows; }
  void moe_forward(const MoeWeights& w, const float* x, int64_t T, float* y) const;

  ModelConfig cfg_;
  Checkpoint ckpt_;
  ModelWeights w_;
  ops::RopeTable rope_;
  float softmax_scale_ = 1.0f;
  ThreadPool* pool_ = nullptr;
  Bf16Emulation emul_;
  bool e4m3_x_ = false;
  LinearObserver* observer_ = nullptr;
};

}  // namespace pg
