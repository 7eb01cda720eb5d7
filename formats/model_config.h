// ModelConfig: the typed view of a Hugging Face config.json for the DeepSeek-V3 family
// (model_type deepseek_v3, kimi_k2: DeepSeek-V3/R1, Moonlight, Kimi-K2; deepseek_v2: V2, V2-Lite).
// Field names are the config.json keys verbatim, so one grep finds checkpoint, reference and us.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
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
// ModelOpt NVFP4 exports may also carry {"quant_method": "modelopt", "quant_algo": "NVFP4", ...} here;
// their details are read into ModelConfig::hf_quant_config.
struct QuantizationConfig {
  std::string quant_method;  // "" (none), "fp8", "modelopt"
  std::string fmt = "e4m3";
  std::string activation_scheme;
  int64_t weight_block_size[2] = {128, 128};  // [rows (N), cols (K)] of one scale block
};

// hf_quant_config.json of ModelOpt checkpoints (nvidia/DeepSeek-R1-FP4 layout):
// {"producer": {"name": "modelopt", "version": ...},
//  "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": null, "group_size": 16,
//                   "exclude_modules": ["lm_head", "model.layers.0.self_attn*", ...]}}
// Parsed only; the NVFP4 tensor layout is described where it is loaded.
struct HfQuantConfig {
  std::string quant_algo;           // "NVFP4"
  std::string kv_cache_quant_algo;  // "" when null / absent
  int64_t group_size = 16;          // elements along K sharing one FP8 E4M3 scale
  std::vector<std::string> exclude_modules;  // module names; '*' matches any run of characters
  std::string producer_name, producer_version;

  // True when `module` (e.g. "model.layers.3.mlp.gate") matches an exclude_modules pattern.
  bool is_excluded(std::string_view module) const;
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
  bool rope_interleave = true;  // DeepSeek checkpoints pair rope dims as (2i, 2i+1); false: (i, i+d/2)
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
  std::optional<int64_t> eos_token_id;  // the first when config.json gives a list
  std::vector<int64_t> eos_token_ids;   // all of them (empty when null)
  std::optional<int64_t> pad_token_id;
  std::string torch_dtype;  // "bfloat16", ... ("dtype" in newer transformers)

  QuantizationConfig quantization_config;
  std::optional<HfQuantConfig> hf_quant_config;  // from hf_quant_config.json (load_model_config)

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool is_moe_layer(int64_t layer_idx) const {
    return n_routed_experts > 0 && layer_idx >= first_k_dense_replace && layer_idx % moe_layer_freq == 0;
  }
};

// "deepseek_v3", "kimi_k2", "deepseek_v2" — for messages.
std::string supported_model_types();

// Parses and validates config.json text (`source` names the file in messages).
// Keys that fix tensor shapes are required (vocab_size, hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
// v_head_dim): a silent default would mis-read every weight. Other keys default as in
// transformers' DeepseekV3Config / DeepseekV2Config; for V3, scoring_func "sigmoid" and
// topk_method "noaux_tc" (what DeepSeek-V3's own config.json states and transformers hard-codes).
// When "rope_scaling" is absent, newer transformers' "rope_parameters" is read instead.
Result<ModelConfig> parse_model_config(std::string_view json_text, std::string_view source = "config.json");
// Parses hf_quant_config.json text.
Result<HfQuantConfig> parse_hf_quant_config(std::string_view json_text,
                                            std::string_view source = "hf_quant_config.json");
// Reads <dir>/config.json, and <dir>/hf_quant_config.json when present.
Result<ModelConfig> load_model_config(const std::filesystem::path& model_dir);

}  // namespace pg
