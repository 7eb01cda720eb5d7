// The bf16 staging kernels of the cuBLASLt GEMM (gemm/convert.cu): f32 activations rounded to
// bf16, f32 / FP8-block weights expanded to bf16. fmt-free, so the .cu includes it; the
// Status-returning caller is gemm/gemm.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pg::ops::cuda {

// Source element type of a conversion (ops/matrix.h's WeightFormat, restated fmt-free).
enum class ToBf16Src : uint8_t {
  kF32,       // round to nearest even (cvt.rn.bf16x2.f32: NaN stays NaN, overflow to inf)
  kBF16,      // plain copy (re-strides a bf16 matrix into aligned scratch)
  kFp8Block,  // DeepSeek FP8: e4m3fn value * scale_inv of its block, the f32 product rounded to bf16
  kNvfp4,     // NVFP4 (ModelOpt): (e2m1 * e4m3 block scale) * scale_2 in f32 (ops::matrix_row_to_f32's
              //  bits), rounded to bf16
};

// dst[r][c] = bf16(src[r][c]) for c < cols; dst[r][c] = 0 for cols <= c < dst_stride.
// One thread per 8 destination elements (one 16-byte store).
struct ToBf16Params {
  const void* src = nullptr;         // [rows, cols] f32 | bf16 | fp8 e4m3fn ([rows, cols / 2] NVFP4 codes),
                                     //  row stride src_stride elements (NVFP4: src_stride / 2 bytes)
  const float* scale_inv = nullptr;  // kFp8Block: [ceil(rows / block_rows), scale_cols] f32
  const uint8_t* scale_fp8 = nullptr;   // kNvfp4: [rows, cols / 16] e4m3fn, row stride src_stride / 16
  const float* scale_2_rows = nullptr;  // kNvfp4: [rows / scale_2_group_rows] f32, or null: scale_2 for all
  int64_t scale_2_group_rows = 1;
  float scale_2 = 1.0f;
  uint16_t* dst = nullptr;           // [rows, dst_stride] bf16, 16-byte aligned
  int64_t rows = 0, cols = 0;
  int64_t src_stride = 0;            // elements of the source type
  int64_t dst_stride = 0;            // elements; a multiple of 8 (whole 16-byte chunks), >= cols
  int64_t block_rows = 128, block_cols = 128, scale_cols = 0;  // kFp8Block
  ToBf16Src src_type = ToBf16Src::kF32;
  // Whole chunks may be read with vector loads: the source rows are aligned to a chunk's bytes
  // (16 B for f32 / bf16 / 2 x 16 B f32, 8 B for fp8, 4 B for NVFP4) and, for fp8, a chunk never
  // straddles a scale block (block_cols % 8 == 0; NVFP4's 16-element blocks hold whole chunks).
  // The launcher decides (gemm.cpp).
  bool vec = false;
};

// Elements one thread converts (one 16-byte bf16 store).
constexpr int kToBf16Chunk = 8;

cudaError_t launch_to_bf16(const ToBf16Params& p, cudaStream_t stream);

}  // namespace pg::ops::cuda
