// ops::cpu::moe_experts, the definition, against a direct double-precision evaluation that runs
// the shared experts as one MLP of width n_shared * inter (as the checkpoint stores them), over
// f32 / bf16 / FP8 stacks at the tiny models' odd dims; plus the validation contract.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/moe_experts.h"

namespace pg::ops {
namespace {

// A stacked expert weight in one format, plus its dequantized f32 values.
struct Stack {
  std::vector<float> f32, deq, scale;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> fp8;
  Matrix w;
};

Stack make_stack(WeightFormat f, int64_t rows, int64_t cols, int64_t block, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f / std::sqrt(float(cols)));
  Stack s;
  s.f32.resize(size_t(rows * cols));
  for (auto& v : s.f32) v = nd(rng);
  s.w = Matrix{f, rows, cols, nullptr};
  s.deq = s.f32;
  if (f == WeightFormat::kBF16) {
    s.bf16.resize(s.f32.size());
    for (size_t i = 0; i < s.f32.size(); ++i) s.bf16[i] = f32_to_bf16(s.f32[i]), s.deq[i] = bf16_to_f32(s.bf16[i]);
    s.w.data = s.bf16.data();
  } else if (f == WeightFormat::kFp8Block) {
    const int64_t sr = (rows + block - 1) / block, sc = (cols + block - 1) / block;
    s.fp8.resize(s.f32.size());
    s.scale.resize(size_t(sr * sc));
    for (int64_t bi = 0; bi < sr; ++bi)
      for (int64_t bj = 0; bj < sc; ++bj) {
        float amax = 1e-30f;
        for (int64_t r = bi * block; r < std::min(rows, (bi + 1) * block); ++r)
          for (int64_t c = bj * block; c < std::min(cols, (bj + 1) * block); ++c)
            amax = std::max(amax, std::fabs(s.f32[size_t(r * cols + c)]));
        const float scale = amax / 448.0f;
        s.scale[size_t(bi * sc + bj)] = scale;
        for (int64_t r = bi * block; r < std::min(rows, (bi + 1) * block); ++r)
          for (int64_t c = bj * block; c < std::min(cols, (bj + 1) * block); ++c) {
            const size_t i = size_t(r * cols + c);
            s.fp8[i] = f32_to_f8e4m3(s.f32[i] / scale, Overflow::kSaturate);
            s.deq[i] = f8e4m3_to_f32(s.fp8[i]) * scale;
          }
      }
    s.w.data = s.fp8.data();
    s.w.scale_inv = s.scale.data();
    s.w.block_rows = s.w.block_cols = block;
  } else {
    s.w.data = s.f32.data();
  }
  return s;
}

struct Case {
  WeightFormat format = WeightFormat::kF32;
  int64_t m = 7, hidden = 52, inter = 22, n_experts = 8, top_k = 3, n_shared = 2;
  int64_t block = 8;
  bool same_experts = false;  // every token picks experts {1, 4, 6, ...}
  bool duplicates = false;    // slot 1 repeats slot 0's expert
};

struct Problem {
  Case c;
  Stack gate_up, down;
  std::vector<float> x, weight;
  std::vector<int32_t> idx;
  MoeExpertsArgs args(float* y) const {
    MoeExpertsArgs a;
    a.x = x.data(), a.expert_idx = idx.data(), a.expert_weight = weight.data();
    a.gate_up = &gate_up.w, a.down = &down.w, a.y = y;
    a.m = c.m, a.hidden = c.hidden, a.inter = c.inter, a.n_experts = c.n_experts, a.top_k = c.top_k;
    a.n_shared = c.n_shared;
    return a;
  }
};

Problem make_problem(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p;
  p.c = c;
  const int64_t n_all = c.n_experts + c.n_shared;
  p.gate_up = make_stack(c.format, n_all * 2 * c.inter, c.hidden, c.block, rng);
  p.down = make_stack(c.format, n_all * c.hidden, c.inter, c.block, rng);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f), wd(0.05f, 1.0f);
  p.x.resize(size_t(c.m * c.hidden));
  for (auto& v : p.x) v = ud(rng);
  p.idx.resize(size_t(c.m * c.top_k));
  p.weight.resize(p.idx.size());
  std::vector<int32_t> perm(static_cast<size_t>(c.n_experts));
  for (int64_t t = 0; t < c.m; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t k = 0; k < c.top_k; ++k) {
      int32_t e = c.same_experts ? int32_t((1 + 3 * k) % c.n_experts) : perm[size_t(k)];
      if (c.duplicates && k == 1) e = p.idx[size_t(t * c.top_k)];
      p.idx[size_t(t * c.top_k + k)] = e;
      p.weight[size_t(t * c.top_k + k)] = wd(rng);
    }
  }
  return p;
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

