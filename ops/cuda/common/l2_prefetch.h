// L2Prefetch: byte ranges a latency-bound kernel asks the L2 to fetch while it runs (weights the
// next kernels of the step stream), issued as bulk prefetches spread over its grid
// (l2_prefetch.cuh). Host and device, fmt-free: a member of kernel Params.
#pragma once

#include <cstdint>

namespace pg::ops::cuda {

struct L2Prefetch {
  static constexpr int kMaxRanges = 6;
  const void* ptr[kMaxRanges] = {};
  uint64_t bytes[kMaxRanges] = {};  // multiples of 16, ptr 16-byte aligned (add() makes them so)
  int n = 0;

  // Appends [p, p + bytes) shrunk to 16-byte boundaries, up to `budget` bytes in all (what is left
  // of it after the ranges before); false when the list is full or the budget spent.
  bool add(const void* p, uint64_t nbytes, uint64_t budget) {
    if (!p || n >= kMaxRanges) return false;
    uint64_t used = 0;
    for (int i = 0; i < n; ++i) used += bytes[i];
    if (used >= budget) return false;
    const auto a = reinterpret_cast<uintptr_t>(p);
    const uintptr_t lo = (a + 15) & ~uintptr_t(15), hi = (a + nbytes) & ~uintptr_t(15);
    if (hi <= lo) return true;
    uint64_t len = hi - lo;
    if (len > budget - used) len = (budget - used) & ~uint64_t(15);
    if (len == 0) return false;
    ptr[n] = reinterpret_cast<const void*>(lo), bytes[n] = len, ++n;
    return true;
  }
  uint64_t total() const {
    uint64_t t = 0;
    for (int i = 0; i < n; ++i) t += bytes[i];
    return t;
  }
};

}  // namespace pg::ops::cuda
