// ModelConfig: the typed view of a Hugging Face config.json for the DeepSeek-V3 family
// (model_type deepseek_v3, kimi_k2: DeepSeek-V3/R1, Moonlight, Kimi-K2; deepseek_v2: V2, V2-Lite).
// Field names are the config.json keys verbatim, so one grep finds checkpoint, reference and us.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace pg {

enum class ModelFamily { kDeepseekV3, kDeepseekV2 };

// rope_scaling {"type"/"rope_type": "yarn", ...}; absent => plain RoPE.
struct RopeScaling {
  std::string type;  // "yarn" (the only scaling the family ships); "" when absent
  double factor = 1.0;
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
};

// quantization_config of DeepSeek FP8 checkpoints:
// {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
struct QuantizationConfig {
  std::string quant_method;  // "" (none), "fp8"; NVFP4 comes from hf_quant_config.json
  std::string fmt = "e4m3";
  std::string activation_scheme;
  int64_t weight_block_size[2] = {128, 128};
};

struct ModelConfig {
  std::string model_type;  // "deepseek_v3" | "kimi_k2" | "deepseek_v2"
  ModelFamily family = ModelFamily::kDeepseekV3;
  std::vector<std::string> architectures;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;      // dense MLP
  int64_t moe_intermediate_size = 0;  // per routed / shared expert
  int64_t num_hidden_layers = 0;
  int64_t num_nextn_predict_layers = 0;  // MTP layers stored after the main layers
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool attention_bias = false;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";

  // MLA
  std::optional<int64_t> q_lora_rank;  // null for V2-Lite / Moonlight
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;

  // MoE
  int64_t n_routed_experts = 0;  // 0 => every layer dense
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  std::string scoring_func = "softmax";     // V3: "sigmoid"
  std::string topk_method = "greedy";       // V3: "noaux_tc"; V2: "greedy" | "group_limited_greedy"

  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;
  std::string torch_dtype;  // "bfloat16", ...

  QuantizationConfig quantization_config;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool is_moe_layer(int64_t layer_idx) const {
    return n_routed_experts > 0 && layer_idx >= first_k_dense_replace && layer_idx % moe_layer_freq == 0;
  }
};

// Parses and validates config.json text (`source` names the file in messages).
Result<ModelConfig> parse_model_config(std::string_view json_text, std::string_view source = "config.json");
// Reads <dir>/config.json.
Result<ModelConfig> load_model_config(const std::filesystem::path& model_dir);

}  // namespace pg
