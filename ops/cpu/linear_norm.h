// CPU reference of linear_norm (ops/linear_norm.h).
#pragma once

#include "core/thread_pool.h"
#include "ops/linear_norm.h"

namespace pg::ops::cpu {

// in_norm: ops::cpu::rmsnorm of x into a scratch copy, then ops::cpu::linear on it; out_norm:
// ops::cpu::linear, then ops::cpu::rmsnorm of y into y_normed.
void linear_norm(const LinearNormArgs& a, ThreadPool& pool);

}  // namespace pg::ops::cpu
