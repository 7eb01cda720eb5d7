// ModelRunner: what the engine drives — a model on one backend together with its KV cache.
// CpuRunner wraps the CPU reference (DeepseekModel + KvCache); model/cuda/ has the CUDA one.
// Both take the same SeqStep lists and fill the same StepOutput, so the engine, the server and
// speculative decoding run unchanged on either.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/model_config.h"
#include "model/deepseek_model.h"

namespace pg {

// ---- Draft chains (speculative decoding with the MTP head) ----
// A draft chain is the MTP catch-up pass over the positions a step computed (forward_mtp
// semantics), then, for each of its output rows, up to n_drafts draft tokens, depth by depth:
// depth 0 is picked from the catch-up row's logits (its row is position last_pos - 1, whose
// input token is the one at last_pos); depth d >= 1 runs the MTP head on (the depth d-1 MTP
// output, the depth d-1 draft) and picks from its logits. The depth d-1 draft is the token at
// last_pos + d, so by forward_mtp's convention (the token at p + 1 goes in at position p) depth d
// runs at position last_pos + d - 1, one past the position of the MTP output it takes, and writes
// the MTP KV there before attending it: every MTP row a depth attends was written by the catch-up
// pass (positions < last_pos) or by this chain (last_pos .. last_pos + d - 1), as in vLLM's
// deepseek_mtp, which advances the position by one per chained depth.
inline constexpr int64_t kMaxDraftDepth = 8;  // = kMaxSpeculativeTokens (engine/engine.h)

struct DraftRow {
  int64_t n_drafts = 0;                  // drafts to make from this output row, [0, kMaxDraftDepth]
  int64_t last_pos = 0;                  // the sequence's last token; depth d >= 1 runs at last_pos + d - 1
  std::span<const int32_t> block_table;  // covers positions [0, last_pos + n_drafts - 1)
  bool want_logits = false;              // return each depth's logits (speculative sampling's q)
};

struct DraftOutput {
  std::vector<std::vector<int32_t>> tokens;  // per row: the drafts made (n_drafts, fewer if a depth failed)
  std::vector<std::vector<float>> logits;    // per row with want_logits: [drafts made, vocab] f32
                                             // (as the model produced them), else empty
};

// Picks draft tokens on the device the logits live on (the engine's GPU sampler). The calls are
// captured into the runner's draft-chain graphs: every pointer pick() reads must stay where it
// is while generation() is unchanged (a new generation makes the runner capture again).
class DeviceDraftPicker {
 public:
  virtual ~DeviceDraftPicker() = default;
  // Before a chain over n_rows rows (the chain's rows, then padding rows that may draw any
  // token) and n_depths depths: uploads what pick() reads, ordered on `stream`. Not captured;
  // never waits for the device.
  virtual Status begin(int64_t n_rows, int64_t n_depths, void* stream) = 0;
  // Enqueues depth `depth`'s choice for rows [0, n_rows) from logits [n_rows, stride] f32 into
  // tokens [n_rows] int32 on `stream`. Never allocates nor synchronizes (capturable).
  virtual Status pick(int64_t depth, const float* logits, int64_t n_rows, int64_t stride, int32_t* tokens,
                      void* stream) = 0;
  virtual uint64_t generation() const = 0;
};

// How a draft chain chooses its tokens.
class DraftPicker {
 public:
  virtual ~DraftPicker() = default;
  // Host: row `row`'s draft at `depth` from its logits [vocab] f32 (as the model produced them).
  // Called in depth order for each row.
  virtual int32_t pick(size_t row, int64_t depth, std::span<const float> logits) = 0;
  // The same choice on the device, when there is one (null: the runner picks on the host).
  virtual DeviceDraftPicker* device() { return nullptr; }
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int64_t n_mtp_layers() const = 0;
  // The paged KV cache: blocks of kv_block_size() positions; the engine's block manager hands
  // out ids in [0, n_kv_blocks()).
  virtual int64_t n_kv_blocks() const = 0;
  virtual int64_t kv_block_size() const = 0;
  // DeepseekModel::forward / forward_mtp semantics, the cache being the runner's own.
  virtual Status forward(std::span<const SeqStep> seqs, StepOutput& out) = 0;
  virtual Status forward_mtp(int64_t mtp_idx, std::span<const SeqStep> seqs, std::span<const float> prev_hidden,
                             StepOutput& out) = 0;
  // A draft chain (above) with MTP layer `mtp_idx`; `rows` has one entry per output row of the
  // catch-up pass (`seqs`, `prev_hidden`: forward_mtp's arguments). This default loops
  // forward_mtp depth by depth and picks on the host; a runner may keep the chain on its device
  // when picker.device() is set (CudaRunner: one graph per (batch bucket, depth), one copy back).
  // An error from the catch-up pass is returned; a failed deeper depth ends every chain there.
  virtual Status draft_chain(int64_t mtp_idx, std::span<const SeqStep> seqs, std::span<const float> prev_hidden,
                             std::span<const DraftRow> rows, DraftPicker& picker, DraftOutput& out);
  // "cpu (2 threads)", "cuda (NVIDIA H200, graphs on)": for logs and /version.
  virtual std::string describe() const = 0;
  // Whether forward() must fill StepOutput::hidden_all (speculative decoding's MTP input). A
  // runner may skip that copy when it is not needed.
  virtual void set_need_hidden_all(bool) {}
  // Logits left on the device by the last forward() ([n_rows, vocab] f32), for a DeviceSampler;
  // null on the CPU. With set_logits_to_host(false) forward() does not copy them to
  // StepOutput::logits (the rest of StepOutput is filled as always).
  virtual const float* device_logits() const { return nullptr; }
  virtual void* device_stream() const { return nullptr; }
  virtual void set_logits_to_host(bool) {}
  // The CPU model behind the runner, when there is one (the engine sets its thread pool).
  virtual DeepseekModel* cpu_model() { return nullptr; }
  // What one more draft (its chain step and its verify row) typically costs on this backend, as a
  // share of a decode step: the adaptive depth's cost when the engine is given none
  // (EngineConfig::speculative_draft_cost). Bandwidth-bound GPUs: ~0.25 (the embedded model on the
  // H200 fits 0.24; bench/RESULTS.md, session 36).
  virtual double draft_cost_hint() const { return 0.25; }
};

class CpuRunner final : public ModelRunner {
 public:
  CpuRunner(std::unique_ptr<DeepseekModel> model, int64_t n_blocks, int64_t block_size, bool kv_bf16 = false)
      : model_(std::move(model)), cache_(model_->make_cache(n_blocks, block_size, kv_bf16)) {}

  const ModelConfig& config() const override { return model_->config(); }
  int64_t n_mtp_layers() const override { return model_->n_mtp_layers(); }
  int64_t n_kv_blocks() const override { return cache_.n_blocks(); }
  int64_t kv_block_size() const override { return cache_.block_size(); }
  Status forward(std::span<const SeqStep> seqs, StepOutput& out) override { return model_->forward(seqs, cache_, out); }
  Status forward_mtp(int64_t mtp_idx, std::span<const SeqStep> seqs, std::span<const float> prev_hidden,
                     StepOutput& out) override {
    return model_->forward_mtp(mtp_idx, seqs, prev_hidden, cache_, out);
  }
  std::string describe() const override { return cache_.bf16() ? "cpu (bf16 KV cache)" : "cpu"; }
  DeepseekModel* cpu_model() override { return model_.get(); }
  // The CPU is compute-bound at these sizes: a verify row costs nearly a step's arithmetic (the
  // embedded model on the 2-core development machine fits 0.63-0.92).
  double draft_cost_hint() const override { return 0.75; }

 private:
  std::unique_ptr<DeepseekModel> model_;
  KvCache cache_;
};

}  // namespace pg
