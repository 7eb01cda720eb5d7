// nvfp4_quantize: a bf16 or f32 matrix into NVFP4 on the device, at load time (the NVFP4 copy of
// the MTP head that drafts with it: CudaRunnerOptions::draft_head). The rules are quantize_nvfp4's
// (formats/nvfp4.h) without its MSE search, so the two give the same bytes for the same scale_2.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/common/nvfp4_layout.h"

namespace pg::ops::cuda {

// The largest |v| of `n` elements at `src` (bf16 when src_bf16 else f32, device memory), into
// *amax (host memory). Enqueued on `stream` and waited for.
cudaError_t nvfp4_amax(const void* src, bool src_bf16, int64_t n, float* amax, cudaStream_t stream);

// Quantizes src [rows, cols] (cols % 16 == 0; finite) with per-tensor scale `scale_2` (> 0;
// nvfp4_auto_scale_2 of nvfp4_amax's result for quantize_nvfp4's automatic one): per 16 values of
// a row the block scale s = e4m3(clamp(amax / (6 x scale_2), 2^-9, 448)) (1 for an all-zero block)
// into scale_fp8 [rows, cols / 16], and the codes nvfp4_encode_rne(v / (s x scale_2)) into packed
// [rows, cols / 2] in the checkpoint layout (element 2j in the low nibble of byte j; the caller
// converts them with nvfp4_to_device_layout before a kernel reads them). Enqueued on `stream`
// and waited for.
cudaError_t nvfp4_quantize(const void* src, bool src_bf16, int64_t rows, int64_t cols, float scale_2, uint8_t* packed,
                           uint8_t* scale_fp8, cudaStream_t stream);

}  // namespace pg::ops::cuda
