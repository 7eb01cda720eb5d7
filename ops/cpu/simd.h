// The CPU ops' inner loops (dot products, bf16 rows to f32), picked once at run time by what the
// processor supports: AVX-512 where it has it, else AVX2, else the portable loops. Every form gives the same bits
// as the portable one (the same 16 interleaved partial sums, each a product rounded then added,
// then the same tree: no FMA), so results do not depend on the machine, only their speed does.
#pragma once

#include <cstdint>

namespace pg::ops::cpu {

// sum_i a[i] * b[i] in dot()'s fixed order (cpu_ops.h).
float simd_dot(const float* a, const float* b, int64_t n);
// dot(x, w as f32): the same bits as converting the bf16 row first, without the row buffer.
float simd_dot_bf16(const float* x, const uint16_t* w, int64_t n);
// out[r] = dot(a + r * a_stride, b, n) for r < rows: each the bits of simd_dot; several rows at
// once where the form can (their partial sums are independent chains, so they overlap).
void simd_dots(const float* a, int64_t a_stride, int64_t rows, const float* b, int64_t n, float* out);
// out[r] = simd_dot_bf16(x, w + r * w_stride, n) for r < rows (rows of a bf16 matrix against one x).
void simd_dots_bf16(const float* x, const uint16_t* w, int64_t w_stride, int64_t rows, int64_t n, float* out);
// out[t * out_stride + r] = simd_dot_bf16(x + t * x_stride, w + r * w_stride, n) for t < m, r < rows:
// tokens against rows of a bf16 matrix, each row converted once per block of tokens (2 with AVX2,
// 4 with AVX-512).
void simd_dots_bf16_tokens(const float* x, int64_t x_stride, int64_t m, const uint16_t* w, int64_t w_stride,
                           int64_t rows, int64_t n, float* out, int64_t out_stride);
// The same against f32 rows: out[t * out_stride + r] = simd_dot(x + t * x_stride, w + r * w_stride, n).
void simd_dots_tokens(const float* x, int64_t x_stride, int64_t m, const float* w, int64_t w_stride, int64_t rows,
                      int64_t n, float* out, int64_t out_stride);
// NVFP4 rows (ops::Matrix kNvfp4's layout for `rows` consecutive rows: packed [rows][n / 2], e4m3
// block scales [rows][n / 16], one scale_2 for them all; n % 16 == 0) against m tokens:
// out[t * out_stride + r] = simd_dot(x_t, row r as matrix_row_to_f32 gives it), each 16-value block
// dequantized in registers ((e2m1 x block scale) x scale_2, both products rounded) instead of
// through a row buffer.
void simd_dots_nvfp4_tokens(const float* x, int64_t x_stride, int64_t m, const uint8_t* packed, const uint8_t* scales,
                            float scale_2, int64_t rows, int64_t n, float* out, int64_t out_stride);
// y[i] += alpha * x[i] (the product rounded, then the sum).
void simd_axpy(float alpha, const float* x, float* y, int64_t n);
// For r = 0 .. rows - 1 in order: y[i] += alpha[r] * x[r * x_stride + i] (the bits of that
// many simd_axpy calls; y read and written once for all of them).
void simd_axpys(const float* alpha, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t n);
// out[i] = bf16 w[i] as f32 (exact: the bits shifted up).
void simd_bf16_to_f32(const uint16_t* w, float* out, int64_t n);
// One NVFP4 row as f32 (cols % 16 == 0): out[c] = (e2m1(code c) * block_scale[c / 16]) * scale_2, both
// products rounded (ops::matrix_row_to_f32's definition). packed: cols / 2 bytes, element 2j in the
// low nibble of byte j; block_scale: the row's cols / 16 e4m3 scales already as f32.
void simd_nvfp4_to_f32(const uint8_t* packed, const float* block_scale, float scale_2, int64_t cols, float* out);

// "avx512", "avx2" or "portable": the form in use (`peregrine bench` prints it).
// PEREGRINE_CPU_SIMD=portable or =avx2 keeps that form where the processor has more (an A/B of the
// speed; the bits are the same).
const char* simd_level();

// One form's loops, for the tests that hold every form to the portable one's bits.
struct SimdKernels {
  float (*dot)(const float*, const float*, int64_t);
  float (*dot_bf16)(const float*, const uint16_t*, int64_t);
  void (*axpy)(float, const float*, float*, int64_t);
  void (*axpys)(const float*, const float*, int64_t, int64_t, float*, int64_t);
  void (*dots)(const float*, int64_t, int64_t, const float*, int64_t, float*);
  void (*dots_bf16)(const float*, const uint16_t*, int64_t, int64_t, int64_t, float*);
  void (*dots_bf16_tokens)(const float*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, int64_t, float*, int64_t);
  void (*dots_tokens)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t, float*, int64_t);
  void (*bf16_to_f32)(const uint16_t*, float*, int64_t);
  void (*nvfp4_to_f32)(const uint8_t*, const float*, float, int64_t, float*);
  void (*dots_nvfp4_tokens)(const float*, int64_t, int64_t, const uint8_t*, const uint8_t*, float, int64_t, int64_t,
                            float*, int64_t);
  const char* level;
};
// The form named `level` ("portable", "avx2", "avx512"), or nullptr where this build or processor lacks it.
const SimdKernels* simd_kernels(const char* level);

}  // namespace pg::ops::cpu
