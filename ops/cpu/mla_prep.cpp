// The CPU definition of mla_prep (ops/mla_prep.h): the three ops it fuses, in turn.
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/mla_ops.h"

namespace pg::ops::cpu {

void mla_prep(const MlaPrepArgs& a, ThreadPool& pool) {
  mla_kv_write(a.kv_write);
  rope(a.q_rope);
  head_linear(a.w_uk, pool);
}

}  // namespace pg::ops::cpu
