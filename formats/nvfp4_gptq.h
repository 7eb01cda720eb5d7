// GPTQ for NVFP4 weights (Frantar et al., "GPTQ: Accurate Post-Training Quantization for
// Generative Pre-trained Transformers", 2022): each Linear's weights are rounded one input column
// at a time, and the error of each rounding is pushed onto the columns not yet rounded, weighted by
// the inverse Hessian of the layer's squared output error, H = sum over calibration inputs of x xᵀ.
// The output is an ordinary NVFP4 tensor (formats/nvfp4.h, the ModelOpt layout): only the choice
// of codes and block scales changes, so every loader and kernel reads it as it reads quantize_nvfp4's.
//
// The rules, per row (rows are independent: the same row bits for any thread count):
//  - scale_2 as quantize_nvfp4 derives it from the original tensor (amax / (448 * 6)).
//  - At column j = 16 b, block b's e4m3 scale is nvfp4_block_scale of the row's 16 values as
//    updated so far (GPTQ's "groups decided when reached"), with the MSE search when asked.
//  - Column j: code = nvfp4_encode(w_j / (fp8(s) * scale_2)), q_j its dequantized value, e = (w_j -
//    q_j) / U_jj, and w_k -= e U_jk for k > j, where U is the upper Cholesky factor of H⁻¹
//    (H⁻¹ = Uᵀ U) after damping: H_ii += damp * mean(diag H), a zero diagonal (an input never seen)
//    becoming 1 first. With H = c I no error moves and the result is quantize_nvfp4's bit for bit.
// H is accumulated in f64 (nvfp4_hessian_add) and the factorization runs in f64.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "formats/nvfp4.h"

namespace pg {

// Σ x xᵀ over the calibration rows a Linear saw: [n, n] f64, its lower triangle (j <= i) holding
// the sums; the upper triangle is not read.
struct GptqHessian {
  int64_t n = 0;             // the Linear's in-features
  int64_t samples = 0;       // rows added
  std::vector<double> h;     // [n, n], lower triangle
  void reset(int64_t cols) { n = cols, samples = 0, h.assign(size_t(cols * cols), 0.0); }
};

// h += Σ_r x_r x_rᵀ (lower triangle) over m rows of x (n = h.n values each, row stride x_stride; 0: n). Rows of h are
// split over the pool; each element sums its rows in order, so the result is independent of the
// thread count.
void nvfp4_hessian_add(GptqHessian& h, const float* x, int64_t m, int64_t x_stride, ThreadPool* pool = nullptr);

struct GptqOptions {
  double damp = 0.1;         // fraction of the mean diagonal added to the diagonal (GPTQ's paper: 0.01)
  bool mse_search = false;   // nvfp4_block_scale's MSE search for each block, on the updated values
};

// What one GPTQ quantization did, for logs and tests.
struct GptqStats {
  double damp_used = 0;      // the damping fraction that made H positive definite (damp x 10^k)
  int64_t dead_inputs = 0;   // inputs with H_ii = 0 (never non-zero in the calibration data)
};

// U of a Hessian (gptq_inverse_factor) with how it was damped: what the rounding needs, computed once
// for the Linears that share one input (gate_proj and up_proj).
struct GptqFactor {
  int64_t n = 0;
  std::vector<double> u;  // [n, n], upper triangular
  GptqStats stats;
};
// Errors: gptq_inverse_factor's.
Result<GptqFactor> gptq_factor(const GptqHessian& h, double damp, ThreadPool* pool = nullptr);

// Quantizes w [rows, cols] (f32, finite, cols % 16 == 0) with GPTQ under the Hessian h (h.n == cols)
// into `out`. When H + damp is not positive definite (a Cholesky pivot <= 0), the damping is raised
// tenfold, up to 6 times, before giving up with an error.
// Errors: the shape or h's size, non-finite w, a damp outside [0, 1], a Hessian with a non-finite
// entry, or one that no damping makes positive definite.
Result<GptqStats> quantize_nvfp4_gptq(const float* w, int64_t rows, int64_t cols, const GptqHessian& h,
                                      const GptqOptions& o, Nvfp4Tensor& out, ThreadPool* pool = nullptr);
// The same with the factor computed before (f.n == cols; o.damp is f's already).
Result<GptqStats> quantize_nvfp4_gptq(const float* w, int64_t rows, int64_t cols, const GptqFactor& f,
                                      const GptqOptions& o, Nvfp4Tensor& out, ThreadPool* pool = nullptr);

// U of the rules above for a Hessian (damped as described), [n, n] row-major f64, zeros below the
// diagonal; exposed for tests. Same errors as quantize_nvfp4_gptq's for the Hessian.
Result<std::vector<double>> gptq_inverse_factor(const GptqHessian& h, double damp, GptqStats* stats = nullptr,
                                                ThreadPool* pool = nullptr);

}  // namespace pg
