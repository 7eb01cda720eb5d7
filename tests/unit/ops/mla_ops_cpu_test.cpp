// The CPU definitions of the MLA helper ops (embedding, mla_kv_write, head_linear) against
// straightforward loops (double sums where the op sums): every table format, odd dims, strides,
// shuffled block tables, large RoPE positions, and the untouched elements around every output.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/mla_ops.h"

namespace pg::ops {
namespace {

const float kPoison = std::bit_cast<float>(0xffffffffu);  // a NaN no op writes
bool is_poison(float v) { return std::bit_cast<uint32_t>(v) == 0xffffffffu; }

std::vector<float> normal_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

TEST(MlaOpsCpu, EmbeddingEveryFormat) {
  std::mt19937 rng(11);
  const int64_t vocab = 37, H = 52, ys = 55, bs = 32;  // fp8 32x32 blocks over an odd table
  const std::vector<int32_t> tokens = {0, 36, 5, 5, 31, 32, 17};
  const int64_t m = int64_t(tokens.size()), sr = (vocab + bs - 1) / bs, sc = (H + bs - 1) / bs;
  const std::vector<float> wf = normal_vec(size_t(vocab * H), rng);
  std::vector<uint16_t> wb(wf.size());
  std::vector<uint8_t> w8(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) wb[i] = f32_to_bf16(wf[i]), w8[i] = uint8_t(rng() & 0xff);
  for (uint8_t& b : w8) if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
  std::vector<float> scale = normal_vec(size_t(sr * sc), rng, 0.01f);
  const Matrix tables[] = {{WeightFormat::kF32, vocab, H, wf.data()},
                           {WeightFormat::kBF16, vocab, H, wb.data()},
                           {WeightFormat::kFp8Block, vocab, H, w8.data(), scale.data(), bs, bs}};
  for (const Matrix& t : tables) {
    std::vector<float> y(size_t(m * ys), kPoison);
    EmbeddingArgs a;
    a.table = &t, a.tokens = tokens.data(), a.y = y.data(), a.m = m, a.y_stride = ys;
    ASSERT_TRUE(validate(a).ok());
    cpu::embedding(a);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t r = tokens[size_t(i)];
      for (int64_t c = 0; c < H; ++c) {
        const size_t e = size_t(r * H + c);
        const float want = t.format == WeightFormat::kF32    ? wf[e]
                           : t.format == WeightFormat::kBF16 ? bf16_to_f32(wb[e])
                                                             : f8e4m3_to_f32(w8[e]) * scale[size_t((r / bs) * sc + c / bs)];
        ASSERT_EQ(std::bit_cast<uint32_t>(y[size_t(i * ys + c)]), std::bit_cast<uint32_t>(want)) << i << "," << c;
      }
      for (int64_t c = H; c < ys; ++c) EXPECT_TRUE(is_poison(y[size_t(i * ys + c)])) << "row gap written";
    }
  }
}

// The RoPE of one pair as the contract defines it: fp32 angle, cos/sin in double, rounded to
// f32 and scaled by attention_factor; the rotation itself in double.
void rope_pair(const RopeTable& t, int64_t pos, int64_t k, double& x0, double& x1) {
  const float angle = t.inv_freq[size_t(k)] * float(pos);
  const double c = double(float(std::cos(double(angle))) * t.attention_factor);
  const double s = double(float(std::sin(double(angle))) * t.attention_factor);
  const double a0 = x0, a1 = x1;
  x0 = a0 * c - a1 * s;
  x1 = a1 * c + a0 * s;
}

RopeTable test_rope_table(int64_t rope_dim, bool interleave) {
  RopeTable t;
  t.interleave = interleave;
  t.attention_factor = 1.1f;
  for (int64_t i = 0; i < rope_dim / 2; ++i)
    t.inv_freq.push_back(float(std::pow(10000.0, -double(2 * i) / double(rope_dim)) / (i < 2 ? 1.0 : 40.0)));
  return t;
}

struct KvWriteCase {
  int64_t R, P, block_size, n_blocks, max_blocks, kv_pad;
  std::vector<std::pair<int32_t, int64_t>> tokens;  // (seq, position)
};

void run_kv_write(const KvWriteCase& c, bool interleave) {
  std::mt19937 rng(uint32_t(c.R * 7 + c.P + interleave));
  const int64_t D = c.R + c.P, ks = D + c.kv_pad, m = int64_t(c.tokens.size());
  const RopeTable table = test_rope_table(c.P, interleave);
  // Block tables: entries the tokens use get distinct shuffled blocks; the rest stay -1
  // (reading one would abort the reference).
  std::vector<int32_t> perm(static_cast<size_t>(c.n_blocks));
  for (int32_t i = 0; i < int32_t(perm.size()); ++i) perm[size_t(i)] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  int32_t n_seqs = 0;
  for (auto [s, p] : c.tokens) n_seqs = std::max(n_seqs, s + 1);
  std::vector<int32_t> tables(size_t(n_seqs * c.max_blocks), -1);
  size_t next = 0;
  for (auto [s, p] : c.tokens) {
    int32_t& e = tables[size_t(s * c.max_blocks + p / c.block_size)];
    if (e < 0) e = perm[next++];
  }
  std::vector<int32_t> token_seq;
  std::vector<int64_t> positions;
  for (auto [s, p] : c.tokens) token_seq.push_back(s), positions.push_back(p);
  std::vector<float> kv = normal_vec(size_t(m * ks), rng), w = normal_vec(size_t(c.R), rng);
  const std::vector<float> kv0 = kv;
  std::vector<float> cache(size_t(c.n_blocks * c.block_size * D), kPoison);

  MlaKvWriteArgs a;
  a.kv = kv.data(), a.norm_weight = w.data(), a.eps = 1e-6f, a.positions = positions.data(), a.table = &table;
  a.block_tables = tables.data(), a.token_seq = token_seq.data(), a.cache = cache.data(), a.m = m;
  a.kv_lora_rank = c.R, a.rope_dim = c.P, a.block_size = c.block_size, a.max_blocks_per_seq = c.max_blocks;
  a.n_blocks = c.n_blocks, a.kv_stride = ks;
  ASSERT_TRUE(validate(a).ok());
  cpu::mla_kv_write(a);

  EXPECT_EQ(std::memcmp(kv.data(), kv0.data(), kv.size() * sizeof(float)), 0) << "kv was modified";
  std::vector<bool> written(size_t(c.n_blocks * c.block_size), false);
  for (int64_t t = 0; t < m; ++t) {
    const int64_t p = positions[size_t(t)];
    const int64_t row = int64_t(tables[size_t(token_seq[size_t(t)] * c.max_blocks + p / c.block_size)]) * c.block_size +
                        p % c.block_size;
    written[size_t(row)] = true;
    const float* x = &kv[size_t(t * ks)];
    const float* got = &cache[size_t(row * D)];
    double ss = 0;
    for (int64_t j = 0; j < c.R; ++j) ss += double(x[j]) * x[j];
    const double inv = 1.0 / std::sqrt(ss / double(c.R) + 1e-6);
    for (int64_t j = 0; j < c.R; ++j) EXPECT_NEAR(got[j], w[size_t(j)] * x[j] * inv, 2e-6 * std::fabs(w[size_t(j)] * x[j] * inv) + 1e-7);
    for (int64_t k = 0; k < c.P / 2; ++k) {
      const int64_t i0 = interleave ? 2 * k : k, i1 = interleave ? 2 * k + 1 : k + c.P / 2;
      double x0 = x[c.R + i0], x1 = x[c.R + i1];
      rope_pair(table, p, k, x0, x1);
      EXPECT_NEAR(got[c.R + i0], x0, 1e-6) << "t=" << t << " pair " << k << " pos " << p;
      EXPECT_NEAR(got[c.R + i1], x1, 1e-6) << "t=" << t << " pair " << k << " pos " << p;
    }
  }
  int64_t touched = 0;
  for (size_t r = 0; r < written.size(); ++r)
    if (!written[r])
      for (int64_t j = 0; j < D; ++j) touched += !is_poison(cache[r * size_t(D) + size_t(j)]);
  EXPECT_EQ(touched, 0) << "cache rows no token owns were written";
}

TEST(MlaOpsCpu, KvWriteTinyShuffledBlocks) {
  KvWriteCase c{27, 6, 5, 12, 4, 3, {}};
  for (int64_t p = 0; p < 7; ++p) c.tokens.push_back({0, p});
  for (int64_t p = 10; p < 13; ++p) c.tokens.push_back({2, p});
  c.tokens.push_back({1, 19});
  for (bool il : {true, false}) run_kv_write(c, il);
}

TEST(MlaOpsCpu, KvWriteRealDimsLargePositions) {
  KvWriteCase c{512, 64, 64, 16, 2560, 0, {{0, 0}, {0, 1}, {1, 163839}, {2, 100000}, {2, 100001}, {1, 65}}};
  for (bool il : {true, false}) run_kv_write(c, il);
}

// A bf16 pool holds exactly what the f32 write leaves, each value rounded to nearest even; rows no
// token owns stay untouched.
TEST(MlaOpsCpu, KvWriteBf16PoolIsTheF32RowRounded) {
  const int64_t R = 27, P = 6, D = R + P, bs = 4, n_blocks = 5, max_blocks = 4, m = 3;
  std::mt19937 rng(11);
  const RopeTable table = test_rope_table(P, true);
  const std::vector<int32_t> tables = {3, 0, 4, 1};
  const std::vector<int32_t> token_seq = {0, 0, 0};
  const std::vector<int64_t> positions = {2, 5, 13};
  const std::vector<float> kv = normal_vec(size_t(m * D), rng), w = normal_vec(size_t(R), rng);
  std::vector<float> cache(size_t(n_blocks * bs * D), 0.0f);
  const uint16_t kUntouched = 0x7fc1;  // a NaN no write produces
  std::vector<uint16_t> cache16(cache.size(), kUntouched);
  MlaKvWriteArgs a;
  a.kv = kv.data(), a.norm_weight = w.data(), a.positions = positions.data(), a.table = &table;
  a.block_tables = tables.data(), a.token_seq = token_seq.data(), a.cache = cache.data(), a.m = m;
  a.kv_lora_rank = R, a.rope_dim = P, a.block_size = bs, a.max_blocks_per_seq = max_blocks, a.n_blocks = n_blocks;
  ASSERT_TRUE(validate(a).ok());
  cpu::mla_kv_write(a);
  MlaKvWriteArgs b = a;
  b.cache = nullptr, b.cache_bf16 = cache16.data();
  ASSERT_TRUE(validate(b).ok());
  cpu::mla_kv_write(b);
  int64_t written = 0;
  for (size_t i = 0; i < cache.size(); ++i) {
    const int64_t row = int64_t(i) / D;
    const bool owned = row == 3 * bs + 2 || row == 0 * bs + 1 || row == 1 * bs + 1;
    if (!owned) {
      EXPECT_EQ(cache16[i], kUntouched) << "row " << row << " belongs to no token";
      continue;
    }
    ++written;
    EXPECT_EQ(cache16[i], f32_to_bf16(cache[i])) << "row " << row << " column " << int64_t(i) % D;
  }
  EXPECT_EQ(written, m * D);
  b.cache_bf16 = nullptr;
  EXPECT_FALSE(validate(b).ok()) << "no pool";
  b.cache = cache.data(), b.cache_bf16 = cache16.data();
  EXPECT_FALSE(validate(b).ok()) << "two pools";
}

struct HeadCase {
  const char* name;
  HeadWeight format;
  int64_t m, n_heads, n, k;
  int64_t x_row_stride, x_head_stride, y_row_stride, y_head_stride;
};

TEST(MlaOpsCpu, HeadLinearAgainstLoops) {
  const HeadCase cases[] = {
      {"tiny_f32", HeadWeight::kF32, 5, 3, 27, 11, 40, 12, 3 * 27, 27},
      {"tiny_bf16_gaps", HeadWeight::kBF16, 4, 3, 13, 27, 3 * 27, 27, 50, 15},
      {"rows_in_heads", HeadWeight::kBF16, 3, 3, 13, 27, 3 * 27, 27, 13, 3 * 13 + 2},
      {"moonlight_w_uk", HeadWeight::kBF16, 2, 16, 512, 128, 16 * 192, 192, 16 * 512, 512},
      {"moonlight_w_uv", HeadWeight::kBF16, 3, 16, 128, 512, 16 * 512, 512, 16 * 128, 128},
  };
  for (const HeadCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::mt19937 rng(uint32_t(c.n * 31 + c.k));
    const size_t x_len = size_t((c.m - 1) * c.x_row_stride + (c.n_heads - 1) * c.x_head_stride + c.k);
    const size_t y_len = size_t(std::max((c.m - 1) * c.y_row_stride + (c.n_heads - 1) * c.y_head_stride + c.n, int64_t(1)));
    const std::vector<float> x = normal_vec(x_len, rng), wf0 = normal_vec(size_t(c.n_heads * c.n * c.k), rng);
    std::vector<float> wf = wf0;
    std::vector<uint16_t> wb(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) wb[i] = f32_to_bf16(wf0[i]), wf[i] = c.format == HeadWeight::kBF16 ? bf16_to_f32(wb[i]) : wf0[i];
    std::vector<float> y(y_len, kPoison);
    HeadLinearArgs a;
    a.x = x.data(), a.x_row_stride = c.x_row_stride, a.x_head_stride = c.x_head_stride;
    a.w = c.format == HeadWeight::kF32 ? static_cast<const void*>(wf.data()) : wb.data(), a.w_format = c.format;
    a.y = y.data(), a.y_row_stride = c.y_row_stride, a.y_head_stride = c.y_head_stride;
    a.m = c.m, a.n_heads = c.n_heads, a.n = c.n, a.k = c.k;
    ASSERT_TRUE(validate(a).ok()) << validate(a).message();
    ThreadPool pool(2);
    cpu::head_linear(a, pool);
    std::vector<bool> out(y_len, false);
    for (int64_t t = 0; t < c.m; ++t)
      for (int64_t h = 0; h < c.n_heads; ++h)
        for (int64_t i = 0; i < c.n; ++i) {
          double s = 0, sa = 0;
          for (int64_t j = 0; j < c.k; ++j) {
            const double v = double(wf[size_t((h * c.n + i) * c.k + j)]) * x[size_t(t * c.x_row_stride + h * c.x_head_stride + j)];
            s += v, sa += std::fabs(v);
          }
          const size_t o = size_t(t * c.y_row_stride + h * c.y_head_stride + i);
          out[o] = true;
          ASSERT_NEAR(y[o], s, 1e-5 * sa) << "t=" << t << " h=" << h << " i=" << i;
        }
    for (size_t o = 0; o < y_len; ++o)
      if (!out[o]) {
        EXPECT_TRUE(is_poison(y[o])) << "element " << o << " between outputs was written";
      }
  }
}

// FP8 heads (HeadWeight::kFp8: e4m3 codes, one f32 scale per row and scale_group columns) give the
// bits of f32 heads holding code x scale, the values the loader's f32 heads of an FP8 kv_b_proj hold:
// the same row, the same dot products. Groups of 16 and 128, a partial last group (k = 27).
TEST(MlaOpsCpu, HeadLinearFp8SameBitsAsF32OfItsValues) {
  struct Fp8Case {
    int64_t m, n_heads, n, k, group;
  };
  for (const Fp8Case& c : {Fp8Case{3, 4, 64, 128, 128}, Fp8Case{2, 2, 32, 512, 128}, Fp8Case{5, 3, 13, 27, 16}}) {
    SCOPED_TRACE("k=" + std::to_string(c.k) + " group=" + std::to_string(c.group));
    std::mt19937 rng(uint32_t(c.k * 7 + c.group));
    const int64_t rows = c.n_heads * c.n, groups = (c.k + c.group - 1) / c.group;
    const std::vector<float> x = normal_vec(size_t(c.m * c.n_heads * c.k), rng);
    std::vector<uint8_t> q(size_t(rows * c.k));
    std::vector<float> s(size_t(rows * groups)), wf(q.size());
    for (uint8_t& v : q) v = f32_to_f8e4m3(std::normal_distribution<float>(0.0f, 40.0f)(rng), Overflow::kSaturate);
    for (float& v : s) v = std::uniform_real_distribution<float>(1e-3f, 1e-2f)(rng);  // not powers of two
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < c.k; ++j)
        wf[size_t(r * c.k + j)] = f8e4m3_to_f32(q[size_t(r * c.k + j)]) * s[size_t(r * groups + j / c.group)];
    std::vector<float> y8(size_t(c.m * rows), kPoison), y32 = y8;
    HeadLinearArgs a;
    a.x = x.data(), a.x_row_stride = c.n_heads * c.k, a.x_head_stride = c.k;
    a.y_row_stride = rows, a.y_head_stride = c.n, a.m = c.m, a.n_heads = c.n_heads, a.n = c.n, a.k = c.k;
    HeadLinearArgs a8 = a, a32 = a;
    a8.w = q.data(), a8.w_format = HeadWeight::kFp8, a8.w_scale = s.data(), a8.scale_group = c.group, a8.y = y8.data();
    a32.w = wf.data(), a32.w_format = HeadWeight::kF32, a32.y = y32.data();
    ASSERT_TRUE(validate(a8).ok()) << validate(a8).message();
    ThreadPool pool(2);
    cpu::head_linear(a8, pool);
    cpu::head_linear(a32, pool);
    int64_t differ = 0;
    for (size_t i = 0; i < y8.size(); ++i) differ += std::memcmp(&y8[i], &y32[i], 4) != 0;
    EXPECT_EQ(differ, 0);
  }
  // The scales are required, and their group must be a power of two >= 16.
  const std::vector<float> xs(8, 1.0f);
  const std::vector<uint8_t> q(16);
  std::vector<float> y(8), s(1, 1.0f);
  HeadLinearArgs h;
  h.x = xs.data(), h.w = q.data(), h.w_format = HeadWeight::kFp8, h.y = y.data();
  h.m = 1, h.n_heads = 2, h.n = 2, h.k = 4, h.x_row_stride = 8, h.x_head_stride = 4, h.y_row_stride = 4, h.y_head_stride = 2;
  EXPECT_FALSE(validate(h).ok());  // no scales
  h.w_scale = s.data();
  EXPECT_TRUE(validate(h).ok());
  h.scale_group = 24;
  EXPECT_FALSE(validate(h).ok());
  h.scale_group = 8;
  EXPECT_FALSE(validate(h).ok());
}

