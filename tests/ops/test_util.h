// Shared pieces of the CUDA-vs-CPU op tests: the skip-without-GPU rule, seeded parallel random
// fills, device round trips, and comparisons with named tolerances (max_abs, max_rel, cosine).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cuda/common/device.h"
#include "ops/cuda/common/device_buffer.h"
#include "ops/cuda/common/nvfp4_layout_launch.h"
#include "tests/ops/random.h"

namespace pg::ops::test {

// Where no usable GPU exists the test says so and is reported as skipped, never passed.
#define PG_REQUIRE_CUDA()                                                                  \
  do {                                                                                     \
    if (!::pg::ops::cuda::cuda_available())                                                \
      GTEST_SKIP() << "CUDA test skipped: " << ::pg::ops::cuda::cuda_unavailable_reason(); \
  } while (0)

#define PG_ASSERT_OK(expr)                                   \
  do {                                                       \
    const ::pg::Status _pg_s = (expr);                       \
    ASSERT_TRUE(_pg_s.ok()) << #expr << ": " << _pg_s.to_string(); \
  } while (0)

// A case's seed from its name (FNV-1a): every case draws its own inputs, stable across runs.
inline uint64_t seed_of(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char ch : s) h = (h ^ uint8_t(ch)) * 1099511628211ull;
  return h;
}

// Waits for the device; a kernel fault fails the test here, naming the error.
inline bool sync_ok() {
  const cudaError_t e = cudaDeviceSynchronize();
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  return e == cudaSuccess;
}

template <typename T>
cuda::DeviceBuffer<T> to_device(const std::vector<T>& h) {
  auto r = cuda::DeviceBuffer<T>::from_host(h.data(), h.size());
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : cuda::DeviceBuffer<T>();
}
// NVFP4 codes in the checkpoint's layout, uploaded and rearranged into the device's
// (ops/cuda/common/nvfp4_layout.h) as the model's upload does.
inline cuda::DeviceBuffer<uint8_t> to_device_nvfp4(const std::vector<uint8_t>& codes) {
  cuda::DeviceBuffer<uint8_t> d = to_device(codes);
  if (d.size()) {
    const cudaError_t e = cuda::nvfp4_to_device_layout(d.data(), d.size(), nullptr);
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  }
  return d;
}
template <typename T>
std::vector<T> to_host(const cuda::DeviceBuffer<T>& d) {
  std::vector<T> h(d.size());
  const Status s = d.download(h.data(), h.size());
  EXPECT_TRUE(s.ok()) << s.to_string();
  return h;
}

// A device buffer of n elements filled with 0xff bytes (is_poison: what no kernel writes).
template <typename T>
cuda::DeviceBuffer<T> poisoned(size_t n) {
  auto r = cuda::DeviceBuffer<T>::create(n);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  cuda::DeviceBuffer<T> b = r.ok() ? std::move(r).value() : cuda::DeviceBuffer<T>();
  EXPECT_TRUE(b.fill_bytes(0xff).ok());
  return b;
}

inline bool is_poison(float v) {  // the 0xffffffff NaN that fill_bytes(0xff) writes
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b == 0xffffffffu;
}

// Statistics of got vs ref over the same elements.
struct Diff {
  int64_t n = 0, non_finite = 0, over_tol = 0;
  double max_abs = 0, max_rel = 0, cosine = 1;
  int64_t worst = -1;  // element of the largest error relative to its tolerance
  double worst_ratio = 0;
  std::string summary() const {
    return "n=" + std::to_string(n) + " non_finite=" + std::to_string(non_finite) + " over_tol=" +
           std::to_string(over_tol) + " max_abs=" + std::to_string(max_abs) + " max_rel=" + std::to_string(max_rel) +
           " cosine=" + std::to_string(cosine) + " worst_elem=" + std::to_string(worst) +
           " worst_err/tol=" + std::to_string(worst_ratio);
  }
};

// Compares elementwise with a per-element tolerance tol(i) (absolute); also reports max_abs,
// max_rel (|err| / max(|ref|, 1e-30)) and the cosine similarity, computed in double.
template <typename TolFn>
Diff compare(const float* got, const float* ref, int64_t n, TolFn tol) {
  Diff d;
  d.n = n;
  double dot = 0, ng = 0, nr = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got[i], r = ref[i];
    if (!std::isfinite(g)) {
      ++d.non_finite;
      continue;
    }
    const double err = std::fabs(g - r), t = tol(i);
    d.max_abs = std::max(d.max_abs, err);
    d.max_rel = std::max(d.max_rel, err / std::max(std::fabs(r), 1e-30));
    const double ratio = t > 0 ? err / t : (err > 0 ? std::numeric_limits<double>::infinity() : 0.0);
    if (ratio > d.worst_ratio || d.worst < 0) d.worst_ratio = ratio, d.worst = i;
    if (err > t) ++d.over_tol;
    dot += g * r, ng += g * g, nr += r * r;
  }
  d.cosine = (ng > 0 && nr > 0) ? dot / std::sqrt(ng * nr) : (ng == nr ? 1.0 : 0.0);
  return d;
}

}  // namespace pg::ops::test
