// validate() of the MoE expert op (ops/moe_experts.h).
#include "ops/moe_experts.h"

namespace pg::ops {

Status validate(const MoeExpertsArgs& a) {
  if (!a.gate_up || !a.down) return invalid_argument("moe_experts: no gate_up/down weights");
  PG_TRY(validate_matrix(*a.gate_up));
  PG_TRY(validate_matrix(*a.down));
  // n_experts 0 with n_shared >= 1 and top_k 0 is a dense MLP (the runner's first dense layers).
  if (a.m < 0 || a.hidden <= 0 || a.inter <= 0 || a.n_experts < 0 || a.n_shared < 0 || a.n_experts + a.n_shared == 0)
    return invalid_argument("moe_experts: bad dims m={} hidden={} inter={} n_experts={} n_shared={}", a.m, a.hidden,
                            a.inter, a.n_experts, a.n_shared);
  if (a.top_k < 0 || a.top_k > a.n_experts)
    return invalid_argument("moe_experts: top_k {} of {} experts", a.top_k, a.n_experts);
  const int64_t n_all = a.n_experts + a.n_shared;
  if (a.gate_up->rows != n_all * 2 * a.inter || a.gate_up->cols != a.hidden)
    return invalid_argument("moe_experts: gate_up is {}x{}, want ({} + {}) * 2 * {} x {}", a.gate_up->rows,
                            a.gate_up->cols, a.n_experts, a.n_shared, a.inter, a.hidden);
  if (a.down->rows != n_all * a.hidden || a.down->cols != a.inter)
    return invalid_argument("moe_experts: down is {}x{}, want ({} + {}) * {} x {}", a.down->rows, a.down->cols,
                            a.n_experts, a.n_shared, a.hidden, a.inter);
  if (a.gate_up->format == WeightFormat::kFp8Block && a.inter % a.gate_up->block_rows)
    return invalid_argument(
        "moe_experts: FP8 block weights need inter ({}) to be a multiple of gate_up's block_rows ({}) so that "
        "every expert's rows start on a scale-row boundary",
        a.inter, a.gate_up->block_rows);
  if (a.down->format == WeightFormat::kFp8Block && a.hidden % a.down->block_rows)
    return invalid_argument(
        "moe_experts: FP8 block weights need hidden ({}) to be a multiple of down's block_rows ({}) so that "
        "every expert's rows start on a scale-row boundary",
        a.hidden, a.down->block_rows);
  if (a.y_stride && a.y_stride < a.hidden)
    return invalid_argument("moe_experts: y_stride {} < hidden {}", a.y_stride, a.hidden);
  if (a.m > 0 && (!a.x || !a.y)) return invalid_argument("moe_experts: m={} with null x/y", a.m);
  if (a.m > 0 && a.top_k > 0 && (!a.expert_idx || !a.expert_weight))
    return invalid_argument("moe_experts: top_k={} with null expert_idx/expert_weight", a.top_k);
  return ok_status();
}

}  // namespace pg::ops
