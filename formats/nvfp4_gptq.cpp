// GPTQ for NVFP4 (see nvfp4_gptq.h for the rules). Built with -ffp-contract=off as nvfp4.cpp: the
// block scales and codes must be quantize_nvfp4's wherever no error moves.
#include "formats/nvfp4_gptq.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"

namespace pg {
namespace {

constexpr int64_t kB = kNvfp4BlockSize;
constexpr int64_t kRowsPerTask = 16;  // rows updated together: one U row serves them all from L1
constexpr int kMaxDampRaises = 6;

// sum_k a[k] b[k] over n terms in 8 interleaved partial sums (a fixed order, so the same bits on every
// machine and thread count; independent chains the compiler can put in vector registers).
double dot8(const double* a, const double* b, int64_t n) {
  double p[8] = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int l = 0; l < 8; ++l) p[l] += a[k + l] * b[k + l];
  for (int l = 0; k < n; ++k, ++l) p[l] += a[k] * b[k];
  return ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}

// L L^T = A, L lower (row-major, zeros above the diagonal), by columns: column j's entries below
// the pivot are independent dot products, split over the pool. False when a pivot is not > 0.
bool cholesky_lower(const std::vector<double>& a, int64_t n, std::vector<double>& l, ThreadPool& pool) {
  l.assign(size_t(n * n), 0.0);
  for (int64_t j = 0; j < n; ++j) {
    const double* lj = &l[size_t(j * n)];
    const double d = a[size_t(j * n + j)] - dot8(lj, lj, j);
    if (!(d > 0) || !std::isfinite(d)) return false;
    const double pivot = std::sqrt(d);
    l[size_t(j * n + j)] = pivot;
    pool.parallel_for(n - j - 1, [&](int64_t b, int64_t e) {
      for (int64_t i = j + 1 + b; i < j + 1 + e; ++i) {
        double* li = &l[size_t(i * n)];
        li[j] = (a[size_t(i * n + j)] - dot8(li, lj, j)) / pivot;
      }
    }, /*min_chunk=*/32);
  }
  return true;
}

}  // namespace

void nvfp4_hessian_add(GptqHessian& h, const float* x, int64_t m, int64_t x_stride, ThreadPool* pool) {
  if (m <= 0) return;
  const int64_t n = h.n, stride = x_stride > 0 ? x_stride : n;
  ThreadPool& tp = pool ? *pool : ThreadPool::global();
  // Rows of x as f64 once, then h[i][j] += Σ_r x_ri x_rj for j <= i (the lower triangle).
  std::vector<double> xd(size_t(m * n));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) xd[size_t(r * n + c)] = double(x[r * stride + c]);
  tp.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      double* hi = &h.h[size_t(i * n)];
      for (int64_t r = 0; r < m; ++r) {
        const double* xr = &xd[size_t(r * n)];
        const double v = xr[i];
        if (v == 0) continue;
        for (int64_t j = 0; j <= i; ++j) hi[j] += v * xr[j];
      }
    }
  }, /*min_chunk=*/16);
  h.samples += m;
}

Result<std::vector<double>> gptq_inverse_factor(const GptqHessian& h, double damp, GptqStats* stats,
                                                ThreadPool* pool_or_null) {
  const int64_t n = h.n;
  if (n <= 0 || h.h.size() != size_t(n * n))
    return invalid_argument("gptq: the Hessian holds {} values for {} inputs (want {})", h.h.size(), n, n * n);
  if (!(damp >= 0 && damp <= 1)) return invalid_argument("gptq: damp must be in [0, 1], got {}", damp);
  for (double v : h.h)
    if (!std::isfinite(v)) return invalid_argument("gptq: the Hessian has a non-finite entry");
  ThreadPool& pool = pool_or_null ? *pool_or_null : ThreadPool::global();

  // The reversed, damped Hessian A = P H P (P reverses the order): its lower Cholesky factor L gives
  // H = V Vᵀ with V = P L P upper, so H⁻¹ = V⁻ᵀ V⁻¹ and U = V⁻¹ = P L⁻¹ P.
  int64_t dead = 0;
  double mean_diag = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = h.h[size_t(i * n + i)];
    dead += d == 0;
    mean_diag += d == 0 ? 1.0 : d;
  }
  mean_diag /= double(n);
  std::vector<double> a(size_t(n * n)), l;
  double used = damp;
  bool factored = false;
  for (int attempt = 0; attempt <= kMaxDampRaises && !factored; ++attempt, used *= 10) {
    if (attempt > 0 && used == 0) used = 1e-6;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) a[size_t(i * n + j)] = h.h[size_t((n - 1 - j) * n + (n - 1 - i))];
    for (int64_t i = 0; i < n; ++i) {
      double& d = a[size_t(i * n + i)];
      if (d == 0) d = 1.0;  // an input never seen: its column rounds alone, moving no error
      d += used * mean_diag;
    }
    factored = cholesky_lower(a, n, l, pool);
    if (factored) break;
  }
  if (!factored)
    return failed_precondition("gptq: the Hessian is not positive definite even with damping {} of its mean diagonal",
                               used / 10);
  if (stats) stats->damp_used = used, stats->dead_inputs = dead;

  // M = L⁻¹ (lower), row j of Mᵀ at a time: Mᵀ[j][i] = M[i][j] = -(Σ_{k=j}^{i-1} L[i][k] M[k][j]) / L[i][i].
  std::vector<double> mt(size_t(n * n), 0.0);
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      double* mj = &mt[size_t(j * n)];
      mj[j] = 1.0 / l[size_t(j * n + j)];
      for (int64_t i = j + 1; i < n; ++i) {
        const double* li = &l[size_t(i * n)];
        mj[i] = -dot8(li + j, mj + j, i - j) / li[i];
      }
    }
  });
  // U[i][j] = M[n-1-i][n-1-j] = Mᵀ[n-1-j][n-1-i] (nonzero for j >= i).
  std::vector<double> u(size_t(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i; j < n; ++j) u[size_t(i * n + j)] = mt[size_t((n - 1 - j) * n + (n - 1 - i))];
  return u;
}

