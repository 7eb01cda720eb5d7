// nvfp4_to_device_layout (nvfp4_layout.h): one pass over an uploaded code buffer.
#include "ops/cuda/common/nvfp4_layout_launch.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace pg::ops::cuda {
namespace {

// Word i of the aligned body (uint4 at a time), then the unaligned head and tail bytes.
__global__ void nvfp4_layout_words(uint4* v, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint4 w = v[i];
    w.x = nvfp4_device_word(w.x), w.y = nvfp4_device_word(w.y);
    w.z = nvfp4_device_word(w.z), w.w = nvfp4_device_word(w.w);
    v[i] = w;
  }
}
__global__ void nvfp4_layout_bytes(uint8_t* b, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    b[i] = nvfp4_device_byte(b[i]);
}

}  // namespace

cudaError_t nvfp4_to_device_layout(void* codes, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  uint8_t* p = static_cast<uint8_t*>(codes);
  const size_t head = std::min(bytes, size_t((16 - reinterpret_cast<uintptr_t>(p) % 16) % 16));
  const size_t body = (bytes - head) / 16, tail = bytes - head - body * 16;
  constexpr int kThreads = 256;
  if (head) nvfp4_layout_bytes<<<1, kThreads, 0, stream>>>(p, head);
  if (body) {
    const size_t blocks = std::min<size_t>((body + kThreads - 1) / kThreads, 4096);
    nvfp4_layout_words<<<unsigned(blocks), kThreads, 0, stream>>>(reinterpret_cast<uint4*>(p + head), body);
  }
  if (tail) nvfp4_layout_bytes<<<1, kThreads, 0, stream>>>(p + head + body * 16, tail);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  // Done before it returns: the model's streams are non-blocking, so nothing orders their first
  // kernels after this one on the legacy stream.
  return cudaStreamSynchronize(stream);
}

}  // namespace pg::ops::cuda
