// ops::cuda::mla_attention against ops::cpu::mla_attention on seeded random inputs: moonlight
// (16 heads, R 512, P 64), DeepSeek-V3 (128 heads) and the tiny models' odd dims over paged
// caches with shuffled block tables (block_size 16 and 64); decode at ctx 1..4097, mixed batches,
// speculative verify (consecutive positions of one sequence), a causal prefill of 300 tokens,
// graph bounds (max_ctx above every context), q_lat / q_pe read at strides (q_pe in place inside
// q [m, n_heads, nope + rope]) and a captured graph replayed at other contexts (the fused
// combine's counters return to zero after every launch). Every CUDA case runs on each kernel
// (cuda::MlaCores): the split-KV kernel on the CUDA cores' f32 FMAs and on the tensor cores'
// split-bf16 mmas, and the two-pass kernels (f32 FMAs) where they take the shape.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/common/env.h"
#include "ops/cuda/mla_attention.h"
#include "ops/cuda/mla_attention_params.h"
#include "ops/cuda/mla_ops.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {
namespace {

// Tolerance, derived. Per (token, head) the backends differ in (1) the scores s_j (the D-term
// dot in another order, the scale folded into log2 units on the GPU), (2) the softmax (exp2f
// vs exp, online rescaling over chunks and splits), (3) the order of the weighted sum over the
// n = ctx rows. With Higham & Mary's probabilistic bound (lambda = 10, see linear_test.cpp):
//   (1) |ds_j| <= E = max_j [lambda (sqrt(n_dot_cpu) + sqrt(n_dot_gpu)) u scale sum_d |q_d k_jd| + 4u |s_j|];
//       a shift of every score by at most E moves each softmax weight w_j by at most 2E w_j;
//   (2)+(3) the sums of n terms (weights, outputs, on both sides): 4 lambda sqrt(n) u relative
//       to sum_j w_j |v_jc|, plus 16u for exp2f's 2 ulp, the reciprocal and the rescales.
// So |o_gpu - o_cpu| <= (2E + (4 lambda sqrt(n) + 16) u) sum_j w_j |c_kv[j, c]|, w in double.
// The tensor-core kernel adds, per product of two f32 values split into bf16 pairs, at most
// 3 x 2^-18 of |x y| (the dropped lo·lo and the two pairs' residuals), and the mmas' f32
// accumulation up to 2^-23 per addition into an accumulator (rounding assumed no better than
// truncation, so no sqrt): a chain of 3 ceil(D / 16) mmas for a score (+ 16 inside each),
// 3 ceil(n / 16) for an output; both bounds worst-case, linear in sum |x y|.
constexpr double kLambda = 10.0;
constexpr double kSplitProductUnit = 3.0 / (1 << 18), kMmaAddUnit = 1.0 / (1 << 23);
// A wrong row, head or split shows in the cosine long before the bound.
constexpr double kMinCosine = 1.0 - 1e-6;

struct Seq {
  int64_t len;      // cache rows written for the sequence
  int64_t n_query;  // its last n_query positions are query tokens (ctx_len = pos + 1)
};

struct MlaCase {
  const char* name;
  int64_t n_heads, r, p, block_size;
  std::vector<Seq> seqs;
  int64_t max_ctx = 0;        // 0: the largest ctx_len (else a graph bound above it)
  float softmax_scale = 0.0f;  // 0: 1 / sqrt(192), DeepSeek's qk_head_dim
  float q_amp = 1.0f;         // |q| scale: larger makes the softmax peaky
  double min_cosine = kMinCosine;
  // Strided queries: q_nope >= 0 puts q_pe at column q_nope of per-head rows of q_nope + p floats
  // (as q [m, n_heads, nope + rope] in the model); q_lat_pad adds floats after each head's q_lat.
  int64_t q_nope = -1, q_lat_pad = 0;
};
void PrintTo(const MlaCase& c, std::ostream* os) { *os << c.name; }

// Host inputs of one case; `args` points into them.
struct HostData {
  std::vector<float> q_lat, q_pe, kv;  // q_lat / q_pe at the case's strides
  std::vector<int32_t> tables, token_seq;
  std::vector<int64_t> ctx_len;
  MlaAttentionArgs args;
  int64_t max_ctx = 0;
};

HostData make_data(const MlaCase& c) {
  const uint64_t seed = seed_of(c.name);
  HostData d;
  const int64_t D = c.r + c.p, bs = c.block_size, n_seqs = int64_t(c.seqs.size());
  int64_t max_blocks = 1, used = 0;
  for (const Seq& s : c.seqs) {
    max_blocks = std::max(max_blocks, (s.len + bs - 1) / bs);
    used += (s.len + bs - 1) / bs;
  }
  // A graph bound needs table rows that can address it (the launcher checks max_ctx against
  // block_size x max_blocks_per_seq); the entries past a sequence's own blocks are never read.
  if (c.max_ctx) max_blocks = std::max(max_blocks, (c.max_ctx + bs - 1) / bs);
  const int64_t n_blocks = used + 3;  // spare blocks, NaN: a read of a wrong block shows
  // Physical blocks in shuffled order: sequence i's logical block k -> perm[next++].
  std::vector<int32_t> perm(static_cast<size_t>(n_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
  d.tables.assign(size_t(n_seqs * max_blocks), perm[0]);
  d.kv.assign(size_t(n_blocks * bs * D), std::numeric_limits<float>::quiet_NaN());
  size_t next = 0;
  for (int64_t i = 0; i < n_seqs; ++i) {
    const Seq& s = c.seqs[size_t(i)];
    for (int64_t k = 0; k < (s.len + bs - 1) / bs; ++k) d.tables[size_t(i * max_blocks + k)] = perm[next++];
    ThreadPool::global().parallel_for(s.len, [&](int64_t jb, int64_t je) {  // rows past len stay NaN: never read
      for (int64_t j = jb; j < je; ++j) {
        float* row = &d.kv[size_t((int64_t(d.tables[size_t(i * max_blocks + j / bs)]) * bs + j % bs) * D)];
        for (int64_t e = 0; e < D; ++e) row[e] = uniform_pm1(seed + 1, uint64_t((i << 40) + j * D + e));
      }
    }, 256);
    for (int64_t q = 0; q < s.n_query; ++q) {
      d.token_seq.push_back(int32_t(i));
      d.ctx_len.push_back(s.len - s.n_query + q + 1);
    }
  }
  const int64_t m = int64_t(d.ctx_len.size());
  // Padding between strided heads is NaN: a read outside a head's q shows.
  const int64_t ql_hs = c.r + c.q_lat_pad, qp_hs = c.q_nope >= 0 ? c.q_nope + c.p : c.p;
  const int64_t qp_off = c.q_nope >= 0 ? c.q_nope : 0;
  d.q_lat.assign(size_t(m * c.n_heads * ql_hs), std::numeric_limits<float>::quiet_NaN());
  d.q_pe.assign(size_t(m * c.n_heads * qp_hs + qp_off), std::numeric_limits<float>::quiet_NaN());
  for (int64_t th = 0; th < m * c.n_heads; ++th) {
    for (int64_t e = 0; e < c.r; ++e) d.q_lat[size_t(th * ql_hs + e)] = c.q_amp * uniform_pm1(seed + 2, uint64_t(th * c.r + e));
    for (int64_t e = 0; e < c.p; ++e)
      d.q_pe[size_t(qp_off + th * qp_hs + e)] = c.q_amp * uniform_pm1(seed + 3, uint64_t(th * c.p + e));
  }
  d.max_ctx = c.max_ctx ? c.max_ctx : *std::max_element(d.ctx_len.begin(), d.ctx_len.end());

  MlaAttentionArgs& a = d.args;
  a.q_lat = d.q_lat.data(), a.q_pe = d.q_pe.data() + qp_off, a.kv = d.kv.data(), a.block_tables = d.tables.data();
  if (c.q_lat_pad) a.q_lat_head_stride = ql_hs, a.q_lat_row_stride = c.n_heads * ql_hs;
  if (c.q_nope >= 0) a.q_pe_head_stride = qp_hs, a.q_pe_row_stride = c.n_heads * qp_hs;
  a.token_seq = d.token_seq.data(), a.ctx_len = d.ctx_len.data();
  a.m = m, a.n_heads = c.n_heads, a.kv_lora_rank = c.r, a.rope_dim = c.p;
  a.block_size = bs, a.max_blocks_per_seq = max_blocks, a.n_blocks = n_blocks;
  a.softmax_scale = c.softmax_scale != 0.0f ? c.softmax_scale : 1.0f / std::sqrt(192.0f);
  return d;
}

// Per-element tolerance of o_lat [m, n_heads, R] (see the derivation above), from double scores.
std::vector<double> tolerances(const MlaAttentionArgs& a, cuda::MlaCores cores) {
  const int64_t R = a.kv_lora_rank, P = a.rope_dim, D = R + P, H = a.n_heads;
  const double u = kF32Unit, scale = a.softmax_scale;
  const bool tc = cores == cuda::MlaCores::kTensor;
  const double tc_dot = tc ? kSplitProductUnit + (3 * std::ceil(double(D) / 16) + 16) * kMmaAddUnit : 0.0;
  const double n_dot_cpu = std::ceil(double(R) / 16) + std::ceil(double(P) / 16) + 10;
  const double n_dot_gpu = 4 * std::ceil(std::ceil(double(D) / 4) / 16) + 12;
  const double dot_bound = kLambda * (std::sqrt(n_dot_cpu) + std::sqrt(n_dot_gpu)) * u * scale;
  std::vector<double> tol(static_cast<size_t>(a.m * H * R));
  ThreadPool::global().parallel_for(a.m * H, [&](int64_t b, int64_t e) {
    std::vector<double> s, absdot;
    for (int64_t th = b; th < e; ++th) {
      const int64_t t = th / H, n = a.ctx_len[t];
      const int32_t* table = a.block_tables + int64_t(a.token_seq[t]) * a.max_blocks_per_seq;
      const float* ql = a.q_lat + t * q_lat_row_stride(a) + (th % H) * q_lat_head_stride(a);
      const float* qp = a.q_pe + t * q_pe_row_stride(a) + (th % H) * q_pe_head_stride(a);
      auto row_of = [&](int64_t j) { return a.kv + (int64_t(table[j / a.block_size]) * a.block_size + j % a.block_size) * D; };
      s.assign(size_t(n), 0.0);
      double mx = -1e300, E = 0;
      for (int64_t j = 0; j < n; ++j) {
        const float* row = row_of(j);
        double dot = 0, ad = 0;
        for (int64_t c = 0; c < R; ++c) dot += double(ql[c]) * row[c], ad += std::fabs(double(ql[c]) * row[c]);
        for (int64_t c = 0; c < P; ++c) dot += double(qp[c]) * row[R + c], ad += std::fabs(double(qp[c]) * row[R + c]);
        s[size_t(j)] = dot * scale;
        mx = std::max(mx, s[size_t(j)]);
        E = std::max(E, (dot_bound + tc_dot * scale) * ad + 4 * u * std::fabs(s[size_t(j)]));
      }
      double sum = 0;
      for (double& v : s) sum += (v = std::exp(v - mx));
      const double tc_pv = tc ? kSplitProductUnit + (3 * std::ceil(double(n) / 16) + 16) * kMmaAddUnit : 0.0;
      const double rel = 2 * E + (4 * kLambda * std::sqrt(double(n)) + 16) * u + tc_pv;
      double* out = &tol[size_t(th * R)];
      std::fill(out, out + R, 0.0);
      for (int64_t j = 0; j < n; ++j) {
        const float* row = row_of(j);
        const double w = s[size_t(j)] / sum;
        for (int64_t c = 0; c < R; ++c) out[c] += w * std::fabs(double(row[c]));
      }
      for (int64_t c = 0; c < R; ++c) out[c] *= rel;
    }
  });
  return tol;
}

// Device copies of a case's inputs and a poisoned output and workspace.
struct DeviceData {
  cuda::DeviceBuffer<float> q_lat, q_pe, kv, o_lat, ws;
  cuda::DeviceBuffer<int32_t> tables, token_seq;
  cuda::DeviceBuffer<int64_t> ctx_len;
  MlaAttentionArgs args;
};

DeviceData upload_case(const HostData& h, int64_t max_ctx) {
  DeviceData d;
  d.q_lat = to_device(h.q_lat), d.q_pe = to_device(h.q_pe), d.kv = to_device(h.kv);
  d.tables = to_device(h.tables), d.token_seq = to_device(h.token_seq), d.ctx_len = to_device(h.ctx_len);
  const MlaAttentionArgs& a = h.args;
  auto o = cuda::DeviceBuffer<float>::create(size_t(a.m * a.n_heads * a.kv_lora_rank));
  EXPECT_TRUE(o.ok());
  if (o.ok()) d.o_lat = std::move(o).value();
  EXPECT_TRUE(d.o_lat.fill_bytes(0xff).ok());
  const size_t ws = cuda::mla_attention_workspace_floats(a.m, a.n_heads, a.kv_lora_rank, max_ctx);
  auto w = cuda::DeviceBuffer<float>::create(ws);
  EXPECT_TRUE(w.ok());
  if (w.ok()) d.ws = std::move(w).value();
  EXPECT_TRUE(d.ws.fill_bytes(0xff).ok());  // partials are written before they are read
  EXPECT_TRUE(cuda::mla_attention_workspace_init(d.ws.data(), d.ws.size(), nullptr).ok());  // counters only
  // Done on the device when it returns: the tests launch on non-blocking streams too, which do not
  // wait for the legacy stream's memsets (0xff counters read by a launch write past their group).
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  d.args = a;
  d.args.q_lat = d.q_lat.data(), d.args.kv = d.kv.data();
  d.args.q_pe = d.q_pe.data() + (a.q_pe - h.q_pe.data());
  d.args.block_tables = d.tables.data(), d.args.token_seq = d.token_seq.data(), d.args.ctx_len = d.ctx_len.data();
  d.args.o_lat = d.o_lat.data();
  return d;
}

std::vector<float> cpu_reference(const HostData& h) {
  std::vector<float> o(static_cast<size_t>(h.args.m * h.args.n_heads * h.args.kv_lora_rank));
  MlaAttentionArgs a = h.args;
  a.o_lat = o.data();
  EXPECT_TRUE(validate(a).ok());
  cpu::mla_attention(a, ThreadPool::global());
  return o;
}

void expect_close(const char* what, const std::vector<float>& got, const std::vector<float>& ref,
                  const std::vector<double>& tol, double min_cosine) {
  const Diff d = compare(got.data(), ref.data(), int64_t(got.size()), [&](int64_t i) { return tol[size_t(i)]; });
  EXPECT_EQ(d.non_finite, 0) << what << ": unwritten or non-finite outputs: " << d.summary();
  EXPECT_EQ(d.over_tol, 0) << what << ": " << d.summary();
  EXPECT_GE(d.cosine, min_cosine) << what << ": " << d.summary();
  std::printf("[ mla_attn ] %-34s %s\n", what, d.summary().c_str());
}

const char* cores_name(cuda::MlaCores c) {
  return c == cuda::MlaCores::kTensor ? "tc" : c == cuda::MlaCores::kCudaTwoPass ? "tp" : "cc";
}
// The two-pass kernels take <= 16 heads and m x n_heads <= 64 (else the launcher falls back to
// a split-KV kernel, which its own instantiation already tests).
bool skip_two_pass(cuda::MlaCores c, const MlaAttentionArgs& a) {
  return c == cuda::MlaCores::kCudaTwoPass && !cuda::mla_two_pass_fits(a.m, a.n_heads);
}

class MlaAttentionCuda : public ::testing::TestWithParam<std::tuple<MlaCase, cuda::MlaCores>> {};

TEST_P(MlaAttentionCuda, MatchesCpu) {
  PG_REQUIRE_CUDA();
  const auto& [c, cores] = GetParam();
  const HostData h = make_data(c);
  if (skip_two_pass(cores, h.args)) GTEST_SKIP() << c.name << ": outside the two-pass kernels' shapes";
  const std::vector<float> ref = cpu_reference(h);
  const std::vector<double> tol = tolerances(h.args, cores);
  DeviceData d = upload_case(h, h.max_ctx);
  PG_ASSERT_OK(cuda::mla_attention(d.args, h.max_ctx, d.ws.data(), d.ws.size(), nullptr, cores));
  ASSERT_TRUE(sync_ok());
  const std::string what = std::string(c.name) + " " + cores_name(cores);
  expect_close(what.c_str(), to_host(d.o_lat), ref, tol, c.min_cosine);
  // Again on the same workspace: the first launch left the combine's counters at zero.
  PG_ASSERT_OK(d.o_lat.fill_bytes(0xff));
  PG_ASSERT_OK(cuda::mla_attention(d.args, h.max_ctx, d.ws.data(), d.ws.size(), nullptr, cores));
  ASSERT_TRUE(sync_ok());
  const std::string again = what + " (2nd launch)";
  expect_close(again.c_str(), to_host(d.o_lat), ref, tol, c.min_cosine);
}

constexpr int64_t kMoonH = 16, kV3H = 128, kR = 512, kP = 64;

const MlaCase kCases[] = {
    // Decode, batch 1.
    {"moonlight_ctx1", kMoonH, kR, kP, 64, {{1, 1}}},
    {"moonlight_ctx17", kMoonH, kR, kP, 16, {{17, 1}}},
    {"moonlight_ctx1000", kMoonH, kR, kP, 64, {{1000, 1}}},
    {"moonlight_ctx4097", kMoonH, kR, kP, 16, {{4097, 1}}},
    {"v3_ctx1", kV3H, kR, kP, 64, {{1, 1}}},
    {"v3_ctx17", kV3H, kR, kP, 16, {{17, 1}}},
    {"v3_ctx1000", kV3H, kR, kP, 16, {{1000, 1}}},
    {"v3_ctx4097", kV3H, kR, kP, 64, {{4097, 1}}},
    {"tiny3_ctx1", 3, 27, 6, 16, {{1, 1}}},
    {"tiny3_ctx1000", 3, 27, 6, 16, {{1000, 1}}},
    {"tiny4_ctx17", 4, 32, 8, 64, {{17, 1}}},
    {"tiny4_ctx4097", 4, 32, 8, 16, {{4097, 1}}},
    // Several sequences of different lengths in one call.
    {"moonlight_batch5", kMoonH, kR, kP, 16, {{1, 1}, {17, 1}, {1000, 1}, {4097, 1}, {300, 1}}},
    {"v3_batch3", kV3H, kR, kP, 64, {{33, 1}, {2048, 1}, {5, 1}}},
    {"tiny3_batch4", 3, 27, 6, 16, {{2, 1}, {100, 1}, {31, 1}, {64, 1}}},
    // Speculative verify: consecutive positions of one sequence (and of two).
    {"moonlight_verify5", kMoonH, kR, kP, 16, {{1000, 5}}},
    {"v3_verify5", kV3H, kR, kP, 64, {{2000, 5}}},
    {"moonlight_verify_two_seqs", kMoonH, kR, kP, 64, {{700, 5}, {64, 3}}},
    {"tiny4_verify5", 4, 32, 8, 16, {{50, 5}}},
    // Batch 64 decode (one split per token pair; no combine for short contexts).
    {"moonlight_batch64",
     kMoonH, kR, kP, 16,
     [] {
       std::vector<Seq> v;
       for (int i = 0; i < 64; ++i) v.push_back({1 + 37 * i, 1});
       return v;
     }()},
    // Causal prefill.
    {"moonlight_prefill300", kMoonH, kR, kP, 16, {{300, 300}}},
    {"tiny3_prefill300", 3, 27, 6, 64, {{300, 300}}},
    {"moonlight_prefill_two_seqs", kMoonH, kR, kP, 64, {{150, 150}, {100, 100}}},
    {"v3_prefill40", kV3H, kR, kP, 16, {{40, 40}}},
    // Graph bounds: the grid and workspace sized for max_ctx, the contexts far below it.
    {"moonlight_bound32k_ctx1000", kMoonH, kR, kP, 64, {{1000, 1}}, 32768},
    {"moonlight_bound8k_batch2", kMoonH, kR, kP, 16, {{17, 1}, {200, 1}}, 8192},
    {"v3_bound16k_ctx100", kV3H, kR, kP, 64, {{100, 1}}, 16384},
    {"tiny3_bound4k_verify3", 3, 27, 6, 16, {{10, 3}}, 4096},
    // Strided queries: q_pe in place in q [m, n_heads, nope + rope] (aligned nope: the float4
    // path; odd nope: the scalar path), q_lat with padded heads.
    {"moonlight_qstride_ctx1000", kMoonH, kR, kP, 64, {{1000, 1}}, 0, 0.0f, 1.0f, kMinCosine, 128, 4},
    {"v3_qstride_ctx1024", kV3H, kR, kP, 64, {{1024, 1}}, 0, 0.0f, 1.0f, kMinCosine, 128},
    {"moonlight_qstride_verify5", kMoonH, kR, kP, 16, {{600, 5}}, 4096, 0.0f, 1.0f, kMinCosine, 128},
    {"moonlight_qstride_odd", kMoonH, kR, kP, 64, {{777, 2}}, 0, 0.0f, 1.0f, kMinCosine, 3, 1},
    {"tiny3_qstride_ctx200", 3, 27, 6, 16, {{200, 1}}, 0, 0.0f, 1.0f, kMinCosine, 11, 2},
    {"tiny3_qstride_prefill50", 3, 27, 6, 16, {{50, 50}}, 0, 0.0f, 1.0f, kMinCosine, 11},
    // The timing shape (batch 1, ctx 1024, block 64) and a split of many short rows.
    {"moonlight_ctx1024", kMoonH, kR, kP, 64, {{1024, 1}}},
    {"v3_ctx1024", kV3H, kR, kP, 64, {{1024, 1}}},
    {"moonlight_ctx8192", kMoonH, kR, kP, 64, {{8192, 1}}},
    {"v3_batch8_ctx4096", kV3H, kR, kP, 64, {{4096, 1}, {4000, 1}, {3000, 1}, {100, 1}, {1, 1}, {2, 1}, {4095, 1}, {64, 1}}},
    {"moonlight_batch2_ctx1500", kMoonH, kR, kP, 64, {{1500, 1}, {1499, 1}}},
    {"tiny4_batch8_bound1k", 4, 32, 8, 16, {{100, 1}, {200, 1}, {3, 1}, {999, 1}, {31, 1}, {32, 1}, {33, 1}, {1000, 1}}, 1024},
    // Stability: scores of +-hundreds (exp would overflow without the max); tolerance scales with them.
    {"moonlight_peaky_ctx1000", kMoonH, kR, kP, 64, {{1000, 1}}, 0, 8.0f, 1.0f, 1.0 - 1e-4},
    {"moonlight_sharp_ctx4097", kMoonH, kR, kP, 16, {{4097, 1}}, 0, 0.0f, 6.0f},
};

INSTANTIATE_TEST_SUITE_P(Cases, MlaAttentionCuda,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Values(cuda::MlaCores::kCuda, cuda::MlaCores::kTensor,
                                                              cuda::MlaCores::kCudaTwoPass)),
                         [](const ::testing::TestParamInfo<std::tuple<MlaCase, cuda::MlaCores>>& i) {
                           return std::string(std::get<0>(i.param).name) + "_" + cores_name(std::get<1>(i.param));
                         });

// The deferred form: the attention leaves its split partials and W_UV's kernel combines them
// (mla_attention's defer_to, head_linear_combine). y = W_UV · o_lat against W_UV · (the CPU's
// o_lat) in double: per output r, sum_c |W_rc| tol_o[c] (the attention's bound, carried through
// the GEMV) plus the GEMV's own rounding, lambda sqrt(n_gpu) u sum_c |W_rc o_c| with n_gpu = 8 +
// k/8 + 5 roundings (mla_ops_test.cpp's head_linear bound, one side). Then again at shorter
// contexts on the same workspace: the longer run's partials sit in the splits past the new
// contexts' active ones and must not be read.
struct DeferCase {
  MlaCase c;
  HeadWeight format;
  bool deferred;     // whether the plan takes the deferred form (more than one split)
  int64_t v = 128;   // W_UV's rows a head (v_head_dim)
};
void PrintTo(const DeferCase& d, std::ostream* os) { *os << d.c.name; }

class MlaAttentionDeferredCuda : public ::testing::TestWithParam<DeferCase> {};

TEST_P(MlaAttentionDeferredCuda, MatchesCpu) {
  PG_REQUIRE_CUDA();
  const DeferCase& dc = GetParam();
  const MlaCase& c = dc.c;
  HostData h = make_data(c);
  const int64_t m = h.args.m, H = c.n_heads, R = c.r, V = dc.v;
  const uint64_t seed = seed_of(std::string(c.name) + "_w_uv");
  // W_UV [H, V, R] in the case's format, and its f32 values.
  std::vector<float> wf(size_t(H * V * R));
  std::vector<uint16_t> wb;
  std::vector<uint8_t> wq;
  std::vector<float> wscale;
  const int64_t kGroup = std::min<int64_t>(128, R);  // FP8: columns per scale (R is a power of two here)
  if (dc.format == HeadWeight::kBF16) {
    wb.resize(wf.size());
    for (size_t i = 0; i < wb.size(); ++i) wf[i] = bf16_to_f32(wb[i] = f32_to_bf16(uniform_pm1(seed, i)));
  } else if (dc.format == HeadWeight::kFp8) {
    wq.resize(wf.size()), wscale.resize(size_t(H * V * (R / kGroup)));
    for (size_t i = 0; i < wq.size(); ++i) {  // finite e4m3 codes
      const uint8_t b = uint8_t(splitmix64(seed + i) >> 56);
      wq[i] = (b & 0x7f) == 0x7f ? uint8_t(b ^ 1) : b;
    }
    for (size_t i = 0; i < wscale.size(); ++i) wscale[i] = std::exp2(-8.0f + 2.0f * uniform_pm1(seed + 5, i));
    for (size_t i = 0; i < wq.size(); ++i) wf[i] = f8e4m3_to_f32(wq[i]) * wscale[i / R * (R / kGroup) + i % R / kGroup];
  } else {
    for (size_t i = 0; i < wf.size(); ++i) wf[i] = uniform_pm1(seed, i);
  }
  auto dwf = to_device(wf);
  auto dwb = wb.empty() ? cuda::DeviceBuffer<uint16_t>() : to_device(wb);
  auto dwq = wq.empty() ? cuda::DeviceBuffer<uint8_t>() : to_device(wq);
  auto dws = wscale.empty() ? cuda::DeviceBuffer<float>() : to_device(wscale);
  auto dy = poisoned<float>(size_t(m * H * V));

  DeviceData d = upload_case(h, h.max_ctx);
  HeadLinearArgs uv;
  uv.x = d.o_lat.data(), uv.x_row_stride = H * R, uv.x_head_stride = R, uv.w_format = dc.format;
  uv.w = dc.format == HeadWeight::kBF16 ? static_cast<const void*>(dwb.data())
         : dc.format == HeadWeight::kFp8 ? static_cast<const void*>(dwq.data())
                                         : dwf.data();
  if (dc.format == HeadWeight::kFp8) uv.w_scale = dws.data(), uv.scale_group = kGroup;
  uv.y = dy.data(), uv.y_row_stride = H * V, uv.y_head_stride = V, uv.m = m, uv.n_heads = H, uv.n = V, uv.k = R;
  ASSERT_TRUE(cuda::head_linear_combine_ok(uv)) << c.name;

  // The CUDA-core kernel, then the tensor-core one (its plan splits these contexts as the CUDA-core
  // one does: more than one split where that has). Each defers only in its vector instantiation
  // (PEREGRINE_ATTENTION_VEC=0 takes the one with the scalar fallbacks, which combines in the
  // kernel), the CUDA-core one only in its lean form (PEREGRINE_ATTENTION_LEAN), the tensor-core one
  // unless PEREGRINE_ATTENTION_DEFER_TC=0: the gated runs of those paths check that they combine.
  auto run_and_check = [&](const char* tag, cuda::MlaCores cores) {
    const bool tc = cores == cuda::MlaCores::kTensor;
    const bool defers = cuda::attention_vec_kernel() && (tc ? cuda::attention_defer_tc() : cuda::attention_lean_kernel());
    cuda::MlaPartials parts;
    PG_ASSERT_OK(cuda::mla_attention(d.args, h.max_ctx, d.ws.data(), d.ws.size(), nullptr, cores, &parts));
    ASSERT_EQ(parts.deferred, dc.deferred && defers)
        << c.name << (tc ? " (tensor cores)" : "") << ": the plan's deferred form";
    PG_ASSERT_OK(dy.fill_bytes(0xff));
    PG_ASSERT_OK(parts.deferred ? cuda::head_linear_combine(uv, parts, nullptr) : cuda::head_linear(uv, nullptr));
    ASSERT_TRUE(sync_ok());
    const std::vector<float> y = to_host(dy);
    const std::vector<float> o = cpu_reference(h);
    const std::vector<double> tol_o = tolerances(h.args, cores);
    std::vector<float> ref(y.size());
    std::vector<double> tol(y.size());
    const double n_gpu = 8 + std::ceil(double(R) / 8) + 5;
    ThreadPool::global().parallel_for(m * H * V, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t t = i / (H * V), hh = i / V % H, r = i % V;
        const float* w = &wf[size_t((hh * V + r) * R)];
        const float* x = &o[size_t((t * H + hh) * R)];
        const double* tx = &tol_o[size_t((t * H + hh) * R)];
        double y_ref = 0, carried = 0, absdot = 0;
        for (int64_t k = 0; k < R; ++k) {
          y_ref += double(w[k]) * x[k];
          carried += std::fabs(double(w[k])) * tx[k];
          absdot += std::fabs(double(w[k]) * x[k]);
        }
        ref[size_t(i)] = float(y_ref);
        tol[size_t(i)] = carried + kLambda * std::sqrt(n_gpu) * kF32Unit * absdot + kF32Unit * std::fabs(y_ref);
      }
    }, 64);
    const std::string what = std::string(c.name) + (tc ? " tensor cores" : "") + " deferred " + tag;
    expect_close(what.c_str(), y, ref, tol, c.min_cosine);
  };
  for (cuda::MlaCores cores : {cuda::MlaCores::kCuda, cuda::MlaCores::kTensor}) run_and_check("", cores);
  // Shorter contexts on the same workspace (a third of each, at least 1).
  for (int64_t& n : h.ctx_len) n = std::max<int64_t>(1, n / 3);
  h.args.ctx_len = h.ctx_len.data();
  PG_ASSERT_OK(d.ctx_len.upload(h.ctx_len.data(), h.ctx_len.size()));
  for (cuda::MlaCores cores : {cuda::MlaCores::kCuda, cuda::MlaCores::kTensor})
    run_and_check("(shorter contexts)", cores);
}

