// validate(): the shape and pointer contracts of every op, checked at the boundary.
#include "ops/linear.h"
#include "ops/mla_attention.h"
#include "ops/moe_routing.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"

namespace pg::ops {

Status validate(const LinearArgs& a) {
  if (!a.w) return invalid_argument("linear: no weight");
  PG_TRY(validate_matrix(*a.w));
  if (a.m < 0 || (a.m > 0 && (!a.x || !a.y))) return invalid_argument("linear: m={} with null x/y", a.m);
  if (a.x_stride && a.x_stride < a.w->cols) return invalid_argument("linear: x_stride {} < cols {}", a.x_stride, a.w->cols);
  if (a.y_stride && a.y_stride < a.w->rows) return invalid_argument("linear: y_stride {} < rows {}", a.y_stride, a.w->rows);
  return ok_status();
}

Status validate(const RmsNormArgs& a) {
  if (a.n <= 0 || a.m < 0 || !a.weight || (a.m && (!a.x || !a.y)))
    return invalid_argument("rmsnorm: bad arguments m={} n={}", a.m, a.n);
  return ok_status();
}

Status validate(const RopeArgs& a) {
  if (!a.table || a.rope_dim <= 0 || a.rope_dim % 2 || int64_t(a.table->inv_freq.size()) != a.rope_dim / 2)
    return invalid_argument("rope: rope_dim {} does not match the table", a.rope_dim);
  if (a.m && (!a.x || !a.positions)) return invalid_argument("rope: null input");
  return ok_status();
}

Status validate(const MlaAttentionArgs& a) {
  if (a.m && (!a.q_lat || !a.q_pe || !a.block_tables || !a.token_seq || !a.ctx_len || !a.o_lat))
    return invalid_argument("mla_attention: null input");
  if (a.m && !a.kv == !a.kv_bf16)
    return invalid_argument("mla_attention: the cache pool must be given once, as kv (f32) or kv_bf16, got {}",
                            a.kv ? "both" : "neither");
  if (a.n_heads <= 0 || a.kv_lora_rank <= 0 || a.rope_dim <= 0 || a.block_size <= 0 || a.max_blocks_per_seq <= 0)
    return invalid_argument("mla_attention: bad dims");
  // Strides: 0 or large enough that the heads of a row (and the rows) do not overlap.
  const int64_t qlh = q_lat_head_stride(a), qph = q_pe_head_stride(a);
  if (a.q_lat_head_stride < 0 || a.q_pe_head_stride < 0 || qlh < a.kv_lora_rank || qph < a.rope_dim)
    return invalid_argument("mla_attention: head strides q_lat {} q_pe {} below kv_lora_rank {} / rope_dim {}",
                            a.q_lat_head_stride, a.q_pe_head_stride, a.kv_lora_rank, a.rope_dim);
  if (a.q_lat_row_stride < 0 || a.q_pe_row_stride < 0 ||
      q_lat_row_stride(a) < (a.n_heads - 1) * qlh + a.kv_lora_rank ||
      q_pe_row_stride(a) < (a.n_heads - 1) * qph + a.rope_dim)
    return invalid_argument("mla_attention: row strides q_lat {} q_pe {} overlap the heads", a.q_lat_row_stride,
                            a.q_pe_row_stride);
  for (int64_t t = 0; t < a.m; ++t)
    if (a.ctx_len[t] <= 0 || a.ctx_len[t] > a.block_size * a.max_blocks_per_seq)
      return invalid_argument("mla_attention: ctx_len {} out of range", a.ctx_len[t]);
  return ok_status();
}

Status validate(const MoeRoutingArgs& a) {
  if (a.n_experts <= 0 || a.top_k <= 0 || a.top_k > a.n_experts) return invalid_argument("moe_routing: top_k {} of {}", a.top_k, a.n_experts);
  if (a.n_group <= 0 || a.n_experts % a.n_group || a.topk_group <= 0 || a.topk_group > a.n_group)
    return invalid_argument("moe_routing: {} experts in {} groups, keep {}", a.n_experts, a.n_group, a.topk_group);
  if (a.top_k > a.topk_group * (a.n_experts / a.n_group))
    return invalid_argument("moe_routing: top_k {} exceeds the experts in the kept groups", a.top_k);
  if (a.method == MoeTopk::kNoAuxTc && !a.bias) return invalid_argument("moe_routing: noaux_tc needs e_score_correction_bias");
  return ok_status();
}

}  // namespace pg::ops