// split_fp8_heads: code x scale of every W_UK^T / W_UV weight is the f32 value of its element of
// the dequantized kv_b_proj (what the f32 heads hold), for DeepSeek's 128 x 128 blocks and for
// blocks of 32 (several groups per W_UK^T row, several W_UV rows per block row); and the shapes it
// refuses.
TEST(MlaOpsCpu, SplitFp8HeadsKeepsEveryWeight) {
  struct SplitCase {
    int64_t nh, nope, V, R, block;
  };
  for (const SplitCase& c : {SplitCase{2, 128, 128, 512, 128}, SplitCase{3, 64, 32, 96, 32}}) {
    SCOPED_TRACE("block=" + std::to_string(c.block));
    std::mt19937 rng(uint32_t(c.block));
    const int64_t rows = c.nh * (c.nope + c.V);
    std::vector<uint8_t> q(size_t(rows * c.R));
    for (uint8_t& v : q) v = f32_to_f8e4m3(std::normal_distribution<float>(0.0f, 40.0f)(rng), Overflow::kSaturate);
    Matrix w{WeightFormat::kFp8Block, rows, c.R, q.data()};
    w.block_rows = w.block_cols = c.block;
    std::vector<float> s(size_t(((rows + c.block - 1) / c.block) * w.scale_cols()));
    for (float& v : s) v = std::uniform_real_distribution<float>(1e-3f, 1e-2f)(rng);
    w.scale_inv = s.data();
    ASSERT_TRUE(fp8_heads_fit(w, c.nope, c.V));
    const Fp8Heads f = split_fp8_heads(w, c.nh, c.nope, c.V);
    const int64_t ukg = (c.nope + f.uk_group - 1) / f.uk_group, uvg = (c.R + f.uv_group - 1) / f.uv_group;
    std::vector<float> row(size_t(c.R));
    int64_t differ = 0;
    for (int64_t h = 0; h < c.nh; ++h) {
      for (int64_t d = 0; d < c.nope; ++d) {  // W_UK[h][d][:] = kv_b_proj row h (nope + V) + d
        matrix_row_to_f32(w, h * (c.nope + c.V) + d, row.data());
        for (int64_t r = 0; r < c.R; ++r) {
          const int64_t o = (h * c.R + r) * c.nope + d;
          const float v = f8e4m3_to_f32(f.uk_t[size_t(o)]) * f.uk_scale[size_t((h * c.R + r) * ukg + d / f.uk_group)];
          differ += std::memcmp(&v, &row[size_t(r)], 4) != 0;
        }
      }
      for (int64_t v = 0; v < c.V; ++v) {  // W_UV[h][v][:] = kv_b_proj row h (nope + V) + nope + v
        matrix_row_to_f32(w, h * (c.nope + c.V) + c.nope + v, row.data());
        for (int64_t r = 0; r < c.R; ++r) {
          const float x = f8e4m3_to_f32(f.uv[size_t((h * c.V + v) * c.R + r)]) * f.uv_scale[size_t((h * c.V + v) * uvg + r / f.uv_group)];
          differ += std::memcmp(&x, &row[size_t(r)], 4) != 0;
        }
      }
    }
    EXPECT_EQ(differ, 0);
  }
  std::vector<uint8_t> q(size_t(4 * 192 * 64));
  std::vector<float> s(64, 1.0f);
  Matrix w{WeightFormat::kFp8Block, 4 * 192, 64, q.data()};
  w.scale_inv = s.data();
  EXPECT_FALSE(fp8_heads_fit(w, 128, 64));  // a head's 192 rows start mid-block (128 x 128)
  w.block_rows = 64, w.block_cols = 64;
  EXPECT_TRUE(fp8_heads_fit(w, 128, 64));
  w.block_cols = 48;
  EXPECT_FALSE(fp8_heads_fit(w, 128, 64));  // not a power of two
  w.block_cols = 64, w.format = WeightFormat::kBF16;
  EXPECT_FALSE(fp8_heads_fit(w, 128, 64));
}

