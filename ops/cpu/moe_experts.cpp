// CPU reference of moe_experts (see ops/moe_experts.h): group the (token, slot) pairs by expert,
// h = silu(gate·x) * (up·x) per pair, then y[t] = sum over t's pairs, in ascending expert id
// (shared experts last), of weight * down·h.
#include "ops/cpu/moe_experts.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "ops/cpu/cpu_ops.h"

namespace pg::ops::cpu {
namespace {

struct Pair {
  int64_t token;
  float weight;
};

float silu(float v) { return v / (1.0f + std::exp(-v)); }

// Row r of w as f32: a pointer into w (f32) or into `buf` (dequantized).
const float* row_f32(const Matrix& w, int64_t r, std::vector<float>& buf) {
  if (w.format == WeightFormat::kF32) return static_cast<const float*>(w.data) + r * w.cols;
  buf.resize(size_t(w.cols));
  matrix_row_to_f32(w, r, buf.data());
  return buf.data();
}

}  // namespace

void moe_experts(const MoeExpertsArgs& a, ThreadPool& pool) {
  if (a.m == 0) return;
  const int64_t H = a.hidden, I = a.inter, E = a.n_experts, K = a.top_k;
  const int64_t ys = a.y_stride ? a.y_stride : H;

  // The pairs of every expert, tokens ascending (then slots): [n_experts + n_shared] lists.
  std::vector<std::vector<Pair>> pairs(size_t(E + a.n_shared));
  for (int64_t t = 0; t < a.m; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = a.expert_idx[t * K + k];
      PG_CHECK(e >= 0 && e < E, "moe_experts: expert id {} of token {} outside [0, {})", e, t, E);
      pairs[size_t(e)].push_back({t, a.expert_weight[t * K + k]});
    }
  for (int64_t s = 0; s < a.n_shared; ++s)
    for (int64_t t = 0; t < a.m; ++t) pairs[size_t(E + s)].push_back({t, 1.0f});

  // Active experts in the summation order, and each one's first row of h.
  std::vector<int64_t> active, first;
  int64_t n_pairs = 0;
  for (int64_t e = 0; e < E + a.n_shared; ++e)
    if (!pairs[size_t(e)].empty()) {
      active.push_back(e);
      first.push_back(n_pairs);
      n_pairs += int64_t(pairs[size_t(e)].size());
    }
  const int64_t n_active = int64_t(active.size());

  // h = silu(gate·x) * (up·x): [n_pairs, inter] f32, parallel over (active expert, gate/up row).
  std::vector<float> h(size_t(n_pairs * I));
  pool.parallel_for(n_active * I, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> gbuf, ubuf;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t ai = i / I, j = i % I, e = active[size_t(ai)];
      const float* g = row_f32(*a.gate_up, e * 2 * I + j, gbuf);
      const float* u = row_f32(*a.gate_up, e * 2 * I + I + j, ubuf);
      const std::vector<Pair>& ps = pairs[size_t(e)];
      for (size_t p = 0; p < ps.size(); ++p) {
        const float* x = a.x + ps[p].token * H;
        h[size_t((first[size_t(ai)] + int64_t(p)) * I + j)] = silu(dot(x, g, H)) * dot(x, u, H);
      }
    }
  }, /*min_chunk=*/std::max<int64_t>(1, 16384 / std::max<int64_t>(1, H * n_pairs / std::max<int64_t>(1, n_active))));

  // y[t][o] = sum over t's pairs (experts ascending) of weight * down_e[o]·h, parallel over o.
  pool.parallel_for(H, [&](int64_t o0, int64_t o1) {
    thread_local std::vector<float> dbuf, acc;
    acc.resize(size_t(a.m));
    for (int64_t o = o0; o < o1; ++o) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t ai = 0; ai < n_active; ++ai) {
        const int64_t e = active[size_t(ai)];
        const float* d = row_f32(*a.down, e * H + o, dbuf);
        const std::vector<Pair>& ps = pairs[size_t(e)];
        for (size_t p = 0; p < ps.size(); ++p)
          acc[size_t(ps[p].token)] += ps[p].weight * dot(d, &h[size_t((first[size_t(ai)] + int64_t(p)) * I)], I);
      }
      for (int64_t t = 0; t < a.m; ++t) {
        float& out = a.y[t * ys + o];
        out = a.accumulate ? out + acc[size_t(t)] : acc[size_t(t)];
      }
    }
  }, /*min_chunk=*/std::max<int64_t>(1, 16384 / std::max<int64_t>(1, I * n_pairs)));
}

}  // namespace pg::ops::cpu
