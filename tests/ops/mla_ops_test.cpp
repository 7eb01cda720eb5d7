// The CUDA MLA helper ops against their CPU definitions on seeded random inputs: embedding
// (every table format, exact), rope (V3 / moonlight / tiny layouts, both pair layouts, positions
// up to 163839), mla_kv_write (shuffled block tables, untouched rows) and head_linear (W_UK / W_UV
// at V3 and moonlight dims, m = 1..64 and prefill, f32 and long rows, odd dims on the generic
// path), mla_prep (the three fused: the same bits as the three launches), with outputs poisoned first. Ends with a bandwidth report of head_linear at m = 1.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/mla_ops.h"
#include "ops/cuda/mla_ops.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {
namespace {

// head_linear tolerance, derived as in linear_test.cpp: CPU and GPU sum the same k exact
// products (bf16 weights are exact in f32) in different orders: the CPU in 16 chains of
// ceil(k/16) terms and a 4-level tree; the GPU in per-lane chains of at most 8 (chunk dot) +
// ceil(k/8) (chunk adds) roundings and a <= 5-level shuffle tree (the generic path: ceil(k/32)
// + 5). Higham & Mary's probabilistic bound with lambda = 10 (failure probability < 1e-18 per
// output): |y_gpu - y_cpu| <= 10 (sqrt(n_cpu) + sqrt(n_gpu)) u sum_k |w_k x_k|.
constexpr double kLambda = 10.0;
constexpr double kMinCosine = 1.0 - 1e-6;
// mla_kv_write's c_kv part, deterministic: the sums of squares differ by at most the CPU's
// ceil(R/16) + 4 and the GPU's ceil(R/128) + 7 roundings (relative, positive terms); 1/sqrt
// halves that, and both sides round the two products the same way on the same inputs but inv,
// which adds <= 2 more. So |y_gpu - y_cpu| <= (ceil(R/16) + ceil(R/128) + 13) u |y|.
// RoPE: cos/sin in double rounded to f32 agree unless the double results straddle an f32
// rounding boundary (CUDA's sincos errs <= 2 ulp of double, probability ~2^-28 per value); the
// brief's limit: 1e-6 absolute for |x| <= 1, attention_factor ~1.
constexpr double kRopeMaxAbs = 1e-6;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// ---------------------------------------------------------------------------------------------
struct EmbeddingCase {
  const char* name;
  WeightFormat format;
  int64_t vocab, hidden, m, y_pad = 0, block = 128;
};
void PrintTo(const EmbeddingCase& c, std::ostream* os) { *os << c.name; }

constexpr WeightFormat kF32 = WeightFormat::kF32, kBF16 = WeightFormat::kBF16, kFp8 = WeightFormat::kFp8Block;

const EmbeddingCase kEmbeddingCases[] = {
    {"v3_bf16_m1", kBF16, 1000, 7168, 1},
    {"v3_bf16_m64", kBF16, 1000, 7168, 64},
    {"v3_fp8_m7", kFp8, 300, 7168, 7},
    {"moonlight_bf16_strided", kBF16, 500, 2048, 5, 4},
    {"moonlight_f32", kF32, 100, 2048, 3},
    {"moonlight_bf16_prefill", kBF16, 1000, 2048, 8192},
    {"fp8_32_blocks_vec", kFp8, 70, 64, 9, 0, 32},
    {"tiny_f32_scalar", kF32, 37, 52, 9, 3},
    {"tiny_bf16_scalar", kBF16, 37, 52, 9},
    {"tiny_fp8_32_blocks_scalar", kFp8, 37, 52, 9, 0, 32},
};

class EmbeddingCuda : public ::testing::TestWithParam<EmbeddingCase> {};

TEST_P(EmbeddingCuda, MatchesCpuExactly) {
  PG_REQUIRE_CUDA();
  const EmbeddingCase& c = GetParam();
  const uint64_t seed = seed_of(c.name);
  const size_t n = size_t(c.vocab * c.hidden);
  std::vector<float> wf;
  std::vector<uint16_t> wb;
  std::vector<uint8_t> w8;
  std::vector<float> scale;
  Matrix t{c.format, c.vocab, c.hidden, nullptr, nullptr, c.block, c.block};
  if (c.format == kF32) {
    wf.resize(n), parallel_fill(wf, [&](uint64_t i) { return uniform_pm1(seed, i); }), t.data = wf.data();
  } else if (c.format == kBF16) {
    wb.resize(n), parallel_fill(wb, [&](uint64_t i) { return f32_to_bf16(uniform_pm1(seed, i)); }), t.data = wb.data();
  } else {
    w8.resize(n);
    parallel_fill(w8, [&](uint64_t i) {
      const uint8_t b = uint8_t(splitmix64(seed ^ (i * 0x9e3779b97f4a7c15ull)) >> 56);
      return (b & 0x7f) == 0x7f ? uint8_t(b ^ 1) : b;  // every finite e4m3 code
    });
    scale.resize(size_t(((c.vocab + c.block - 1) / c.block) * t.scale_cols()));
    parallel_fill(scale, [&](uint64_t i) { return std::exp2(-9.0f + 3.0f * uniform_pm1(seed + 1, i)); });
    t.data = w8.data(), t.scale_inv = scale.data();
  }
  std::vector<int32_t> tokens(static_cast<size_t>(c.m));
  for (int64_t i = 0; i < c.m; ++i) tokens[size_t(i)] = int32_t(splitmix64(seed + 7 + uint64_t(i)) % uint64_t(c.vocab));
  tokens[0] = int32_t(c.vocab - 1);  // the last row
  if (c.m > 1) tokens[1] = 0;
  const int64_t ys = c.hidden + c.y_pad;
  std::vector<float> y_cpu(static_cast<size_t>(c.m * ys), std::bit_cast<float>(0xffffffffu));
  EmbeddingArgs a;
  a.table = &t, a.tokens = tokens.data(), a.y = y_cpu.data(), a.m = c.m, a.y_stride = c.y_pad ? ys : 0;
  ASSERT_TRUE(validate(a).ok());
  cpu::embedding(a);

  cuda::DeviceBuffer<float> dwf, dscale;
  cuda::DeviceBuffer<uint16_t> dwb;
  cuda::DeviceBuffer<uint8_t> dw8;
  Matrix dt = t;
  if (c.format == kF32) dwf = to_device(wf), dt.data = dwf.data();
  if (c.format == kBF16) dwb = to_device(wb), dt.data = dwb.data();
  if (c.format == kFp8) dw8 = to_device(w8), dscale = to_device(scale), dt.data = dw8.data(), dt.scale_inv = dscale.data();
  auto dtok = to_device(tokens);
  auto dy = poisoned<float>(y_cpu.size());
  EmbeddingArgs da = a;
  da.table = &dt, da.tokens = dtok.data(), da.y = dy.data();
  PG_ASSERT_OK(cuda::embedding(da, nullptr));
  ASSERT_TRUE(sync_ok());
  const std::vector<float> y_gpu = to_host(dy);
  int64_t diff = 0;
  for (size_t i = 0; i < y_cpu.size(); ++i) diff += !same_bits(y_gpu[i], y_cpu[i]);  // gaps: both poison
  EXPECT_EQ(diff, 0) << "elements whose bits differ from the CPU's (row gaps must stay poisoned)";
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmbeddingCuda, ::testing::ValuesIn(kEmbeddingCases),
                         [](const ::testing::TestParamInfo<EmbeddingCase>& i) { return std::string(i.param.name); });

TEST(EmbeddingCudaIds, OutOfRangeIdLeavesItsRowUnwritten) {
  PG_REQUIRE_CUDA();
  std::vector<uint16_t> w(static_cast<size_t>(4 * 16), f32_to_bf16(1.5f));
  const std::vector<int32_t> tokens = {3, 4, -1, 0};
  auto dw = to_device(w);
  auto dtok = to_device(tokens);
  auto dy = poisoned<float>(4 * 16);
  const Matrix t{kBF16, 4, 16, dw.data()};
  EmbeddingArgs a;
  a.table = &t, a.tokens = dtok.data(), a.y = dy.data(), a.m = 4;
  PG_ASSERT_OK(cuda::embedding(a, nullptr));
  ASSERT_TRUE(sync_ok());
  const std::vector<float> y = to_host(dy);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 16; ++j) {
      const float v = y[size_t(i * 16 + j)];
      if (i == 1 || i == 2) EXPECT_TRUE(is_poison(v)) << "row " << i;
      else EXPECT_EQ(v, 1.5f) << "row " << i;
    }
}

