// The device side of L2Prefetch (l2_prefetch.h): each block of the grid issues its share of the
// ranges as bulk L2 prefetches (cp.async.bulk.prefetch.L2, sm_90; no completion to wait for, so a
// block may exit at once), chunk c of a range from block c % gridDim.x, lane (c / gridDim.x) % 32 of
// its first warp. A kernel that is latency-bound (the decode attention: its HBM traffic is a few MB
// over ~10 us) calls it first, so the weights of the kernels after it are in L2 when they start.
#pragma once

#include "ops/cuda/common/l2_prefetch.h"

namespace pg::ops::cuda {

constexpr uint32_t kL2PrefetchChunk = 16 * 1024;

__device__ __forceinline__ void l2_prefetch_share(const L2Prefetch& pf) {
  if (pf.n == 0 || threadIdx.x >= 32) return;
  const uint64_t G = gridDim.x, first = blockIdx.x + G * threadIdx.x, step = G * 32;
#pragma unroll 1
  for (int r = 0; r < pf.n; ++r) {
    const char* base = static_cast<const char*>(pf.ptr[r]);
    const uint64_t bytes = pf.bytes[r];
#pragma unroll 1
    for (uint64_t off = first * kL2PrefetchChunk; off < bytes; off += step * kL2PrefetchChunk) {
      const uint32_t size = bytes - off < kL2PrefetchChunk ? uint32_t(bytes - off) : kL2PrefetchChunk;
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + off), "r"(size) : "memory");
    }
  }
}

}  // namespace pg::ops::cuda
