// The CPU definition of linear_norm (ops/linear_norm.h): the norm and the linear, composed.
#include "ops/cpu/linear_norm.h"

#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace pg::ops::cpu {

void linear_norm(const LinearNormArgs& a, ThreadPool& pool) {
  const int64_t m = a.lin.m, k = a.lin.w->cols, n = a.lin.w->rows;
  if (m == 0) return;
  if (a.in_norm) {
    std::vector<float> xn(size_t(m * k));  // [m, k] rmsnorm(x) * in_norm
    rmsnorm(RmsNormArgs{a.lin.x, a.in_norm, xn.data(), m, k, a.lin.x_stride, 0, a.eps});
    LinearArgs la = a.lin;
    la.x = xn.data(), la.x_stride = 0;
    linear(la, pool);
    return;
  }
  linear(a.lin, pool);
  rmsnorm(RmsNormArgs{a.lin.y, a.out_norm, a.y_normed, m, n, a.lin.y_stride, a.y_normed_stride, a.eps});
}

}  // namespace pg::ops::cpu
