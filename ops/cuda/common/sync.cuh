// Acquire / release accesses for flags and counters that blocks of one grid hand to each other
// (the attention's split combine, the handoff probes): a reader that sees the value through
// ld_acquire also sees what the writer stored before its st_release (or __threadfence + store).
// And ld_now, a load the compiler keeps where it is written.
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

// A plain global load issued where it is written: the compiler may sink an ordinary load into the
// branch that first uses it (a round trip started late); an asm volatile load stays in place. For
// values another kernel wrote before this one started (after pdl_wait).
__device__ __forceinline__ int64_t ld_now(const int64_t* p) {
  int64_t v;
  asm volatile("ld.global.s64 %0, [%1];\n" : "=l"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ int32_t ld_now(const int32_t* p) {
  int32_t v;
  asm volatile("ld.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}

}  // namespace pg::ops::cuda
