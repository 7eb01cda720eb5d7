// Host side of kernels with more than 48 KB of dynamic shared memory: the opt-in, once per kernel
// and device. Include from the .cu file that launches the kernel (the template takes the kernel).
#pragma once

#include <cuda_runtime.h>

#include <mutex>

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

}  // namespace pg::ops::cuda
