// GPTQ calibration for `peregrine quantize --gptq` (formats/nvfp4_gptq.h): the source model runs on
// the CPU over teacher-forced windows of a text (eval's windows), and each Linear to quantize gets
// the Hessian Σ x xᵀ of the inputs it saw. Modules that take the same input share one Hessian
// (gate_proj and up_proj; q_a_proj, or q_proj, and kv_a_proj_with_mqa). The inputs are the source
// model's own at every layer (not those of the layers already quantized): one forward pass serves
// every layer whose Hessians fit in memory together, and larger models take several passes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "formats/nvfp4_gptq.h"

namespace pg {
class DeepseekModel;
}

namespace pg::cli {

inline constexpr uint64_t kDefaultGptqMemory = uint64_t(8) << 30;  // Hessian bytes of one calibration pass

struct GptqCalibrationOptions {
  std::filesystem::path text;   // the calibration text
  int64_t context = 512;        // tokens per window (cut to the model's context)
  int64_t max_tokens = 8192;    // text tokens taken, in all
  uint64_t max_hessian_bytes = kDefaultGptqMemory;
};

class GptqCalibration {
 public:
  // Loads the model at `src` for the CPU (memory-mapped) and cuts the text into windows.
  // Errors: the loaders', an empty or too short text.
  static Result<std::unique_ptr<GptqCalibration>> open(const std::filesystem::path& src,
                                                        const GptqCalibrationOptions& o, ThreadPool* pool);
  ~GptqCalibration();

  // The module whose input `module` takes, which owns their shared Hessian: "...up_proj" ->
  // "...gate_proj", "...kv_a_proj_with_mqa" -> "...q_a_proj" (or "...q_proj" without q_lora); the
  // module itself otherwise.
  std::string input_key(std::string_view module) const;
  // Bytes of the Hessian `module` uses (in-features² f64).
  uint64_t hessian_bytes(std::string_view module) const;
  // The modules in calibration passes, in the order given: a pass takes input keys (whole) while
  // their Hessians fit in max_hessian_bytes; a key larger than that alone is a pass of its own.
  std::vector<std::vector<std::string>> plan_passes(std::span<const std::string> modules) const;
  // One pass over the text: the Hessians of `modules` (those of the previous pass are dropped).
  // window_done(i, n) after each window. Errors: a module that is no Linear of the model's layers.
  Status collect(std::span<const std::string> modules, const std::function<void(int64_t, int64_t)>& window_done = {});
  // The Hessian `module` uses, from the last collect; nullptr when it was not collected.
  const GptqHessian* hessian(std::string_view module) const;

  int64_t tokens() const { return tokens_; }
  int64_t windows() const { return int64_t(windows_.size()); }

 private:
  GptqCalibration() = default;
  std::unique_ptr<DeepseekModel> model_;
  std::vector<std::vector<int32_t>> windows_;
  int64_t tokens_ = 0;
  uint64_t max_bytes_ = kDefaultGptqMemory;
  ThreadPool* pool_ = nullptr;
  std::map<std::string, GptqHessian, std::less<>> hessians_;  // by input key
};

}  // namespace pg::cli
