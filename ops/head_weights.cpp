// The compact head weights of an FP8 or NVFP4 kv_b_proj (ops/head_linear.h: Fp8Heads, Bf16Heads).
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"
#include "ops/head_linear.h"

namespace pg::ops {

bool fp8_heads_fit(const Matrix& kv_b_proj, int64_t nope, int64_t v_head_dim) {
  const Matrix& w = kv_b_proj;
  auto pow2_16 = [](int64_t b) { return b >= 16 && (b & (b - 1)) == 0; };
  return w.format == WeightFormat::kFp8Block && w.data && w.scale_inv && nope > 0 && v_head_dim > 0 &&
         w.rows % (nope + v_head_dim) == 0 && pow2_16(w.block_rows) && pow2_16(w.block_cols) &&
         (nope + v_head_dim) % w.block_rows == 0;
}

Fp8Heads split_fp8_heads(const Matrix& kv_b_proj, int64_t n_heads, int64_t nope, int64_t v_head_dim) {
  const Matrix& w = kv_b_proj;
  const int64_t V = v_head_dim, R = w.cols, br = w.block_rows, bc = w.block_cols, sc = w.scale_cols();
  PG_CHECK(fp8_heads_fit(w, nope, V) && w.rows == n_heads * (nope + V), "split_fp8_heads: kv_b_proj [{}, {}] does not fit",
           w.rows, w.cols);
  const uint8_t* codes = static_cast<const uint8_t*>(w.data);
  auto scale = [&](int64_t row, int64_t col) { return w.scale_inv[(row / br) * sc + col / bc]; };
  Fp8Heads f;
  f.uk_group = br, f.uv_group = bc;
  const int64_t uk_groups = (nope + br - 1) / br, uv_groups = (R + bc - 1) / bc;
  f.uk_t.resize(size_t(n_heads * R * nope)), f.uv.resize(size_t(n_heads * V * R));
  f.uk_scale.resize(size_t(n_heads * R * uk_groups)), f.uv_scale.resize(size_t(n_heads * V * uv_groups));
  for (int64_t h = 0; h < n_heads; ++h) {
    const int64_t base = h * (nope + V);  // head h's first kv_b_proj row: a block row's first
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t d = 0; d < nope; ++d) f.uk_t[size_t((h * R + r) * nope + d)] = codes[(base + d) * R + r];
      for (int64_t g = 0; g < uk_groups; ++g) f.uk_scale[size_t((h * R + r) * uk_groups + g)] = scale(base + g * br, r);
    }
    for (int64_t v = 0; v < V; ++v) {
      const int64_t row = base + nope + v;
      std::memcpy(f.uv.data() + (h * V + v) * R, codes + row * R, size_t(R));
      for (int64_t g = 0; g < uv_groups; ++g) f.uv_scale[size_t((h * V + v) * uv_groups + g)] = scale(row, g * bc);
    }
  }
  return f;
}

bool nvfp4_heads_fit(const Matrix& kv_b_proj, int64_t nope, int64_t v_head_dim) {
  const Matrix& w = kv_b_proj;
  return w.format == WeightFormat::kNvfp4 && w.data && w.scale_fp8 && !w.scale_2_rows && nope > 0 && v_head_dim > 0 &&
         w.rows % (nope + v_head_dim) == 0 && w.cols % kNvfp4GroupSize == 0;
}

Bf16Heads split_nvfp4_heads(const Matrix& kv_b_proj, int64_t n_heads, int64_t nope, int64_t v_head_dim) {
  const Matrix& w = kv_b_proj;
  const int64_t V = v_head_dim, R = w.cols;
  PG_CHECK(nvfp4_heads_fit(w, nope, V) && w.rows == n_heads * (nope + V),
           "split_nvfp4_heads: kv_b_proj [{}, {}] does not fit", w.rows, w.cols);
  const uint8_t* codes = static_cast<const uint8_t*>(w.data);
  // code x block scale: exact in f32, and in bf16 (the bits above bf16's 16 are zero).
  auto value = [&](int64_t row, int64_t col) {
    const uint8_t b = codes[row * (R / 2) + col / 2];
    const float v = e2m1_to_f32(col % 2 ? uint8_t(b >> 4) : uint8_t(b & 0xf)) *
                    f8e4m3_to_f32(w.scale_fp8[row * (R / kNvfp4GroupSize) + col / kNvfp4GroupSize]);
    return f32_to_bf16(v);
  };
  Bf16Heads f;
  f.y_scale = w.scale_2;
  f.uk_t.resize(size_t(n_heads * R * nope)), f.uv.resize(size_t(n_heads * V * R));
  for (int64_t h = 0; h < n_heads; ++h) {
    const int64_t base = h * (nope + V);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t d = 0; d < nope; ++d) f.uk_t[size_t((h * R + r) * nope + d)] = value(base + d, r);
    for (int64_t v = 0; v < V; ++v)
      for (int64_t r = 0; r < R; ++r) f.uv[size_t((h * V + v) * R + r)] = value(base + nope + v, r);
  }
  return f;
}

}  // namespace pg::ops
