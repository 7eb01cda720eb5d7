// The draft heads' quantizer tests (fp8_quantize_test, nvfp4_quantize_test): their cases, the
// source matrix on the device, and what a quantized copy costs one token's linear (the relative RMS
// error of its outputs against the source's, over a seeded x in [-1, 1]).
#pragma once

#include <cmath>
#include <cstdint>
#include <ostream>
#include <vector>

#include "core/dtype.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/matrix.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {

// A quantizer case: a [rows, cols] source matrix in bf16 (else f32).
struct QuantCase {
  const char* name;
  int64_t rows, cols;
  bool bf16;
};
inline void PrintTo(const QuantCase& c, std::ostream* os) { *os << c.name; }

// The case's source on the device: v ([rows, cols] f32, already bf16-exact when c.bf16) in its dtype.
struct QuantSource {
  cuda::DeviceBuffer<float> f32;
  cuda::DeviceBuffer<uint16_t> bf16;
  bool is_bf16 = false;
  const void* data() const { return is_bf16 ? static_cast<const void*>(bf16.data()) : static_cast<const void*>(f32.data()); }
  Matrix matrix(const QuantCase& c) const {
    return Matrix{is_bf16 ? WeightFormat::kBF16 : WeightFormat::kF32, c.rows, c.cols, data()};
  }
};
inline QuantSource upload_source(const QuantCase& c, const std::vector<float>& v) {
  QuantSource s;
  s.is_bf16 = c.bf16;
  if (c.bf16) {
    std::vector<uint16_t> vb(v.size());
    for (size_t i = 0; i < vb.size(); ++i) vb[i] = f32_to_bf16(v[i]);
    s.bf16 = to_device(vb);
  } else {
    s.f32 = to_device(v);
  }
  return s;
}

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
