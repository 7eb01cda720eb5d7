// ops::cuda::mla_prefill (the tensor-core prefill attention) against a CPU reference with the
// same bf16 roundings (scaled q, cache rows, softmax weights; f32 sums), and against the f32
// ops::cpu::mla_attention by cosine: moonlight (16 heads, R 512, P 64), DeepSeek-V3 (128 heads)
// and the embedded model's dims (4 heads, R 64, P 16) over paged caches with shuffled blocks;
// chunked prefill (a run starting past position 0), two runs of two sequences in one call, and a
// workspace so small that the queries go in many chunks. Tokens outside the runs stay untouched.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/mla_prefill.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {
namespace {

struct Run {
  int64_t cached;  // cache rows before the run (its first position)
  int64_t n;       // query tokens, at positions cached .. cached + n - 1
};

struct PrefillCase {
  const char* name;
  int64_t n_heads, r, p, block_size;
  std::vector<Run> runs;   // one sequence each
  int64_t extra_tokens = 0;  // decode tokens after the runs, not in any run: left untouched
  int64_t ws_tokens = 0;     // workspace for chunks of this many tokens (0: every token at once)
};
void PrintTo(const PrefillCase& c, std::ostream* os) { *os << c.name; }

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

struct Host {
  std::vector<float> q_lat, q_pe, kv;
  std::vector<int32_t> tables, token_seq;
  std::vector<int64_t> ctx_len;
  std::vector<cuda::MlaPrefillRun> runs;
  MlaAttentionArgs a;
};

Host make(const PrefillCase& c) {
  const uint64_t seed = seed_of(c.name);
  Host h;
  const int64_t D = c.r + c.p, bs = c.block_size, n_seqs = int64_t(c.runs.size());
  int64_t max_blocks = 1, used = 0;
  for (const Run& r : c.runs) {
    const int64_t blocks = (r.cached + r.n + bs - 1) / bs;
    max_blocks = std::max(max_blocks, blocks), used += blocks;
  }
  const int64_t n_blocks = used + 2;
  std::vector<int32_t> perm(static_cast<size_t>(n_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
  h.tables.assign(size_t(n_seqs * max_blocks), perm[0]);
  h.kv.assign(size_t(n_blocks * bs * D), std::numeric_limits<float>::quiet_NaN());  // unread rows: NaN
  size_t next = 0;
  int64_t t = 0;
  for (int64_t i = 0; i < n_seqs; ++i) {
    const Run& r = c.runs[size_t(i)];
    const int64_t len = r.cached + r.n;
    for (int64_t k = 0; k < (len + bs - 1) / bs; ++k) h.tables[size_t(i * max_blocks + k)] = perm[next++];
    for (int64_t j = 0; j < len; ++j) {
      float* row = &h.kv[size_t((int64_t(h.tables[size_t(i * max_blocks + j / bs)]) * bs + j % bs) * D)];
      for (int64_t e = 0; e < D; ++e) row[e] = uniform_pm1(seed + 1, uint64_t((i << 40) + j * D + e));
    }
    h.runs.push_back({t, t + r.n, r.cached, i});
    for (int64_t q = 0; q < r.n; ++q, ++t) h.token_seq.push_back(int32_t(i)), h.ctx_len.push_back(r.cached + q + 1);
  }
  for (int64_t q = 0; q < c.extra_tokens; ++q) h.token_seq.push_back(0), h.ctx_len.push_back(1 + q);
  const int64_t m = int64_t(h.ctx_len.size());
  h.q_lat.resize(size_t(m * c.n_heads * c.r));
  h.q_pe.resize(size_t(m * c.n_heads * c.p));
  for (size_t i = 0; i < h.q_lat.size(); ++i) h.q_lat[i] = uniform_pm1(seed + 2, i);
  for (size_t i = 0; i < h.q_pe.size(); ++i) h.q_pe[i] = uniform_pm1(seed + 3, i);
  MlaAttentionArgs& a = h.a;
  a.q_lat = h.q_lat.data(), a.q_pe = h.q_pe.data(), a.kv = h.kv.data(), a.block_tables = h.tables.data();
  a.token_seq = h.token_seq.data(), a.ctx_len = h.ctx_len.data();
  a.m = m, a.n_heads = c.n_heads, a.kv_lora_rank = c.r, a.rope_dim = c.p;
  a.block_size = bs, a.max_blocks_per_seq = max_blocks, a.n_blocks = n_blocks;
  a.softmax_scale = 1.0f / std::sqrt(192.0f);
  return h;
}

// The run tokens' o_lat with the GPU path's roundings, and per element the bound
// 2^-8 * sum_j w_j |v_jc|: one bf16 step of every softmax weight (a weight near a rounding
// boundary may round the other way after the GEMM's f32 sum in another order), plus the f32 sums.
void bf16_reference(const Host& h, std::vector<float>& o, std::vector<double>& tol) {
  const MlaAttentionArgs& a = h.a;
  const int64_t R = a.kv_lora_rank, P = a.rope_dim, D = R + P, H = a.n_heads;
  o.assign(size_t(a.m * H * R), 0.0f);
  tol.assign(o.size(), 0.0);
  const int64_t m_runs = h.runs.back().t1;
  ThreadPool::global().parallel_for(m_runs * H, [&](int64_t b, int64_t e) {
    std::vector<float> q(static_cast<size_t>(D)), w;
    for (int64_t th = b; th < e; ++th) {
      const int64_t t = th / H, hh = th % H, n = a.ctx_len[t];
      for (int64_t c = 0; c < R; ++c) q[size_t(c)] = round_bf16(a.softmax_scale * a.q_lat[(t * H + hh) * R + c]);
      for (int64_t c = 0; c < P; ++c) q[size_t(R + c)] = round_bf16(a.softmax_scale * a.q_pe[(t * H + hh) * P + c]);
      const int32_t* table = a.block_tables + int64_t(a.token_seq[t]) * a.max_blocks_per_seq;
      auto row = [&](int64_t j) { return a.kv + (int64_t(table[j / a.block_size]) * a.block_size + j % a.block_size) * D; };
      w.assign(size_t(n), 0.0f);
      float mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t c = 0; c < D; ++c) s += double(q[size_t(c)]) * round_bf16(row(j)[c]);
        w[size_t(j)] = float(s);
        mx = std::max(mx, w[size_t(j)]);
      }
      double sum = 0;
      for (float v : w) sum += std::exp(double(v) - mx);
      for (int64_t j = 0; j < n; ++j) {
        const double wj = std::exp(double(w[size_t(j)]) - mx) / sum;
        const float wb = round_bf16(float(wj));
        for (int64_t c = 0; c < R; ++c) {
          const float v = round_bf16(row(j)[c]);
          o[size_t(th * R + c)] += wb * v;
          tol[size_t(th * R + c)] += std::ldexp(wj, -8) * std::fabs(v);
        }
      }
      for (int64_t c = 0; c < R; ++c) tol[size_t(th * R + c)] += 1e-6;
    }
  });
}

class MlaPrefillCuda : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(MlaPrefillCuda, MatchesBf16ReferenceAndF32Cosine) {
  PG_REQUIRE_CUDA();
  const PrefillCase& c = GetParam();
  Host h = make(c);
  const MlaAttentionArgs& a = h.a;
  const int64_t R = a.kv_lora_rank, H = a.n_heads, m_runs = h.runs.back().t1;
  std::vector<float> ref;
  std::vector<double> tol;
  bf16_reference(h, ref, tol);
  std::vector<float> f32(static_cast<size_t>(a.m * H * R));
  MlaAttentionArgs fa = a;
  fa.o_lat = f32.data();
  cpu::mla_attention(fa, ThreadPool::global());

