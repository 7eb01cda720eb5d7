// head_linear: per-head batched matrix-vector product, y[t,h,:] = W[h] · x[t,h,:], i.e.
//   y[t,h,n] = Σ_k W[h,n,k] * x[t,h,k]
// MLA uses it twice per layer (deepseek_model.cpp layer_forward): W_UK absorption (W [heads,
// kv_lora_rank, qk_nope_head_dim], x = q_nope inside the q rows) and W_UV (W [heads, v_head_dim,
// kv_lora_rank], x = o_lat). W comes from kv_b_proj, split per head at load time.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "ops/matrix.h"

namespace pg::ops {

// kFp8: e4m3fn codes with one f32 scale per row and `scale_group` columns, W[r, j] = code(r, j) x
// w_scale[r x ceil(k / scale_group) + j / scale_group]: a DeepSeek-FP8 kv_b_proj's W_UK / W_UV at one
// byte a weight (a W_UV row lies in one 128-row block of kv_b_proj, so its scales are that block
// row's; W_UK^T's row (h, r) is a column of one block row, its groups that block's rows).
enum class HeadWeight : uint8_t { kF32, kBF16, kFp8 };

struct HeadLinearArgs {
  const float* x = nullptr;        // [m, n_heads, k] f32 at x[t * x_row_stride + h * x_head_stride + j]
  int64_t x_row_stride = 0, x_head_stride = 0;  // elements
  const void* w = nullptr;         // [n_heads, n, k] f32 | bf16 | e4m3fn, row-major, contiguous
  HeadWeight w_format = HeadWeight::kBF16;
  const float* w_scale = nullptr;  // kFp8: [n_heads * n, ceil(k / scale_group)] f32, same memory as w
  int64_t scale_group = 128;       // kFp8: columns per scale, a power of two >= 16
  float y_scale = 1.0f;            // y = y_scale x (W · x): an NVFP4 kv_b_proj's scale_2 (Bf16Heads)
  float* y = nullptr;              // [m, n_heads, n] f32 at y[t * y_row_stride + h * y_head_stride + i]
  int64_t y_row_stride = 0, y_head_stride = 0;  // elements; every (t, h, i) a distinct element
  int64_t m = 0, n_heads = 0, n = 0, k = 0;
};

Status validate(const HeadLinearArgs& a);

// W_UK^T [n_heads, R, nope] and W_UV [n_heads, V, R] of a DeepSeek-FP8 kv_b_proj ([n_heads * (nope +
// V), R] e4m3 codes, f32 scales per block_rows x block_cols block) as HeadWeight::kFp8: each weight
// keeps its kv_b_proj element's code and block scale, so code x scale is the f32 value of the
// dequantized kv_b_proj (ops::matrix_row_to_f32), at a quarter of f32's bytes. W_UK^T's row (h, r)
// runs over head h's nope rows of kv_b_proj: its scale changes every block_rows columns
// (uk_group); a W_UV row is a kv_b_proj row (uv_group = block_cols).
struct Fp8Heads {
  std::vector<uint8_t> uk_t, uv;         // codes
  std::vector<float> uk_scale, uv_scale;  // [n_heads * R, ceil(nope / uk_group)], [n_heads * V, ceil(R / uv_group)]
  int64_t uk_group = 0, uv_group = 0;
};
// Whether kv_b_proj can be split so: FP8 with power-of-two blocks of >= 16 (a 16-code chunk under
// one scale), every head's rows starting a block row ((nope + V) % block_rows == 0).
bool fp8_heads_fit(const Matrix& kv_b_proj, int64_t nope, int64_t v_head_dim);
Fp8Heads split_fp8_heads(const Matrix& kv_b_proj, int64_t n_heads, int64_t nope, int64_t v_head_dim);

// W_UK^T and W_UV of an NVFP4 kv_b_proj (one ModelOpt tensor: e2m1 codes, e4m3 scales per 16, one
// scale_2) as bf16 values code x block scale, exact (<= 6 significant bits, within bf16's range),
// with y_scale = scale_2 applied to the outputs: 2 bytes a weight instead of f32's 4. (The code
// blocks run along kv_b_proj's rows, so W_UK^T, a transpose, cannot keep them.)
struct Bf16Heads {
  std::vector<uint16_t> uk_t, uv;  // [n_heads, R, nope], [n_heads, V, R]
  float y_scale = 1.0f;
};
bool nvfp4_heads_fit(const Matrix& kv_b_proj, int64_t nope, int64_t v_head_dim);
Bf16Heads split_nvfp4_heads(const Matrix& kv_b_proj, int64_t n_heads, int64_t nope, int64_t v_head_dim);

}  // namespace pg::ops
