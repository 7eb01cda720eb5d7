// NVFP4 (formats/nvfp4.h): e2m1 code rounding, hand-worked blocks, ties, zero and tiny blocks,
// error bounds, thread-count invariance, ops::Matrix kNvfp4 against the dequantized f32 matrix,
// and the PyTorch twin's fixture (tools/nvfp4_reference.py --golden) when it is present.
#include "formats/nvfp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "formats/safetensors.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/matrix.h"

namespace pg {
namespace {

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> w(size_t(rows * cols));
  for (float& v : w) v = nd(rng);
  return w;
}

Nvfp4Tensor quantize_or_die(const std::vector<float>& w, int64_t rows, int64_t cols, float scale_2 = kNvfp4AutoScale2,
                            bool mse = false, ThreadPool* pool = nullptr) {
  Nvfp4Tensor t;
  const Status s = quantize_nvfp4(w.data(), rows, cols, scale_2, mse, t, pool);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return t;
}

std::vector<float> dequantized(const Nvfp4Tensor& t) {
  std::vector<float> out(size_t(t.rows * t.cols));
  dequantize_nvfp4(t, out.data());
  return out;
}

ops::Matrix as_matrix(const Nvfp4Tensor& t) {
  ops::Matrix m{ops::WeightFormat::kNvfp4, t.rows, t.cols, t.packed.data()};
  m.scale_fp8 = t.scale_fp8.data();
  m.scale_2 = t.scale_2;
  return m;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Nvfp4Test, EveryCodeRoundTrips) {
  for (uint8_t code = 0; code < 16; ++code) {
    const float v = e2m1_to_f32(code);
    // -0 (code 8) encodes as +0: the sign bit is set only for values < 0, as ModelOpt's cast does.
    EXPECT_EQ(nvfp4_encode(v), code == 8 ? 0 : code) << "code " << int(code) << " value " << v;
  }
}

TEST(Nvfp4Test, EncodeTiesToEvenAndSaturates) {
  struct Case { float x; uint8_t code; };
  const Case cases[] = {
      {0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4}, {3.5f, 6}, {5.0f, 6},  // ties: even mantissa
      {0.2500001f, 1}, {0.7499999f, 1}, {2.5000002f, 5}, {4.9999995f, 6}, {5.0000005f, 7},
      {-0.25f, 8}, {-0.75f, 10}, {-2.5f, 12}, {-5.0f, 14}, {-0.1f, 8},  // sign kept when rounding to 0
      {6.0f, 7}, {7.0f, 7}, {1e30f, 7}, {INFINITY, 7}, {-1e30f, 15}, {-INFINITY, 15},
      {0.0f, 0}, {-0.0f, 0}, {NAN, 0},
  };
  for (const Case& c : cases) EXPECT_EQ(nvfp4_encode(c.x), c.code) << "x = " << c.x;
}

TEST(Nvfp4Test, HandWorkedBlockWithUnitScales) {
  // scale_2 = 1, amax 6: q = 6 / (6 * 1) = 1 -> e4m3 0x38; codes are the values themselves rounded.
  const std::vector<float> w = {6, -6, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5, -5, 4, -0.5f, 0, 1, 1.5f, -3};
  const Nvfp4Tensor t = quantize_or_die(w, 1, 16, 1.0f);
  EXPECT_EQ(t.scale_2, 1.0f);
  ASSERT_EQ(t.scale_fp8.size(), 1u);
  EXPECT_EQ(t.scale_fp8[0], 0x38);
  // (even element | odd element << 4): 7|15, 0|2, 2|4, 4|6, 6|14, 6|9, 0|2, 3|13
  const std::vector<uint8_t> want = {0xF7, 0x20, 0x42, 0x64, 0xE6, 0x96, 0x20, 0xD3};
  EXPECT_EQ(t.packed, want);
  const std::vector<float> d = dequantized(t);
  const std::vector<float> want_d = {6, -6, 0, 1, 1, 2, 2, 4, 4, -4, 4, -0.5f, 0, 1, 1.5f, -3};
  EXPECT_EQ(d, want_d);
}

TEST(Nvfp4Test, HandWorkedAutoScale2) {
  // amax 2688 = 448 * 6 -> scale_2 = 1 exactly. Block 0: amax 2688 -> q = 448 -> 0x7e, 2688 / 448 = 6 -> code 7.
  // Block 1: amax 3 -> q = 0.5 -> 0x30 (exponent field 6); 3 / 0.5 = 6 -> code 7, -1 / 0.5 = -2 -> code 12.
  std::vector<float> w(32, 0.0f);
  w[0] = 2688;
  w[1] = 448;  // 448 / 448 = 1 -> code 2
  w[16] = 3;
  w[17] = -1;
  const Nvfp4Tensor t = quantize_or_die(w, 1, 32);
  EXPECT_EQ(t.scale_2, 1.0f);
  EXPECT_EQ(t.scale_fp8, (std::vector<uint8_t>{0x7e, 0x30}));
  EXPECT_EQ(t.packed[0], 0x27);
  EXPECT_EQ(t.packed[8], 0xC7);
  const std::vector<float> d = dequantized(t);
  EXPECT_EQ(d[0], 2688.0f);
  EXPECT_EQ(d[1], 448.0f);
  EXPECT_EQ(d[16], 3.0f);
  EXPECT_EQ(d[17], -1.0f);
}

TEST(Nvfp4Test, HandWorkedInexactBlockScale) {
  // scale_2 = 0.5, all 1.0: q = 1 / 3 = 1.333 * 2^-2 -> e4m3 rounds the mantissa to 1.375 (0x2b = 0.34375);
  // 1 / (0.34375 * 0.5) = 5.82 -> code 7 (6); dequantized 6 * 0.34375 * 0.5 = 1.03125.
  const std::vector<float> w(16, 1.0f);
  const Nvfp4Tensor t = quantize_or_die(w, 1, 16, 0.5f);
  EXPECT_EQ(t.scale_fp8[0], 0x2b);
  EXPECT_EQ(f8e4m3_to_f32(0x2b), 0.34375f);
  for (uint8_t b : t.packed) EXPECT_EQ(b, 0x77);
  for (float v : dequantized(t)) EXPECT_EQ(v, 1.03125f);
}

TEST(Nvfp4Test, ZeroBlocksAndZeroTensor) {
  std::vector<float> w(2 * 32, 0.0f);
  w[16] = 1.0f;  // row 0 block 1 non-zero; every other block all zeros
  Nvfp4Tensor t = quantize_or_die(w, 2, 32);
  EXPECT_EQ(t.scale_fp8[0], 0x38);  // zero block: scale 1.0, not 0 (no 0 / 0)
  EXPECT_EQ(t.scale_fp8[2], 0x38);
  for (float v : dequantized(t)) EXPECT_FALSE(std::isnan(v));

  const std::vector<float> zeros(3 * 48, 0.0f);
  for (bool mse : {false, true}) {
    t = quantize_or_die(zeros, 3, 48, kNvfp4AutoScale2, mse);
    EXPECT_EQ(t.scale_2, 1.0f);  // ModelOpt's 0 / (448 * 6) would make every block scale NaN
    for (uint8_t s : t.scale_fp8) EXPECT_EQ(s, 0x38);
    for (uint8_t b : t.packed) EXPECT_EQ(b, 0);
    for (float v : dequantized(t)) EXPECT_EQ(v, 0.0f);
  }
  // A zero scale byte in a checkpoint decodes to zeros, never NaN.
  const std::vector<uint8_t> packed(8, 0x77), scale(1, 0);
  std::vector<float> out(16);
  dequantize_nvfp4(packed.data(), scale.data(), 1.0f, 1, 16, out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(Nvfp4Test, TinyAndHugeValues) {
  // Block 0 tiny next to a huge block 1: its q = amax / (6 * scale_2) underflows to 0 in f32, and
  // ModelOpt's rule (q == 0 -> 1.0) treats it as a zero block; its values decode to zeros.
  std::vector<float> w(32, 0.0f);
  for (int j = 0; j < 16; ++j) w[j] = (j % 2 ? -1e-30f : 1e-30f) * float(j + 1);
  for (int j = 16; j < 32; ++j) w[j] = 3e37f * (float(j - 15) / 16.0f);
  for (bool mse : {false, true}) {
    const Nvfp4Tensor t = quantize_or_die(w, 1, 32, kNvfp4AutoScale2, mse);
    EXPECT_EQ(t.scale_fp8[0], 0x38);
    const std::vector<float> d = dequantized(t);
    for (int j = 0; j < 16; ++j) EXPECT_EQ(d[j], 0.0f);
    for (float v : d) EXPECT_TRUE(std::isfinite(v));
    if (!mse) {  // (the search may clip the largest value for a better fit of the rest)
      EXPECT_EQ(t.scale_fp8[1], 0x7e);
      EXPECT_NEAR(d[31] / 3e37f, 1.0f, 1e-6f);
    }
  }
  // Small but representable: q = 1e-3 / (6 * 3000 / 2688) < 2^-9 is clamped to the smallest scale 0x01.
  for (int j = 0; j < 16; ++j) w[j] = 1e-3f * float(j + 1) / 16.0f;
  for (int j = 16; j < 32; ++j) w[j] = 3000.0f;
  {
    const Nvfp4Tensor t = quantize_or_die(w, 1, 32);
    EXPECT_EQ(t.scale_fp8[0], 0x01);
    const std::vector<float> d = dequantized(t);
    const float unit = (1.0f / 512.0f) * t.scale_2;
    for (int j = 0; j < 16; ++j) EXPECT_LE(std::fabs(d[j] - w[j]), unit) << j;
  }
  // A given scale_2 far too small: block scales saturate at 448 and codes at ±6, still finite.
  const std::vector<float> big(16, 1000.0f);
  const Nvfp4Tensor t = quantize_or_die(big, 1, 16, 1e-3f);
  EXPECT_EQ(t.scale_fp8[0], 0x7e);
  for (uint8_t b : t.packed) EXPECT_EQ(b, 0x77);
  for (float v : dequantized(t)) EXPECT_EQ(v, (6.0f * 448.0f) * 1e-3f);
}

TEST(Nvfp4Test, ErrorBoundsOnRandomMatrices) {
  const int64_t rows = 37, cols = 160;
  const std::vector<float> w = random_matrix(rows, cols, 7, 0.02f);
  double err_plain = 0, err_mse = 0, norm = 0;
  for (bool mse : {false, true}) {
    const Nvfp4Tensor t = quantize_or_die(w, rows, cols, kNvfp4AutoScale2, mse);
    EXPECT_FLOAT_EQ(t.scale_2, [&] {
      float a = 0;
      for (float v : w) a = std::max(a, std::fabs(v));
      return a / 2688.0f;
    }());
    const std::vector<float> d = dequantized(t);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = size_t(r * cols + c);
        const float unit = f8e4m3_to_f32(t.scale_fp8[size_t(r * cols / 16 + c / 16)]) * t.scale_2;
        // Without clipping the e2m1 grid's widest gap (4..6) bounds the error by one unit; the amax
        // element clips by at most 6 / (1 - 2^-4) - 6 = 0.4 units (e4m3 rounds q by <= 2^-4 relative).
        // MSE search may clip further: up to 4 e4m3 steps (scale >= 0.66 q) -> <= 3 units.
        EXPECT_LE(std::fabs(double(w[i]) - double(d[i])), (mse ? 3.0 : 1.0) * unit * 1.0001) << r << "," << c;
        (mse ? err_mse : err_plain) += (double(w[i]) - d[i]) * (double(w[i]) - d[i]);
        if (!mse) norm += double(w[i]) * w[i];
      }
  }
  EXPECT_LT(err_plain / norm, 0.02);  // ~ -17 dB: typical for 4-bit e2m1 with 16-element blocks
  EXPECT_LE(err_mse, err_plain);      // the search keeps the amax scale unless another is strictly better
}

TEST(Nvfp4Test, MseSearchNeverWorseInAnyBlock) {
  const int64_t rows = 20, cols = 64;
  const std::vector<float> w = random_matrix(rows, cols, 11);
  const Nvfp4Tensor a = quantize_or_die(w, rows, cols, kNvfp4AutoScale2, false);
  const Nvfp4Tensor b = quantize_or_die(w, rows, cols, kNvfp4AutoScale2, true);
  const std::vector<float> da = dequantized(a), db = dequantized(b);
  int changed = 0;
  for (int64_t blk = 0; blk < rows * cols / 16; ++blk) {
    double ea = 0, eb = 0;
    for (int64_t j = 0; j < 16; ++j) {
      const size_t i = size_t(blk * 16 + j);
      ea += (double(w[i]) - da[i]) * (double(w[i]) - da[i]);
      eb += (double(w[i]) - db[i]) * (double(w[i]) - db[i]);
    }
    EXPECT_LE(eb, ea) << "block " << blk;
    changed += a.scale_fp8[size_t(blk)] != b.scale_fp8[size_t(blk)];
  }
  EXPECT_GT(changed, 0);  // on Gaussian blocks a smaller scale often wins
}

TEST(Nvfp4Test, ThreadCountInvariance) {
  const int64_t rows = 53, cols = 96;
  const std::vector<float> w = random_matrix(rows, cols, 3);
  for (bool mse : {false, true}) {
    ThreadPool one(1);
    const Nvfp4Tensor ref = quantize_or_die(w, rows, cols, kNvfp4AutoScale2, mse, &one);
    for (int n : {2, 3, 7}) {
      ThreadPool pool(n);
      const Nvfp4Tensor t = quantize_or_die(w, rows, cols, kNvfp4AutoScale2, mse, &pool);
      EXPECT_EQ(t.packed, ref.packed) << n << " threads";
      EXPECT_EQ(t.scale_fp8, ref.scale_fp8) << n << " threads";
      EXPECT_EQ(t.scale_2, ref.scale_2);
      std::vector<float> d1(w.size()), dn(w.size());
      dequantize_nvfp4(ref, d1.data(), &one);
      dequantize_nvfp4(t, dn.data(), &pool);
      EXPECT_TRUE(same_bits(d1, dn));
    }
  }
}

TEST(Nvfp4Test, MatrixRowsMatchDequantize) {
  const int64_t rows = 9, cols = 48;
  const Nvfp4Tensor t = quantize_or_die(random_matrix(rows, cols, 5), rows, cols, 0.37f);
  const ops::Matrix m = as_matrix(t);
  ASSERT_TRUE(ops::validate_matrix(m).ok());
  const std::vector<float> d = dequantized(t);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    ops::matrix_row_to_f32(m, r, row.data());
    EXPECT_EQ(std::memcmp(row.data(), &d[size_t(r * cols)], size_t(cols) * sizeof(float)), 0) << "row " << r;
  }
}

TEST(Nvfp4Test, LinearEqualsLinearOnDequantizedMatrix) {
  const int64_t rows = 29, cols = 80, m = 5;
  const Nvfp4Tensor t = quantize_or_die(random_matrix(rows, cols, 9), rows, cols, kNvfp4AutoScale2, true);
  const std::vector<float> wd = dequantized(t);
  const std::vector<float> x = random_matrix(m, cols, 13);
  const ops::Matrix q = as_matrix(t);
  const ops::Matrix f{ops::WeightFormat::kF32, rows, cols, wd.data()};
  ThreadPool pool(3);
  for (bool accumulate : {false, true}) {
    std::vector<float> y_q(size_t(m * rows), 0.5f), y_f(size_t(m * rows), 0.5f);
    ops::LinearArgs a{x.data(), &q, y_q.data(), m};
    a.accumulate = accumulate;
    ASSERT_TRUE(ops::validate(a).ok());
    ops::cpu::linear(a, pool);
    a.w = &f;
    a.y = y_f.data();
    ops::cpu::linear(a, pool);
    EXPECT_TRUE(same_bits(y_q, y_f)) << "accumulate " << accumulate;
  }
}

TEST(Nvfp4Test, ValidationErrors) {
  const uint8_t bytes[16] = {};
  ops::Matrix m{ops::WeightFormat::kNvfp4, 2, 24, bytes};
  m.scale_fp8 = bytes;
  EXPECT_FALSE(ops::validate_matrix(m).ok());  // 24 % 16
  m.cols = 16;
  EXPECT_TRUE(ops::validate_matrix(m).ok());
  m.scale_2 = NAN;
  EXPECT_FALSE(ops::validate_matrix(m).ok());
  m.scale_2 = -1.0f;
  EXPECT_FALSE(ops::validate_matrix(m).ok());
  m.scale_2 = 1.0f;
  m.scale_fp8 = nullptr;
  EXPECT_FALSE(ops::validate_matrix(m).ok());

  Nvfp4Tensor t;
  std::vector<float> w(48, 1.0f);
  EXPECT_FALSE(quantize_nvfp4(w.data(), 2, 24, 0, false, t).ok());
  EXPECT_FALSE(quantize_nvfp4(w.data(), 1, 48, -1.0f, false, t).ok());
  EXPECT_FALSE(quantize_nvfp4(w.data(), 1, 48, INFINITY, false, t).ok());
  w[37] = NAN;
  const Status s = quantize_nvfp4(w.data(), 3, 16, 0, false, t);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("w[2][5]"), std::string::npos) << s.message();
}

