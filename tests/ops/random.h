// Seeded, thread-count-independent random test data and the f32 unit roundoff; no CUDA, so the
// CPU-only tests of tests/ops use it too.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"

namespace pg::ops::test {

// Unit roundoff of f32 (round to nearest): 2^-24.
constexpr double kF32Unit = 5.9604644775390625e-08;

// splitmix64: tiny, fast and good enough for test data; one stream per (seed, index).
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Uniform in [-1, 1) with 24 random mantissa bits, a pure function of (seed, i): fills are
// identical whatever the thread count.
inline float uniform_pm1(uint64_t seed, uint64_t i) {
  return float(int64_t(splitmix64(seed * 0x100000001b3ull + i) >> 40) - (int64_t(1) << 23)) * (1.0f / float(1 << 23));
}

// out[i] = gen(i) for i in [0, n), in parallel.
template <typename T, typename Gen>
void parallel_fill(std::vector<T>& out, Gen gen) {
  ThreadPool::global().parallel_for(int64_t(out.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[size_t(i)] = gen(uint64_t(i));
  }, 1 << 16);
}

}  // namespace pg::ops::test
