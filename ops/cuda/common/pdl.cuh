// Programmatic Dependent Launch (Hopper): a kernel launched with launch_pdl may start while the
// kernel before it in the stream is still running. Its blocks must call pdl_wait() before they
// read anything an earlier kernel wrote and before they write anything an earlier kernel reads;
// what depends on nothing (weights: prefetching them into L2) may come first. pdl_trigger() lets
// the next kernel start launching. Both are no-ops when the kernel was launched without the
// attribute, so a kernel that waits is always safe. PEREGRINE_PDL=0 turns the attribute off (to
// measure what it buys).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "ops/cuda/common/env.h"
#include "ops/cuda/common/timeline.cuh"

namespace pg::ops::cuda {

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
// Prefetches the 128-byte line holding p into L2 (no register result, nothing to wait for).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

inline bool pdl_enabled() {
  static const bool on = env_switch("PEREGRINE_PDL", true);
  return on;
}

// kernel<<<grid, block, smem, stream>>>(args...) with the programmatic-serialization attribute
// where `on` (and PDL is enabled).
template <typename... KArgs, typename... Args>
cudaError_t launch_pdl_if(bool on, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          Args&&... args) {
#if defined(PG_TIMELINE) && PG_TIMELINE
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) == cudaSuccess && capturing == cudaStreamCaptureStatusNone)
    timeline_start();
#endif
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = on && pdl_enabled() ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

template <typename... KArgs, typename... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  return launch_pdl_if(true, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace pg::ops::cuda

// In a launcher returning cudaError_t: launch_pdl(...) and return its error if any.
#define PG_LAUNCH_PDL(...)                                            \
  do {                                                                \
    const cudaError_t _pg_pdl_err = ::pg::ops::cuda::launch_pdl(__VA_ARGS__); \
    if (_pg_pdl_err != cudaSuccess) return _pg_pdl_err;               \
  } while (0)
