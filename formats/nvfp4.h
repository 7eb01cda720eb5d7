// NVFP4 weights as NVIDIA ModelOpt exports them (nvidia/DeepSeek-R1-FP4), and a quantizer that
// follows ModelOpt's rounding rules exactly; tools/nvfp4_reference.py is its PyTorch twin.
//
// Checkpoint layout of one quantized Linear (hf_quant_config.json: quant_algo "NVFP4", group_size 16):
//   <module>.weight          U8      [out, in/2]   two e2m1 codes per byte
//   <module>.weight_scale    F8_E4M3 [out, in/16]  one scale per 16 consecutive elements of a row
//   <module>.weight_scale_2  F32     []            per-tensor scale
//   <module>.input_scale     F32     []            activation scale (unused by weight-only kernels)
//   w[r][c] = e2m1(code(r, c)) * fp8(weight_scale[r][c / 16]) * weight_scale_2
//
// Nibble order: element 2j sits in the LOW nibble of byte j, element 2j+1 in the HIGH nibble.
// Sources: ModelOpt modelopt/torch/quantization/qtensor/nvfp4_tensor.py, NVFP4QTensor.quantize packs
// `(q[..., 1::2] << 4) | q[..., 0::2]` and dequantize unpacks `[..., 0::2] = x & 0x0F`,
// `[..., 1::2] = x >> 4`; vLLM's reference dequantizer (break_fp4_bytes in
// vllm/model_executor/layers/quantization/utils/nvfp4_emulation_utils.py) stacks (low, high) per byte.
// Scale layout: the checkpoint's weight_scale is plain row-major [out, in/16] with no swizzle. ModelOpt
// computes it as a reshape of the weight into [out, in/16, 16] blocks (get_weights_scaling_factor);
// vLLM's ModelOptNvFp4LinearMethod (vllm/model_executor/layers/quantization/modelopt.py) declares
// weight_scale as [output_size, input_size // group_size] float8_e4m3fn and applies swizzle_blockscale
// (128x4 tiles interleaved for CUTLASS) only in process_weights_after_loading: swizzling is the
// kernel's choice, made after loading.
// e2m1 codes: bit 3 sign, bits 2..1 exponent (bias 1), bit 0 mantissa: ±{0, .5, 1, 1.5, 2, 3, 4, 6}.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"

namespace pg {

inline constexpr int64_t kNvfp4BlockSize = 16;  // ModelOpt group_size; the tensor-core scale block
inline constexpr float kNvfp4E2M1Max = 6.0f;    // largest e2m1 magnitude
inline constexpr float kNvfp4E4M3Max = 448.0f;  // largest finite e4m3fn magnitude
inline constexpr float kNvfp4E4M3Min = 1.0f / 512.0f;  // smallest e4m3fn subnormal, 2^-9
inline constexpr float kNvfp4AutoScale2 = 0.0f;  // quantize_nvfp4: derive scale_2 from the tensor

struct Nvfp4Tensor {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> packed;     // [rows, cols/2] u8: element 2j low nibble, 2j+1 high nibble
  std::vector<uint8_t> scale_fp8;  // [rows, cols/16] e4m3fn, row-major, unswizzled
  float scale_2 = 1.0f;            // per-tensor scale (weight_scale_2)
};

// The per-tensor scale quantize_nvfp4 derives from a tensor's largest magnitude (kNvfp4AutoScale2):
// amax / (448 * 6), and 1.0 for an all-zero tensor. The device quantizer's too
// (ops/cuda/common/nvfp4_quantize.h), so both give the same bits.
inline float nvfp4_auto_scale_2(float amax) { return amax > 0 ? amax / (kNvfp4E4M3Max * kNvfp4E2M1Max) : 1.0f; }

// The e2m1 code of a value already divided by its block scale: round to nearest, ties to even
// mantissa (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4), magnitudes
// above 6 (and ±inf) saturate to ±6. The sign bit is set only for x < 0, so +0 and -0 both give
// code 0 (as ModelOpt's `(x < 0) << 3`), and NaN gives 0 (it only arises as 0 / 0 when a block's
// scale product underflows; the weight itself was 0).
uint8_t nvfp4_encode(float x);

// The e4m3fn code of one block's scale, by quantize_nvfp4's rules below (amax, then the MSE
// search when asked) for the 16 values at x. GPTQ (formats/nvfp4_gptq.h) picks its block scales
// with it too, from the block's values as updated when its first column is reached.
uint8_t nvfp4_block_scale(const float* x, float scale_2, bool mse_search);

// Quantizes w [rows, cols] f32 (row-major; cols % 16 == 0; every element finite) into `out`.
//  scale_2: scale_2_or_auto when > 0; kNvfp4AutoScale2 (0) derives it as ModelOpt does,
//    amax(|w|) / (448 * 6) (NVFP4QTensor.get_weights_scaling_factor_2: the tensor's largest
//    magnitude maps to the largest block scale times the largest e2m1 value), and 1.0 for an
//    all-zero tensor (where ModelOpt's 0 / 0 would give NaN scales; any value decodes to zeros).
//  block scale (ModelOpt's get_weights_scaling_factor, f32): q = amax_block / (6 * scale_2);
//    q == 0 -> 1.0 (all-zero blocks: a finite, invertible scale, no NaN); q clamped to
//    [2^-9, 448] (no underflow to a zero scale, no overflow to NaN when scale_2 was given);
//    s = e4m3fn(q) round to nearest even.
//  codes: nvfp4_encode(w / (fp8(s) * scale_2)), the divisor rounded to f32 first (as ModelOpt).
//  mse_search: for each non-zero block also tries the e4m3 codes 1, 2, 3, 4 steps below s and 1
//    step above (those in [2^-9, 448]), in that order after s itself, and keeps the first with the
//    strictly smallest squared error sum_j (double(w_j) - double(dequantized_j))^2 (f64, j
//    ascending). Smaller scales trade clipping of the block's largest value for resolution of
//    the rest; one step above helps when rounding s down made the largest value clip.
// Thread-parallel by rows over `pool` (nullptr: ThreadPool::global()); every row is computed by
// one thread in a fixed order, so the output is identical for any thread count.
// Errors: non-finite w (names the first row/col), cols % 16, empty shape, scale_2_or_auto negative,
// NaN or inf.
Status quantize_nvfp4(const float* w, int64_t rows, int64_t cols, float scale_2_or_auto, bool mse_search,
                      Nvfp4Tensor& out, ThreadPool* pool = nullptr);

// out[r][c] = (e2m1(code(r, c)) * fp8(scale_fp8[r][c / 16])) * scale_2, [rows, cols] f32.
// The first product is exact (<= 2 x 4 significant bits), so each value is the exact product
// rounded once; ops::matrix_row_to_f32 (WeightFormat::kNvfp4) computes the same bits.
void dequantize_nvfp4(const uint8_t* packed, const uint8_t* scale_fp8, float scale_2, int64_t rows, int64_t cols,
                      float* out, ThreadPool* pool = nullptr);
void dequantize_nvfp4(const Nvfp4Tensor& t, float* out, ThreadPool* pool = nullptr);

}  // namespace pg