const DeferCase kDeferCases[] = {
    {{"moonlight_ctx1000", kMoonH, kR, kP, 64, {{1000, 1}}}, HeadWeight::kBF16, true},
    {{"moonlight_ctx1024", kMoonH, kR, kP, 64, {{1024, 1}}}, HeadWeight::kFp8, true},
    {{"moonlight_ctx4097", kMoonH, kR, kP, 16, {{4097, 1}}}, HeadWeight::kBF16, true},
    {{"moonlight_ctx17", kMoonH, kR, kP, 16, {{17, 1}}}, HeadWeight::kBF16, false},  // one split: no deferral
    {{"moonlight_bound32k_ctx1000", kMoonH, kR, kP, 64, {{1000, 1}}, 32768}, HeadWeight::kF32, true},
    {{"moonlight_bound8k_batch2", kMoonH, kR, kP, 16, {{17, 1}, {200, 1}}, 8192}, HeadWeight::kBF16, true},
    {{"moonlight_verify5", kMoonH, kR, kP, 16, {{1000, 5}}}, HeadWeight::kBF16, true},
    {{"moonlight_verify_two_seqs", kMoonH, kR, kP, 64, {{700, 5}, {64, 3}}}, HeadWeight::kFp8, true},
    {{"moonlight_peaky_ctx1000", kMoonH, kR, kP, 64, {{1000, 1}}, 0, 8.0f, 1.0f, 1.0 - 1e-4}, HeadWeight::kBF16, true},
    {{"v3_ctx1000", kV3H, kR, kP, 16, {{1000, 1}}}, HeadWeight::kBF16, true},
    {{"v3_batch3", kV3H, kR, kP, 64, {{33, 1}, {2048, 1}, {5, 1}}}, HeadWeight::kFp8, true},
    // The embedded and golden models' dims: blocks of W_UV rows that span several heads.
    {{"tiny4_r64_ctx1000", 4, 64, 16, 16, {{1000, 1}}}, HeadWeight::kBF16, true, 32},
    {{"tiny4_r32_verify4", 4, 32, 8, 64, {{300, 4}}}, HeadWeight::kF32, true, 16},
    {{"tiny4_r32_batch3", 4, 32, 8, 16, {{40, 1}, {7, 1}, {129, 1}}}, HeadWeight::kFp8, true, 16},
};

