// Matrix: a weight matrix as a checkpoint stores it, in any of the formats the ops read
// directly (dequantizing on read): f32, bf16, DeepSeek FP8 with 2-D block scales.
// Row-major [rows = out_features, cols = in_features], as torch Linear.weight.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace pg::ops {

enum class WeightFormat : uint8_t {
  kF32,
  kBF16,
  // DeepSeek FP8: e4m3fn values [rows, cols] and f32 scale_inv [ceil(rows/bn), ceil(cols/bk)];
  // w[r][c] = fp8(r, c) * scale_inv[r / bn][c / bk]  (bn x bk = weight_block_size, 128x128 in V3)
  kFp8Block,
};

struct Matrix {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;  // out features (N)
  int64_t cols = 0;  // in features (K)
  const void* data = nullptr;           // [rows, cols] of the format's element type
  const float* scale_inv = nullptr;     // kFp8Block: [ceil(rows/block_rows), ceil(cols/block_cols)]
  int64_t block_rows = 128, block_cols = 128;

  int64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
};

// Dequantizes row `r` of `w` into out[0..cols) (f32).
void matrix_row_to_f32(const Matrix& w, int64_t r, float* out);

Status validate_matrix(const Matrix& w);

}  // namespace pg::ops
