// Row dequantization and validation of weight matrices.
#include "ops/matrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/simd.h"

namespace pg::ops {

void matrix_row_to_f32(const Matrix& w, int64_t r, float* out) {
  switch (w.format) {
    case WeightFormat::kF32:
      std::memcpy(out, static_cast<const float*>(w.data) + r * w.cols, size_t(w.cols) * sizeof(float));
      return;
    case WeightFormat::kBF16: {
      cpu::simd_bf16_to_f32(static_cast<const uint16_t*>(w.data) + r * w.cols, out, w.cols);
      return;
    }
    case WeightFormat::kFp8Block: {
      const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * w.cols;
      const float* scales = w.scale_inv + (r / w.block_rows) * w.scale_cols();
      for (int64_t c0 = 0; c0 < w.cols; c0 += w.block_cols) {
        const float s = scales[c0 / w.block_cols];
        const int64_t c1 = std::min(w.cols, c0 + w.block_cols);
        for (int64_t c = c0; c < c1; ++c) out[c] = f8e4m3_to_f32(row[c]) * s;
      }
      return;
    }
    case WeightFormat::kNvfp4: {
      // Same definition as formats/nvfp4.cpp's dequantize_nvfp4 (tests hold them bit-identical).
      const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * (w.cols / 2);
      const uint8_t* scales = w.scale_fp8 + r * (w.cols / kNvfp4GroupSize);
      thread_local std::vector<float> s;  // the row's block scales as f32
      s.resize(size_t(w.cols / kNvfp4GroupSize));
      for (size_t b = 0; b < s.size(); ++b) s[b] = f8e4m3_to_f32(scales[b]);
      cpu::simd_nvfp4_to_f32(row, s.data(), w.row_scale_2(r), w.cols, out);
      return;
    }
  }
}

Status validate_matrix(const Matrix& w) {
  if (!w.data || w.rows <= 0 || w.cols <= 0) return invalid_argument("matrix: empty ({}x{})", w.rows, w.cols);
  if (w.format == WeightFormat::kFp8Block && (!w.scale_inv || w.block_rows <= 0 || w.block_cols <= 0))
    return invalid_argument("matrix: FP8 block weights need scale_inv and positive block sizes");
  if (w.format == WeightFormat::kNvfp4) {
    if (w.cols % kNvfp4GroupSize)
      return invalid_argument("matrix: NVFP4 needs cols ({}) to be a multiple of {}", w.cols, kNvfp4GroupSize);
    if (!w.scale_fp8) return invalid_argument("matrix: NVFP4 weights need scale_fp8");
    if (!std::isfinite(w.scale_2) || w.scale_2 < 0)
      return invalid_argument("matrix: NVFP4 scale_2 must be finite and >= 0, got {}", w.scale_2);
    if (w.scale_2_rows && (w.scale_2_group_rows <= 0 || w.rows % w.scale_2_group_rows))
      return invalid_argument("matrix: NVFP4 scale_2 groups of {} rows must divide the {} rows", w.scale_2_group_rows,
                              w.rows);
  }
  return ok_status();
}

}  // namespace pg::ops