INSTANTIATE_TEST_SUITE_P(Cases, MlaAttentionDeferredCuda, ::testing::ValuesIn(kDeferCases),
                         [](const ::testing::TestParamInfo<DeferCase>& i) {
                           return std::string(i.param.c.name) + (i.param.format == HeadWeight::kBF16  ? "_bf16"
                                                                 : i.param.format == HeadWeight::kFp8 ? "_fp8"
                                                                                                      : "_f32");
                         });

// A bf16 cache pool (MlaAttentionArgs::kv_bf16) gives the bits of the f32 pool that holds its values
// widened: the kernels stage the same f32 rows in shared memory (KvBf16Stage) and run the same code
// after. Both kernels, with the combine in the kernel and deferred (the partials compared), one chunk
// a split and several (ctx 8192, the prefill), the 2-byte loads (tiny3: D = 33), verify steps and
// batches. The two-pass kernels refuse a bf16 pool.
class MlaAttentionBf16PoolCuda : public ::testing::TestWithParam<std::tuple<MlaCase, cuda::MlaCores>> {};

TEST_P(MlaAttentionBf16PoolCuda, SameBitsAsItsF32Values) {
  PG_REQUIRE_CUDA();
  const auto& [c, cores] = GetParam();
  HostData h = make_data(c);
  std::vector<uint16_t> kv16(h.kv.size());
  for (size_t i = 0; i < kv16.size(); ++i) h.kv[i] = bf16_to_f32(kv16[i] = f32_to_bf16(h.kv[i]));  // NaN stays NaN
  DeviceData d = upload_case(h, h.max_ctx);
  auto dkv16 = to_device(kv16);
  MlaAttentionArgs b = d.args;
  b.kv = nullptr, b.kv_bf16 = dkv16.data();
  // o_lat and the workspace after one launch, both poisoned before it (the counters zeroed).
  auto run = [&](const MlaAttentionArgs& a, bool defer, bool& deferred) {
    EXPECT_TRUE(d.o_lat.fill_bytes(0xff).ok());
    EXPECT_TRUE(d.ws.fill_bytes(0xff).ok());
    EXPECT_TRUE(cuda::mla_attention_workspace_init(d.ws.data(), d.ws.size(), nullptr).ok());
    cuda::MlaPartials parts;
    EXPECT_TRUE(cuda::mla_attention(a, h.max_ctx, d.ws.data(), d.ws.size(), nullptr, cores, defer ? &parts : nullptr).ok());
    EXPECT_TRUE(sync_ok());
    deferred = parts.deferred;
    return std::make_pair(to_host(d.o_lat), to_host(d.ws));
  };
  for (bool defer : {false, true}) {
    bool deferred_f = false, deferred_b = false;
    const auto [of, wf] = run(d.args, defer, deferred_f);
    const auto [ob, wb] = run(b, defer, deferred_b);
    ASSERT_EQ(deferred_b, deferred_f) << c.name << ": the same plan";
    const std::string what = std::string(c.name) + " " + cores_name(cores) + (deferred_f ? " deferred" : "");
    EXPECT_EQ(std::memcmp(ob.data(), of.data(), of.size() * sizeof(float)), 0) << what << ": o_lat differs";
    EXPECT_EQ(std::memcmp(wb.data(), wf.data(), wf.size() * sizeof(float)), 0) << what << ": the partials differ";
    if (!deferred_f) {  // written, and near the CPU's (a wrong row in both pools would not show above)
      const Diff diff = compare(of.data(), cpu_reference(h).data(), int64_t(of.size()), [](int64_t) { return 1e30; });
      EXPECT_EQ(diff.non_finite, 0) << what << ": " << diff.summary();
      EXPECT_GE(diff.cosine, c.min_cosine) << what << ": " << diff.summary();
    }
    std::printf("[ mla_attn ] %-34s bf16 pool: the f32 pool's bits\n", what.c_str());
  }
  Status tp = cuda::mla_attention(b, h.max_ctx, d.ws.data(), d.ws.size(), nullptr, cuda::MlaCores::kCudaTwoPass);
  if (cuda::mla_two_pass_fits(b.m, b.n_heads)) {
    EXPECT_FALSE(tp.ok()) << c.name << ": two passes over a bf16 pool";
  }
}

