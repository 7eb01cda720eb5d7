// Element c of W row `row` as f32, dequantized exactly as ops::cpu::linear does (fp8 value x its
// block scale, NVFP4 (e2m1 x block scale) x scale_2): the scalar kernels' weight read
// (linear/scalar.cu, linear_norm/scalar.cu).
#pragma once

#include "ops/cuda/common/vec.cuh"
#include "ops/cuda/linear/params.h"

namespace pg::ops::cuda {

template <LinearWeight F>
__device__ __forceinline__ float weight_at(const LinearParams& p, int64_t row, int64_t c) {
  if constexpr (F == LinearWeight::kF32) {
    return __ldg(static_cast<const float*>(p.w) + row * p.k + c);
  } else if constexpr (F == LinearWeight::kBF16) {
    return __uint_as_float(uint32_t(__ldg(static_cast<const unsigned short*>(p.w) + row * p.k + c)) << 16);
  } else if constexpr (F == LinearWeight::kFp8Block) {
    const uint8_t v = static_cast<const uint8_t*>(p.w)[row * p.k + c];
    return fp8_e4m3_to_f32(v) * __ldg(p.scale_inv + (row / p.block_rows) * p.scale_cols + c / p.block_cols);
  } else {  // NVFP4: (e2m1 * block scale) * scale_2, as ops::matrix_row_to_f32
    const uint8_t b = __ldg(static_cast<const uint8_t*>(p.w) + row * (p.k / 2) + c / 2);
    const float s = fp8_e4m3_to_f32(__ldg(p.scale_fp8 + row * (p.k / kNvfp4Block) + c / kNvfp4Block));
    const float s2 = p.scale_2_rows ? __ldg(p.scale_2_rows + row / p.scale_2_group_rows) : p.scale_2;
    return (e2m1_to_f32(nvfp4_device_code(b, uint32_t(c % 2))) * s) * s2;
  }
}

}  // namespace pg::ops::cuda
