// The CPU inner loops of simd.h: a portable, an AVX2 and an AVX-512 form of each, the same
// arithmetic in the same order. The vector forms are one body (simd_forms.inc) compiled once per
// instruction set, in a `#pragma GCC target` region without FMA (GCC would otherwise contract the
// product and the add into one rounding), and called only where the processor reports the set.
#include "ops/cpu/simd.h"

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/dtype.h"

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

void dots_tokens_portable(const float* x, int64_t x_stride, int64_t m, const float* w, int64_t w_stride, int64_t rows,
                          int64_t n, float* out, int64_t out_stride) {
  for (int64_t t = 0; t < m; ++t)
    for (int64_t r = 0; r < rows; ++r) out[t * out_stride + r] = dot_portable(x + t * x_stride, w + r * w_stride, n);
}

void axpy_portable(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void axpys_portable(const float* alpha, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) axpy_portable(alpha[r], x + r * x_stride, y, n);
}

constexpr const float* kE2M1 = kE2M1Values;  // core/dtype.h: e2m1 codes (bit 3 the sign) as f32

void nvfp4_to_f32_portable(const uint8_t* packed, const float* block_scale, float scale_2, int64_t cols, float* out) {
  for (int64_t c = 0; c < cols; c += 2) {
    const float s = block_scale[c / 16];
    const uint8_t b = packed[c / 2];
    out[c] = (kE2M1[b & 0xf] * s) * scale_2;
    out[c + 1] = (kE2M1[b >> 4] * s) * scale_2;
  }
}

void dots_nvfp4_tokens_portable(const float* x, int64_t xs, int64_t m, const uint8_t* p, const uint8_t* sc, float s2,
                                int64_t rows, int64_t n, float* out, int64_t os) {
  std::vector<float> row(static_cast<size_t>(n)), bs(static_cast<size_t>(n / 16));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < n / 16; ++b) bs[size_t(b)] = f8e4m3_to_f32(sc[r * (n / 16) + b]);
    nvfp4_to_f32_portable(p + r * (n / 2), bs.data(), s2, n, row.data());
    for (int64_t t = 0; t < m; ++t) out[t * os + r] = dot_portable(x + t * xs, row.data(), n);
  }
}

void bf16_to_f32_portable(const uint16_t* w, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits_to_f32(w[i]);
}

#if PG_SIMD_X86
// AVX2: V is two 8-lane registers (lanes 0..7, 8..15).
#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {
struct V {
  __m256 lo, hi;
};
inline __m256 bf16x8(const uint16_t* w) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline V zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline V load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline V load_bf16(const uint16_t* w) { return {bf16x8(w), bf16x8(w + 8)}; }
inline V splat(float a) { return {_mm256_set1_ps(a), _mm256_set1_ps(a)}; }
inline V add(V a, V b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
inline V mul(V a, V b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline void store(float* p, V v) { _mm256_storeu_ps(p, v.lo), _mm256_storeu_ps(p + 8, v.hi); }
// The nibbles in element order; the magnitude looked up in 8 lanes by the low 3 bits, the sign
// bit (bit 3) put back.
inline V e2m1(const uint8_t* bytes8) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes8));
  const __m128i nib = _mm_set1_epi8(0x0f);
  const __m128i codes = _mm_unpacklo_epi8(_mm_and_si128(b, nib), _mm_and_si128(_mm_srli_epi16(b, 4), nib));
  const __m256 mags = _mm256_loadu_ps(kE2M1);
  auto half = [&](__m128i c8) {
    const __m256i c = _mm256_cvtepu8_epi32(c8);
    const __m256 sign = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(c, 3), 31));
    return _mm256_xor_ps(_mm256_permutevar8x32_ps(mags, c), sign);
  };
  return {half(codes), half(_mm_srli_si128(codes, 8))};
}
// dot's fixed tree over 16 lanes (finish without a tail), from the 8-lane sums of lanes l and l + 8:
// then l + 4, l + 2, l + 1, the same adds in the same pairs, in registers.
inline float tree8(__m256 s8) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
inline float tree(V v) { return tree8(_mm256_add_ps(v.lo, v.hi)); }
constexpr int kTokBlock = 2;  // 2 tokens x 4 rows x 2 registers: the 16 registers AVX2 has
#include "ops/cpu/simd_forms.inc"
}  // namespace avx2
#pragma GCC pop_options