// ---------------------------------------------------------------------------------------------
// DeepSeek-V3's YaRN table (rope_theta 10000, factor 40, original 4096, beta 32 / 1), the
// formula of model/rope_yarn.cpp; attention_factor 1.25 so that the scale is exercised.
RopeTable yarn_table(int64_t dim, bool interleave) {
  RopeTable t;
  t.interleave = interleave;
  t.attention_factor = 1.25f;
  const double theta = 10000, factor = 40, orig = 4096;
  auto corr = [&](double n_rot) { return (double(dim) * std::log(orig / (n_rot * 2 * M_PI))) / (2 * std::log(theta)); };
  double low = std::max(std::floor(corr(32)), 0.0), high = std::min(std::ceil(corr(1)), double(dim - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float pf = std::pow(float(theta), float(2 * i) / float(dim));
    const float ramp = std::clamp((float(i) - float(low)) / (float(high) - float(low)), 0.0f, 1.0f);
    t.inv_freq.push_back((1.0f / (float(factor) * pf)) * ramp + (1.0f / pf) * (1.0f - ramp));
  }
  return t;
}

struct RopeCase {
  const char* name;
  int64_t m, n_heads, head_stride, row_stride, offset, rope_dim;
  int64_t max_pos = 163839;
};
void PrintTo(const RopeCase& c, std::ostream* os) { *os << c.name; }

const RopeCase kRopeCases[] = {
    {"v3_q_pe", 6, 128, 192, 128 * 192, 128, 64},
    {"v3_k_pe", 6, 1, 576, 576, 512, 64},
    {"moonlight_q_pe_prefill", 4096, 16, 192, 16 * 192, 128, 64, 4095},
    {"tiny", 9, 3, 17, 3 * 17 + 2, 11, 6},
};

class RopeCuda : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeCuda, MatchesCpuAtLargePositions) {
  PG_REQUIRE_CUDA();
  const RopeCase& c = GetParam();
  for (bool interleave : {true, false}) {
    SCOPED_TRACE(interleave ? "interleaved pairs" : "split halves");
    const uint64_t seed = seed_of(c.name) + interleave;
    const RopeTable table = yarn_table(c.rope_dim, interleave);
    std::vector<int64_t> pos(static_cast<size_t>(c.m));
    for (int64_t i = 0; i < c.m; ++i) pos[size_t(i)] = c.m >= 1024 ? i : int64_t(splitmix64(seed + uint64_t(i)) % uint64_t(c.max_pos + 1));
    if (c.m >= 4) pos[0] = 0, pos[1] = 1, pos[2] = c.max_pos, pos[3] = c.max_pos - 1;
    std::vector<float> x(static_cast<size_t>(c.m * c.row_stride));
    parallel_fill(x, [&](uint64_t i) { return uniform_pm1(seed, i); });
    std::vector<float> x_cpu = x;
    RopeArgs a;
    a.x = x_cpu.data(), a.positions = pos.data(), a.table = &table, a.m = c.m, a.n_heads = c.n_heads;
    a.head_stride = c.head_stride, a.row_stride = c.row_stride, a.offset = c.offset, a.rope_dim = c.rope_dim;
    ASSERT_TRUE(validate(a).ok());
    cpu::rope(a);

    auto dx = to_device(x);
    auto dpos = to_device(pos);
    auto dfreq = to_device(table.inv_freq);
    RopeArgs da = a;
    da.x = dx.data(), da.positions = dpos.data();
    PG_ASSERT_OK(cuda::rope(da, dfreq.data(), nullptr));
    ASSERT_TRUE(sync_ok());
    const std::vector<float> x_gpu = to_host(dx);
    double max_abs = 0;
    int64_t not_same = 0, bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = std::fabs(double(x_gpu[i]) - x_cpu[i]);
      max_abs = std::max(max_abs, e);
      not_same += !same_bits(x_gpu[i], x_cpu[i]);
      bad += !(e <= kRopeMaxAbs);  // NaN counts
    }
    EXPECT_EQ(bad, 0) << "max_abs=" << max_abs;
    std::printf("[ rope     ] %-24s %s max_abs=%.3g elements not bit-equal=%lld of %zu\n", c.name,
                interleave ? "interleave" : "halves    ", max_abs, (long long)not_same, x.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeCuda, ::testing::ValuesIn(kRopeCases),
                         [](const ::testing::TestParamInfo<RopeCase>& i) { return std::string(i.param.name); });

// rope_cos_sin, the step's table mla_prep reads: against the CPU's rope of unit pairs (1, 0), whose
// rotation is exactly (cos, sin): 1 x c - 0 x s and 0 x c + 1 x s round to c and s.
TEST(RopeCosSinCuda, MatchesCpuRopeOfUnitPairs) {
  PG_REQUIRE_CUDA();
  constexpr int64_t kP = 64, kM = 37;
  const RopeTable table = yarn_table(kP, true);
  std::vector<int64_t> pos(kM);
  for (int64_t i = 0; i < kM; ++i) pos[size_t(i)] = int64_t(splitmix64(seed_of("rope_cos_sin") + uint64_t(i)) % 163840);
  pos[0] = 0, pos[1] = 1, pos[2] = 163839, pos[3] = 4096;
  std::vector<float> unit(size_t(kM * kP), 0.0f);
  for (size_t i = 0; i < unit.size(); i += 2) unit[i] = 1.0f;
  RopeArgs a;
  a.x = unit.data(), a.positions = pos.data(), a.table = &table, a.m = kM, a.n_heads = 1;
  a.head_stride = kP, a.row_stride = kP, a.offset = 0, a.rope_dim = kP;
  ASSERT_TRUE(validate(a).ok());
  cpu::rope(a);

  auto dpos = to_device(pos);
  auto dfreq = to_device(table.inv_freq);
  auto dcs = poisoned<float>(size_t(kM * kP));
  PG_ASSERT_OK(cuda::rope_cos_sin(dpos.data(), kM, table, dfreq.data(), dcs.data(), nullptr));
  ASSERT_TRUE(sync_ok());
  const std::vector<float> cs = to_host(dcs);
  int64_t bad = 0, not_same = 0;
  for (int64_t t = 0; t < kM; ++t)
    for (int64_t k = 0; k < kP / 2; ++k) {
      const float c_cpu = unit[size_t(t * kP + 2 * k)], s_cpu = unit[size_t(t * kP + 2 * k + 1)];
      const float c = cs[size_t(t * kP + k)], s = cs[size_t(t * kP + kP / 2 + k)];
      bad += !(std::fabs(double(c) - c_cpu) <= kRopeMaxAbs) + !(std::fabs(double(s) - s_cpu) <= kRopeMaxAbs);
      not_same += !same_bits(c, c_cpu) + !same_bits(s, s_cpu);
    }
  EXPECT_EQ(bad, 0) << "cos / sin values off the CPU's (or unwritten)";
  std::printf("[ rope     ] rope_cos_sin %lld of %lld values not bit-equal to the CPU's\n", (long long)not_same,
              (long long)(kM * kP));
}

TEST(RopeCosSinCuda, RejectsMissingBuffers) {
  const RopeTable table = yarn_table(64, true);
  float f = 0;
  int64_t p = 0;
  EXPECT_FALSE(cuda::rope_cos_sin(&p, -1, table, &f, &f, nullptr).ok());
  EXPECT_FALSE(cuda::rope_cos_sin(nullptr, 1, table, &f, &f, nullptr).ok());
  EXPECT_FALSE(cuda::rope_cos_sin(&p, 1, table, nullptr, &f, nullptr).ok());
  EXPECT_FALSE(cuda::rope_cos_sin(&p, 1, table, &f, nullptr, nullptr).ok());
  EXPECT_FALSE(cuda::rope_cos_sin(&p, 1, RopeTable{}, &f, &f, nullptr).ok());
  MlaPrepArgs none;
  EXPECT_FALSE(cuda::mla_prep(none, nullptr, nullptr).ok());
}

// ---------------------------------------------------------------------------------------------
struct KvWriteCase {
  const char* name;
  int64_t R, P, block_size, n_blocks, max_blocks, kv_pad;
  std::vector<std::pair<int32_t, int64_t>> tokens;  // (seq, position)
};
void PrintTo(const KvWriteCase& c, std::ostream* os) { *os << c.name; }

std::vector<KvWriteCase> kv_write_cases() {
  std::vector<KvWriteCase> cs;
  KvWriteCase v3{"v3_decode_and_prefill", 512, 64, 64, 64, 2560, 0, {{1, 163839}, {2, 100000}, {2, 100001}, {4, 5}}};
  for (int64_t p = 0; p < 300; ++p) v3.tokens.push_back({0, p});  // a prefill chunk over 5 blocks
  for (int64_t p = 64; p < 80; ++p) v3.tokens.push_back({3, p});
  cs.push_back(v3);
  KvWriteCase tiny{"tiny_strided_kv", 27, 6, 5, 12, 4, 3, {{1, 19}}};
  for (int64_t p = 0; p < 7; ++p) tiny.tokens.push_back({0, p});
  for (int64_t p = 10; p < 13; ++p) tiny.tokens.push_back({2, p});
  cs.push_back(tiny);
  return cs;
}

class KvWriteCuda : public ::testing::TestWithParam<KvWriteCase> {};

TEST_P(KvWriteCuda, WritesOnlyItsRowsAndMatchesCpu) {
  PG_REQUIRE_CUDA();
  const KvWriteCase& c = GetParam();
  const int64_t D = c.R + c.P, ks = D + c.kv_pad, m = int64_t(c.tokens.size());
  for (bool interleave : {true, false}) {
    SCOPED_TRACE(interleave ? "interleaved pairs" : "split halves");
    const uint64_t seed = seed_of(c.name) + interleave;
    const RopeTable table = yarn_table(c.P, interleave);
    // Shuffled physical blocks for the table entries the tokens use; the rest -1.
    std::vector<int32_t> perm(static_cast<size_t>(c.n_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[splitmix64(seed + i) % (i + 1)]);
    int32_t n_seqs = 0;
    for (auto [s, p] : c.tokens) n_seqs = std::max(n_seqs, s + 1);
    std::vector<int32_t> tables(size_t(n_seqs * c.max_blocks), -1), token_seq;
    std::vector<int64_t> positions;
    size_t next = 0;
    for (auto [s, p] : c.tokens) {
      int32_t& e = tables[size_t(s * c.max_blocks + p / c.block_size)];
      if (e < 0) e = perm[next++];
      token_seq.push_back(s), positions.push_back(p);
    }
    std::vector<float> kv(static_cast<size_t>(m * ks)), w(size_t(c.R));
    parallel_fill(kv, [&](uint64_t i) { return 2.0f * uniform_pm1(seed, i); });
    parallel_fill(w, [&](uint64_t i) { return uniform_pm1(seed + 1, i); });
    std::vector<float> cache_cpu(static_cast<size_t>(c.n_blocks * c.block_size * D), std::bit_cast<float>(0xffffffffu));
    MlaKvWriteArgs a;
    a.kv = kv.data(), a.norm_weight = w.data(), a.eps = 1e-6f, a.positions = positions.data(), a.table = &table;
    a.block_tables = tables.data(), a.token_seq = token_seq.data(), a.cache = cache_cpu.data(), a.m = m;
    a.kv_lora_rank = c.R, a.rope_dim = c.P, a.block_size = c.block_size, a.max_blocks_per_seq = c.max_blocks;
    a.n_blocks = c.n_blocks, a.kv_stride = ks;
    ASSERT_TRUE(validate(a).ok());
    cpu::mla_kv_write(a);

    auto dkv = to_device(kv);
    auto dw = to_device(w);
    auto dpos = to_device(positions);
    auto dtables = to_device(tables);
    auto dseq = to_device(token_seq);
    auto dfreq = to_device(table.inv_freq);
    auto dcache = poisoned<float>(cache_cpu.size());
    MlaKvWriteArgs da = a;
    da.kv = dkv.data(), da.norm_weight = dw.data(), da.positions = dpos.data(), da.block_tables = dtables.data();
    da.token_seq = dseq.data(), da.cache = dcache.data();
    PG_ASSERT_OK(cuda::mla_kv_write(da, dfreq.data(), nullptr));
    ASSERT_TRUE(sync_ok());
    const std::vector<float> cache_gpu = to_host(dcache), kv_after = to_host(dkv);
    EXPECT_EQ(std::memcmp(kv_after.data(), kv.data(), kv.size() * sizeof(float)), 0) << "kv was modified";

    const double norm_units = std::ceil(double(c.R) / 16) + std::ceil(double(c.R) / 128) + 13;
    int64_t wrong_untouched = 0, over_tol = 0;
    double max_rel_norm = 0, max_abs_rope = 0;
    for (int64_t row = 0; row < c.n_blocks * c.block_size; ++row) {
      const float* g = &cache_gpu[size_t(row * D)];
      const float* r = &cache_cpu[size_t(row * D)];
      if (is_poison(r[0])) {  // no token owns this row (the CPU wrote every element of its rows)
        for (int64_t j = 0; j < D; ++j) wrong_untouched += !is_poison(g[j]);
        continue;
      }
      for (int64_t j = 0; j < c.R; ++j) {
        const double e = std::fabs(double(g[j]) - r[j]);
        max_rel_norm = std::max(max_rel_norm, e / std::max(std::fabs(double(r[j])), 1e-30));
        over_tol += !(e <= norm_units * kF32Unit * std::fabs(double(r[j])));
      }
      for (int64_t j = c.R; j < D; ++j) {
        const double e = std::fabs(double(g[j]) - r[j]);
        max_abs_rope = std::max(max_abs_rope, e);
        over_tol += !(e <= 2 * kRopeMaxAbs);  // |k_pe| < 2 here
      }
    }
    EXPECT_EQ(wrong_untouched, 0) << "cache rows no token owns were written";
    EXPECT_EQ(over_tol, 0) << "max_rel(c_kv)=" << max_rel_norm << " max_abs(k_pe)=" << max_abs_rope;
    std::printf("[ kv_write ] %-24s m=%-4lld max_rel(c_kv)=%.3g max_abs(k_pe)=%.3g\n", c.name, (long long)m,
                max_rel_norm, max_abs_rope);

    // A bf16 pool: the f32 rows above rounded to nearest even, nothing else written.
    auto dcache16 = poisoned<uint16_t>(cache_cpu.size());
    MlaKvWriteArgs db = da;
    db.cache = nullptr, db.cache_bf16 = dcache16.data();
    PG_ASSERT_OK(cuda::mla_kv_write(db, dfreq.data(), nullptr));
    ASSERT_TRUE(sync_ok());
    const std::vector<uint16_t> cache16 = to_host(dcache16);
    int64_t wrong16 = 0;
    for (size_t i = 0; i < cache16.size(); ++i)
      wrong16 += is_poison(cache_cpu[i]) ? cache16[i] != 0xffffu : cache16[i] != f32_to_bf16(cache_gpu[i]);
    EXPECT_EQ(wrong16, 0) << "bf16 pool: elements that are not the f32 row's rounding (or rows no token owns written)";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, KvWriteCuda, ::testing::ValuesIn(kv_write_cases()),
                         [](const ::testing::TestParamInfo<KvWriteCase>& i) { return std::string(i.param.name); });

// ---------------------------------------------------------------------------------------------
struct HeadCase {
  const char* name;
  HeadWeight format;
  int64_t m, n_heads, n, k;
  int64_t x_row_stride = 0, x_head_stride = 0;  // 0: dense [m, n_heads, k]
  int64_t y_head_pad = 0;                       // y [m, n_heads, n + pad]
  bool y_head_major = false;                    // y [n_heads, m, n]
  bool misalign_x = false;                      // x 4 bytes past a 16-byte boundary: generic path
  int64_t group = 128;                          // kFp8: columns per scale
  float y_scale = 1.0f;                         // outputs times this (an NVFP4 kv_b_proj's scale_2)
};
void PrintTo(const HeadCase& c, std::ostream* os) { *os << c.name; }

constexpr HeadWeight kHF32 = HeadWeight::kF32, kHBF16 = HeadWeight::kBF16, kHFP8 = HeadWeight::kFp8;
constexpr int64_t kV3QRow = 128 * 192, kMoonQRow = 16 * 192;

const HeadCase kHeadCases[] = {
    // DeepSeek-V3: W_UK [128, 512, 128] on q_nope inside q rows; W_UV [128, 128, 512] on o_lat.
    {"v3_w_uk_m1", kHBF16, 1, 128, 512, 128, kV3QRow, 192},
    {"v3_w_uk_m3", kHBF16, 3, 128, 512, 128, kV3QRow, 192},
    {"v3_w_uk_m64", kHBF16, 64, 128, 512, 128, kV3QRow, 192},
    {"v3_w_uv_m1", kHBF16, 1, 128, 128, 512},
    {"v3_w_uv_m16", kHBF16, 16, 128, 128, 512},
    {"v3_w_uv_m33", kHBF16, 33, 128, 128, 512},
    // moonlight-16b-a3b: 16 heads.
    {"moonlight_w_uk_m1", kHBF16, 1, 16, 512, 128, kMoonQRow, 192},
    {"moonlight_w_uk_m9", kHBF16, 9, 16, 512, 128, kMoonQRow, 192},
    {"moonlight_w_uv_m64", kHBF16, 64, 16, 128, 512},
    {"moonlight_w_uv_prefill_m1000", kHBF16, 1000, 16, 128, 512},
    {"one_head_w_uk_prefill_m8192", kHBF16, 8192, 1, 512, 128, 192, 192},
    // f32 weights, every lane count, long rows (segments), gaps between heads, head-major y.
    {"f32_k128_m1", kHF32, 1, 16, 512, 128, kMoonQRow, 192},
    {"f32_k512_m5", kHF32, 5, 16, 128, 512},
    {"bf16_k16_m2", kHBF16, 2, 4, 64, 16},
    {"bf16_k2048_segments_m3", kHBF16, 3, 4, 64, 2048},
    {"f32_k1028_segments_m1", kHF32, 1, 2, 30, 1028},
    {"bf16_gaps_m7", kHBF16, 7, 8, 128, 512, 0, 0, 3},
    {"bf16_head_major_y_m5", kHBF16, 5, 8, 128, 512, 0, 0, 0, true},
    // Generic path: odd dims (the tiny golden models: kv_lora 27, nope 11, v 13), odd n, misaligned x.
    {"tiny_w_uk_m1", kHF32, 1, 3, 27, 11, 3 * 17, 17},
    {"tiny_w_uk_m7", kHBF16, 7, 3, 27, 11, 3 * 17, 17},
    {"tiny_w_uv_m100", kHBF16, 100, 3, 13, 27},
    {"tiny_k13_m3", kHF32, 3, 3, 13, 13},
    {"odd_n_m4", kHBF16, 4, 3, 27, 128},
    {"misaligned_x_m2", kHBF16, 2, 16, 128, 512, 0, 0, 0, false, true},
    // FP8 (a DeepSeek-FP8 kv_b_proj's codes, one scale per row and 128 columns, or 16): the decode
    // shapes, segments, the generic path (odd k, a partial last group; misaligned x).
    {"fp8_v3_w_uk_m1", kHFP8, 1, 128, 512, 128, kV3QRow, 192},
    {"fp8_v3_w_uv_m4", kHFP8, 4, 128, 128, 512},
    {"fp8_moonlight_w_uk_m9", kHFP8, 9, 16, 512, 128, kMoonQRow, 192},
    {"fp8_moonlight_w_uv_m64", kHFP8, 64, 16, 128, 512},
    {"fp8_group16_k2048_segments_m3", kHFP8, 3, 4, 64, 2048, 0, 0, 0, false, false, 16},
    {"fp8_tiny_w_uv_generic_m5", kHFP8, 5, 3, 13, 27, 0, 0, 0, false, false, 16},
    {"fp8_misaligned_x_m2", kHFP8, 2, 16, 128, 512, 0, 0, 0, false, true},
    // bf16 heads with y_scale (an NVFP4 kv_b_proj's): vector and generic paths.
    {"bf16_y_scale_v3_w_uv_m2", kHBF16, 2, 128, 128, 512, 0, 0, 0, false, false, 128, 0.0371f},
    {"bf16_y_scale_tiny_generic_m3", kHBF16, 3, 3, 13, 27, 0, 0, 0, false, false, 128, -2.5f},
};

struct HeadData {
  std::vector<float> x, wf;  // wf: W in f32 (bf16 values, or FP8 code x scale, exactly)
  std::vector<uint16_t> wb;
  std::vector<uint8_t> wq;   // kFp8: codes [rows, k] and scales [rows, ceil(k / group)]
  std::vector<float> ws;
  HeadLinearArgs a;          // host pointers, y unset
  size_t y_len = 0;
  int64_t x_off = 0;
};

HeadData make_head_data(const HeadCase& c, uint64_t seed) {
  HeadData d;
  HeadLinearArgs& a = d.a;
  a.m = c.m, a.n_heads = c.n_heads, a.n = c.n, a.k = c.k, a.w_format = c.format, a.y_scale = c.y_scale;
  a.x_head_stride = c.x_head_stride ? c.x_head_stride : c.k;
  a.x_row_stride = c.x_row_stride ? c.x_row_stride : c.n_heads * c.k;
  if (c.y_head_major) {
    a.y_row_stride = c.n, a.y_head_stride = c.m * c.n;
  } else {
    a.y_head_stride = c.n + c.y_head_pad, a.y_row_stride = c.n_heads * a.y_head_stride;
  }
  d.y_len = size_t((c.m - 1) * a.y_row_stride + (c.n_heads - 1) * a.y_head_stride + c.n);
  d.x_off = c.misalign_x ? 1 : 0;
  d.x.resize(size_t(d.x_off + (c.m - 1) * a.x_row_stride + (c.n_heads - 1) * a.x_head_stride + c.k));
  parallel_fill(d.x, [&](uint64_t i) { return uniform_pm1(seed + 2, i); });
  d.wf.resize(size_t(c.n_heads * c.n * c.k));
  if (c.format == kHBF16) {
    d.wb.resize(d.wf.size());
    parallel_fill(d.wb, [&](uint64_t i) { return f32_to_bf16(uniform_pm1(seed, i)); });
    for (size_t i = 0; i < d.wb.size(); ++i) d.wf[i] = bf16_to_f32(d.wb[i]);
  } else if (c.format == kHFP8) {
    const int64_t rows = c.n_heads * c.n, groups = (c.k + c.group - 1) / c.group;
    d.wq.resize(d.wf.size()), d.ws.resize(size_t(rows * groups));
    for (size_t i = 0; i < d.wq.size(); ++i) {  // every finite e4m3 code, no NaN
      const uint8_t b = uint8_t(splitmix64(seed + i) >> 56);
      d.wq[i] = (b & 0x7f) == 0x7f ? uint8_t(b ^ 1) : b;
    }
    parallel_fill(d.ws, [&](uint64_t i) { return std::exp2(-8.0f + 2.0f * uniform_pm1(seed + 5, i)); });
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < c.k; ++j)
        d.wf[size_t(r * c.k + j)] = f8e4m3_to_f32(d.wq[size_t(r * c.k + j)]) * d.ws[size_t(r * groups + j / c.group)];
    a.w_scale = d.ws.data(), a.scale_group = c.group;
  } else {
    parallel_fill(d.wf, [&](uint64_t i) { return uniform_pm1(seed, i); });
  }
  a.x = d.x.data() + d.x_off;
  a.w = c.format == kHBF16  ? static_cast<const void*>(d.wb.data())
        : c.format == kHFP8 ? static_cast<const void*>(d.wq.data())
                            : d.wf.data();
  return d;
}

class HeadLinearCuda : public ::testing::TestWithParam<HeadCase> {};

TEST_P(HeadLinearCuda, MatchesCpu) {
  PG_REQUIRE_CUDA();
  const HeadCase& c = GetParam();
  HeadData d = make_head_data(c, seed_of(c.name));
  std::vector<float> y_cpu(d.y_len, std::bit_cast<float>(0xffffffffu));
  HeadLinearArgs a = d.a;
  a.y = y_cpu.data();
  ASSERT_TRUE(validate(a).ok()) << validate(a).message();
  cpu::head_linear(a, ThreadPool::global());

  auto dx = to_device(d.x);
  auto dwf = c.format == kHF32 ? to_device(d.wf) : cuda::DeviceBuffer<float>();
  auto dwb = c.format == kHBF16 ? to_device(d.wb) : cuda::DeviceBuffer<uint16_t>();
  auto dwq = c.format == kHFP8 ? to_device(d.wq) : cuda::DeviceBuffer<uint8_t>();
  auto dws = c.format == kHFP8 ? to_device(d.ws) : cuda::DeviceBuffer<float>();
  auto dy = poisoned<float>(d.y_len);
  HeadLinearArgs da = a;
  da.x = dx.data() + d.x_off, da.y = dy.data();
  da.w = c.format == kHF32 ? static_cast<const void*>(dwf.data())
         : c.format == kHFP8 ? static_cast<const void*>(dwq.data())
                             : dwb.data();
  if (c.format == kHFP8) da.w_scale = dws.data();
  PG_ASSERT_OK(cuda::head_linear(da, nullptr));
  ASSERT_TRUE(sync_ok());
  const std::vector<float> y_gpu = to_host(dy);

  // Outputs with their tolerances; every other element of y must still be poison.
  const int64_t n_out = c.m * c.n_heads * c.n;
  std::vector<double> absdot(static_cast<size_t>(n_out));  // sum_k |w_k x_k| per output, the scale of the rounding error
  ThreadPool::global().parallel_for(n_out, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const int64_t t = o / (c.n_heads * c.n), h = o / c.n % c.n_heads, i = o % c.n;
      const float* xt = a.x + t * a.x_row_stride + h * a.x_head_stride;
      const float* wr = &d.wf[size_t((h * c.n + i) * c.k)];
      double sa = 0;
      for (int64_t j = 0; j < c.k; ++j) sa += std::fabs(double(wr[j]) * xt[j]);
      absdot[size_t(o)] = sa * std::fabs(c.y_scale);
    }
  }, 64);
  std::vector<float> got, ref;
  std::vector<double> tol;
  std::vector<bool> is_out(d.y_len, false);
  const double n_cpu = std::ceil(double(c.k) / 16) + 4, n_gpu = 8 + std::ceil(double(c.k) / 8) + 5;
  for (int64_t o = 0; o < n_out; ++o) {
    const int64_t t = o / (c.n_heads * c.n), h = o / c.n % c.n_heads, i = o % c.n;
    const size_t yo = size_t(t * a.y_row_stride + h * a.y_head_stride + i);
    is_out[yo] = true;
    got.push_back(y_gpu[yo]), ref.push_back(y_cpu[yo]);
    tol.push_back(kLambda * (std::sqrt(n_cpu) + std::sqrt(n_gpu)) * kF32Unit * absdot[size_t(o)]);
  }
  int64_t gap_touched = 0;
  for (size_t o = 0; o < d.y_len; ++o) gap_touched += !is_out[o] && !is_poison(y_gpu[o]);
  const Diff diff = compare(got.data(), ref.data(), int64_t(got.size()), [&](int64_t i) { return tol[size_t(i)]; });
  EXPECT_EQ(diff.non_finite, 0) << "unwritten or non-finite outputs: " << diff.summary();
  EXPECT_EQ(diff.over_tol, 0) << diff.summary();
  EXPECT_GE(diff.cosine, kMinCosine) << diff.summary();
  EXPECT_EQ(gap_touched, 0) << "elements of y that are no output were written";
  std::printf("[ head_lin ] %-30s m=%-5lld heads=%-3lld n=%-4lld k=%-5lld %s\n", c.name, (long long)c.m,
              (long long)c.n_heads, (long long)c.n, (long long)c.k, diff.summary().c_str());
}

