// The weights of a DeepSeek-V3-family model, as views into the memory-mapped checkpoint
// (matrices stay in their stored format: bf16, f32 or DeepSeek FP8 blocks) plus the small
// f32 tensors the forward pass derives at load (norm weights, the absorbed W_UK / W_UV).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/model_config.h"
#include "formats/safetensors.h"
#include "ops/matrix.h"

namespace pg {

struct MlpWeights {
  ops::Matrix gate, up, down;  // [inter, H], [inter, H], [H, inter]
};

struct AttentionWeights {
  bool has_q_lora = false;
  ops::Matrix q_a_proj;              // [q_lora_rank, H]
  std::vector<float> q_a_layernorm;  // [q_lora_rank]
  ops::Matrix q_b_proj;              // [n_heads * qk_head_dim, q_lora_rank]
  ops::Matrix q_proj;                // [n_heads * qk_head_dim, H] (no q_lora)
  ops::Matrix kv_a_proj_with_mqa;    // [kv_lora_rank + qk_rope_head_dim, H]
  std::vector<float> kv_a_layernorm; // [kv_lora_rank]
  ops::Matrix kv_b_proj;             // [n_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank]
  std::vector<float> w_uk;           // [n_heads, qk_nope_head_dim, kv_lora_rank] f32, from kv_b_proj
  std::vector<float> w_uv;           // [n_heads, v_head_dim, kv_lora_rank] f32, from kv_b_proj
  ops::Matrix o_proj;                // [H, n_heads * v_head_dim]
};

struct MoeWeights {
  ops::Matrix router;                 // mlp.gate.weight [n_routed_experts, H]
  std::vector<float> router_f32;      // the router in f32 (logits are computed in f32)
  std::vector<float> e_score_correction_bias;  // [n_routed_experts] (V3), empty for V2
  std::vector<MlpWeights> experts;    // n_routed_experts
  bool has_shared = false;
  MlpWeights shared;                  // inter = moe_intermediate_size * n_shared_experts
};

struct LayerWeights {
  std::vector<float> input_layernorm, post_attention_layernorm;  // [H]
  AttentionWeights attn;
  bool is_moe = false;
  MlpWeights mlp;  // dense layers
  MoeWeights moe;
};

// DeepSeek-V3's multi-token-prediction module, stored as layer num_hidden_layers + i.
struct MtpWeights {
  ops::Matrix embed_tokens;     // [vocab, H] (DeepSeek stores its own copy)
  std::vector<float> enorm, hnorm;  // [H]
  ops::Matrix eh_proj;          // [H, 2H]: input is [enorm(emb) ; hnorm(h)]
  LayerWeights block;
  std::vector<float> shared_head_norm;  // [H]
  ops::Matrix shared_head_head;         // [vocab, H]
};

struct ModelWeights {
  ops::Matrix embed_tokens;  // [vocab, H]
  std::vector<LayerWeights> layers;
  std::vector<float> norm;   // [H]
  ops::Matrix lm_head;       // [vocab, H]
  std::vector<MtpWeights> mtp;
};

// Binds every tensor of the checkpoint to its place, checking names, shapes and dtypes.
// Missing tensors, tensors of the wrong shape or dtype, and tensors no part of the model
// uses are errors that name the tensor and what was expected.
Result<ModelWeights> load_model_weights(const ModelConfig& cfg, const Checkpoint& ckpt);

}  // namespace pg