// split_nvfp4_heads: bf16(code x block scale) x y_scale is the f32 value of the dequantized kv_b_proj
// element, bit for bit; and head_linear's y_scale multiplies the unscaled outputs (exactly).
TEST(MlaOpsCpu, SplitNvfp4HeadsKeepsEveryWeight) {
  const int64_t nh = 2, nope = 32, V = 16, R = 64, rows = nh * (nope + V);
  std::mt19937 rng(7);
  std::vector<uint8_t> codes(size_t(rows * R / 2)), scales(size_t(rows * R / 16));
  for (uint8_t& b : codes) b = uint8_t(rng());
  for (uint8_t& b : scales) b = uint8_t(0x20 + rng() % 0x50);  // positive finite e4m3
  Matrix w{WeightFormat::kNvfp4, rows, R, codes.data()};
  w.scale_fp8 = scales.data(), w.scale_2 = 0.0123f;
  ASSERT_TRUE(nvfp4_heads_fit(w, nope, V));
  const Bf16Heads f = split_nvfp4_heads(w, nh, nope, V);
  EXPECT_EQ(f.y_scale, w.scale_2);
  std::vector<float> row(static_cast<size_t>(R));
  int64_t differ = 0;
  for (int64_t h = 0; h < nh; ++h)
    for (int64_t i = 0; i < nope + V; ++i) {
      matrix_row_to_f32(w, h * (nope + V) + i, row.data());
      for (int64_t r = 0; r < R; ++r) {
        const uint16_t b = i < nope ? f.uk_t[size_t((h * R + r) * nope + i)] : f.uv[size_t((h * V + i - nope) * R + r)];
        const float v = bf16_to_f32(b) * f.y_scale;
        differ += std::memcmp(&v, &row[size_t(r)], 4) != 0;
      }
    }
  EXPECT_EQ(differ, 0);
  w.scale_2_rows = &w.scale_2, w.scale_2_group_rows = rows;
  EXPECT_FALSE(nvfp4_heads_fit(w, nope, V));  // one tensor, one scale_2

  // y_scale on head_linear: the unscaled outputs times it.
  const std::vector<float> x = normal_vec(size_t(3 * 2 * 64), rng), wf = normal_vec(size_t(2 * 8 * 64), rng);
  std::vector<float> y1(size_t(3 * 2 * 8)), y2(y1.size());
  HeadLinearArgs a;
  a.x = x.data(), a.x_row_stride = 2 * 64, a.x_head_stride = 64, a.w = wf.data(), a.w_format = HeadWeight::kF32;
  a.y_row_stride = 2 * 8, a.y_head_stride = 8, a.m = 3, a.n_heads = 2, a.n = 8, a.k = 64;
  ThreadPool pool(2);
  a.y = y1.data();
  cpu::head_linear(a, pool);
  a.y = y2.data(), a.y_scale = -0.37f;
  ASSERT_TRUE(validate(a).ok());
  cpu::head_linear(a, pool);
  for (size_t i = 0; i < y1.size(); ++i) EXPECT_EQ(y2[i], y1[i] * -0.37f);
  a.y_scale = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(validate(a).ok());
}

