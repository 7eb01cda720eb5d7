// The NVFP4 dequantize kernel of the prefill paths (gemm/convert.cu, ToBf16Src::kNvfp4) against
// formats/nvfp4's dequantize_nvfp4 (and ops::matrix_row_to_f32 for per-row-group scale_2), bit for
// bit: each element is the same f32 product rounded once to bf16 (core/dtype.h f32_to_bf16).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "formats/nvfp4.h"
#include "ops/cuda/gemm/convert.h"
#include "ops/matrix.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {
namespace {

struct DequantCase {
  const char* name;
  int64_t rows, cols;
  int64_t dst_pad = 0;        // destination row stride cols + dst_pad (the padding must be zeros)
  bool vec = true;            // the 8-element vector path (else the per-element path)
  int64_t scale_2_group = 0;  // > 0: a scale_2 per group of this many rows (an expert stack)
};
void PrintTo(const DequantCase& c, std::ostream* os) { *os << c.name; }

class Nvfp4DequantCuda : public ::testing::TestWithParam<DequantCase> {};

TEST_P(Nvfp4DequantCuda, BitExactVsCpu) {
  PG_REQUIRE_CUDA();
  const DequantCase& c = GetParam();
  const uint64_t seed = seed_of(c.name);
  // Every code byte, every finite positive e4m3 scale (0x01..0x7e: subnormal to 448), scale_2 a
  // non-power of two so the final product rounds.
  std::vector<uint8_t> packed(size_t(c.rows * c.cols / 2)), scales(size_t(c.rows * c.cols / 16));
  parallel_fill(packed, [&](uint64_t i) { return uint8_t(splitmix64(seed ^ (i * 0x9e3779b97f4a7c15ull)) >> 56); });
  parallel_fill(scales, [&](uint64_t i) {
    return uint8_t(1 + (splitmix64((seed + 1) ^ (i * 0x9e3779b97f4a7c15ull)) >> 32) % 0x7e);
  });
  const float scale_2 = 0.0123f;
  std::vector<float> group_scale_2;
  if (c.scale_2_group)
    for (int64_t g = 0; g < c.rows / c.scale_2_group; ++g) group_scale_2.push_back(0.0123f * float(g + 1) / 3.0f);

  // Reference: the CPU's f32 values, rounded to bf16.
  std::vector<float> ref_f32(size_t(c.rows * c.cols));
  if (c.scale_2_group) {
    Matrix w{WeightFormat::kNvfp4, c.rows, c.cols, packed.data()};
    w.scale_fp8 = scales.data(), w.scale_2_rows = group_scale_2.data(), w.scale_2_group_rows = c.scale_2_group;
    for (int64_t r = 0; r < c.rows; ++r) matrix_row_to_f32(w, r, ref_f32.data() + r * c.cols);
  } else {
    dequantize_nvfp4(packed.data(), scales.data(), scale_2, c.rows, c.cols, ref_f32.data());
  }

  const int64_t ld = c.cols + c.dst_pad;
  auto dpacked = to_device_nvfp4(packed);
  auto dscales = to_device(scales);
  auto dgroups = to_device(group_scale_2);
  auto dst_r = cuda::DeviceBuffer<uint16_t>::create(size_t(c.rows * ld));
  PG_ASSERT_OK(dst_r.status());
  cuda::DeviceBuffer<uint16_t> dst = std::move(dst_r).value();
  PG_ASSERT_OK(dst.fill_bytes(0xff));
  cuda::ToBf16Params p;
  p.src = dpacked.data(), p.src_type = cuda::ToBf16Src::kNvfp4, p.dst = dst.data();
  p.rows = c.rows, p.cols = c.cols, p.src_stride = c.cols, p.dst_stride = ld;
  p.scale_fp8 = dscales.data(), p.scale_2 = scale_2;
  if (c.scale_2_group) p.scale_2_rows = dgroups.data(), p.scale_2_group_rows = c.scale_2_group;
  p.vec = c.vec;
  ASSERT_EQ(cuda::launch_to_bf16(p, nullptr), cudaSuccess);
  ASSERT_TRUE(sync_ok());
  const std::vector<uint16_t> got = to_host(dst);

  int64_t mismatches = 0, first = -1, pad_bad = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t j = 0; j < c.cols; ++j) {
      if (got[size_t(r * ld + j)] != f32_to_bf16(ref_f32[size_t(r * c.cols + j)])) {
        if (first < 0) first = r * c.cols + j;
        ++mismatches;
      }
    }
    for (int64_t j = c.cols; j < ld; ++j) pad_bad += got[size_t(r * ld + j)] != 0;
  }
  EXPECT_EQ(mismatches, 0) << "first mismatch at element " << first << ": got 0x" << std::hex
                           << (first >= 0 ? got[size_t(first / c.cols * ld + first % c.cols)] : 0) << " want 0x"
                           << (first >= 0 ? f32_to_bf16(ref_f32[size_t(first)]) : 0);
  EXPECT_EQ(pad_bad, 0) << "padding columns not zeroed";
  std::printf("[ nvfp4 dq ] %-28s %lld x %lld bit-exact (%lld mismatches)\n", c.name, (long long)c.rows,
              (long long)c.cols, (long long)mismatches);
}

const DequantCase kDequantCases[] = {
    {"v3_expert_gate_up", 4096, 7168},
    {"v3_expert_down", 7168, 2048},
    {"moonlight_expert_down", 2048, 1408, 8},
    {"moonlight_stack_scale_2", 4 * 2816, 2048, 0, true, 2816},
    {"scalar_path", 37, 48, 3, false},
    {"scalar_path_groups", 40, 80, 0, false, 10},
    {"odd_cols", 5, 1040, 0, true},
};

INSTANTIATE_TEST_SUITE_P(Shapes, Nvfp4DequantCuda, ::testing::ValuesIn(kDequantCases),
                         [](const ::testing::TestParamInfo<DequantCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace pg::ops::test
