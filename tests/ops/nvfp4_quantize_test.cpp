// nvfp4_amax and nvfp4_quantize (ops/cuda/common/nvfp4_quantize.h), the NVFP4 draft head's load-time
// quantizer, against the CPU quantizer (formats/nvfp4.h's quantize_nvfp4 with the automatic scale_2
// and no MSE search) byte for byte: scale_2, the block scales and the packed codes; bf16 and f32
// sources, an all-zero block, blocks small enough for the smallest block scale, negative values
// that round to zero. Then the NVFP4 linear over the copy (in the device layout) against the
// source's linear: the relative error an NVFP4 head brings to the drafts' logits.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "formats/nvfp4.h"
#include "ops/cuda/common/nvfp4_quantize.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/matrix.h"
#include "tests/ops/quantized_copy.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {
namespace {

class Nvfp4QuantizeCuda : public ::testing::TestWithParam<QuantCase> {};

TEST_P(Nvfp4QuantizeCuda, ByteExactVsCpu) {
  PG_REQUIRE_CUDA();
  const QuantCase& c = GetParam();
  const uint64_t seed = seed_of(c.name);
  const int64_t n = c.rows * c.cols;
  // Values over several magnitudes (codes across the e2m1 range, block scales across e4m3's);
  // row 0's block 1 all zeros; row 1's blocks 1e-6 small (their scale clamps to 2^-9); row 2's
  // block 0 one value and fifteen tiny negatives (they round to -0 codes).
  std::vector<float> v(static_cast<size_t>(n));
  parallel_fill(v, [&](uint64_t i) {
    const int64_t r = int64_t(i) / c.cols, col = int64_t(i) % c.cols;
    float x = uniform_pm1(seed, i) * std::exp2(-8.0f * std::fabs(uniform_pm1(seed + 1, i)));
    if (r == 0 && col >= 16 && col < 32) x = 0.0f;
    if (r == 1) x *= 1e-6f;
    if (r == 2 && col < 16) x = col == 0 ? 1.0f : -1e-3f;
    return c.bf16 ? bf16_to_f32(f32_to_bf16(x)) : x;
  });
  const QuantSource dsrc = upload_source(c, v);
  const void* src = dsrc.data();

  Nvfp4Tensor want;
  PG_ASSERT_OK(quantize_nvfp4(v.data(), c.rows, c.cols, kNvfp4AutoScale2, /*mse_search=*/false, want));
  float amax = -1.0f;
  ASSERT_EQ(cuda::nvfp4_amax(src, c.bf16, n, &amax, nullptr), cudaSuccess);
  const float scale_2 = nvfp4_auto_scale_2(amax);
  ASSERT_EQ(std::memcmp(&scale_2, &want.scale_2, 4), 0) << "scale_2 " << scale_2 << " vs the CPU's " << want.scale_2;

  auto dpacked = poisoned<uint8_t>(size_t(n / 2));
  auto dscales = poisoned<uint8_t>(size_t(n / 16));
  ASSERT_EQ(cuda::nvfp4_quantize(src, c.bf16, c.rows, c.cols, scale_2, dpacked.data(), dscales.data(), nullptr),
            cudaSuccess);
  const auto packed = to_host(dpacked), scales = to_host(dscales);
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < scales.size(); ++i)
    if (scales[i] != want.scale_fp8[i] && bad++ == 0) first = int64_t(i);
  EXPECT_EQ(bad, 0) << "block scales differ, first at block " << first;
  bad = 0, first = -1;
  for (size_t i = 0; i < packed.size(); ++i)
    if (packed[i] != want.packed[i] && bad++ == 0) first = int64_t(i);
  EXPECT_EQ(bad, 0) << "codes differ, first at byte " << first;

  // The NVFP4 linear over the copy against the source's (one token): the head's logits as drafted.
  ASSERT_EQ(cuda::nvfp4_to_device_layout(dpacked.data(), dpacked.size(), nullptr), cudaSuccess);
  const Matrix src_m = dsrc.matrix(c);
  Matrix q_m{WeightFormat::kNvfp4, c.rows, c.cols, dpacked.data()};
  q_m.scale_fp8 = dscales.data();
  q_m.scale_2 = scale_2;
  const double rel = linear_copy_rel_rms(src_m, q_m, seed + 2);
  // e2m1 keeps one mantissa bit: the weights' RMS error is ~10-15% of their RMS for these blocks; a
  // wrong scale, nibble order or layout gives ~1.
  EXPECT_LT(rel, 0.25) << "the NVFP4 copy's outputs against the source's (relative RMS error)";
  std::printf("[ measure  ] nvfp4 quantize %s: logits' relative RMS error %.4f\n", c.name, rel);
}

const QuantCase kQuantCases[] = {
    {"bf16_256x512", 256, 512, true},
    {"f32_130x448", 130, 448, false},
    {"bf16_head_8192x256", 8192, 256, true},  // the embedded model's head
};
INSTANTIATE_TEST_SUITE_P(Shapes, Nvfp4QuantizeCuda, ::testing::ValuesIn(kQuantCases),
                         [](const ::testing::TestParamInfo<QuantCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace pg::ops::test
