// The CPU inner loops of simd.h: a portable, an AVX2 and an AVX-512 form of each, the same
// arithmetic in the same order. The vector functions are compiled for their instruction set alone
// (target attributes without FMA: GCC would otherwise contract the product and the add into one
// rounding) and called only where the processor reports it.
#include "ops/cpu/simd.h"

#include <cstdlib>
#include <cstring>
#include <string_view>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*() and then warn that
// the (deliberately) undefined value may be used: a known false positive, silenced for this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define PG_SIMD_X86 1
#else
#define PG_SIMD_X86 0
#endif

namespace pg::ops::cpu {
namespace {

constexpr int kLanes = 16;  // dot's interleaved partial sums

inline float bf16_bits_to_f32(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The tail (lanes 0.. of the last partial chunk) and the fixed tree, shared by every form.
template <typename B>
inline float finish(float (&acc)[kLanes], const float* a, B b_at, int64_t i, int64_t n) {
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b_at(i);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

float dot_portable(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  return finish(acc, a, [b](int64_t j) { return b[j]; }, i, n);
}

float dot_bf16_portable(const float* x, const uint16_t* w, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l] * bf16_bits_to_f32(w[i + l]);
  return finish(acc, x, [w](int64_t j) { return bf16_bits_to_f32(w[j]); }, i, n);
}

void dots_portable(const float* a, int64_t a_stride, int64_t rows, const float* b, int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = dot_portable(a + r * a_stride, b, n);
}

void dots_bf16_portable(const float* x, const uint16_t* w, int64_t w_stride, int64_t rows, int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = dot_bf16_portable(x, w + r * w_stride, n);
}

void dots_bf16_tokens_portable(const float* x, int64_t x_stride, int64_t m, const uint16_t* w, int64_t w_stride,
                               int64_t rows, int64_t n, float* out, int64_t out_stride) {
  for (int64_t t = 0; t < m; ++t) dots_bf16_portable(x + t * x_stride, w, w_stride, rows, n, out + t * out_stride);
}

void axpy_portable(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void axpys_portable(const float* alpha, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) axpy_portable(alpha[r], x + r * x_stride, y, n);
}

// e2m1 codes (bit 3 the sign) as f32: core/dtype.h's e2m1_to_f32.
constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

void nvfp4_to_f32_portable(const uint8_t* packed, const float* block_scale, float scale_2, int64_t cols, float* out) {
  for (int64_t c = 0; c < cols; c += 2) {
    const float s = block_scale[c / 16];
    const uint8_t b = packed[c / 2];
    out[c] = (kE2M1[b & 0xf] * s) * scale_2;
    out[c + 1] = (kE2M1[b >> 4] * s) * scale_2;
  }
}

void bf16_to_f32_portable(const uint16_t* w, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits_to_f32(w[i]);
}

#if PG_SIMD_X86
__attribute__((target("avx2"))) inline __m256 bf16x8_to_f32(const uint16_t* w) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx2"))) float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();  // lanes 0..7, 8..15
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8)));
  }
  float acc[kLanes];
  _mm256_storeu_ps(acc, lo);
  _mm256_storeu_ps(acc + 8, hi);
  return finish(acc, a, [b](int64_t j) { return b[j]; }, i, n);
}

__attribute__((target("avx2"))) float dot_bf16_avx2(const float* x, const uint16_t* w, int64_t n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(x + i), bf16x8_to_f32(w + i)));
    hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(x + i + 8), bf16x8_to_f32(w + i + 8)));
  }
  float acc[kLanes];
  _mm256_storeu_ps(acc, lo);
  _mm256_storeu_ps(acc + 8, hi);
  return finish(acc, x, [w](int64_t j) { return bf16_bits_to_f32(w[j]); }, i, n);
}

// kRows rows at once: 2 kRows independent accumulator chains (each row's two halves of 16 lanes),
// so the adds of different rows overlap where one row's chain waits on each add's latency. Rows
// of f32 a against a shared b, or of bf16 w against a shared x (the product is the same either way
// round). Blocks of 4, then 2, then 1 rows.
template <int kRows>
__attribute__((target("avx2"))) inline void dots_block_avx2(const float* a, int64_t a_stride, const float* b, int64_t n,
                                                            float* out) {
  const float* ar[kRows];
  __m256 lo[kRows], hi[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) ar[r] = a + r * a_stride, lo[r] = hi[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m256 b0 = _mm256_loadu_ps(b + i), b1 = _mm256_loadu_ps(b + i + 8);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      lo[r] = _mm256_add_ps(lo[r], _mm256_mul_ps(_mm256_loadu_ps(ar[r] + i), b0));
      hi[r] = _mm256_add_ps(hi[r], _mm256_mul_ps(_mm256_loadu_ps(ar[r] + i + 8), b1));
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float acc[kLanes];
    _mm256_storeu_ps(acc, lo[r]);
    _mm256_storeu_ps(acc + 8, hi[r]);
    out[r] = finish(acc, ar[r], [b](int64_t j) { return b[j]; }, i, n);
  }
}