// AVX-512: V is one 16-lane register, exactly dot's 16 partial sums.
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
struct V {
  __m512 v;
};
inline V zero() { return {_mm512_setzero_ps()}; }
inline V load(const float* p) { return {_mm512_loadu_ps(p)}; }
inline V load_bf16(const uint16_t* w) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}
inline V splat(float a) { return {_mm512_set1_ps(a)}; }
inline V add(V a, V b) { return {_mm512_add_ps(a.v, b.v)}; }
inline V mul(V a, V b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline void store(float* p, V v) { _mm512_storeu_ps(p, v.v); }
// The nibbles in element order, looked up in the 16-entry table.
inline V e2m1(const uint8_t* bytes8) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes8));
  const __m128i nib = _mm_set1_epi8(0x0f);
  const __m128i codes = _mm_unpacklo_epi8(_mm_and_si128(b, nib), _mm_and_si128(_mm_srli_epi16(b, 4), nib));
  return {_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes), _mm512_loadu_ps(kE2M1))};
}
// dot's fixed tree over 16 lanes (finish without a tail), from the 8-lane sums of lanes l and l + 8:
// then l + 4, l + 2, l + 1, the same adds in the same pairs, in registers.
inline float tree8(__m256 s8) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
inline float tree(V v) {
  const __m256 lo = _mm512_castps512_ps256(v.v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v.v), 1));
  return tree8(_mm256_add_ps(lo, hi));
}
constexpr int kTokBlock = 4;  // 4 tokens x 4 rows = 16 of the 32 registers
#include "ops/cpu/simd_forms.inc"
}  // namespace avx512
#pragma GCC pop_options
#endif

constexpr SimdKernels kPortable{dot_portable,          dot_bf16_portable,         axpy_portable,
                                axpys_portable,        dots_portable,             dots_bf16_portable,
                                dots_bf16_tokens_portable, dots_tokens_portable,  bf16_to_f32_portable,
                                nvfp4_to_f32_portable, dots_nvfp4_tokens_portable, "portable"};
#if PG_SIMD_X86
constexpr SimdKernels kAvx512{avx512::dot,         avx512::dot_bf16,         avx512::axpy,
                              avx512::axpys,       avx512::dots,             avx512::dots_bf16,
                              avx512::dots_bf16_tokens, avx512::dots_tokens, avx512::bf16_to_f32,
                              avx512::nvfp4_to_f32, avx512::dots_nvfp4_tokens, "avx512"};
constexpr SimdKernels kAvx2{avx2::dot,         avx2::dot_bf16,         avx2::axpy,
                            avx2::axpys,       avx2::dots,             avx2::dots_bf16,
                            avx2::dots_bf16_tokens, avx2::dots_tokens, avx2::bf16_to_f32,
                            avx2::nvfp4_to_f32, avx2::dots_nvfp4_tokens, "avx2"};
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
void simd_dots_tokens(const float* x, int64_t x_stride, int64_t m, const float* w, int64_t w_stride, int64_t rows,
                      int64_t n, float* out, int64_t out_stride) {
  kernels().dots_tokens(x, x_stride, m, w, w_stride, rows, n, out, out_stride);
}
void simd_axpy(float alpha, const float* x, float* y, int64_t n) { kernels().axpy(alpha, x, y, n); }
void simd_axpys(const float* alpha, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t n) {
  kernels().axpys(alpha, x, x_stride, rows, y, n);
}
void simd_bf16_to_f32(const uint16_t* w, float* out, int64_t n) { kernels().bf16_to_f32(w, out, n); }
void simd_nvfp4_to_f32(const uint8_t* packed, const float* block_scale, float scale_2, int64_t cols, float* out) {
  kernels().nvfp4_to_f32(packed, block_scale, scale_2, cols, out);
}
void simd_dots_nvfp4_tokens(const float* x, int64_t x_stride, int64_t m, const uint8_t* packed, const uint8_t* scales,
                            float scale_2, int64_t rows, int64_t n, float* out, int64_t out_stride) {
  kernels().dots_nvfp4_tokens(x, x_stride, m, packed, scales, scale_2, rows, n, out, out_stride);
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
