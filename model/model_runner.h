// ModelRunner: what the engine drives — a model on one backend together with its KV cache.
// CpuRunner wraps the CPU reference (DeepseekModel + KvCache); model/cuda/ has the CUDA one.
// Both take the same SeqStep lists and fill the same StepOutput, so the engine, the server and
// speculative decoding run unchanged on either.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"
#include "formats/model_config.h"
#include "model/deepseek_model.h"

namespace pg {

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
};

class CpuRunner final : public ModelRunner {
 public:
  CpuRunner(std::unique_ptr<DeepseekModel> model, int64_t n_blocks, int64_t block_size)
      : model_(std::move(model)), cache_(model_->make_cache(n_blocks, block_size)) {}

  const ModelConfig& config() const override { return model_->config(); }
  int64_t n_mtp_layers() const override { return model_->n_mtp_layers(); }
  int64_t n_kv_blocks() const override { return cache_.n_blocks(); }
  int64_t kv_block_size() const override { return cache_.block_size(); }
  Status forward(std::span<const SeqStep> seqs, StepOutput& out) override { return model_->forward(seqs, cache_, out); }
  Status forward_mtp(int64_t mtp_idx, std::span<const SeqStep> seqs, std::span<const float> prev_hidden,
                     StepOutput& out) override {
    return model_->forward_mtp(mtp_idx, seqs, prev_hidden, cache_, out);
  }
  std::string describe() const override { return "cpu"; }
  DeepseekModel* cpu_model() override { return model_.get(); }

 private:
  std::unique_ptr<DeepseekModel> model_;
  KvCache cache_;
};

}  // namespace pg