template <int kRows>
__attribute__((target("avx2"))) inline void dots_bf16_block_avx2(const float* x, const uint16_t* w, int64_t w_stride,
                                                                 int64_t n, float* out) {
  const uint16_t* wr[kRows];
  __m256 lo[kRows], hi[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) wr[r] = w + r * w_stride, lo[r] = hi[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      lo[r] = _mm256_add_ps(lo[r], _mm256_mul_ps(x0, bf16x8_to_f32(wr[r] + i)));
      hi[r] = _mm256_add_ps(hi[r], _mm256_mul_ps(x1, bf16x8_to_f32(wr[r] + i + 8)));
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float acc[kLanes];
    _mm256_storeu_ps(acc, lo[r]);
    _mm256_storeu_ps(acc + 8, hi[r]);
    const uint16_t* wrr = wr[r];
    out[r] = finish(acc, x, [wrr](int64_t j) { return bf16_bits_to_f32(wrr[j]); }, i, n);
  }
}

__attribute__((target("avx2"))) void dots_avx2(const float* a, int64_t a_stride, int64_t rows, const float* b, int64_t n,
                                               float* out) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) dots_block_avx2<4>(a + r * a_stride, a_stride, b, n, out + r);
  if (r + 2 <= rows) dots_block_avx2<2>(a + r * a_stride, a_stride, b, n, out + r), r += 2;
  if (r < rows) dots_block_avx2<1>(a + r * a_stride, a_stride, b, n, out + r);
}

__attribute__((target("avx2"))) void dots_bf16_avx2(const float* x, const uint16_t* w, int64_t w_stride, int64_t rows,
                                                    int64_t n, float* out) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) dots_bf16_block_avx2<4>(x, w + r * w_stride, w_stride, n, out + r);
  if (r + 2 <= rows) dots_bf16_block_avx2<2>(x, w + r * w_stride, w_stride, n, out + r), r += 2;
  if (r < rows) dots_bf16_block_avx2<1>(x, w + r * w_stride, w_stride, n, out + r);
}

// Two tokens against two bf16 rows: four (token, row) dots, eight accumulator chains, each row
// converted once for both tokens.
__attribute__((target("avx2"))) inline void dots_bf16_2x2_avx2(const float* x0, const float* x1, const uint16_t* w0,
                                                               const uint16_t* w1, int64_t n, float* out0, float* out1) {
  __m256 a00l = _mm256_setzero_ps(), a00h = a00l, a01l = a00l, a01h = a00l, a10l = a00l, a10h = a00l, a11l = a00l,
         a11h = a00l;  // a{token}{row}{half}
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m256 w0l = bf16x8_to_f32(w0 + i), w0h = bf16x8_to_f32(w0 + i + 8);
    const __m256 w1l = bf16x8_to_f32(w1 + i), w1h = bf16x8_to_f32(w1 + i + 8);
    const __m256 x0l = _mm256_loadu_ps(x0 + i), x0h = _mm256_loadu_ps(x0 + i + 8);
    const __m256 x1l = _mm256_loadu_ps(x1 + i), x1h = _mm256_loadu_ps(x1 + i + 8);
    a00l = _mm256_add_ps(a00l, _mm256_mul_ps(x0l, w0l));
    a00h = _mm256_add_ps(a00h, _mm256_mul_ps(x0h, w0h));
    a01l = _mm256_add_ps(a01l, _mm256_mul_ps(x0l, w1l));
    a01h = _mm256_add_ps(a01h, _mm256_mul_ps(x0h, w1h));
    a10l = _mm256_add_ps(a10l, _mm256_mul_ps(x1l, w0l));
    a10h = _mm256_add_ps(a10h, _mm256_mul_ps(x1h, w0h));
    a11l = _mm256_add_ps(a11l, _mm256_mul_ps(x1l, w1l));
    a11h = _mm256_add_ps(a11h, _mm256_mul_ps(x1h, w1h));
  }
  const __m256 lo[4] = {a00l, a01l, a10l, a11l}, hi[4] = {a00h, a01h, a10h, a11h};
  const float* xs[4] = {x0, x0, x1, x1};
  const uint16_t* ws[4] = {w0, w1, w0, w1};
  float* outs[4] = {out0, out0 + 1, out1, out1 + 1};
  for (int k = 0; k < 4; ++k) {
    float acc[kLanes];
    _mm256_storeu_ps(acc, lo[k]);
    _mm256_storeu_ps(acc + 8, hi[k]);
    const uint16_t* wk = ws[k];
    *outs[k] = finish(acc, xs[k], [wk](int64_t j) { return bf16_bits_to_f32(wk[j]); }, i, n);
  }
}