const MlaCase kBf16PoolCases[] = {
    {"moonlight_ctx1000", kMoonH, kR, kP, 64, {{1000, 1}}},
    {"moonlight_ctx4097", kMoonH, kR, kP, 16, {{4097, 1}}},
    {"moonlight_ctx8192", kMoonH, kR, kP, 64, {{8192, 1}}},
    {"v3_ctx1024", kV3H, kR, kP, 64, {{1024, 1}}},
    {"v3_verify5", kV3H, kR, kP, 64, {{2000, 5}}},
    {"moonlight_verify5", kMoonH, kR, kP, 16, {{1000, 5}}},
    {"moonlight_batch5", kMoonH, kR, kP, 16, {{1, 1}, {17, 1}, {1000, 1}, {4097, 1}, {300, 1}}},
    {"moonlight_bound32k_ctx1000", kMoonH, kR, kP, 64, {{1000, 1}}, 32768},
    {"moonlight_prefill300", kMoonH, kR, kP, 16, {{300, 300}}},
    {"tiny3_ctx1000", 3, 27, 6, 16, {{1000, 1}}},
    {"tiny3_batch4", 3, 27, 6, 16, {{2, 1}, {100, 1}, {31, 1}, {64, 1}}},
    {"tiny4_verify5", 4, 32, 8, 16, {{50, 5}}},
};

