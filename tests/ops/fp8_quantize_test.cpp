// fp8_quantize_blocks (ops/cuda/common/fp8_quantize.h), the FP8 draft head's load-time quantizer,
// against the same arithmetic on the CPU, bit for bit: per 128 x 128 block the scale amax / 448 (1 for
// an all-zero block) and each code f32_to_f8e4m3(v / scale, saturating); bf16 and f32 sources, whole
// and partial blocks, an all-zero block. Then the FP8 linear over the copy against the source's
// linear: the relative error an e4m3 head brings (the drafts' logits).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cuda/common/fp8_quantize.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/matrix.h"
#include "tests/ops/quantized_copy.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {
namespace {

class Fp8QuantizeCuda : public ::testing::TestWithParam<QuantCase> {};

TEST_P(Fp8QuantizeCuda, BitExactVsCpu) {
  PG_REQUIRE_CUDA();
  const QuantCase& c = GetParam();
  const uint64_t seed = seed_of(c.name);
  const int64_t n = c.rows * c.cols, bc = (c.cols + 127) / 128, br = (c.rows + 127) / 128;
  // Values over several magnitudes per block (so codes span the e4m3 range, subnormals included);
  // block (0, 1) all zeros where it exists.
  std::vector<float> v(static_cast<size_t>(n));
  parallel_fill(v, [&](uint64_t i) {
    const int64_t r = int64_t(i) / c.cols, col = int64_t(i) % c.cols;
    if (r < 128 && col >= 128 && col < 256) return 0.0f;
    const float x = uniform_pm1(seed, i) * std::exp2(-6.0f * std::fabs(uniform_pm1(seed + 1, i)));
    return c.bf16 ? bf16_to_f32(f32_to_bf16(x)) : x;
  });
  const QuantSource dsrc = upload_source(c, v);
  auto dcodes = poisoned<uint8_t>(size_t(n));
  auto dscale = poisoned<float>(size_t(br * bc));
  const void* src = dsrc.data();
  ASSERT_EQ(cuda::fp8_quantize_blocks(src, c.bf16, c.rows, c.cols, dcodes.data(), dscale.data(), nullptr), cudaSuccess);
  const auto codes = to_host(dcodes);
  const auto scale = to_host(dscale);

  std::vector<float> want_scale(static_cast<size_t>(br * bc), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    float& m = want_scale[size_t((i / c.cols / 128) * bc + (i % c.cols) / 128)];
    m = std::fmax(m, std::fabs(v[size_t(i)]));
  }
  for (float& s : want_scale) s = s > 0.0f ? s / 448.0f : 1.0f;
  ASSERT_EQ(std::memcmp(scale.data(), want_scale.data(), want_scale.size() * 4), 0) << "block scales";
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; ++i) {
    const float s = want_scale[size_t((i / c.cols / 128) * bc + (i % c.cols) / 128)];
    const uint8_t want = f32_to_f8e4m3(v[size_t(i)] / s, Overflow::kSaturate);
    if (codes[size_t(i)] != want && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0) << "codes differ, first at element " << first;

  // The FP8 linear over the copy against the source's (one token): the head's logits as drafted.
  const Matrix src_m = dsrc.matrix(c);
  const Matrix fp8_m{WeightFormat::kFp8Block, c.rows, c.cols, dcodes.data(), dscale.data(), 128, 128};
  const double rel = linear_copy_rel_rms(src_m, fp8_m, seed + 2);
  // e4m3 rounds to 3 mantissa bits: ~3.6% RMS a weight, at most 6.25%; a wrong scale or layout gives ~1.
  EXPECT_LT(rel, 0.06) << "the FP8 copy's outputs against the source's (relative RMS error)";
  std::printf("[ measure  ] fp8 quantize %s: logits' relative RMS error %.4f\n", c.name, rel);
}

const QuantCase kQuantCases[] = {
    {"bf16_256x512", 256, 512, true},
    {"bf16_partial_300x320", 300, 320, true},
    {"f32_partial_130x448", 130, 448, false},
    {"bf16_head_8192x256", 8192, 256, true},  // the embedded model's head
};
INSTANTIATE_TEST_SUITE_P(Shapes, Fp8QuantizeCuda, ::testing::ValuesIn(kQuantCases),
                         [](const ::testing::TestParamInfo<QuantCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace pg::ops::test