__attribute__((target("avx2"))) void dots_bf16_tokens_avx2(const float* x, int64_t x_stride, int64_t m, const uint16_t* w,
                                                           int64_t w_stride, int64_t rows, int64_t n, float* out,
                                                           int64_t out_stride) {
  int64_t t = 0;
  for (; t + 2 <= m; t += 2) {
    const float *x0 = x + t * x_stride, *x1 = x0 + x_stride;
    float *o0 = out + t * out_stride, *o1 = o0 + out_stride;
    int64_t r = 0;
    for (; r + 2 <= rows; r += 2)
      dots_bf16_2x2_avx2(x0, x1, w + r * w_stride, w + (r + 1) * w_stride, n, o0 + r, o1 + r);
    if (r < rows) {
      o0[r] = dot_bf16_avx2(x0, w + r * w_stride, n);
      o1[r] = dot_bf16_avx2(x1, w + r * w_stride, n);
    }
  }
  if (t < m) dots_bf16_avx2(x + t * x_stride, w, w_stride, rows, n, out + t * out_stride);
}

__attribute__((target("avx2"))) void axpy_avx2(float alpha, const float* x, float* y, int64_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(a, _mm256_loadu_ps(x + i))));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

__attribute__((target("avx2"))) void axpys_avx2(const float* alpha, const float* x, int64_t x_stride, int64_t rows,
                                                float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(y + i);
    for (int64_t r = 0; r < rows; ++r)
      v = _mm256_add_ps(v, _mm256_mul_ps(_mm256_set1_ps(alpha[r]), _mm256_loadu_ps(x + r * x_stride + i)));
    _mm256_storeu_ps(y + i, v);
  }
  for (; i < n; ++i)
    for (int64_t r = 0; r < rows; ++r) y[i] += alpha[r] * x[r * x_stride + i];
}

// 16 values a block: the block's 8 bytes split into nibbles in element order, the magnitudes looked up
// in 8 lanes, the sign bit put back, then the two products.
__attribute__((target("avx2"))) void nvfp4_to_f32_avx2(const uint8_t* packed, const float* block_scale, float scale_2,
                                                       int64_t cols, float* out) {
  const __m256 mags = _mm256_loadu_ps(kE2M1);
  const __m256 s2 = _mm256_set1_ps(scale_2);
  for (int64_t b = 0; b < cols / 16; ++b) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + 8 * b));
    const __m128i lo = _mm_and_si128(bytes, _mm_set1_epi8(0x0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0f));
    const __m128i codes = _mm_unpacklo_epi8(lo, hi);  // 16 codes in element order
    const __m256 s = _mm256_set1_ps(block_scale[b]);
    for (int h = 0; h < 2; ++h) {
      const __m256i c = _mm256_cvtepu8_epi32(h ? _mm_srli_si128(codes, 8) : codes);
      const __m256 mag = _mm256_permutevar8x32_ps(mags, c);  // the low 3 bits pick the magnitude
      const __m256 v = _mm256_xor_ps(mag, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(c, 3), 31)));
      _mm256_storeu_ps(out + 16 * b + 8 * h, _mm256_mul_ps(_mm256_mul_ps(v, s), s2));
    }
  }
}

__attribute__((target("avx2"))) void bf16_to_f32_avx2(const uint16_t* w, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, bf16x8_to_f32(w + i));
  for (; i < n; ++i) out[i] = bf16_bits_to_f32(w[i]);
}

// AVX-512: one 16-lane register is exactly dot's 16 partial sums, so a row needs one accumulator
// chain and half the AVX2 form's instructions.
#define PG_AVX512 __attribute__((target("avx512f")))