INSTANTIATE_TEST_SUITE_P(Cases, MlaAttentionBf16PoolCuda,
                         ::testing::Combine(::testing::ValuesIn(kBf16PoolCases),
                                            ::testing::Values(cuda::MlaCores::kCuda, cuda::MlaCores::kTensor)),
                         [](const ::testing::TestParamInfo<std::tuple<MlaCase, cuda::MlaCores>>& i) {
                           return std::string(std::get<0>(i.param).name) + "_" + cores_name(std::get<1>(i.param));
                         });

// One capture with a bound, replayed with the device-side ctx_len changed: the graph stays valid.
class MlaAttentionCudaGraph : public ::testing::TestWithParam<cuda::MlaCores> {};

TEST_P(MlaAttentionCudaGraph, ReplayAtOtherContexts) {
  PG_REQUIRE_CUDA();
  const cuda::MlaCores cores = GetParam();
  MlaCase c{"graph_replay", kMoonH, kR, kP, 16, {{3000, 1}, {700, 1}}, 4096};
  HostData h = make_data(c);
  DeviceData d = upload_case(h, c.max_ctx);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status s = cuda::mla_attention(d.args, c.max_ctx, d.ws.data(), d.ws.size(), stream, cores);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  PG_ASSERT_OK(s);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  const std::vector<std::vector<int64_t>> contexts = {{3000, 700}, {1, 4}, {2999, 33}, {64, 65}};
  for (const auto& ctx : contexts) {
    h.ctx_len = ctx;
    h.args.ctx_len = h.ctx_len.data();
    PG_ASSERT_OK(d.ctx_len.upload(ctx.data(), ctx.size()));
    PG_ASSERT_OK(d.o_lat.fill_bytes(0xff));
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const std::string what =
        "graph_replay " + std::string(cores_name(cores)) + " ctx " + std::to_string(ctx[0]) + "," + std::to_string(ctx[1]);
    expect_close(what.c_str(), to_host(d.o_lat), cpu_reference(h), tolerances(h.args, cores), kMinCosine);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Cores, MlaAttentionCudaGraph,
                         ::testing::Values(cuda::MlaCores::kCuda, cuda::MlaCores::kTensor, cuda::MlaCores::kCudaTwoPass),
                         [](const ::testing::TestParamInfo<cuda::MlaCores>& i) { return std::string(cores_name(i.param)); });

// Bad arguments come back as a Status naming the problem, before anything touches the device.
TEST(MlaAttentionCudaValidate, RejectsBadArguments) {
  float f = 0;
  int32_t i32 = 0;
  int64_t i64 = 1;
  MlaAttentionArgs a;
  a.q_lat = &f, a.q_pe = &f, a.kv = &f, a.block_tables = &i32, a.token_seq = &i32, a.ctx_len = &i64, a.o_lat = &f;
  a.m = 1, a.n_heads = 16, a.kv_lora_rank = 512, a.rope_dim = 64, a.block_size = 16, a.max_blocks_per_seq = 4;
  a.n_blocks = 8;

  MlaAttentionArgs b = a;
  b.q_pe = nullptr;
  Status s = cuda::mla_attention(b, 64, nullptr, 0, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.to_string().find("null"), std::string::npos) << s.to_string();

  b = a;
  b.rope_dim = 0;
  s = cuda::mla_attention(b, 64, nullptr, 0, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.to_string().find("dims"), std::string::npos) << s.to_string();

  s = cuda::mla_attention(a, 65, nullptr, 0, nullptr);  // bound past the block table's 64 rows
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.to_string().find("max_ctx"), std::string::npos) << s.to_string();

  b = a;
  b.kv_lora_rank = 1024;
  s = cuda::mla_attention(b, 64, nullptr, 0, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.to_string().find("kv_lora_rank"), std::string::npos) << s.to_string();

  b = a;
  b.q_pe_head_stride = 32;  // < rope_dim: heads overlap
  s = cuda::mla_attention(b, 64, nullptr, 0, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.to_string().find("head strides"), std::string::npos) << s.to_string();

  b = a;
  b.q_pe_head_stride = 192, b.q_pe_row_stride = 15 * 192;  // the last head runs into the next row
  s = cuda::mla_attention(b, 64, nullptr, 0, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.to_string().find("row strides"), std::string::npos) << s.to_string();

  // Batch 1 at 64 rows splits (at least 2 chunks of 32), so it needs a workspace.
  ASSERT_GT(cuda::mla_attention_workspace_floats(1, 16, 512, 64), 0u);
  s = cuda::mla_attention(a, 64, nullptr, 0, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.to_string().find("workspace"), std::string::npos) << s.to_string();
}

