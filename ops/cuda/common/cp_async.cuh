// cp.async (Ampere's LDGSTS): global -> shared memory without a register round trip, in groups a
// thread commits and later waits for. A thread's wait makes its own copies visible to itself;
// other threads see them only after a barrier (__syncwarp / __syncthreads) that follows the wait.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pg::ops::cuda {

// 16 bytes, L2 only (cg: streamed data that no other warp of the SM re-reads). valid = false
// reads nothing and writes 16 zero bytes (src-size 0).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
}
// An L2 policy for data read once per step (the weights): evict first, as ld_stream's ".cs".
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t q;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(q));
  return q;
}
// cp_async16 under an L2 policy (l2_evict_first_policy: the weights).
// A hazard (H100, CUDA 13.0's ptxas, 2026-12-05): where the destination's offset is warp-uniform to the
// compiler (the ring probe's slot offsets), ptxas folded it into the copy's shared address as a uniform
// register, LDGSTS.128 [R + UR], beside the policy's uniform descriptor, and compute-sanitizer reported
// "illegal instruction" at exactly those copies (the hint-free copies beside them kept [R + imm]).
// `scripts/sass_loops.py FILE.cu --check-ldgsts` lists [R + UR] copies; no engine kernel has one.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid, uint64_t policy) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(s), "l"(src),
               "r"(valid ? 16 : 0), "l"(policy));
}
// The copy with or without the policy, by a compile-time choice (kHint = false: the hazard above).
template <bool kHint>
__device__ __forceinline__ void cp_async16_hint(void* dst, const void* src, bool valid, uint64_t policy) {
  if constexpr (kHint) cp_async16(dst, src, valid, policy);
  else cp_async16(dst, src, valid);
}
// 4 bytes through L1 (ca: the 4 bytes' line is re-read by the next copies). valid = false writes zeros.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { cp_async_wait<0>(); }

// The bulk copy (sm_90's async proxy): one thread moves a whole contiguous range from global into
// this block's shared memory, counted in bytes on an mbarrier that the waiting threads poll. Its
// uses: data a kernel before this one wrote (read after pdl_wait), one copy for what a block's
// threads would otherwise load and store a piece each.
//   mbarrier_init by one thread (count 1: the issuing thread's arrive), then bulk_copy_to_shared
//   by that thread, then mbarrier_wait(bar, 0) by each thread that reads the range: the phase's
//   completion makes the copy's bytes visible to them (a barrier after passes them on).
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(b), "r"(count) : "memory");
  // The initialized barrier visible to the async proxy before any copy completes on it.
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from src to dst, completing on bar; the
// calling thread's arrive announces them (arrive.expect_tx), so the phase ends when they have landed.
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(d),
               "l"(src), "r"(bytes), "r"(b)
               : "memory");
}
// Until the barrier's phase `parity` (0 for its first) has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(b), "r"(parity)
        : "memory");
  } while (!done);
}

}  // namespace pg::ops::cuda