  auto dq_lat = to_device(h.q_lat), dq_pe = to_device(h.q_pe), dkv = to_device(h.kv);
  auto dtables = to_device(h.tables), dseq = to_device(h.token_seq);
  auto dctx = to_device(h.ctx_len);
  auto o = cuda::DeviceBuffer<float>::create(size_t(a.m * H * R));
  PG_ASSERT_OK(o.status());
  PG_ASSERT_OK(o->fill_bytes(0xff));
  int64_t max_ctx = 0;
  for (const auto& r : h.runs) max_ctx = std::max(max_ctx, r.start_pos + r.t1 - r.t0);
  const int64_t chunk_rows = (c.ws_tokens ? c.ws_tokens : m_runs) * H;
  auto ws = cuda::DeviceBuffer<uint8_t>::create(cuda::mla_prefill_workspace_bytes(max_ctx, H, R, a.rope_dim, chunk_rows));
  PG_ASSERT_OK(ws.status());
  PG_ASSERT_OK(ws->fill_bytes(0xff));
  auto g = cuda::GemmContext::create(1, 8, 8, 0);
  PG_ASSERT_OK(g.status());
  MlaAttentionArgs da = a;
  da.q_lat = dq_lat.data(), da.q_pe = dq_pe.data(), da.kv = dkv.data(), da.block_tables = dtables.data();
  da.token_seq = dseq.data(), da.ctx_len = dctx.data(), da.o_lat = o->data();
  PG_ASSERT_OK(cuda::mla_prefill(*g, da, h.runs, ws->data(), ws->size(), nullptr));
  ASSERT_TRUE(sync_ok());
  const std::vector<float> got = to_host(*o);

