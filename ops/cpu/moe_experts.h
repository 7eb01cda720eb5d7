// The CPU definition of the MoE expert op (ops/moe_experts.h).
#pragma once

#include "core/thread_pool.h"
#include "ops/moe_experts.h"

namespace pg::ops::cpu {

// Every selected expert's weights are dequantized once per call, however many tokens chose it;
// parallel over gate/up rows, then over output columns, so results do not depend on the thread
// count. Aborts (PG_CHECK) on an expert id outside [0, n_experts).
void moe_experts(const MoeExpertsArgs& a, ThreadPool& pool);

}  // namespace pg::ops::cpu
