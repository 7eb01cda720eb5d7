// head_linear: per-head batched matrix-vector product, y[t,h,:] = W[h] · x[t,h,:], i.e.
//   y[t,h,n] = Σ_k W[h,n,k] * x[t,h,k]
// MLA uses it twice per layer (deepseek_model.cpp layer_forward): W_UK absorption (W [heads,
// kv_lora_rank, qk_nope_head_dim], x = q_nope inside the q rows) and W_UV (W [heads, v_head_dim,
// kv_lora_rank], x = o_lat). W comes from kv_b_proj, split per head at load time.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace pg::ops {

enum class HeadWeight : uint8_t { kF32, kBF16 };

struct HeadLinearArgs {
  const float* x = nullptr;        // [m, n_heads, k] f32 at x[t * x_row_stride + h * x_head_stride + j]
  int64_t x_row_stride = 0, x_head_stride = 0;  // elements
  const void* w = nullptr;         // [n_heads, n, k] f32 | bf16, row-major, contiguous
  HeadWeight w_format = HeadWeight::kBF16;
  float* y = nullptr;              // [m, n_heads, n] f32 at y[t * y_row_stride + h * y_head_stride + i]
  int64_t y_row_stride = 0, y_head_stride = 0;  // elements; every (t, h, i) a distinct element
  int64_t m = 0, n_heads = 0, n = 0, k = 0;
};

Status validate(const HeadLinearArgs& a);

}  // namespace pg::ops
