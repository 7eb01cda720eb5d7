// CPU op definitions on small hand-checked cases: linear over each weight format, RMSNorm,
// RoPE pair layouts, and MLA attention over a paged cache against a direct computation.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/cpu_ops.h"

namespace pg::ops {
namespace {

TEST(CpuOps, LinearFormatsAgree) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  const int64_t n = 37, k = 70, m = 3;
  std::vector<float> w(size_t(n * k)), x(size_t(m * k));
  for (auto& v : w) v = bf16_to_f32(f32_to_bf16(nd(rng)));  // exact in bf16
  for (auto& v : x) v = nd(rng);
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]);
  Matrix mf{WeightFormat::kF32, n, k, w.data()}, mb{WeightFormat::kBF16, n, k, wb.data()};
  // FP8 with 16x32 blocks: quantize w block-wise and compare against its dequantized f32 form.
  const int64_t bn = 16, bk = 32, sr = (n + bn - 1) / bn, sc = (k + bk - 1) / bk;
  std::vector<uint8_t> wq(w.size());
  std::vector<float> s(size_t(sr * sc)), wdq(w.size());
  for (int64_t i = 0; i < sr; ++i)
    for (int64_t j = 0; j < sc; ++j) {
      float amax = 0;
      for (int64_t r = i * bn; r < std::min(n, (i + 1) * bn); ++r)
        for (int64_t c = j * bk; c < std::min(k, (j + 1) * bk); ++c) amax = std::max(amax, std::fabs(w[r * k + c]));
      s[i * sc + j] = amax / 448.0f;
      for (int64_t r = i * bn; r < std::min(n, (i + 1) * bn); ++r)
        for (int64_t c = j * bk; c < std::min(k, (j + 1) * bk); ++c) {
          wq[r * k + c] = f32_to_f8e4m3(w[r * k + c] / s[i * sc + j], Overflow::kSaturate);
          wdq[r * k + c] = f8e4m3_to_f32(wq[r * k + c]) * s[i * sc + j];
        }
    }
  Matrix m8{WeightFormat::kFp8Block, n, k, wq.data(), s.data(), bn, bk}, mdq{WeightFormat::kF32, n, k, wdq.data()};
  ThreadPool pool(2);
  auto run = [&](const Matrix& mat) {
    std::vector<float> y(size_t(m * n));
    LinearArgs a;
    a.x = x.data(); a.w = &mat; a.y = y.data(); a.m = m;
    EXPECT_TRUE(validate(a).ok());
    cpu::linear(a, pool);
    return y;
  };
  const auto yf = run(mf), yb = run(mb), y8 = run(m8), ydq = run(mdq);
  EXPECT_EQ(yf, yb);   // bf16 weights exact in f32: same bits
  EXPECT_EQ(y8, ydq);  // FP8 dequantized on read == dequantized ahead
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < n; ++r) {
      double ref = 0;
      for (int64_t c = 0; c < k; ++c) ref += double(x[i * k + c]) * w[r * k + c];
      EXPECT_NEAR(yf[i * n + r], ref, 1e-4 * (1 + std::fabs(ref)));
    }
}

TEST(CpuOps, RmsNorm) {
  const std::vector<float> x = {1, 2, 3, 4}, w = {1, 0.5f, 2, 1};
  std::vector<float> y(4);
  RmsNormArgs a;
  a.x = x.data(); a.weight = w.data(); a.y = y.data(); a.m = 1; a.n = 4; a.eps = 0;
  cpu::rmsnorm(a);
  const float inv = 1.0f / std::sqrt(30.0f / 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], w[i] * x[i] * inv, 1e-6);
}

TEST(CpuOps, RopePairLayouts) {
  RopeTable t;
  t.inv_freq = {1.0f, 0.5f};
  const int64_t pos = 3;
  for (bool interleave : {true, false}) {
    t.interleave = interleave;
    std::vector<float> x = {1, 2, 3, 4};
    RopeArgs a;
    a.x = x.data(); a.positions = &pos; a.table = &t; a.m = 1; a.n_heads = 1; a.head_stride = 4; a.row_stride = 4;
    a.offset = 0; a.rope_dim = 4;
    ASSERT_TRUE(validate(a).ok());
    cpu::rope(a);
    // pair k rotates (x0, x1) by angle pos * inv_freq[k]
    const int i0[2] = {interleave ? 0 : 0, interleave ? 2 : 1}, i1[2] = {interleave ? 1 : 2, interleave ? 3 : 3};
    const float in[4] = {1, 2, 3, 4};
    for (int k = 0; k < 2; ++k) {
      const double ang = pos * t.inv_freq[k];
      EXPECT_NEAR(x[i0[k]], in[i0[k]] * std::cos(ang) - in[i1[k]] * std::sin(ang), 1e-5);
      EXPECT_NEAR(x[i1[k]], in[i1[k]] * std::cos(ang) + in[i0[k]] * std::sin(ang), 1e-5);
    }
  }
}