INSTANTIATE_TEST_SUITE_P(Shapes, HeadLinearCuda, ::testing::ValuesIn(kHeadCases),
                         [](const ::testing::TestParamInfo<HeadCase>& i) { return std::string(i.param.name); });

// Not a pass/fail check: µs and GB/s of W (the bytes that matter) for the V3 and moonlight
// decode shapes, for the lead's GPU run to compare against the H200's ~4.5 TB/s read ceiling.
// Each launch is timed alone after a 256 MB memset has pushed W out of the 50 MB L2.
// ---------------------------------------------------------------------------------------------
// mla_prep: the fused launch against the three launches it replaces, bit for bit (every role runs
// the same code on the same inputs, cos / sin from rope_cos_sin's table instead of computed in
// place), on the cache, q (q_pe roped in place) and q_lat, all poisoned first. Each of the three is
// checked against the CPU above.
struct PrepCase {
  const char* name;
  HeadWeight w_format;
  int64_t m, n_heads, nope, P, R;
  bool q_in_qkv;  // moonlight: q and [c_kv | k_pe] in one row of the [q | kv_a] projection
};
void PrintTo(const PrepCase& c, std::ostream* os) { *os << c.name; }

const PrepCase kPrepCases[] = {
    {"moonlight_bf16_m1", kHBF16, 1, 16, 128, 64, 512, true},
    {"moonlight_bf16_m3", kHBF16, 3, 16, 128, 64, 512, true},
    {"moonlight_bf16_m8", kHBF16, 8, 16, 128, 64, 512, true},
    {"moonlight_f32_m5", kHF32, 5, 16, 128, 64, 512, true},
    {"moonlight_bf16_m64", kHBF16, 64, 16, 128, 64, 512, true},
    {"v3_bf16_m1", kHBF16, 1, 128, 128, 64, 512, false},
    {"v3_bf16_m10", kHBF16, 10, 128, 128, 64, 512, false},
    {"tiny_generic_path", kHF32, 4, 3, 5, 6, 27, true},
    {"moonlight_fp8_m1", kHFP8, 1, 16, 128, 64, 512, true},
    {"v3_fp8_m4", kHFP8, 4, 128, 128, 64, 512, false},
};

