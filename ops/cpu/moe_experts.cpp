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

  // h = silu(gate·x) * (up·x): [n_pairs, inter] f32, parallel over (active expert, gate/up row); a
  // chunk's rows of one expert go together through dot_rows.
  std::vector<float> h(size_t(n_pairs * I));
  pool.parallel_for(n_active * I, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> g, u;
    for (int64_t i = i0; i < i1;) {
      const int64_t ai = i / I, j0 = i % I, nj = std::min(i1 - i, I - j0), e = active[size_t(ai)];
      g.resize(size_t(nj)), u.resize(size_t(nj));
      const std::vector<Pair>& ps = pairs[size_t(e)];
      for (size_t p = 0; p < ps.size(); ++p) {
        const float* x = a.x + ps[p].token * H;
        dot_rows(*a.gate_up, e * 2 * I + j0, nj, x, g.data());
        dot_rows(*a.gate_up, e * 2 * I + I + j0, nj, x, u.data());
        float* hp = &h[size_t((first[size_t(ai)] + int64_t(p)) * I + j0)];
        for (int64_t j = 0; j < nj; ++j) hp[j] = silu(g[size_t(j)]) * u[size_t(j)];
      }
      i += nj;
    }
  }, /*min_chunk=*/std::max<int64_t>(1, 16384 / std::max<int64_t>(1, H * n_pairs / std::max<int64_t>(1, n_active))));

  // y[t][o] = sum over t's pairs (experts ascending) of weight * down_e[o]·h, parallel over o; a
  // chunk's outputs of one expert and pair go together through dot_rows, then add in that order.
  pool.parallel_for(H, [&](int64_t o0, int64_t o1) {
    thread_local std::vector<float> acc, d;
    const int64_t no = o1 - o0;
    acc.assign(size_t(a.m * no), 0.0f);
    d.resize(size_t(no));
    for (int64_t ai = 0; ai < n_active; ++ai) {
      const int64_t e = active[size_t(ai)];
      const std::vector<Pair>& ps = pairs[size_t(e)];
      for (size_t p = 0; p < ps.size(); ++p) {
        dot_rows(*a.down, e * H + o0, no, &h[size_t((first[size_t(ai)] + int64_t(p)) * I)], d.data());
        float* at = &acc[size_t(ps[p].token * no)];
        for (int64_t o = 0; o < no; ++o) at[o] += ps[p].weight * d[size_t(o)];
      }
    }
    for (int64_t t = 0; t < a.m; ++t)
      for (int64_t o = o0; o < o1; ++o) {
        float& out = a.y[t * ys + o];
        const float v = acc[size_t(t * no + o - o0)];
        out = a.accumulate ? out + v : v;
      }
  }, /*min_chunk=*/std::max<int64_t>(1, 16384 / std::max<int64_t>(1, I * n_pairs)));
}

}  // namespace pg::ops::cpu
