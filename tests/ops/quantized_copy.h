// What a quantized copy of a matrix (the draft heads' FP8 / NVFP4 copies) costs one token's linear:
// the relative RMS error of its outputs against the source's, over a seeded x in [-1, 1].
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/cuda/cuda_ops.h"
#include "ops/matrix.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {

// sqrt(sum (y_copy - y_src)^2 / sum y_src^2) for y = W x at m = 1; NaN (and a test failure) where
// either linear fails.
inline double linear_copy_rel_rms(const Matrix& src, const Matrix& copy, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(src.cols));
  parallel_fill(x, [&](uint64_t i) { return uniform_pm1(seed, i); });
  auto dx = to_device(x);
  auto dy0 = poisoned<float>(size_t(src.rows)), dy1 = poisoned<float>(size_t(src.rows));
  LinearArgs la;
  la.x = dx.data(), la.m = 1, la.w = &src, la.y = dy0.data();
  const Status s0 = cuda::linear(la, nullptr);
  la.w = &copy, la.y = dy1.data();
  const Status s1 = cuda::linear(la, nullptr);
  EXPECT_TRUE(s0.ok() && s1.ok()) << s0.to_string() << " / " << s1.to_string();
  if (!s0.ok() || !s1.ok()) return std::nan("");
  const auto y0 = to_host(dy0), y1 = to_host(dy1);
  double num = 0, den = 0;
  for (size_t i = 0; i < y0.size(); ++i) num += double(y1[i] - y0[i]) * (y1[i] - y0[i]), den += double(y0[i]) * y0[i];
  return std::sqrt(num / den);
}

}  // namespace pg::ops::test