// Direct evaluation in double: the routed experts one by one, the shared experts as one MLP of
// width n_shared * inter (its down matrix re-assembled column-wise from the stacked experts).
// Also returns, per output, sum of |terms| (the scale for the tolerance).
std::vector<double> direct(const Problem& p, std::vector<double>& scale) {
  const Case& c = p.c;
  const int64_t H = c.hidden, I = c.inter, S = c.n_shared, E = c.n_experts;
  const float* gu = p.gate_up.deq.data();
  const float* dn = p.down.deq.data();
  std::vector<double> y(size_t(c.m * H), 0.0);
  scale.assign(y.size(), 0.0);
  auto mlp = [&](const float* x, const std::vector<const float*>& g, const std::vector<const float*>& u,
                 const std::vector<const float*>& d, double w, double* out, double* sc) {
    std::vector<double> h(g.size()), ha(g.size());
    for (size_t j = 0; j < g.size(); ++j) {
      double gs = 0, us = 0;
      for (int64_t i = 0; i < H; ++i) gs += double(x[i]) * g[j][i], us += double(x[i]) * u[j][i];
      h[j] = silu(gs) * us;
    }
    for (int64_t o = 0; o < H; ++o) {
      double s = 0, a = 0;
      for (size_t j = 0; j < g.size(); ++j) s += double(d[j][o]) * h[j], a += std::fabs(double(d[j][o]) * h[j]);
      out[o] += w * s;
      sc[o] += std::fabs(w) * a;
    }
  };
  for (int64_t t = 0; t < c.m; ++t) {
    const float* x = p.x.data() + t * H;
    // down columns as pointers with stride: d[j][o] = down[(e*H + o) * I + jj]; use a gathered copy.
    auto expert_ptrs = [&](int64_t e0, int64_t n_e, std::vector<const float*>& g, std::vector<const float*>& u,
                           std::vector<std::vector<float>>& dcols, std::vector<const float*>& d) {
      for (int64_t e = e0; e < e0 + n_e; ++e)
        for (int64_t j = 0; j < I; ++j) {
          g.push_back(gu + (e * 2 * I + j) * H);
          u.push_back(gu + (e * 2 * I + I + j) * H);
          dcols.emplace_back(size_t(H));
          for (int64_t o = 0; o < H; ++o) dcols.back()[size_t(o)] = dn[(e * H + o) * I + j];
        }
      for (auto& col : dcols) d.push_back(col.data());
    };
    for (int64_t k = 0; k < c.top_k; ++k) {
      std::vector<const float*> g, u, d;
      std::vector<std::vector<float>> cols;
      expert_ptrs(p.idx[size_t(t * c.top_k + k)], 1, g, u, cols, d);
      mlp(x, g, u, d, p.weight[size_t(t * c.top_k + k)], &y[size_t(t * H)], &scale[size_t(t * H)]);
    }
    if (S > 0) {  // one MLP of width S * I
      std::vector<const float*> g, u, d;
      std::vector<std::vector<float>> cols;
      expert_ptrs(E, S, g, u, cols, d);
      mlp(x, g, u, d, 1.0, &y[size_t(t * H)], &scale[size_t(t * H)]);
    }
  }
  return y;
}

void expect_matches_direct(const Case& c, uint32_t seed) {
  const Problem p = make_problem(c, seed);
  std::vector<float> y(static_cast<size_t>(c.m * c.hidden), std::nanf(""));
  const MoeExpertsArgs a = p.args(y.data());
  ASSERT_TRUE(validate(a).ok()) << validate(a).to_string();
  ThreadPool pool(2);
  cpu::moe_experts(a, pool);
  std::vector<double> scale;
  const std::vector<double> ref = direct(p, scale);
  // f32 dots of <= 52 terms and a few products: far under 1e-5 of the absolute sum.
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], 1e-5 * scale[i] + 1e-30) << "element " << i;
}

