#include "ops/cuda/common/l2_prefetch.h"

namespace pg::ops::cuda {
namespace {

constexpr int kThreads = 32;
constexpr int kBlocks = 8;  // a handful of SMs' copy engines; each thread issues its chunks and exits

__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(const L2PrefetchParams p) {
  uint64_t policy = 0;
  if (p.evict_last) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  const int64_t me = int64_t(blockIdx.x) * kThreads + threadIdx.x, stride = int64_t(gridDim.x) * kThreads;
  int64_t first = 0;  // chunks of the ranges before r
  for (int r = 0; r < p.n; ++r) {
    const uint64_t base = uint64_t(__cvta_generic_to_global(p.r[r].p));
    const uint64_t lo = (base + 15) & ~uint64_t(15);
    const uint64_t hi = (base + uint64_t(p.r[r].bytes)) & ~uint64_t(15);
    const int64_t bytes = hi > lo ? int64_t(hi - lo) : 0;
    const int64_t chunks = (bytes + kL2PrefetchChunk - 1) / kL2PrefetchChunk;
    // This thread's chunks c of range r: the global chunk indices first + c = me (mod stride).
    int64_t c = ((me - first) % stride + stride) % stride;
    for (; c < chunks; c += stride) {
      const uint64_t a = lo + uint64_t(c * kL2PrefetchChunk);
      const uint32_t n = uint32_t(bytes - c * kL2PrefetchChunk < kL2PrefetchChunk ? bytes - c * kL2PrefetchChunk
                                                                                  : kL2PrefetchChunk);
      if (p.evict_last)
        asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(a), "r"(n), "l"(policy)
                     : "memory");
      else
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(n) : "memory");
    }
    first += chunks;
  }
}

constexpr int kLoadThreads = 128, kLoadBlocks = 64, kLoadsInFlight = 8;

// Reads every aligned 16 bytes of the ranges once through L2 (ld.global.cg), kLoadsInFlight a
// thread at a time; the values are dropped (asm volatile keeps the loads).
__global__ void __launch_bounds__(kLoadThreads) l2_load_kernel(const L2PrefetchParams p) {
  const int64_t me = int64_t(blockIdx.x) * kLoadThreads + threadIdx.x, stride = int64_t(gridDim.x) * kLoadThreads;
  for (int r = 0; r < p.n; ++r) {
    const uint64_t base = uint64_t(__cvta_generic_to_global(p.r[r].p));
    const uint64_t lo = (base + 15) & ~uint64_t(15), hi = (base + uint64_t(p.r[r].bytes)) & ~uint64_t(15);
    const int64_t units = hi > lo ? int64_t(hi - lo) / 16 : 0;
    for (int64_t u0 = me; u0 < units; u0 += stride * kLoadsInFlight) {
#pragma unroll
      for (int i = 0; i < kLoadsInFlight; ++i) {
        const int64_t u = u0 + i * stride;
        if (u < units) {
          uint32_t a, b, c, d;
          asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
                       : "l"(lo + uint64_t(u) * 16));
        }
      }
    }
  }
}

}  // namespace

cudaError_t launch_l2_prefetch(const L2PrefetchParams& p, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  if (p.kind == L2PrefetchKind::kLoad)
    l2_load_kernel<<<kLoadBlocks, kLoadThreads, 0, stream>>>(p);
  else
    l2_prefetch_kernel<<<kBlocks, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