TEST(MlaOpsCpu, ValidateRejectsBadShapes) {
  const std::vector<float> w(64);
  const Matrix t{WeightFormat::kF32, 4, 16, w.data()};
  int32_t tok = 0;
  float y[32];
  EmbeddingArgs e;
  e.table = &t, e.tokens = &tok, e.y = y, e.m = 1, e.y_stride = 8;
  EXPECT_FALSE(validate(e).ok());  // y_stride < H
  e.y_stride = 0;
  EXPECT_TRUE(validate(e).ok());

  const RopeTable rt = test_rope_table(6, true);
  MlaKvWriteArgs k;
  k.table = &rt, k.rope_dim = 8, k.kv_lora_rank = 4, k.block_size = 4, k.max_blocks_per_seq = 1, k.n_blocks = 1;
  EXPECT_FALSE(validate(k).ok());  // rope_dim does not match the table
  k.rope_dim = 6;
  EXPECT_TRUE(validate(k).ok());  // m = 0: no pointers needed
  k.m = 1;
  EXPECT_FALSE(validate(k).ok());  // null pointers

  HeadLinearArgs h;
  h.x = y, h.w = w.data(), h.y = y, h.m = 2, h.n_heads = 2, h.n = 4, h.k = 4;
  h.x_row_stride = 8, h.x_head_stride = 4, h.y_row_stride = 8, h.y_head_stride = 4;
  EXPECT_TRUE(validate(h).ok());
  h.y_row_stride = 4;  // rows would overwrite the next head
  EXPECT_FALSE(validate(h).ok());
  h.y_row_stride = 4, h.y_head_stride = 8;  // rows inside heads
  EXPECT_TRUE(validate(h).ok());
  h.y_head_stride = 6;
  EXPECT_FALSE(validate(h).ok());
}

}  // namespace
}  // namespace pg::ops