PG_AVX512 inline __m512 bf16x16_to_f32(const uint16_t* w) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// kTok tokens (rows of x) against kRows bf16 rows of w: out[t * os + r] = dot_bf16(x_t, w_r).
template <int kTok, int kRows>
PG_AVX512 inline void bf16_block_avx512(const float* x, int64_t xs, const uint16_t* w, int64_t ws, int64_t n, float* out,
                                        int64_t os) {
  __m512 acc[kTok][kRows];
#pragma GCC unroll 4
  for (int t = 0; t < kTok; ++t)
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) acc[t][r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    __m512 wv[kRows];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) wv[r] = bf16x16_to_f32(w + r * ws + i);
#pragma GCC unroll 4
    for (int t = 0; t < kTok; ++t) {
      const __m512 xv = _mm512_loadu_ps(x + t * xs + i);
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) acc[t][r] = _mm512_add_ps(acc[t][r], _mm512_mul_ps(xv, wv[r]));
    }
  }
  for (int t = 0; t < kTok; ++t)
    for (int r = 0; r < kRows; ++r) {
      float a[kLanes];
      _mm512_storeu_ps(a, acc[t][r]);
      const uint16_t* wr = w + r * ws;
      out[t * os + r] = finish(a, x + t * xs, [wr](int64_t j) { return bf16_bits_to_f32(wr[j]); }, i, n);
    }
}

// kRows f32 rows of a against b: out[r] = dot(a_r, b).
template <int kRows>
PG_AVX512 inline void f32_block_avx512(const float* a, int64_t as, const float* b, int64_t n, float* out) {
  __m512 acc[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) acc[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m512 bv = _mm512_loadu_ps(b + i);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_loadu_ps(a + r * as + i), bv));
  }
  for (int r = 0; r < kRows; ++r) {
    float s[kLanes];
    _mm512_storeu_ps(s, acc[r]);
    out[r] = finish(s, a + r * as, [b](int64_t j) { return b[j]; }, i, n);
  }
}

PG_AVX512 float dot_avx512(const float* a, const float* b, int64_t n) {
  float v;
  f32_block_avx512<1>(a, 0, b, n, &v);
  return v;
}

PG_AVX512 float dot_bf16_avx512(const float* x, const uint16_t* w, int64_t n) {
  float v;
  bf16_block_avx512<1, 1>(x, 0, w, 0, n, &v, 0);
  return v;
}

PG_AVX512 void dots_avx512(const float* a, int64_t a_stride, int64_t rows, const float* b, int64_t n, float* out) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) f32_block_avx512<4>(a + r * a_stride, a_stride, b, n, out + r);
  if (r + 2 <= rows) f32_block_avx512<2>(a + r * a_stride, a_stride, b, n, out + r), r += 2;
  if (r < rows) f32_block_avx512<1>(a + r * a_stride, a_stride, b, n, out + r);
}

// Rows r0.. of w against kTok tokens, in blocks of 4, 2 and 1 rows.
template <int kTok>
PG_AVX512 inline void bf16_rows_avx512(const float* x, int64_t xs, const uint16_t* w, int64_t ws, int64_t rows, int64_t n,
                                       float* out, int64_t os) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) bf16_block_avx512<kTok, 4>(x, xs, w + r * ws, ws, n, out + r, os);
  if (r + 2 <= rows) bf16_block_avx512<kTok, 2>(x, xs, w + r * ws, ws, n, out + r, os), r += 2;
  if (r < rows) bf16_block_avx512<kTok, 1>(x, xs, w + r * ws, ws, n, out + r, os);
}

PG_AVX512 void dots_bf16_avx512(const float* x, const uint16_t* w, int64_t w_stride, int64_t rows, int64_t n,
                                float* out) {
  bf16_rows_avx512<1>(x, 0, w, w_stride, rows, n, out, 0);
}

PG_AVX512 void dots_bf16_tokens_avx512(const float* x, int64_t x_stride, int64_t m, const uint16_t* w, int64_t w_stride,
                                       int64_t rows, int64_t n, float* out, int64_t out_stride) {
  int64_t t = 0;
  for (; t + 2 <= m; t += 2)
    bf16_rows_avx512<2>(x + t * x_stride, x_stride, w, w_stride, rows, n, out + t * out_stride, out_stride);
  if (t < m) bf16_rows_avx512<1>(x + t * x_stride, x_stride, w, w_stride, rows, n, out + t * out_stride, out_stride);
}

PG_AVX512 void axpy_avx512(float alpha, const float* x, float* y, int64_t n) {
  const __m512 a = _mm512_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_mul_ps(a, _mm512_loadu_ps(x + i))));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

PG_AVX512 void axpys_avx512(const float* alpha, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(y + i);
    for (int64_t r = 0; r < rows; ++r)
      v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_set1_ps(alpha[r]), _mm512_loadu_ps(x + r * x_stride + i)));
    _mm512_storeu_ps(y + i, v);
  }
  for (; i < n; ++i)
    for (int64_t r = 0; r < rows; ++r) y[i] += alpha[r] * x[r * x_stride + i];
}