TEST(CpuOps, MlaAttentionOverPagedCache) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  const int64_t R = 8, P = 4, D = R + P, heads = 2, bs = 4, n_blocks = 6, ctx = 11;
  std::vector<float> kv(size_t(n_blocks * bs * D));
  for (auto& v : kv) v = nd(rng);
  const std::vector<int32_t> table = {5, 1, 3};  // positions 0-3 in block 5, 4-7 in 1, 8-10 in 3
  std::vector<float> ql(size_t(heads * R)), qp(size_t(heads * P)), o(size_t(heads * R));
  for (auto& v : ql) v = nd(rng);
  for (auto& v : qp) v = nd(rng);
  const int32_t seq = 0;
  const int64_t len = ctx;
  MlaAttentionArgs a;
  a.q_lat = ql.data(); a.q_pe = qp.data(); a.kv = kv.data(); a.block_tables = table.data(); a.token_seq = &seq;
  a.ctx_len = &len; a.o_lat = o.data(); a.m = 1; a.n_heads = heads; a.kv_lora_rank = R; a.rope_dim = P;
  a.block_size = bs; a.max_blocks_per_seq = 3; a.n_blocks = n_blocks; a.softmax_scale = 0.3f;
  ASSERT_TRUE(validate(a).ok());
  ThreadPool pool(2);
  cpu::mla_attention(a, pool);
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<double> sc(static_cast<size_t>(ctx));
    double mx = -1e30, sum = 0;
    for (int64_t j = 0; j < ctx; ++j) {
      const float* row = &kv[(table[j / bs] * bs + j % bs) * D];
      double s = 0;
      for (int64_t c = 0; c < R; ++c) s += double(ql[h * R + c]) * row[c];
      for (int64_t c = 0; c < P; ++c) s += double(qp[h * P + c]) * row[R + c];
      sc[j] = s * 0.3;
      mx = std::max(mx, sc[j]);
    }
    for (auto& s : sc) sum += (s = std::exp(s - mx));
    for (int64_t c = 0; c < R; ++c) {
      double ref = 0;
      for (int64_t j = 0; j < ctx; ++j) ref += sc[j] / sum * kv[(table[j / bs] * bs + j % bs) * D + c];
      EXPECT_NEAR(o[h * R + c], ref, 1e-5);
    }
  }
}

// A bf16 pool gives the bits of the f32 pool that holds its values widened, whatever the threads.
TEST(CpuOps, MlaAttentionBf16PoolSameBitsAsItsF32Values) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int64_t R = 16, P = 8, D = R + P, heads = 3, bs = 4, n_blocks = 7, m = 2;
  std::vector<uint16_t> kv16(size_t(n_blocks * bs * D));
  std::vector<float> kv(kv16.size());
  for (size_t i = 0; i < kv.size(); ++i) kv16[i] = f32_to_bf16(nd(rng)), kv[i] = bf16_to_f32(kv16[i]);
  const std::vector<int32_t> table = {6, 2, 0, 4};
  const std::vector<int32_t> seq = {0, 0};
  const std::vector<int64_t> len = {13, 14};
  std::vector<float> ql(size_t(m * heads * R)), qp(size_t(m * heads * P)), o(size_t(m * heads * R)), o16(o.size());
  for (auto& v : ql) v = nd(rng);
  for (auto& v : qp) v = nd(rng);
  MlaAttentionArgs a;
  a.q_lat = ql.data(); a.q_pe = qp.data(); a.kv = kv.data(); a.block_tables = table.data(); a.token_seq = seq.data();
  a.ctx_len = len.data(); a.o_lat = o.data(); a.m = m; a.n_heads = heads; a.kv_lora_rank = R; a.rope_dim = P;
  a.block_size = bs; a.max_blocks_per_seq = 4; a.n_blocks = n_blocks; a.softmax_scale = 0.25f;
  ASSERT_TRUE(validate(a).ok());
  ThreadPool pool(2);
  cpu::mla_attention(a, pool);
  MlaAttentionArgs b = a;
  b.kv = nullptr, b.kv_bf16 = kv16.data(), b.o_lat = o16.data();
  ASSERT_TRUE(validate(b).ok());
  cpu::mla_attention(b, pool);
  for (size_t i = 0; i < o.size(); ++i) EXPECT_EQ(f32_to_bits(o16[i]), f32_to_bits(o[i])) << "element " << i;
  b.kv_bf16 = nullptr;
  EXPECT_FALSE(validate(b).ok()) << "no pool";
  b.kv = kv.data(), b.kv_bf16 = kv16.data();
  EXPECT_FALSE(validate(b).ok()) << "two pools";
}

}  // namespace
}  // namespace pg::ops