// Host only: the CPU reference reads strided queries exactly as contiguous ones (same values,
// bitwise the same outputs), so the strided CUDA cases are checked against the same definition.
TEST(MlaAttentionCpu, StridedQueriesMatchContiguous) {
  for (int64_t nope : {int64_t(128), int64_t(11)}) {
    MlaCase plain{"strides", 3, 27, 6, 16, {{40, 3}, {7, 1}}};
    MlaCase strided = plain;
    strided.q_nope = nope, strided.q_lat_pad = 5;
    const HostData a = make_data(plain), b = make_data(strided);
    ASSERT_EQ(b.args.q_pe_head_stride, nope + 6);
    ASSERT_EQ(b.args.q_lat_row_stride, 3 * 32);
    const std::vector<float> oa = cpu_reference(a), ob = cpu_reference(b);
    ASSERT_EQ(oa.size(), ob.size());
    for (size_t i = 0; i < oa.size(); ++i) ASSERT_EQ(oa[i], ob[i]) << "element " << i << " nope " << nope;
  }
}

// The split plan's invariants (host only): a split grid fits in one wave of one block per SM,
// every split keeps a chunk of rows, the waiting combiners never hold more than half the SMs,
// and the counters fit their fixed slots.
TEST(MlaAttentionPlan, Invariants) {
  for (int sms : {0, 16, 78, 132, 200}) {
    for (int64_t heads : {3, 4, 16, 128}) {
      for (int64_t m : {1, 2, 5, 8, 64, 300}) {
        for (int64_t ctx : {1, 31, 32, 33, 1024, 4097, 32768, 163840}) {
          for (int variant = 0; variant < 4; ++variant) {  // CUDA / tensor cores x 32- / 16-row chunks
            const bool tc = variant & 1;
            const int chunk = variant & 2 ? 16 : cuda::kMlaChunkRows;
            const cuda::MlaPlan p = cuda::mla_plan(m, heads, ctx, sms, tc, chunk);
            EXPECT_EQ(p.chunk_rows, tc ? cuda::kMlaChunkRows : chunk);  // the tensor cores take 32 only
            const int64_t items = m * p.head_groups, slots = sms > 0 ? sms : cuda::kMlaDefaultSmCount;
            EXPECT_TRUE(p.heads == 8 || p.heads == 16);
            if (tc) {
              EXPECT_EQ(p.heads, cuda::kMlaTcHeads);
            }
            EXPECT_GE(p.head_groups * p.heads, heads);
            EXPECT_LT((p.head_groups - 1) * p.heads, heads);
            EXPECT_GE(p.n_splits, 1);
            EXPECT_LE(p.n_splits, cuda::kMlaMaxSplits);
            EXPECT_GE(p.n_combiners, 1);
            if (p.n_splits > 1) {
              EXPECT_LE(items * p.n_splits, slots) << "m=" << m << " heads=" << heads << " sms=" << sms;
              EXPECT_LE(items, cuda::kMlaCounterSlots);
              EXPECT_LE((p.n_splits - 1) * p.chunk_rows, ctx);
              EXPECT_LE(p.n_combiners, p.n_splits);
              if (p.n_combiners > 1) {
                EXPECT_LE(items * p.n_combiners, sms / 2);
              }
            } else {
              EXPECT_EQ(p.n_combiners, 1);
            }
            if (sms <= 0) {
              EXPECT_EQ(p.n_combiners, 1);
            }
          }
        }
      }
    }
  }
  // The decode shapes of the budget: moonlight 2 groups of 8 heads, V3 8 groups of 16; on the
  // tensor cores moonlight's 16 heads are one group.
  const cuda::MlaPlan moon = cuda::mla_plan(1, 16, 1024, 132), v3 = cuda::mla_plan(1, 128, 1024, 132);
  EXPECT_EQ(moon.heads, 8);
  EXPECT_EQ(moon.n_splits, 32);
  EXPECT_EQ(v3.heads, 16);
  EXPECT_EQ(v3.n_splits, 16);
  const cuda::MlaPlan moon_tc = cuda::mla_plan(1, 16, 1024, 132, true);
  EXPECT_EQ(moon_tc.head_groups, 1);
  EXPECT_EQ(moon_tc.n_splits, 32);
  // 16-row chunks (the plan's other unit; no kernel launches it): twice moonlight's splits at 1K.
  const cuda::MlaPlan moon16 = cuda::mla_plan(1, 16, 1024, 132, false, 16);
  EXPECT_EQ(moon16.heads, 8);
  EXPECT_EQ(moon16.chunk_rows, 16);
  EXPECT_EQ(moon16.n_splits, 64);
  for (int64_t ctx : {1, 15, 16, 17, 1000, 1024, 4097})
    for (int64_t n : {1, 7, 64}) {
      const int64_t rows = cuda::mla_split_rows(ctx, n, 16);
      EXPECT_EQ(rows % 16, 0);
      EXPECT_GE(rows, 16);
      EXPECT_GE(rows * n, ctx) << "ctx=" << ctx << " n=" << n;
      const int64_t rows32 = cuda::mla_split_rows(ctx, n);  // the default unit: 32-row chunks
      EXPECT_EQ(rows32 % cuda::kMlaChunkRows, 0);
      EXPECT_GE(rows32, rows);
    }
  // kAuto: the CUDA cores only where their plan has 8-head blocks (moonlight's batch 1); never
  // the two passes (slower past ~1K rows: mla_attention.h).
  EXPECT_EQ(cuda::mla_cores_for(1, 16), cuda::MlaCores::kCuda);
  EXPECT_EQ(cuda::mla_cores_for(2, 16), cuda::MlaCores::kCuda);
  EXPECT_EQ(cuda::mla_cores_for(4, 16), cuda::MlaCores::kTensor);
  EXPECT_EQ(cuda::mla_cores_for(8, 16), cuda::MlaCores::kTensor);
  EXPECT_EQ(cuda::mla_cores_for(1, 128), cuda::MlaCores::kTensor);
  EXPECT_EQ(cuda::mla_cores_for(3, 4), cuda::MlaCores::kCuda);
  // Two passes: a wave of score blocks; the workspace holds the scores after the counters.
  EXPECT_EQ(cuda::mla_tp_blocks(1, 132), 132);
  EXPECT_EQ(cuda::mla_tp_blocks(4, 132), 33);
  EXPECT_EQ(cuda::mla_tp_blocks(200, 132), 1);
  EXPECT_GE(cuda::mla_attention_workspace_floats(1, 16, 512, 4096),
            size_t(cuda::kMlaCounterSlots) + 4096 * size_t(cuda::kMlaTpHeads));
  // The tensor-core kernel's staged rows: 8 (mod 32) floats, room for every k step.
  for (int d : {14, 33, 40, 576, 704}) {
    const int dk = cuda::mla_tc_dk(d), dp = cuda::mla_tc_row_stride(dk);
    EXPECT_EQ(dk % 16, 0);
    EXPECT_GE(dk, d);
    EXPECT_GE(dp, dk);
    EXPECT_EQ(dp % 32, 8);
  }
}

