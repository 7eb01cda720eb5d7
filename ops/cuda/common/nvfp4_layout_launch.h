// nvfp4_to_device_layout: an uploaded buffer of NVFP4 codes into the device layout (nvfp4_layout.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "ops/cuda/common/nvfp4_layout.h"

namespace pg::ops::cuda {

// Rearranges `bytes` bytes of checkpoint-layout codes at `codes` (device memory) into the device
// layout, in place, on `stream`, and waits for it (an upload-time step: whatever stream reads the
// codes next sees them converted). Call exactly once per uploaded code buffer (twice would scramble it).
cudaError_t nvfp4_to_device_layout(void* codes, size_t bytes, cudaStream_t stream);

}  // namespace pg::ops::cuda