TEST(MoeExpertsCpu, F32MatchesDirect) { expect_matches_direct(Case{}, 1); }

TEST(MoeExpertsCpu, Bf16MatchesDirect) {
  Case c;
  c.format = WeightFormat::kBF16;
  c.m = 5;
  expect_matches_direct(c, 2);
}

TEST(MoeExpertsCpu, Fp8BlocksMatchDirect) {
  Case c;
  c.format = WeightFormat::kFp8Block;
  c.hidden = 40, c.inter = 24, c.block = 8, c.n_shared = 1, c.top_k = 2;
  expect_matches_direct(c, 3);
}

TEST(MoeExpertsCpu, SameExpertsAndDuplicates) {
  Case c;
  c.same_experts = true;
  expect_matches_direct(c, 4);
  c.same_experts = false;
  c.duplicates = true;
  expect_matches_direct(c, 5);
}

TEST(MoeExpertsCpu, SharedOnlyAndRoutedOnly) {
  Case c;
  c.top_k = 0;
  expect_matches_direct(c, 6);
  c.top_k = 3, c.n_shared = 0;
  expect_matches_direct(c, 7);
  c.n_experts = 0, c.top_k = 0, c.n_shared = 1;  // a dense MLP
  expect_matches_direct(c, 8);
}

TEST(MoeExpertsCpu, AccumulateAndStrideAndThreadCount) {
  Case c;
  c.m = 9;
  const Problem p = make_problem(c, 8);
  const int64_t ys = c.hidden + 3;
  std::vector<float> y0(static_cast<size_t>(c.m * ys));
  for (size_t i = 0; i < y0.size(); ++i) y0[i] = float(int(i % 7) - 3) * 0.25f;
  std::vector<float> fresh(size_t(c.m * ys), 0.0f), acc = y0;
  MoeExpertsArgs a = p.args(fresh.data());
  a.y_stride = ys;
  ThreadPool one(1), two(2);
  cpu::moe_experts(a, one);
  a.y = acc.data();
  a.accumulate = true;
  cpu::moe_experts(a, two);
  for (int64_t t = 0; t < c.m; ++t)
    for (int64_t j = 0; j < ys; ++j) {
      const size_t o = size_t(t * ys + j);
      if (j >= c.hidden) {
        EXPECT_EQ(acc[o], y0[o]) << "gap written";
        EXPECT_EQ(fresh[o], 0.0f) << "gap written";
      } else {
        EXPECT_EQ(acc[o], y0[o] + fresh[o]) << t << "," << j;  // the same bits whatever the thread count
      }
    }
}

TEST(MoeExpertsCpu, Validation) {
  Case c;
  c.format = WeightFormat::kFp8Block;
  c.hidden = 40, c.inter = 24, c.block = 16;  // 24 % 16 != 0
  Problem p = make_problem(c, 9);
  std::vector<float> y(static_cast<size_t>(c.m * c.hidden));
  MoeExpertsArgs a = p.args(y.data());
  Status s = validate(a);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("multiple of"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("block_rows"), std::string::npos) << s.message();

  c = Case{};
  p = make_problem(c, 10);
  y.assign(size_t(c.m * c.hidden), 0.0f);
  a = p.args(y.data());
  EXPECT_TRUE(validate(a).ok());
  MoeExpertsArgs b = a;
  b.n_shared = 1;  // stacks hold 2 shared experts
  EXPECT_FALSE(validate(b).ok());
  b = a, b.top_k = c.n_experts + 1;
  EXPECT_FALSE(validate(b).ok());
  b = a, b.expert_idx = nullptr;
  EXPECT_FALSE(validate(b).ok());
  b = a, b.y_stride = c.hidden - 1;
  EXPECT_FALSE(validate(b).ok());
  b = a, b.down = nullptr;
  EXPECT_FALSE(validate(b).ok());
  b = a, b.m = 0, b.x = nullptr, b.y = nullptr;
  EXPECT_TRUE(validate(b).ok());
}

}  // namespace
}  // namespace pg::ops