Result<GptqFactor> gptq_factor(const GptqHessian& h, double damp, ThreadPool* pool) {
  GptqFactor f;
  f.n = h.n;
  PG_ASSIGN_OR_RETURN(f.u, gptq_inverse_factor(h, damp, &f.stats, pool));
  return f;
}

namespace {
Status check_weight(const float* w, int64_t rows, int64_t cols, int64_t n, float& amax) {
  if (rows <= 0 || cols <= 0) return invalid_argument("gptq: empty shape [{}, {}]", rows, cols);
  if (cols % kB) return invalid_argument("gptq: cols ({}) must be a multiple of {}", cols, kB);
  if (n != cols) return invalid_argument("gptq: the Hessian is for {} inputs, the weight has {}", n, cols);
  amax = 0;
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (!std::isfinite(w[i])) return invalid_argument("gptq: w[{}][{}] = {} is not finite", i / cols, i % cols, w[i]);
    amax = std::max(amax, std::fabs(w[i]));
  }
  return ok_status();
}
}  // namespace

// The rounding itself, w checked (amax: its largest magnitude).
static GptqStats round_columns(const float* w, int64_t rows, int64_t cols, float amax, const GptqFactor& f,
                               const GptqOptions& o, Nvfp4Tensor& out, ThreadPool* pool);

Result<GptqStats> quantize_nvfp4_gptq(const float* w, int64_t rows, int64_t cols, const GptqHessian& h,
                                      const GptqOptions& o, Nvfp4Tensor& out, ThreadPool* pool) {
  float amax = 0;
  PG_TRY(check_weight(w, rows, cols, h.n, amax));  // before the factorization: errors come cheap
  PG_ASSIGN_OR_RETURN(GptqFactor f, gptq_factor(h, o.damp, pool));
  return round_columns(w, rows, cols, amax, f, o, out, pool);
}

Result<GptqStats> quantize_nvfp4_gptq(const float* w, int64_t rows, int64_t cols, const GptqFactor& f,
                                      const GptqOptions& o, Nvfp4Tensor& out, ThreadPool* pool) {
  float amax = 0;
  PG_TRY(check_weight(w, rows, cols, f.n, amax));
  if (f.u.size() != size_t(cols * cols)) return invalid_argument("gptq: the factor holds {} values for {} inputs", f.u.size(), cols);
  return round_columns(w, rows, cols, amax, f, o, out, pool);
}

static GptqStats round_columns(const float* w, int64_t rows, int64_t cols, float amax, const GptqFactor& f,
                               const GptqOptions& o, Nvfp4Tensor& out, ThreadPool* pool) {
  const GptqStats stats = f.stats;
  const std::vector<double>& u = f.u;
  const float scale_2 = nvfp4_auto_scale_2(amax);
  out.rows = rows;
  out.cols = cols;
  out.scale_2 = scale_2;
  out.packed.assign(size_t(rows * cols / 2), 0);
  out.scale_fp8.assign(size_t(rows * cols / kB), 0);

  ThreadPool& tp = pool ? *pool : ThreadPool::global();
  const int64_t n_tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  tp.parallel_for(n_tasks, [&](int64_t tb, int64_t te) {
    std::vector<double> work(size_t(kRowsPerTask * cols));
    for (int64_t task = tb; task < te; ++task) {
      const int64_t r0 = task * kRowsPerTask, nr = std::min(kRowsPerTask, rows - r0);
      for (int64_t i = 0; i < nr * cols; ++i) work[size_t(i)] = double(w[r0 * cols + i]);
      float denom[kRowsPerTask] = {}, s[kRowsPerTask] = {};
      double err[kRowsPerTask];
      for (int64_t j = 0; j < cols; ++j) {
        const double* uj = &u[size_t(j * cols)];
        for (int64_t r = 0; r < nr; ++r) {
          double* wr = &work[size_t(r * cols)];
          uint8_t* scales = out.scale_fp8.data() + (r0 + r) * (cols / kB);
          if (j % kB == 0) {
            float block[kB];
            for (int64_t k = 0; k < kB; ++k) block[k] = float(wr[j + k]);
            const uint8_t s_code = nvfp4_block_scale(block, scale_2, o.mse_search);
            scales[j / kB] = s_code;
            s[r] = f8e4m3_to_f32(s_code);
            denom[r] = s[r] * scale_2;
          }
          const float x = float(wr[j]);
          const uint8_t code = nvfp4_encode(x / denom[r]);
          const float q = (e2m1_to_f32(code) * s[r]) * scale_2;
          uint8_t& byte = out.packed[size_t((r0 + r) * (cols / 2) + j / 2)];
          byte = uint8_t(byte | (j % 2 ? code << 4 : code));
          err[r] = (wr[j] - double(q)) / uj[j];
        }
        for (int64_t r = 0; r < nr; ++r) {
          double* wr = &work[size_t(r * cols)];
          const double e = err[r];
          if (e == 0) continue;
          for (int64_t k = j + 1; k < cols; ++k) wr[k] -= e * uj[k];
        }
      }
    }
  });
  return stats;
}

}  // namespace pg
