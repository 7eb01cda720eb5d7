// Acquire / release accesses for flags and counters that blocks of one grid hand to each other
// (the attention's split combine, the handoff probes): a reader that sees the value through
// ld_acquire also sees what the writer stored before its st_release (or __threadfence + store).
#pragma once

#include <cstdint>

namespace pg::ops::cuda {

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

}  // namespace pg::ops::cuda