class MlaPrepCuda : public ::testing::TestWithParam<PrepCase> {};

TEST_P(MlaPrepCuda, SameBitsAsTheThreeOps) {
  PG_REQUIRE_CUDA();
  const PrepCase& c = GetParam();
  const uint64_t seed = seed_of(c.name);
  const int64_t qk = c.nope + c.P, D = c.R + c.P, m = c.m;
  const int64_t q_cols = c.n_heads * qk, q_row = c.q_in_qkv ? q_cols + D : q_cols, kv_row = c.q_in_qkv ? q_row : D;
  constexpr int64_t kBlock = 16, kMaxBlocks = 8;
  const RopeTable table = yarn_table(c.P, true);
  std::vector<float> q(static_cast<size_t>(m * q_row)), kv_sep(c.q_in_qkv ? 0 : static_cast<size_t>(m * D)),
      norm_w(static_cast<size_t>(c.R));
  parallel_fill(q, [&](uint64_t i) { return uniform_pm1(seed, i); });
  parallel_fill(kv_sep, [&](uint64_t i) { return uniform_pm1(seed + 1, i); });
  parallel_fill(norm_w, [&](uint64_t i) { return uniform_pm1(seed + 2, i); });
  const int64_t n_w = c.n_heads * c.R * c.nope;
  std::vector<float> wf(static_cast<size_t>(n_w));
  parallel_fill(wf, [&](uint64_t i) { return uniform_pm1(seed + 3, i); });
  std::vector<uint16_t> wb(static_cast<size_t>(n_w));
  for (size_t i = 0; i < wb.size(); ++i) wb[i] = f32_to_bf16(wf[i]);
  // FP8: codes and one scale per row (k = nope <= 128 columns: one group).
  std::vector<uint8_t> wq(static_cast<size_t>(n_w));
  for (size_t i = 0; i < wq.size(); ++i) wq[i] = f32_to_f8e4m3(wf[i] * 64.0f);
  std::vector<float> ws(static_cast<size_t>(c.n_heads * c.R), 1.0f / 64);
  // Token t: sequence t, a random position; blocks seq x kMaxBlocks + j.
  std::vector<int64_t> pos(static_cast<size_t>(m));
  std::vector<int32_t> token_seq(static_cast<size_t>(m)), tables(static_cast<size_t>(m * kMaxBlocks));
  for (int64_t t = 0; t < m; ++t) {
    pos[size_t(t)] = int64_t(splitmix64(seed + 7 + uint64_t(t)) % uint64_t(kBlock * kMaxBlocks));
    token_seq[size_t(t)] = int32_t(t);
    for (int64_t j = 0; j < kMaxBlocks; ++j) tables[size_t(t * kMaxBlocks + j)] = int32_t(t * kMaxBlocks + j);
  }
  const size_t cache_len = size_t(m * kMaxBlocks * kBlock * D);

  auto dpos = to_device(pos);
  auto dseq = to_device(token_seq);
  auto dtables = to_device(tables);
  auto dfreq = to_device(table.inv_freq);
  auto dnorm = to_device(norm_w);
  auto dw = to_device(wf);
  auto dwb = to_device(wb);
  auto dwq = to_device(wq);
  auto dws = to_device(ws);
  std::vector<float> out[2][3];  // [unfused, fused][cache, q, q_lat]
  for (int fused = 0; fused < 2; ++fused) {
    auto dq = to_device(q);
    auto dkv = to_device(kv_sep);
    auto dcache = poisoned<float>(cache_len);
    auto dlat = poisoned<float>(size_t(m * c.n_heads * c.R));
    MlaPrepArgs a;
    MlaKvWriteArgs& kw = a.kv_write;
    kw.kv = c.q_in_qkv ? dq.data() + q_cols : dkv.data(), kw.kv_stride = kv_row, kw.norm_weight = dnorm.data();
    kw.eps = 1e-6f, kw.positions = dpos.data(), kw.table = &table, kw.block_tables = dtables.data();
    kw.token_seq = dseq.data(), kw.cache = dcache.data(), kw.m = m, kw.kv_lora_rank = c.R, kw.rope_dim = c.P;
    kw.block_size = kBlock, kw.max_blocks_per_seq = kMaxBlocks, kw.n_blocks = m * kMaxBlocks;
    RopeArgs& ra = a.q_rope;
    ra.x = dq.data(), ra.positions = dpos.data(), ra.table = &table, ra.m = m, ra.n_heads = c.n_heads;
    ra.head_stride = qk, ra.row_stride = q_row, ra.offset = c.nope, ra.rope_dim = c.P;
    HeadLinearArgs& uk = a.w_uk;
    uk.x = dq.data(), uk.x_row_stride = q_row, uk.x_head_stride = qk;
    uk.w = c.w_format == kHBF16  ? static_cast<const void*>(dwb.data())
           : c.w_format == kHFP8 ? static_cast<const void*>(dwq.data())
                                 : static_cast<const void*>(dw.data());
    if (c.w_format == kHFP8) uk.w_scale = dws.data(), uk.scale_group = 128;
    uk.w_format = c.w_format, uk.y = dlat.data(), uk.y_row_stride = c.n_heads * c.R, uk.y_head_stride = c.R;
    uk.m = m, uk.n_heads = c.n_heads, uk.n = c.R, uk.k = c.nope;
    if (fused) {  // the cos / sin table of the step, then the launch that reads it
      auto dcs = poisoned<float>(size_t(m * c.P));
      PG_ASSERT_OK(cuda::rope_cos_sin(dpos.data(), m, table, dfreq.data(), dcs.data(), nullptr));
      PG_ASSERT_OK(cuda::mla_prep(a, dcs.data(), nullptr));
      ASSERT_TRUE(sync_ok());
    } else {
      PG_ASSERT_OK(cuda::mla_kv_write(kw, dfreq.data(), nullptr));
      PG_ASSERT_OK(cuda::rope(ra, dfreq.data(), nullptr));
      PG_ASSERT_OK(cuda::head_linear(uk, nullptr));
    }
    ASSERT_TRUE(sync_ok());
    out[fused][0] = to_host(dcache), out[fused][1] = to_host(dq), out[fused][2] = to_host(dlat);
  }
  const char* names[3] = {"cache", "q", "q_lat"};
  for (int k = 0; k < 3; ++k) {
    ASSERT_EQ(out[0][k].size(), out[1][k].size());
    int64_t differ = 0, poison = 0;
    for (size_t i = 0; i < out[0][k].size(); ++i) differ += !same_bits(out[0][k][i], out[1][k][i]);
    for (float v : out[1][k]) poison += is_poison(v);
    EXPECT_EQ(differ, 0) << names[k] << ": elements whose bits differ from the three launches";
    if (k == 2) {
      EXPECT_EQ(poison, 0) << "q_lat elements left unwritten";
    }
  }
  int64_t rows_written = 0;  // the cache rows the tokens own, and only those
  for (size_t r = 0; r < cache_len / size_t(D); ++r) rows_written += !is_poison(out[1][0][r * size_t(D)]);
  EXPECT_EQ(rows_written, m);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaPrepCuda, ::testing::ValuesIn(kPrepCases),
                         [](const ::testing::TestParamInfo<PrepCase>& i) { return std::string(i.param.name); });

