// Random weights of every format for the projection op tests (linear, linear_norm): host arrays in
// the checkpoint's layout, a Matrix over them, and their device copy (NVFP4 codes in the device layout).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "ops/matrix.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {

struct WeightSpec {
  WeightFormat format = WeightFormat::kF32;
  int64_t n = 0, k = 0;         // rows (outputs) x cols
  int64_t block = 128;          // fp8 block_rows = block_cols
  int64_t scale_2_group = 0;    // nvfp4: > 0 gives every group of this many rows its own scale_2
  bool all_scales = false;      // nvfp4: block scales over every finite positive e4m3 (subnormals too)
  float scale_2 = 0.0157f;      // nvfp4: the tensor's scale_2 (per group: times 1.5 +- 1)
};

// Host weights in the spec's format; `w` points into them.
struct HostWeights {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> fp8;     // fp8 values, or NVFP4 packed codes [n, k/2]
  std::vector<float> scale;     // fp8 scale_inv, or NVFP4 per-row-group scale_2
  std::vector<uint8_t> scale8;  // NVFP4 e4m3 block scales [n, k/16]
  Matrix w;
};

// A random e4m3 block scale in [2^-3, 2^4 * 1.875] (exponent field 4..11, any mantissa): the
// products with e2m1 codes span 2^-4 .. 180, times scale_2 ~ 2^-6.
inline uint8_t random_nvfp4_scale(uint64_t seed, uint64_t i) {
  const uint64_t r = splitmix64(seed ^ (i * 0x9e3779b97f4a7c15ull));
  return uint8_t(((4 + (r >> 60) % 8) << 3) | ((r >> 20) & 7));
}

// bf16 / f32 in [-1, 1); fp8 every finite code with block scales in [2^-12, 2^-6]; NVFP4 every
// code, random block scales, scale_2 per tensor or per row group.
inline HostWeights make_host_weights(const WeightSpec& c, uint64_t seed) {
  HostWeights h;
  h.w.format = c.format;
  h.w.rows = c.n;
  h.w.cols = c.k;
  h.w.block_rows = h.w.block_cols = c.block;
  const size_t nk = size_t(c.n * c.k);
  switch (c.format) {
    case WeightFormat::kNvfp4: {
      // Every e2m1 code (both zeros included), random block scales, scale_2 per tensor or per group.
      h.fp8.resize(nk / 2);
      parallel_fill(h.fp8, [&](uint64_t i) { return uint8_t(splitmix64(seed ^ (i * 0x9e3779b97f4a7c15ull)) >> 56); });
      h.scale8.resize(nk / 16);
      parallel_fill(h.scale8, [&](uint64_t i) {
        if (!c.all_scales) return random_nvfp4_scale(seed + 1, i);
        const uint8_t b = uint8_t(splitmix64((seed + 1) ^ (i * 0x9e3779b97f4a7c15ull)) >> 57);  // 0..127
        return b == 0x7f ? uint8_t(0x7e) : b;  // 0x7f is NaN
      });
      h.w.data = h.fp8.data();
      h.w.scale_fp8 = h.scale8.data();
      h.w.scale_2 = c.scale_2;
      if (c.scale_2_group) {
        h.scale.resize(size_t(c.n / c.scale_2_group));
        parallel_fill(h.scale, [&](uint64_t i) { return c.scale_2 * (1.5f + uniform_pm1(seed + 4, i)); });
        h.w.scale_2_rows = h.scale.data();
        h.w.scale_2_group_rows = c.scale_2_group;
      }
      break;
    }
    case WeightFormat::kF32:
      h.f32.resize(nk);
      parallel_fill(h.f32, [&](uint64_t i) { return uniform_pm1(seed, i); });
      h.w.data = h.f32.data();
      break;
    case WeightFormat::kBF16:
      h.bf16.resize(nk);
      parallel_fill(h.bf16, [&](uint64_t i) { return f32_to_bf16(uniform_pm1(seed, i)); });
      h.w.data = h.bf16.data();
      break;
    case WeightFormat::kFp8Block: {
      // Every finite e4m3 code (the two NaN codes S.1111.111 become +-448), as quantized
      // checkpoints use the whole range; block scales in [2^-12, 2^-6].
      h.fp8.resize(nk);
      parallel_fill(h.fp8, [&](uint64_t i) {
        uint8_t b = uint8_t(splitmix64(seed ^ (i * 0x9e3779b97f4a7c15ull)) >> 56);
        return (b & 0x7f) == 0x7f ? uint8_t(b ^ 1) : b;
      });
      h.scale.resize(size_t(((c.n + c.block - 1) / c.block) * h.w.scale_cols()));
      parallel_fill(h.scale, [&](uint64_t i) { return std::exp2(-9.0f + 3.0f * uniform_pm1(seed + 1, i)); });
      h.w.data = h.fp8.data();
      h.w.scale_inv = h.scale.data();
      break;
    }
  }
  return h;
}

// The device copy of host weights; `w` points into it.
struct DeviceWeights {
  cuda::DeviceBuffer<float> f32, scale;
  cuda::DeviceBuffer<uint16_t> bf16;
  cuda::DeviceBuffer<uint8_t> fp8, scale8;
  Matrix w;
};
inline void upload(const HostWeights& h, DeviceWeights& d) {
  d.w = h.w;
  switch (h.w.format) {
    case WeightFormat::kF32: d.f32 = to_device(h.f32), d.w.data = d.f32.data(); break;
    case WeightFormat::kBF16: d.bf16 = to_device(h.bf16), d.w.data = d.bf16.data(); break;
    case WeightFormat::kFp8Block:
      d.fp8 = to_device(h.fp8), d.w.data = d.fp8.data();
      d.scale = to_device(h.scale), d.w.scale_inv = d.scale.data();
      break;
    case WeightFormat::kNvfp4:
      d.fp8 = to_device_nvfp4(h.fp8), d.w.data = d.fp8.data();
      d.scale8 = to_device(h.scale8), d.w.scale_fp8 = d.scale8.data();
      if (h.w.scale_2_rows) d.scale = to_device(h.scale), d.w.scale_2_rows = d.scale.data();
      break;
  }
}

}  // namespace pg::ops::test
