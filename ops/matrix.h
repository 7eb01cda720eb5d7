// Matrix: a weight matrix as a checkpoint stores it, in any of the formats the ops read
// directly (dequantizing on read): f32, bf16, DeepSeek FP8 with 2-D block scales, NVFP4
// (ModelOpt export; layout in formats/nvfp4.h).
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
  // NVFP4 (ModelOpt, nvidia/DeepSeek-R1-FP4): data = packed e2m1 codes [rows, cols/2] u8, element 2j in
  // the low nibble of byte j, 2j+1 in the high nibble; scale_fp8 = e4m3fn [rows, cols/16], one per 16
  // consecutive elements of a row, row-major and unswizzled; scale_2 = per-tensor f32 (weight_scale_2).
  // w[r][c] = (e2m1(r, c) * fp8(scale_fp8[r][c/16])) * scale_2: the first product is exact
  // (<= 2 x 4 significant bits), so each value is the exact product rounded once to f32.
  kNvfp4,
};

struct Matrix {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;  // out features (N)
  int64_t cols = 0;  // in features (K)
  const void* data = nullptr;           // [rows, cols] of the format's element type ([rows, cols/2] u8 for kNvfp4)
  const float* scale_inv = nullptr;     // kFp8Block: [ceil(rows/block_rows), ceil(cols/block_cols)]
  int64_t block_rows = 128, block_cols = 128;
  const uint8_t* scale_fp8 = nullptr;   // kNvfp4: [rows, cols/16] e4m3fn
  float scale_2 = 1.0f;                 // kNvfp4: per-tensor scale, finite and >= 0
  // kNvfp4, a stack of ModelOpt tensors (the MoE expert stacks: each expert is its own tensor with
  // its own weight_scale_2): when set, row r's scale_2 is scale_2_rows[r / scale_2_group_rows]
  // ([rows / scale_2_group_rows] f32, same memory space as data) and `scale_2` is unused.
  const float* scale_2_rows = nullptr;
  int64_t scale_2_group_rows = 0;       // > 0 and dividing rows when scale_2_rows is set

  // kNvfp4: the scale_2 of row r.
  float row_scale_2(int64_t r) const { return scale_2_rows ? scale_2_rows[r / scale_2_group_rows] : scale_2; }

  int64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
};

// Elements of a row sharing one NVFP4 block scale (ModelOpt group_size; the tensor-core block size).
inline constexpr int64_t kNvfp4GroupSize = 16;

// Dequantizes row `r` of `w` into out[0..cols) (f32).
void matrix_row_to_f32(const Matrix& w, int64_t r, float* out);

Status validate_matrix(const Matrix& w);

}  // namespace pg::ops
