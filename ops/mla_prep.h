// mla_prep: MLA's step between the projections and the attention, as one op (the fusion of
// deepseek_model.cpp layer_forward's three small steps that a decode step runs back to back):
//   kv_write: the new tokens' cache rows [rmsnorm(c_kv) * kv_a_layernorm | rope(k_pe)] (ops/mla_kv_write.h)
//   q_rope:   RoPE of q_pe, every head, in place (ops/rope.h)
//   w_uk:     q_lat[t,h] = W_UK[h]ᵀ · q_nope[t,h] (ops/head_linear.h)
// The three are independent: w_uk must read none of the elements q_rope rewrites (q_nope and q_pe
// are disjoint columns of q), and neither reads the cache. The result is that of the three ops
// in any order.
#pragma once

#include "core/status.h"
#include "ops/head_linear.h"
#include "ops/mla_kv_write.h"
#include "ops/rope.h"

namespace pg::ops {

struct MlaPrepArgs {
  MlaKvWriteArgs kv_write;
  RopeArgs q_rope;       // q_rope.m == kv_write.m
  HeadLinearArgs w_uk;   // w_uk.m == kv_write.m
};

// Each part's validate, the same token count, and the same positions for kv_write and q_rope.
Status validate(const MlaPrepArgs& a);

}  // namespace pg::ops
