// Host side of kernels with more than 48 KB of dynamic shared memory: the opt-in, once per kernel
// and device; and their blocks per SM, once per kernel, device and size. Include from the .cu file
// that launches the kernel (the template takes the kernel).
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>

namespace pg::ops::cuda {

// Raises kKernel's dynamic shared memory limit to the most an sm_90 block may have (227 KB, less
// the kernel's static shared memory: a larger value is rejected) once per device, so no later
// launch needs another call (a template on the kernel: a flag per kernel).
template <auto kKernel>
cudaError_t raise_smem_limit_once() {
  constexpr int kMaxSmemBytes = 227 * 1024, kMaxDevices = 64;
  static std::mutex mu;
  static bool done[kMaxDevices] = {};
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(mu);
  if (dev >= 0 && dev < kMaxDevices && done[dev]) return cudaSuccess;
  cudaFuncAttributes fa{};
  e = cudaFuncGetAttributes(&fa, kKernel);
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           kMaxSmemBytes - static_cast<int>(fa.sharedSizeBytes));
  if (e == cudaSuccess && dev >= 0 && dev < kMaxDevices) done[dev] = true;
  return e;
}

// The blocks of kKernel an SM holds at `threads` threads and `smem` bytes of dynamic shared memory
// (cudaOccupancyMaxActiveBlocksPerMultiprocessor), asked once per device and size: a launch that
// sizes its grid by it (the MoE gate_up's persistent grid) pays a lookup, not the query.
template <auto kKernel>
cudaError_t blocks_per_sm_once(int threads, size_t smem, int& per_sm) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, size_t>, int> known;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const auto key = std::make_tuple(dev, threads, smem);
  std::lock_guard<std::mutex> lock(mu);
  if (const auto it = known.find(key); it != known.end()) {
    per_sm = it->second;
    return cudaSuccess;
  }
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, threads, smem);
  if (e == cudaSuccess) known.emplace(key, per_sm);
  return e;
}

}  // namespace pg::ops::cuda