PG_AVX512 void nvfp4_to_f32_avx512(const uint8_t* packed, const float* block_scale, float scale_2, int64_t cols,
                                   float* out) {
  const __m512 table = _mm512_loadu_ps(kE2M1);
  const __m512 s2 = _mm512_set1_ps(scale_2);
  for (int64_t b = 0; b < cols / 16; ++b) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + 8 * b));
    const __m128i lo = _mm_and_si128(bytes, _mm_set1_epi8(0x0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0f));
    const __m512 v = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)), table);
    _mm512_storeu_ps(out + 16 * b, _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(block_scale[b])), s2));
  }
}

PG_AVX512 void bf16_to_f32_avx512(const uint16_t* w, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, bf16x16_to_f32(w + i));
  for (; i < n; ++i) out[i] = bf16_bits_to_f32(w[i]);
}
#endif

constexpr SimdKernels kPortable{dot_portable,       dot_bf16_portable,         axpy_portable, axpys_portable, dots_portable,
                                dots_bf16_portable, dots_bf16_tokens_portable, bf16_to_f32_portable,
                                nvfp4_to_f32_portable, "portable"};
#if PG_SIMD_X86
constexpr SimdKernels kAvx512{dot_avx512,       dot_bf16_avx512,         axpy_avx512, axpys_avx512, dots_avx512,
                              dots_bf16_avx512, dots_bf16_tokens_avx512, bf16_to_f32_avx512,
                              nvfp4_to_f32_avx512, "avx512"};
constexpr SimdKernels kAvx2{dot_avx2,       dot_bf16_avx2,         axpy_avx2, axpys_avx2, dots_avx2,
                            dots_bf16_avx2, dots_bf16_tokens_avx2, bf16_to_f32_avx2,
                            nvfp4_to_f32_avx2, "avx2"};
#endif

const SimdKernels& pick() {
  const char* env = std::getenv("PEREGRINE_CPU_SIMD");
  if (env && std::string_view(env) == "portable") return kPortable;
  if (env && std::string_view(env) == "avx2" && simd_kernels("avx2")) return *simd_kernels("avx2");
  for (const char* level : {"avx512", "avx2"})
    if (const SimdKernels* k = simd_kernels(level)) return *k;
  return kPortable;
}

// A function-local static: safe to call from other translation units' static initializers.
const SimdKernels& kernels() {
  static const SimdKernels& k = pick();
  return k;
}

}  // namespace

float simd_dot(const float* a, const float* b, int64_t n) { return kernels().dot(a, b, n); }
float simd_dot_bf16(const float* x, const uint16_t* w, int64_t n) { return kernels().dot_bf16(x, w, n); }
void simd_dots(const float* a, int64_t a_stride, int64_t rows, const float* b, int64_t n, float* out) {
  kernels().dots(a, a_stride, rows, b, n, out);
}
void simd_dots_bf16(const float* x, const uint16_t* w, int64_t w_stride, int64_t rows, int64_t n, float* out) {
  kernels().dots_bf16(x, w, w_stride, rows, n, out);
}
void simd_dots_bf16_tokens(const float* x, int64_t x_stride, int64_t m, const uint16_t* w, int64_t w_stride,
                           int64_t rows, int64_t n, float* out, int64_t out_stride) {
  kernels().dots_bf16_tokens(x, x_stride, m, w, w_stride, rows, n, out, out_stride);
}
void simd_axpy(float alpha, const float* x, float* y, int64_t n) { kernels().axpy(alpha, x, y, n); }
void simd_axpys(const float* alpha, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t n) {
  kernels().axpys(alpha, x, x_stride, rows, y, n);
}
void simd_bf16_to_f32(const uint16_t* w, float* out, int64_t n) { kernels().bf16_to_f32(w, out, n); }
void simd_nvfp4_to_f32(const uint8_t* packed, const float* block_scale, float scale_2, int64_t cols, float* out) {
  kernels().nvfp4_to_f32(packed, block_scale, scale_2, cols, out);
}
const char* simd_level() { return kernels().level; }

const SimdKernels* simd_kernels(const char* level) {
  const std::string_view l(level);
  if (l == "portable") return &kPortable;
#if PG_SIMD_X86
  __builtin_cpu_init();
  if (l == "avx512") return __builtin_cpu_supports("avx512f") ? &kAvx512 : nullptr;
  if (l == "avx2") return __builtin_cpu_supports("avx2") ? &kAvx2 : nullptr;
#endif
  return nullptr;
}

}  // namespace pg::ops::cpu
