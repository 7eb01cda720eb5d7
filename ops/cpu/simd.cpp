// The CPU inner loops of simd.h: a portable form and an AVX2 form of each, the same arithmetic in
// the same order. The AVX2 functions are compiled for AVX2 alone (target attribute, no FMA: GCC
// would otherwise contract the product and the add into one rounding) and called only where the
// processor reports AVX2.
#include "ops/cpu/simd.h"

#include <cstdlib>
#include <cstring>
#include <string_view>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
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

void axpy_portable(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
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

// kDotRows rows at once: 2 kDotRows independent accumulator chains (each row's two halves of 16
// lanes), so the adds of different rows overlap where one row's chain waits on each add's latency.
// Row r's b operand: f32 rows of a (b the shared vector), or bf16 rows of w (x shared).
constexpr int kDotRows = 4;

__attribute__((target("avx2"))) void dots_avx2(const float* a, int64_t a_stride, int64_t rows, const float* b, int64_t n,
                                               float* out) {
  int64_t r0 = 0;
  for (; r0 + kDotRows <= rows; r0 += kDotRows) {
    const float* ar[kDotRows];
    __m256 lo[kDotRows], hi[kDotRows];
#pragma GCC unroll 4
    for (int r = 0; r < kDotRows; ++r) ar[r] = a + (r0 + r) * a_stride, lo[r] = hi[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      const __m256 b0 = _mm256_loadu_ps(b + i), b1 = _mm256_loadu_ps(b + i + 8);
#pragma GCC unroll 4
      for (int r = 0; r < kDotRows; ++r) {
        lo[r] = _mm256_add_ps(lo[r], _mm256_mul_ps(_mm256_loadu_ps(ar[r] + i), b0));
        hi[r] = _mm256_add_ps(hi[r], _mm256_mul_ps(_mm256_loadu_ps(ar[r] + i + 8), b1));
      }
    }
    for (int r = 0; r < kDotRows; ++r) {
      float acc[kLanes];
      _mm256_storeu_ps(acc, lo[r]);
      _mm256_storeu_ps(acc + 8, hi[r]);
      out[r0 + r] = finish(acc, ar[r], [b](int64_t j) { return b[j]; }, i, n);
    }
  }
  for (; r0 < rows; ++r0) out[r0] = dot_avx2(a + r0 * a_stride, b, n);
}

__attribute__((target("avx2"))) void dots_bf16_avx2(const float* x, const uint16_t* w, int64_t w_stride, int64_t rows,
                                                    int64_t n, float* out) {
  int64_t r0 = 0;
  for (; r0 + kDotRows <= rows; r0 += kDotRows) {
    const uint16_t* wr[kDotRows];
    __m256 lo[kDotRows], hi[kDotRows];
#pragma GCC unroll 4
    for (int r = 0; r < kDotRows; ++r) wr[r] = w + (r0 + r) * w_stride, lo[r] = hi[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
#pragma GCC unroll 4
      for (int r = 0; r < kDotRows; ++r) {
        lo[r] = _mm256_add_ps(lo[r], _mm256_mul_ps(x0, bf16x8_to_f32(wr[r] + i)));
        hi[r] = _mm256_add_ps(hi[r], _mm256_mul_ps(x1, bf16x8_to_f32(wr[r] + i + 8)));
      }
    }
    for (int r = 0; r < kDotRows; ++r) {
      float acc[kLanes];
      _mm256_storeu_ps(acc, lo[r]);
      _mm256_storeu_ps(acc + 8, hi[r]);
      const uint16_t* wrr = wr[r];
      out[r0 + r] = finish(acc, x, [wrr](int64_t j) { return bf16_bits_to_f32(wrr[j]); }, i, n);
    }
  }
  for (; r0 < rows; ++r0) out[r0] = dot_bf16_avx2(x, w + r0 * w_stride, n);
}

__attribute__((target("avx2"))) void axpy_avx2(float alpha, const float* x, float* y, int64_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(a, _mm256_loadu_ps(x + i))));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

__attribute__((target("avx2"))) void bf16_to_f32_avx2(const uint16_t* w, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, bf16x8_to_f32(w + i));
  for (; i < n; ++i) out[i] = bf16_bits_to_f32(w[i]);
}
#endif

constexpr SimdKernels kPortable{dot_portable,  dot_bf16_portable,    axpy_portable, dots_portable,
                                dots_bf16_portable, bf16_to_f32_portable, "portable"};
#if PG_SIMD_X86
constexpr SimdKernels kAvx2{dot_avx2, dot_bf16_avx2, axpy_avx2, dots_avx2, dots_bf16_avx2, bf16_to_f32_avx2, "avx2"};
#endif

const SimdKernels& pick() {
  const char* env = std::getenv("PEREGRINE_CPU_SIMD");
  if (env && std::string_view(env) == "portable") return kPortable;
  const SimdKernels* k = simd_kernels("avx2");
  return k ? *k : kPortable;
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
void simd_axpy(float alpha, const float* x, float* y, int64_t n) { kernels().axpy(alpha, x, y, n); }
void simd_bf16_to_f32(const uint16_t* w, float* out, int64_t n) { kernels().bf16_to_f32(w, out, n); }
const char* simd_level() { return kernels().level; }

const SimdKernels* simd_kernels(const char* level) {
  const std::string_view l(level);
  if (l == "portable") return &kPortable;
#if PG_SIMD_X86
  if (l == "avx2") {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? &kAvx2 : nullptr;
  }
#endif
  return nullptr;
}

}  // namespace pg::ops::cpu
