// `peregrine quantize`: a Hugging Face DeepSeek-V3-family checkpoint (BF16, F32 or DeepSeek FP8) to
// NVIDIA ModelOpt NVFP4, the layout of nvidia/DeepSeek-R1-FP4 (formats/nvfp4.h), which
// model/deepseek_weights.cpp loads. Streams one tensor at a time from the memory-mapped shards.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "formats/model_config.h"
#include "formats/safetensors.h"
#include "cli/gptq.h"

namespace pg::cli {

// transformers' save_pretrained default (max_shard_size "5GB"), what DeepSeek's and NVIDIA's shards use.
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;

struct QuantizeOptions {
  std::filesystem::path src, dst;
  std::string format = "nvfp4";
  std::vector<std::string> exclude;  // fnmatch patterns on module names, on top of the defaults
  bool mse = false;                  // quantize_nvfp4's MSE block-scale search
  bool force = false;                // write into a non-empty DST
  int threads = 0;                   // 0: every hardware thread
  uint64_t max_shard_bytes = kDefaultMaxShardBytes;
  // GPTQ (formats/nvfp4_gptq.h) with the Hessians of this calibration text (cli/gptq.h); empty:
  // every block rounded to nearest (quantize_nvfp4). `mse` applies to GPTQ's block scales too.
  std::filesystem::path gptq_text;
  double gptq_damp = 0.1;  // measured on the embedded model: cli/gptq.h
  uint64_t gptq_max_hessian_bytes = kDefaultGptqMemory;
};

// One tensor of the source, as the planner sees it.
struct SourceTensor {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
};

enum class TensorAction {
  kCopy,      // written unchanged (name, dtype, shape, bytes)
  kQuantize,  // a Linear weight: <m>.weight U8, <m>.weight_scale F8_E4M3, <m>.weight_scale_2 and <m>.input_scale F32
  kDrop,      // the DeepSeek FP8 weight_scale_inv of a quantized weight (consumed by dequantization)
};

struct PlannedTensor {
  std::string name;
  TensorAction action = TensorAction::kCopy;
  std::string scale_inv;  // kQuantize of an F8_E4M3 weight: its "<m>.weight_scale_inv"; else empty
};

struct QuantizePlan {
  std::vector<PlannedTensor> tensors;        // one per source tensor, in the order given
  std::vector<std::string> exclude_modules;  // hf_quant_config.json: defaults, --exclude, modules left for shape
  std::vector<std::string> warnings;         // --exclude patterns matching nothing, in-dims not a multiple of 16
  int64_t n_quantized = 0;
  int64_t n_fp8_kept = 0;  // DeepSeek FP8 weights left unquantized (excluded): they keep weight_scale_inv
};

// Which tensors become NVFP4 (no I/O: a function of the config, the tensor list and the patterns).
//  - Quantized: every Linear weight of the decoder layers model.layers.{i < num_hidden_layers}: a
//    2-D "<m>.weight" other than the router (mlp.gate.weight), i.e. attention projections, dense
//    MLPs, shared experts and routed experts. Attention and shared experts are quantized by default
//    (exclude them with '*self_attn*', '*shared_experts*'); routed experts always are, and an
//    --exclude pattern that matches one is an error.
//  - Never quantized, as in nvidia/DeepSeek-R1-FP4: embeddings, norms, the router, lm_head (listed
//    as "lm_head" in exclude_modules) and the MTP layers model.layers.{num_hidden_layers + k}.*
//    (listed as "model.layers.{n}.*").
//  - --exclude patterns are fnmatch(3) globs on module names (the tensor name without ".weight").
//    Patterns using only '*' are written to exclude_modules as given; patterns with '?', '[' or '\'
//    are written as the module names they matched, since readers of exclude_modules (ours
//    included) know only '*'. A pattern matching no module of the checkpoint is a warning.
//  - A Linear whose in-dim is not a multiple of 16 (the NVFP4 block) stays as it is, with a warning,
//    and is listed by name in exclude_modules.
// Errors: a source that is already NVFP4 (hf_quant_config.json, quant_method "modelopt", U8
// weights); a Linear to quantize whose dtype is not BF16, F32 or F8_E4M3 with its weight_scale_inv
// and a DeepSeek FP8 quantization_config; a pattern matching a routed expert; nothing to quantize.
Result<QuantizePlan> plan_nvfp4(const ModelConfig& cfg, std::span<const SourceTensor> tensors,
                                std::span<const std::string> exclude);

// A source Linear weight [rows, cols] in f32 into `out` (resized): BF16 and F32 exactly; DeepSeek
// FP8 as fp8(w[r][c]) * scale_inv[r / block_rows][c / block_cols], one f32 rounding, as DeepSeek's
// weight_dequant and ops::matrix_row_to_f32 (WeightFormat::kFp8Block) compute it.
Status source_weight_to_f32(const TensorView& w, const TensorView* scale_inv, const QuantizationConfig& q,
                            std::vector<float>& out, ThreadPool& pool);

struct QuantizeResult {
  QuantizePlan plan;
  std::vector<std::filesystem::path> shards;  // written, in order
  std::vector<std::string> copied_files;      // tokenizer, generation_config.json, ... (names)
  bool config_keeps_fp8 = false;  // config.json kept its DeepSeek FP8 quantization_config (n_fp8_kept > 0)
  uint64_t bytes_in = 0, bytes_out = 0;  // tensor bytes
  int64_t gptq_passes = 0, gptq_tokens = 0;  // calibration passes over the text, and its tokens
  double gptq_max_damp = 0;                  // the largest damping a Hessian needed
};

struct QuantizeCallbacks {
  // After planning, before anything is written (warnings can be shown before the long part).
  std::function<void(const QuantizePlan&)> planned;
  // After each source tensor: tensors done / total, source bytes done / total.
  std::function<void(int64_t, int64_t, uint64_t, uint64_t)> progress;
  // A line about a long step (GPTQ's calibration passes).
  std::function<void(const std::string&)> log;
};

// Quantizes options.src into options.dst:
//  - DST is created; a non-empty DST is an error unless `force` (then its *.safetensors and
//    model.safetensors.index.json are removed first: they would be read as part of the new model).
//  - Shards: one model.safetensors, or model-0000i-of-0000n.safetensors of about equal sizes
//    (boundaries between tensors; n from ceil(output bytes / max_shard_bytes) up until no shard of
//    two or more tensors exceeds max_shard_bytes) with model.safetensors.index.json. Each shard is
//    written to a temporary name and renamed when complete; config.json is written last, so a run
//    that fails leaves no folder that loads as a model.
//  - Memory: one source tensor is read at a time (its pages are released after use), plus its f32
//    copy and its quantized bytes. With GPTQ (gptq_text), the source model is also mapped and run
//    on the CPU over the text (cli/gptq.h), one pass per group of Hessians that fits
//    gptq_max_hessian_bytes; the copied tensors are written first, the quantized ones pass by pass.
//    A Linear that saw no input in the calibration (an expert never routed to) is rounded to nearest.
//  - hf_quant_config.json (ModelOpt form); config.json with quantization_config in ModelOpt form
//    (quant_method "modelopt", quant_algo "NVFP4", ...), except when DeepSeek FP8 weights remain:
//    then it keeps the FP8 quantization_config, through which those are read, and hf_quant_config.json
//    alone describes the NVFP4 modules; every other top-level file of SRC is copied.
// Errors: InvalidArgument for usage (missing SRC, DST not empty, bad format, bad patterns), the
// planner's and the file errors otherwise.
Result<QuantizeResult> quantize_checkpoint(const QuantizeOptions& o, const QuantizeCallbacks& callbacks = {});

}  // namespace pg::cli
