// make_runner: CPU or CUDA runner from the same loaded model.
#include "model/runner_factory.h"

#include <algorithm>
#include <cstdio>

#ifdef PG_WITH_CUDA
#include "model/cuda/cuda_runner.h"
#include "ops/cuda/common/device.h"
#endif

namespace pg {

bool cuda_usable() {
#ifdef PG_WITH_CUDA
  return ops::cuda::cuda_available();
#else
  return false;
#endif
}

Result<std::unique_ptr<ModelRunner>> make_runner(std::unique_ptr<DeepseekModel> model, const RunnerOptions& o) {
  if (!model) return invalid_argument("make_runner: no model");
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    return invalid_argument("--device must be auto, cpu or cuda, got '{}'", o.device);
  if (o.kv_block_size <= 0) return invalid_argument("the KV block size must be > 0, got {}", o.kv_block_size);
  if (o.kv_cache_dtype != "auto" && o.kv_cache_dtype != "f32" && o.kv_cache_dtype != "bf16")
    return invalid_argument("--kv-cache-dtype must be auto, f32 or bf16, got '{}'", o.kv_cache_dtype);
  const bool cuda = o.device == "cuda" || (o.device == "auto" && cuda_usable());
  if (!cuda) {
    const ModelConfig& c = model->config();
    const int64_t len = o.max_model_len > 0 ? std::min(o.max_model_len, c.max_position_embeddings)
                                            : c.max_position_embeddings;
    const int64_t blocks = o.kv_blocks > 0 ? o.kv_blocks : o.max_num_seqs * ((len + o.kv_block_size - 1) / o.kv_block_size);
    return std::unique_ptr<ModelRunner>(
        new CpuRunner(std::move(model), blocks, o.kv_block_size, o.kv_cache_dtype == "bf16"));
  }
#ifdef PG_WITH_CUDA
  CudaRunnerOptions co;
  co.gpu_memory_utilization = o.gpu_memory_utilization;
  co.kv_blocks = o.kv_blocks;
  co.kv_block_size = o.kv_block_size;
  co.max_model_len = o.max_model_len;
  co.max_num_seqs = o.max_num_seqs;
  co.max_tokens_per_step = o.max_num_batched_tokens;
  co.use_graphs = o.cuda_graphs;
  co.exact = o.exact;
  if (o.kv_cache_dtype != "auto") co.kv_bf16 = o.kv_cache_dtype == "bf16";
  co.draft_head = o.speculative ? kEngineDraftHead : DraftHead::kModel;
  if (o.progress)
    co.progress = [](const std::string& what, double f) {
      std::fprintf(stderr, "\ruploading weights %5.1f%% %-24s", 100.0 * f, what.c_str());
      if (f >= 1.0) std::fprintf(stderr, "\n");
    };
  PG_ASSIGN_OR_RETURN(std::unique_ptr<CudaRunner> r, CudaRunner::create(std::move(model), co));
  return std::unique_ptr<ModelRunner>(std::move(r));
#else
  return failed_precondition("--device cuda: this build has no CUDA backend (configure with -DPEREGRINE_CUDA=ON)");
#endif
}

}  // namespace pg
