// `peregrine bench` on the CUDA backend: a model folder or `--synthetic NAME` (random weights at
// real shapes, made on the GPU). Built only with PEREGRINE_CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pg::cli {

struct CudaBenchOptions {
  std::string model_dir;   // or
  std::string synthetic;   // moonlight-16b-a3b | deepseek-v2-lite | deepseek-v3
  int64_t layers = 0;      // synthetic: the first N layers (0: all)
  std::string dtype = "bf16";  // synthetic weights: bf16 | fp8
  int64_t context = 1024;      // prompt before decoding
  int64_t decode_tokens = 256;
  int repeats = 5;
  std::vector<int64_t> batches = {8, 16, 32, 64};
  int64_t long_prefill = 8192;  // 0: skip
  double gpu_memory_utilization = 0.90;
  std::string kv_cache_dtype = "auto";  // auto | f32 | bf16 (CudaRunnerOptions::kv_bf16)
  bool graphs = true;
  std::string json_path;  // also write the JSON report here
  bool json = false;      // print JSON instead of the table
  // Speculative decoding step costs at batch 1 after the prompt, per draft depth k (empty: skip):
  // verify step (1 + k tokens), k chained MTP draft steps, distinct experts the verify step reads.
  std::vector<int64_t> speculative_tokens;
  double acceptance_rate = 0.564;  // per draft, for the effective tokens/s
};

int run_cuda_bench(const CudaBenchOptions& o);

}  // namespace pg::cli
