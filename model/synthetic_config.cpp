// Synthetic model shapes: moonlight-16b-a3b, deepseek-v2-lite, deepseek-v3 (config.json values).
#include "model/synthetic_config.h"

#include <algorithm>

namespace pg {

namespace {

ModelConfig moonlight() {
  ModelConfig c;
  c.model_type = "deepseek_v3";
  c.family = ModelFamily::kDeepseekV3;
  c.vocab_size = 163840, c.hidden_size = 2048, c.intermediate_size = 11264, c.moe_intermediate_size = 1408;
  c.num_hidden_layers = 27, c.num_attention_heads = 16, c.num_key_value_heads = 16;
  c.max_position_embeddings = 8192, c.rms_norm_eps = 1e-5, c.rope_theta = 50000.0;
  c.kv_lora_rank = 512, c.qk_nope_head_dim = 128, c.qk_rope_head_dim = 64, c.v_head_dim = 128;
  c.n_routed_experts = 64, c.n_shared_experts = 2, c.num_experts_per_tok = 6, c.n_group = 1, c.topk_group = 1;
  c.first_k_dense_replace = 1, c.norm_topk_prob = true, c.routed_scaling_factor = 2.446;
  c.scoring_func = "sigmoid", c.topk_method = "noaux_tc";
  return c;
}

ModelConfig v2_lite() {
  ModelConfig c;
  c.model_type = "deepseek_v2";
  c.family = ModelFamily::kDeepseekV2;
  c.vocab_size = 102400, c.hidden_size = 2048, c.intermediate_size = 10944, c.moe_intermediate_size = 1408;
  c.num_hidden_layers = 27, c.num_attention_heads = 16, c.num_key_value_heads = 16;
  c.max_position_embeddings = 163840, c.rms_norm_eps = 1e-6, c.rope_theta = 10000.0;
  c.rope_scaling = RopeScaling{"yarn", 40.0, 4096, 32.0, 1.0, 0.707, 0.707};
  c.kv_lora_rank = 512, c.qk_nope_head_dim = 128, c.qk_rope_head_dim = 64, c.v_head_dim = 128;
  c.n_routed_experts = 64, c.n_shared_experts = 2, c.num_experts_per_tok = 6, c.n_group = 1, c.topk_group = 1;
  c.first_k_dense_replace = 1, c.norm_topk_prob = false, c.routed_scaling_factor = 1.0;
  c.scoring_func = "softmax", c.topk_method = "greedy";
  return c;
}

ModelConfig v3() {
  ModelConfig c;
  c.model_type = "deepseek_v3";
  c.family = ModelFamily::kDeepseekV3;
  c.vocab_size = 129280, c.hidden_size = 7168, c.intermediate_size = 18432, c.moe_intermediate_size = 2048;
  c.num_hidden_layers = 61, c.num_nextn_predict_layers = 1, c.num_attention_heads = 128, c.num_key_value_heads = 128;
  c.max_position_embeddings = 163840, c.rms_norm_eps = 1e-6, c.rope_theta = 10000.0;
  c.rope_scaling = RopeScaling{"yarn", 40.0, 4096, 32.0, 1.0, 1.0, 1.0};
  c.q_lora_rank = 1536, c.kv_lora_rank = 512, c.qk_nope_head_dim = 128, c.qk_rope_head_dim = 64, c.v_head_dim = 128;
  c.n_routed_experts = 256, c.n_shared_experts = 1, c.num_experts_per_tok = 8, c.n_group = 8, c.topk_group = 4;
  c.first_k_dense_replace = 3, c.norm_topk_prob = true, c.routed_scaling_factor = 2.5;
  c.scoring_func = "sigmoid", c.topk_method = "noaux_tc";
  return c;
}

}  // namespace

std::vector<std::string> synthetic_model_names() { return {"moonlight-16b-a3b", "deepseek-v2-lite", "deepseek-v3"}; }

Result<ModelConfig> synthetic_model_config(std::string_view name, int64_t layers) {
  ModelConfig c;
  if (name == "moonlight-16b-a3b") c = moonlight();
  else if (name == "deepseek-v2-lite") c = v2_lite();
  else if (name == "deepseek-v3") c = v3();
  else
    return not_found("unknown synthetic model '{}': expected moonlight-16b-a3b, deepseek-v2-lite or deepseek-v3", name);
  c.architectures = {c.family == ModelFamily::kDeepseekV2 ? "DeepseekV2ForCausalLM" : "DeepseekV3ForCausalLM"};
  if (layers < 0) return invalid_argument("--layers must be >= 1, got {}", layers);
  if (layers > 0) {
    if (layers > c.num_hidden_layers)
      return invalid_argument("{} has {} layers; --layers {} is more", name, c.num_hidden_layers, layers);
    c.num_hidden_layers = layers;
    // Keep at least one MoE layer in a slice.
    if (c.n_routed_experts > 0) c.first_k_dense_replace = std::min(c.first_k_dense_replace, layers - 1);
  }
  return c;
}

}  // namespace pg
