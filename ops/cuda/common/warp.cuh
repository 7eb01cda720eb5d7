// Warp and block reductions shared by every kernel (butterfly shuffles: every lane ends with
// the result, so no broadcast step is needed).
#pragma once

#include <cuda_runtime.h>

namespace pg::ops::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// threadIdx.x in a register the compiler keeps: ptxas otherwise re-reads it (S2R, ~20 cycles
// before its first use) inside a loop to spare the register (ncu, 2026-12-03: at the NVFP4 MoE
// gate_up's every ring stage, 5% of its stall samples). Read once, before the loop.
// Unsigned, as threadIdx.x: divisions by powers of two stay shifts (a signed one adds a sign fixup).
__device__ __forceinline__ unsigned pinned_thread_idx() {
  unsigned t = threadIdx.x;
  asm volatile("" : "+r"(t));
  return t;
}
__device__ __forceinline__ int pinned_lane() { return int(pinned_thread_idx() % kWarpSize); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the whole block (kThreads a multiple of 32); every thread gets the result.
// `scratch` is shared memory of kThreads / 32 floats. Contains __syncthreads: call from all threads.
template <int kThreads>
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  static_assert(kThreads % kWarpSize == 0 && kThreads <= 1024, "block of whole warps");
  constexpr int kWarps = kThreads / kWarpSize;
  v = warp_sum(v);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < kWarps ? scratch[lane] : 0.0f;
  return warp_sum(t);  // same fixed order in every warp: every thread gets the same bits
}

}  // namespace pg::ops::cuda
