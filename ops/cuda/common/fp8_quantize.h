// fp8_quantize_blocks: a bf16 or f32 matrix into DeepSeek FP8 (e4m3fn codes, one f32 scale per
// 128 x 128 block), on the device, at load time (the FP8 copy of the MTP head that drafts with it:
// CudaRunnerOptions::draft_head_fp8).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pg::ops::cuda {

constexpr int64_t kFp8QuantBlock = 128;

// Block (i, j) of `src` ([rows, cols], bf16 when src_bf16 else f32, device memory): scale_inv[i *
// ceil(cols / 128) + j] = amax / 448 (1 for an all-zero block) and codes[r * cols + c] =
// e4m3(v / scale_inv), rounded to nearest even and saturated to +-448 (as ops::f32_to_f8e4m3 with
// Overflow::kSaturate: the CPU reference the op test holds it to). Finite inputs. Enqueued on
// `stream`, and waited for (an upload-time step, as nvfp4_to_device_layout).
cudaError_t fp8_quantize_blocks(const void* src, bool src_bf16, int64_t rows, int64_t cols, uint8_t* codes,
                                float* scale_inv, cudaStream_t stream);

}  // namespace pg::ops::cuda
