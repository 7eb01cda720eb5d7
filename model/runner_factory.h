// make_runner: the model on the device the user asked for — the CPU reference, or the CUDA
// runner ("auto" picks CUDA when this build has it and a usable GPU is present).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "model/deepseek_model.h"
#include "model/model_runner.h"

namespace pg {

struct RunnerOptions {
  std::string device = "auto";   // auto | cpu | cuda
  int64_t kv_blocks = 0;         // 0: cpu: max_num_seqs full-length sequences; cuda: from GPU memory
  int64_t kv_block_size = 16;
  int64_t max_model_len = 0;     // 0: the model's
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  double gpu_memory_utilization = 0.90;
  std::string kv_cache_dtype = "auto";  // auto | f32 | bf16 (auto: the CPU's f32, CudaRunnerOptions::kv_bf16's default)
  bool cuda_graphs = true;
  bool exact = false;            // cuda debug mode: f32 activations everywhere (matches the CPU to ~1e-5)
  bool speculative = false;      // the engine drafts with the MTP layers (cuda: their FP8 draft head)
  bool progress = false;         // a loading progress line on stderr
};

// True when this build has the CUDA backend and a usable GPU is present.
bool cuda_usable();

Result<std::unique_ptr<ModelRunner>> make_runner(std::unique_ptr<DeepseekModel> model, const RunnerOptions& o);

}  // namespace pg