TEST(HeadLinearCudaBandwidth, ReportsDecodeShapes) {
  PG_REQUIRE_CUDA();
  const HeadCase cases[] = {
      {"v3_w_uk_m1", kHBF16, 1, 128, 512, 128, kV3QRow, 192},
      {"v3_w_uv_m1", kHBF16, 1, 128, 128, 512},
      {"v3_w_uk_m64", kHBF16, 64, 128, 512, 128, kV3QRow, 192},
      {"v3_w_uv_m64", kHBF16, 64, 128, 128, 512},
      {"moonlight_w_uk_m1", kHBF16, 1, 16, 512, 128, kMoonQRow, 192},
      {"moonlight_w_uv_m1", kHBF16, 1, 16, 128, 512},
      // The formats of an FP8 / NVFP4 checkpoint's heads: f32 (the default), FP8 (compact heads).
      {"v3_w_uk_m1_f32", kHF32, 1, 128, 512, 128, kV3QRow, 192},
      {"v3_w_uv_m1_f32", kHF32, 1, 128, 128, 512},
      {"v3_w_uk_m1_fp8", kHFP8, 1, 128, 512, 128, kV3QRow, 192},
      {"v3_w_uv_m1_fp8", kHFP8, 1, 128, 128, 512},
  };
  constexpr int kIters = 20;
  auto flush = poisoned<uint8_t>(size_t(256) << 20);
  cudaEvent_t e0, e1;
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
  for (const HeadCase& c : cases) {
    HeadData d = make_head_data(c, seed_of(c.name));
    auto dx = to_device(d.x);
    auto dwb = c.format == kHBF16 ? to_device(d.wb) : cuda::DeviceBuffer<uint16_t>();
    auto dwf = c.format == kHF32 ? to_device(d.wf) : cuda::DeviceBuffer<float>();
    auto dwq = c.format == kHFP8 ? to_device(d.wq) : cuda::DeviceBuffer<uint8_t>();
    auto dws = c.format == kHFP8 ? to_device(d.ws) : cuda::DeviceBuffer<float>();
    auto dy = poisoned<float>(d.y_len);
    HeadLinearArgs a = d.a;
    a.x = dx.data(), a.y = dy.data();
    a.w = c.format == kHBF16 ? static_cast<const void*>(dwb.data())
          : c.format == kHF32 ? static_cast<const void*>(dwf.data())
                              : static_cast<const void*>(dwq.data());
    a.w_scale = c.format == kHFP8 ? dws.data() : nullptr;
    PG_ASSERT_OK(cuda::head_linear(a, nullptr));  // warm-up
    float total_ms = 0, best_ms = 1e30f;
    for (int i = 0; i < kIters; ++i) {
      ASSERT_EQ(cudaMemsetAsync(flush.data(), i & 0xff, flush.bytes(), nullptr), cudaSuccess);
      ASSERT_EQ(cudaEventRecord(e0, nullptr), cudaSuccess);
      PG_ASSERT_OK(cuda::head_linear(a, nullptr));
      ASSERT_EQ(cudaEventRecord(e1, nullptr), cudaSuccess);
      ASSERT_TRUE(sync_ok());
      float ms = 0;
      ASSERT_EQ(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
      total_ms += ms, best_ms = std::min(best_ms, ms);
    }
    const double w_bytes = c.format == kHBF16  ? double(d.wb.size()) * 2
                           : c.format == kHF32 ? double(d.wf.size()) * 4
                                               : double(d.wq.size()) + 4.0 * double(d.ws.size());
    const double us = 1e3 * total_ms / kIters, best_us = 1e3 * best_ms;
    std::printf("[ head_lin ] bandwidth %-18s mean %7.2f us (%6.1f GB/s)  best %7.2f us (%6.1f GB/s) of W %.1f MB, cold L2\n",
                c.name, us, w_bytes / (us * 1e3), best_us, w_bytes / (best_us * 1e3), w_bytes / 1e6);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace
}  // namespace pg::ops::test