  const int64_t n_run = m_runs * H * R;
  const Diff d = compare(got.data(), ref.data(), n_run, [&](int64_t i) { return tol[size_t(i)]; });
  EXPECT_EQ(d.non_finite, 0) << c.name << ": " << d.summary();
  EXPECT_EQ(d.over_tol, 0) << c.name << ": " << d.summary();
  const Diff df = compare(got.data(), f32.data(), n_run, [](int64_t) { return 1e30; });
  EXPECT_GE(df.cosine, 0.9999) << c.name << " vs the f32 reference: " << df.summary();
  int64_t touched = 0;
  for (int64_t i = n_run; i < int64_t(got.size()); ++i) touched += !is_poison(got[size_t(i)]);
  EXPECT_EQ(touched, 0) << c.name << ": tokens outside the runs were written";
  std::printf("[ mla_prefill ] %-28s vs bf16 ref: %s | vs f32: max_abs %.3g cosine %.8f\n", c.name,
              d.summary().c_str(), df.max_abs, df.cosine);

  // A bf16 pool of the same rows: the gather stages each value's own rounding, so the same bits.
  std::vector<uint16_t> kv16(h.kv.size());
  for (size_t i = 0; i < kv16.size(); ++i) kv16[i] = f32_to_bf16(h.kv[i]);
  auto dkv16 = to_device(kv16);
  MlaAttentionArgs db = da;
  db.kv = nullptr, db.kv_bf16 = dkv16.data();
  PG_ASSERT_OK(o->fill_bytes(0xff));
  PG_ASSERT_OK(cuda::mla_prefill(*g, db, h.runs, ws->data(), ws->size(), nullptr));
  ASSERT_TRUE(sync_ok());
  const std::vector<float> got16 = to_host(*o);
  EXPECT_EQ(std::memcmp(got16.data(), got.data(), got.size() * sizeof(float)), 0) << c.name << ": a bf16 pool's prefill";
}

const PrefillCase kCases[] = {
    {"moonlight_one_run", 16, 512, 64, 64, {{0, 300}}},
    {"moonlight_chunked_two_seqs", 16, 512, 64, 64, {{200, 200}, {0, 96}}, 3},
    {"moonlight_small_workspace", 16, 512, 64, 16, {{37, 250}}, 0, 7},
    {"v3_one_run", 128, 512, 64, 64, {{64, 130}}},
    {"tiny_embedded_dims", 4, 64, 16, 16, {{0, 300}, {120, 64}}},
};
INSTANTIATE_TEST_SUITE_P(Shapes, MlaPrefillCuda, ::testing::ValuesIn(kCases),
                         [](const auto& i) { return std::string(i.param.name); });

TEST(MlaPrefillCudaArgs, BadArgumentsAreStatusNotCrash) {
  PG_REQUIRE_CUDA();
  const PrefillCase c{"args", 4, 64, 16, 16, {{0, 64}}};
  Host h = make(c);
  auto g = cuda::GemmContext::create(1, 8, 8, 0);
  PG_ASSERT_OK(g.status());
  std::vector<cuda::MlaPrefillRun> past{{0, 65, 0, 0}};
  EXPECT_FALSE(cuda::mla_prefill(*g, h.a, past, nullptr, 0, nullptr).ok());  // run past the tokens
  EXPECT_FALSE(cuda::mla_prefill(*g, h.a, h.runs, nullptr, 0, nullptr).ok());  // no workspace
  MlaAttentionArgs odd = h.a;
  odd.kv_lora_rank = 60;
  EXPECT_FALSE(cuda::mla_prefill(*g, odd, h.runs, nullptr, 0, nullptr).ok());  // R not a multiple of 8
  EXPECT_FALSE(cuda::mla_prefill_supported(27, 6));
  EXPECT_TRUE(cuda::mla_prefill_supported(512, 64));
}

}  // namespace
}  // namespace pg::ops::test
