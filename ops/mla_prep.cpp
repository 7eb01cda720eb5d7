// validate() of the mla_prep contract (ops/mla_prep.h); the CPU definition is ops/cpu/mla_prep.cpp.
#include "ops/mla_prep.h"

namespace pg::ops {

Status validate(const MlaPrepArgs& a) {
  PG_TRY(validate(a.kv_write));
  PG_TRY(validate(a.q_rope));
  PG_TRY(validate(a.w_uk));
  if (a.q_rope.m != a.kv_write.m || a.w_uk.m != a.kv_write.m)
    return invalid_argument("mla_prep: token counts differ (kv_write {}, q_rope {}, w_uk {})", a.kv_write.m,
                            a.q_rope.m, a.w_uk.m);
  if (a.q_rope.positions != a.kv_write.positions)
    return invalid_argument("mla_prep: q_rope and kv_write read different positions");
  return ok_status();
}

}  // namespace pg::ops
