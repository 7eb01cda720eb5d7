// RoPE tables for the DeepSeek family: plain RoPE, or YaRN with DeepSeek's mscale, computed in
// float32 step by step as transformers' _compute_yarn_parameters does (so positions far along
// the context agree to the last bits that matter).
#pragma once

#include "formats/model_config.h"
#include "ops/rope.h"

namespace pg {

ops::RopeTable make_rope_table(const ModelConfig& c);

// The attention softmax scale: 1/sqrt(qk_head_dim), times mscale(factor, mscale_all_dim)² under
// YaRN — DeepSeek's definition (transformers' DeepseekV2 omits the YaRN factor; we do not).
float mla_softmax_scale(const ModelConfig& c);

}  // namespace pg