// Not a check: decode latency at the real shapes for the record (the lead's GPU run prints it).
// Timed as in the decode step: kLaunches launches captured in one CUDA graph (no host overhead),
// on each kernel: batch 1, a verify step of 4 tokens of one sequence (q = 4) and batch 8 (8
// sequences of ctx rows each), block_size 64; ctx 1024 at m = 1 is the per-layer budget's
// reference point (moonlight <= 6 us, V3 <= 12 us).
TEST(MlaAttentionCudaTiming, Decode) {
  PG_REQUIRE_CUDA();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  struct Shape {
    const char* what;
    int64_t n_seqs, q;  // sequences, query tokens per sequence
  };
  for (const Shape& sh : {Shape{"batch 1", 1, 1}, Shape{"verify 4", 1, 4}, Shape{"batch 8", 8, 1}}) {
    for (int64_t heads : {kMoonH, kV3H}) {
      for (int64_t ctx : {1024, 4096, 32768}) {
        for (cuda::MlaCores cores : {cuda::MlaCores::kCuda, cuda::MlaCores::kTensor, cuda::MlaCores::kCudaTwoPass}) {
          if (cores == cuda::MlaCores::kCudaTwoPass && !cuda::mla_two_pass_fits(sh.n_seqs * sh.q, heads)) continue;
          MlaCase c{"timing", heads, kR, kP, 64, std::vector<Seq>(size_t(sh.n_seqs), Seq{ctx, sh.q})};
          HostData h = make_data(c);
          DeviceData d = upload_case(h, ctx);
          const int64_t m = sh.n_seqs * sh.q;
          constexpr int kLaunches = 20;
          const int kReplays = m * ctx * heads >= 4 * 32768 * 16 ? 1 : 5;  // the long V3 batches take ms each
          cudaGraph_t graph = nullptr;
          cudaGraphExec_t exec = nullptr;
          ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
          Status s = ok_status();
          for (int i = 0; i < kLaunches && s.ok(); ++i)
            s = cuda::mla_attention(d.args, ctx, d.ws.data(), d.ws.size(), stream, cores);
          ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
          PG_ASSERT_OK(s);
          ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
          ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);  // warm-up
          cudaEvent_t e0, e1;
          cudaEventCreate(&e0);
          cudaEventCreate(&e1);
          cudaEventRecord(e0, stream);
          for (int i = 0; i < kReplays; ++i) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
          cudaEventRecord(e1, stream);
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          float ms = 0;
          cudaEventElapsedTime(&ms, e0, e1);
          cudaEventDestroy(e0);
          cudaEventDestroy(e1);
          cudaGraphExecDestroy(exec);
          cudaGraphDestroy(graph);
          const double us = 1e3 * ms / (kLaunches * kReplays), bytes = double(sh.n_seqs * ctx) * (kR + kP) * 4;
          const double flops = 2.0 * double(m * ctx) * heads * (2 * kR + kP);
          std::printf("[ mla_attn ] timing %-8s %s heads=%-3lld ctx=%-6lld %8.1f us  %7.1f GB/s of KV  %6.1f TFLOP/s\n",
                      sh.what, cores_name(cores), (long long)heads, (long long)ctx, us, bytes / us * 1e-3,
                      flops / us * 1e-6);
          const std::vector<float> o = to_host(d.o_lat);
          EXPECT_TRUE(std::all_of(o.begin(), o.end(), [](float v) { return std::isfinite(v); }));
        }
      }
    }
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace pg::ops::test
