// NVFP4 quantizer and dequantizer (see nvfp4.h for the layout, the rules and their sources).
// Built with -ffp-contract=off: the squared-error sums must not fuse into FMAs, so that
// tools/nvfp4_reference.py (PyTorch, unfused f64 ops) picks the same block scales.
#include "formats/nvfp4.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/dtype.h"

namespace pg {
namespace {

constexpr int64_t kB = kNvfp4BlockSize;
constexpr uint8_t kE4M3One = 0x38;        // e4m3fn 1.0: exponent field 7 (= bias), mantissa 0
constexpr uint8_t kE4M3MaxCode = 0x7e;    // 448; 0x7f is NaN
// mse_search candidates, as steps from the amax-derived code, in the order they are tried.
constexpr int kMseSteps[] = {-1, -2, -3, -4, +1};

// Codes of one block of 16 for e4m3 scale `s_code`, into codes[0..16).
void encode_block(const float* x, uint8_t s_code, float scale_2, uint8_t* codes) {
  const float denom = f8e4m3_to_f32(s_code) * scale_2;
  for (int64_t j = 0; j < kB; ++j) codes[j] = nvfp4_encode(x[j] / denom);
}

// Dequantized value of a code: the exact product e2m1 * fp8 rounded once by the scale_2 product.
inline float decode(uint8_t code, float s, float scale_2) { return (e2m1_to_f32(code) * s) * scale_2; }

double block_sq_error(const float* x, const uint8_t* codes, uint8_t s_code, float scale_2) {
  const float s = f8e4m3_to_f32(s_code);
  double err = 0;
  for (int64_t j = 0; j < kB; ++j) {
    const double d = double(x[j]) - double(decode(codes[j], s, scale_2));
    err += d * d;
  }
  return err;
}

// One row: block scales and packed codes.
void quantize_row(const float* x, int64_t cols, float scale_2, bool mse_search, uint8_t* packed, uint8_t* scales) {
  uint8_t codes[kB];
  for (int64_t b = 0; b < cols / kB; ++b) {
    const float* xb = x + b * kB;
    const uint8_t s_code = nvfp4_block_scale(xb, scale_2, mse_search);
    encode_block(xb, s_code, scale_2, codes);
    scales[b] = s_code;
    for (int64_t j = 0; j < kB; j += 2) packed[(b * kB + j) / 2] = uint8_t(codes[j] | (codes[j + 1] << 4));
  }
}

}  // namespace

uint8_t nvfp4_block_scale(const float* x, float scale_2, bool mse_search) {
  float amax = 0;
  for (int64_t j = 0; j < kB; ++j) amax = std::max(amax, std::fabs(x[j]));
  float q = amax / (kNvfp4E2M1Max * scale_2);
  if (q == 0) q = 1.0f;
  q = std::clamp(q, kNvfp4E4M3Min, kNvfp4E4M3Max);
  uint8_t s_code = f32_to_f8e4m3(q, Overflow::kSaturate);
  if (!mse_search || amax == 0) return s_code;
  uint8_t codes[kB];
  encode_block(x, s_code, scale_2, codes);
  double best = block_sq_error(x, codes, s_code, scale_2);
  const uint8_t base = s_code;
  for (int step : kMseSteps) {
    const int c = int(base) + step;
    if (c < 1 || c > kE4M3MaxCode) continue;  // 0 is a zero scale; above 0x7e is NaN
    encode_block(x, uint8_t(c), scale_2, codes);
    const double e = block_sq_error(x, codes, uint8_t(c), scale_2);
    if (e < best) best = e, s_code = uint8_t(c);
  }
  return s_code;
}

uint8_t nvfp4_encode(float x) {
  if (!(x < 0) && !(x > 0)) return 0;  // ±0 and NaN
  return f32_to_e2m1(x);               // RNE, saturating at ±6; sign bit set for x < 0
}

Status quantize_nvfp4(const float* w, int64_t rows, int64_t cols, float scale_2_or_auto, bool mse_search,
                      Nvfp4Tensor& out, ThreadPool* pool) {
  if (rows <= 0 || cols <= 0) return invalid_argument("quantize_nvfp4: empty shape [{}, {}]", rows, cols);
  if (cols % kB) return invalid_argument("quantize_nvfp4: cols ({}) must be a multiple of {}", cols, kB);
  if (!std::isfinite(scale_2_or_auto) || scale_2_or_auto < 0)
    return invalid_argument("quantize_nvfp4: scale_2 must be > 0, or 0 for automatic; got {}", scale_2_or_auto);
  ThreadPool& tp = pool ? *pool : ThreadPool::global();

  // Per-row amax and first non-finite column (-1: none); reduced serially, so exact for any split.
  std::vector<float> row_amax(size_t(rows), 0.0f);
  std::vector<int64_t> bad_col(size_t(rows), -1);
  tp.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = w + r * cols;
      float amax = 0;
      for (int64_t c = 0; c < cols; ++c) {
        if (!std::isfinite(x[c])) { bad_col[r] = c; break; }
        amax = std::max(amax, std::fabs(x[c]));
      }
      row_amax[r] = amax;
    }
  });
  float amax = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (bad_col[r] >= 0)
      return invalid_argument("quantize_nvfp4: w[{}][{}] = {} is not finite", r, bad_col[r], w[r * cols + bad_col[r]]);
    amax = std::max(amax, row_amax[r]);
  }
  float scale_2 = scale_2_or_auto;
  if (scale_2 == kNvfp4AutoScale2) scale_2 = nvfp4_auto_scale_2(amax);

  out.rows = rows;
  out.cols = cols;
  out.scale_2 = scale_2;
  out.packed.assign(size_t(rows * cols / 2), 0);
  out.scale_fp8.assign(size_t(rows * cols / kB), 0);
  tp.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      quantize_row(w + r * cols, cols, scale_2, mse_search, out.packed.data() + r * cols / 2,
                   out.scale_fp8.data() + r * cols / kB);
  });
  return ok_status();
}

void dequantize_nvfp4(const uint8_t* packed, const uint8_t* scale_fp8, float scale_2, int64_t rows, int64_t cols,
                      float* out, ThreadPool* pool) {
  PG_CHECK(cols % kB == 0, "dequantize_nvfp4: cols {} is not a multiple of {}", cols, kB);
  ThreadPool& tp = pool ? *pool : ThreadPool::global();
  tp.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* row = packed + r * (cols / 2);
      const uint8_t* scales = scale_fp8 + r * (cols / kB);
      float* o = out + r * cols;
      for (int64_t c = 0; c < cols; c += 2) {
        const float s = f8e4m3_to_f32(scales[c / kB]);
        o[c] = decode(row[c / 2] & 0xf, s, scale_2);
        o[c + 1] = decode(row[c / 2] >> 4, s, scale_2);
      }
    }
  });
}

void dequantize_nvfp4(const Nvfp4Tensor& t, float* out, ThreadPool* pool) {
  PG_CHECK(t.packed.size() == size_t(t.rows * t.cols / 2) && t.scale_fp8.size() == size_t(t.rows * t.cols / kB),
           "dequantize_nvfp4: tensor [{}, {}] holds {} packed bytes and {} scales", t.rows, t.cols, t.packed.size(),
           t.scale_fp8.size());
  dequantize_nvfp4(t.packed.data(), t.scale_fp8.data(), t.scale_2, t.rows, t.cols, out, pool);
}

}  // namespace pg
