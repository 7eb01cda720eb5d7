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
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid, uint64_t policy) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(s), "l"(src),
               "r"(valid ? 16 : 0), "l"(policy));
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

}  // namespace pg::ops::cuda
