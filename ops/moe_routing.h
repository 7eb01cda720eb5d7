// moe_routing: router scores -> the chosen experts and their weights, for every token.
// DeepSeek-V3 (noaux_tc): s = sigmoid(logits); choice = s + e_score_correction_bias;
//   group score = sum of the top-2 choice values in the group; keep the best topk_group groups;
//   top_k experts by choice among kept groups (the others are -inf, as DeepSeek's reference);
//   weight = s (unbiased) of the chosen, / (sum + 1e-20) when norm_topk_prob, * routed_scaling_factor.
// DeepSeek-V2: s = softmax(logits); "greedy": top_k of s; "group_limited_greedy": group score =
//   max of s in the group, keep topk_group groups, then top_k; weights normalised when
//   norm_topk_prob and top_k > 1, then * routed_scaling_factor.
// Ties are part of the contract: value descending, then expert index ascending; outputs are
// written in that order.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace pg::ops {

enum class MoeScoring : uint8_t { kSigmoid, kSoftmax };
enum class MoeTopk : uint8_t { kNoAuxTc, kGreedy, kGroupLimitedGreedy };

struct MoeRoutingArgs {
  const float* logits = nullptr;  // [m, n_experts] f32 router logits
  const float* bias = nullptr;    // [n_experts] f32 e_score_correction_bias (kNoAuxTc), else null
  int32_t* expert_idx = nullptr;  // [m, top_k]
  float* expert_weight = nullptr; // [m, top_k]
  int64_t m = 0, n_experts = 0, top_k = 0, n_group = 1, topk_group = 1;
  MoeScoring scoring = MoeScoring::kSigmoid;
  MoeTopk method = MoeTopk::kNoAuxTc;
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
};

Status validate(const MoeRoutingArgs& a);

}  // namespace pg::ops
