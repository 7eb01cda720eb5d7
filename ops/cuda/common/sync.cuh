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

// A block's arrival on a grid-wide counter once its threads have stored what another block of the
// grid will read (threadFenceReduction's protocol); returns the counter's value before the add to
// thread 0 (0 to the others; callers broadcast through shared memory). Two forms:
// - kRelease = false (PEREGRINE_RELEASE_ARRIVE=0): every thread's __threadfence (fence.sc.gpu: MEMBAR.SC.GPU and an L1
//   invalidate, in each of the block's threads), a barrier, thread 0's atomicAdd;
// - kRelease = true (the default): the barrier, then thread 0's
//   atom.add.acq_rel.gpu alone, a release cumulative over the stores the barrier ordered before it
//   (the CUTLASS grid barrier's pattern) and an acquire of what the blocks before it published.
// Either way the reader of the other blocks' stores loads them through L2 (ld.cg, ld_acquire), after
// a barrier behind the thread that saw the count.
template <bool kRelease>
__device__ __forceinline__ unsigned grid_arrive(unsigned* counter) {
  unsigned old = 0;
  if constexpr (kRelease) {
    __syncthreads();
    if (threadIdx.x == 0)
      asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;\n" : "=r"(old) : "l"(counter) : "memory");
  } else {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) old = atomicAdd(counter, 1u);
  }
  return old;
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