// The fixture tools/nvfp4_reference.py --golden writes (PyTorch, run where torch is installed).
// Per case C: C.w F32 [r, c], C.args F32 [2] = (scale_2_or_auto, mse_search), and the reference's
// C.weight U8, C.weight_scale F8_E4M3, C.weight_scale_2 F32 [], C.dequant F32 [r, c].
TEST(Nvfp4Test, MatchesPyTorchReferenceFixture) {
  const std::filesystem::path path = std::filesystem::path(PG_SOURCE_DIR) / "tests/golden/nvfp4/nvfp4_golden.safetensors";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path << " is absent: generate it with `python3 tools/nvfp4_reference.py --golden "
                 << "tests/golden/nvfp4` on a machine with torch";
  Result<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto bytes_of = [&](const std::string& name) {
    const TensorView* v = f->find(name);
    EXPECT_NE(v, nullptr) << name;
    return v ? std::vector<uint8_t>(v->data, v->data + v->n_bytes) : std::vector<uint8_t>{};
  };
  auto floats_of = [&](const std::string& name) {
    const std::vector<uint8_t> b = bytes_of(name);
    std::vector<float> out(b.size() / 4);
    std::memcpy(out.data(), b.data(), b.size());
    return out;
  };
  int n_cases = 0;
  for (const TensorView& v : f->tensors()) {
    const std::string name(v.name);
    if (!name.ends_with(".w")) continue;
    const std::string c = name.substr(0, name.size() - 2);
    ASSERT_EQ(v.shape.size(), 2u) << name;
    const int64_t rows = v.shape[0], cols = v.shape[1];
    const std::vector<float> w = floats_of(name), args = floats_of(c + ".args");
    ASSERT_EQ(args.size(), 2u) << c;
    const Nvfp4Tensor t = quantize_or_die(w, rows, cols, args[0], args[1] != 0);
    EXPECT_EQ(t.packed, bytes_of(c + ".weight")) << c;
    EXPECT_EQ(t.scale_fp8, bytes_of(c + ".weight_scale")) << c;
    const std::vector<float> s2 = floats_of(c + ".weight_scale_2");
    ASSERT_EQ(s2.size(), 1u) << c;
    EXPECT_EQ(std::memcmp(&t.scale_2, s2.data(), 4), 0) << c << ": " << t.scale_2 << " vs " << s2[0];
    EXPECT_TRUE(same_bits(dequantized(t), floats_of(c + ".dequant"))) << c;
    ++n_cases;
  }
  EXPECT_GT(n_cases, 0);
}

}  // namespace
}  // namespace pg
