// The GPU sampler (engine/cuda/sampler_cuda.h) against pg::Sampler, the CPU definition: for
// thousands of seeded random rows (vocab 1..163840; logits with ties, -inf, NaN, +inf, huge
// values) across greedy, temperatures, top-k, top-p, min-p, penalties, seeds and RNG positions,
// the GPU token equals the CPU token for every row; raw logprobs within kLogprobTol, top-logprob
// ids exact. Also the plain argmax, validation, a CUDA-graph replay, and timings (printed).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "engine/cuda/sampler_cuda.h"
#include "engine/sampler.h"
#include "tests/ops/test_util.h"

namespace pg::cuda_sampling {
namespace {

using ops::cuda::DeviceBuffer;
using ops::test::splitmix64;
using ops::test::to_device;
using ops::test::to_host;
using ops::test::uniform_pm1;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Logprobs are reported, not sampled from: the CPU and GPU sum the same fp32 exps in double in
// different orders (relative error ~1e-16 * vocab), then one double log and one fp32 rounding
// of the result (half an ulp of |logprob| <= ~100: 4e-6).
constexpr double kLogprobTol = 1e-5;

uint64_t mix(uint64_t a, uint64_t b) { return splitmix64(a * 0x9E3779B97F4A7C15ull + b); }

// Row kinds of test logits: the shapes that stress the selects and the special values.
float test_logit(uint64_t seed, int64_t row, int64_t i) {
  const uint64_t rs = mix(seed, uint64_t(row));
  const int kind = int(rs % 10);
  const float u = uniform_pm1(rs, uint64_t(i));
  const uint64_t h = mix(rs ^ 0x5555, uint64_t(i));
  switch (kind) {
    case 0: return 4.0f * u + 2.0f * uniform_pm1(rs + 1, uint64_t(i));  // broad, distinct values
    case 1: return std::round(u * 8.0f) / 2.0f;                          // 17 values: ties everywhere
    case 2: return (h % 4096 == 0) ? 12.0f + u : 3.0f * u;               // a few peaks
    case 3: {                                                            // specials sprinkled
      const uint64_t r = h % 100;
      if (r < 3) return kNaN;
      if (r < 8) return -kInf;
      if (r == 8 && h % 1000 == 8) return kInf;
      if (r == 9) return -1e30f;
      return 5.0f * u;
    }
    case 4: return 0.01f * u;                                            // nearly uniform
    case 5: return 60.0f * u;                                            // most weights 0
    case 6: return (row % 7 == 0) ? -kInf : (row % 7 == 1 ? kNaN : 1.0f);  // degenerate rows
    case 7: {                                                            // huge magnitudes
      const uint64_t r = h % 50;
      if (r == 0) return std::numeric_limits<float>::max();
      if (r == 1) return -std::numeric_limits<float>::max();
      if (r == 2) return 3e38f * u;
      return 1e30f * u;
    }
    case 8: return std::round(u * 3.0f) * 0.25f + ((h % 997 == 0) ? 1.0f : 0.0f);  // ties at the top
    default: return -0.0f * u + (h % 2 ? -0.0f : 0.0f);                // +-0 only: one big tie
  }
}

struct RowSetup {
  SamplingParams params;
  RngPosition rng;
  TokenHistory history;
};

// Parameters by row: every combination of the brief's grid shows up many times.
RowSetup make_setup(uint64_t seed, int64_t row, int64_t vocab) {
  RowSetup s;
  SamplingParams& p = s.params;
  const uint64_t h = mix(seed ^ 0xABCD, uint64_t(row));
  const uint64_t a = h, b = h >> 8, c = h >> 16, d = h >> 24, e = h >> 32, f = h >> 40;
  p.temperature = std::array<double, 5>{0.0, 0.3, 1.0, 1.7, 1.0}[a % 5];
  p.top_k = std::array<int64_t, 7>{-1, 0, 1, 5, 50, vocab, vocab - 1}[b % 7];
  p.top_p = std::array<double, 4>{1.0, 0.1, 0.9, 1.0}[c % 4];
  p.min_p = std::array<double, 3>{0.0, 0.05, 0.0}[d % 3];
  if (e % 3 == 0) {
    p.repetition_penalty = std::array<double, 3>{1.3, 0.7, 1.0}[(e >> 2) % 3];
    p.frequency_penalty = std::array<double, 3>{0.0, 0.5, 1.1}[(e >> 4) % 3];
    p.presence_penalty = std::array<double, 3>{0.0, 0.8, -0.4}[(e >> 6) % 3];
    if (!p.has_penalties()) p.presence_penalty = 2.0;
    std::vector<int32_t> prompt;
    for (int j = 0; j < 40; ++j) prompt.push_back(int32_t(mix(h, uint64_t(j)) % uint64_t(vocab)));
    s.history = TokenHistory(prompt);
    for (int j = 0; j < 25; ++j) s.history.add_output(int32_t(mix(h, uint64_t(100 + j % 10)) % uint64_t(vocab)));
  }
  p.logprobs = f % 2 == 0;
  if (p.logprobs) p.top_logprobs = std::array<int64_t, 4>{0, 1, 5, 20}[(f >> 2) % 4];
  s.rng.seed = mix(seed, uint64_t(row) + 77);
  s.rng.choice_idx = uint32_t((h >> 48) % 4);
  s.rng.output_idx = int64_t(mix(h, 5) % (uint64_t(1) << 40));
  return s;
}

bool sync_ok() {
  const cudaError_t e = cudaDeviceSynchronize();
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  return e == cudaSuccess;
}

std::string describe(const RowSetup& s) {
  const SamplingParams& p = s.params;
  char buf[256];
  std::snprintf(buf, sizeof buf, "T=%g top_k=%lld top_p=%g min_p=%g rp=%g fp=%g pp=%g seed=%llu out=%lld choice=%u",
                p.temperature, (long long)p.top_k, p.top_p, p.min_p, p.repetition_penalty, p.frequency_penalty,
                p.presence_penalty, (unsigned long long)s.rng.seed, (long long)s.rng.output_idx, s.rng.choice_idx);
  return buf;
}

// One batch of rows: host logits, the CPU reference, the GPU run, the comparison.
void run_batch(int64_t vocab, int64_t n_rows, uint64_t seed, int64_t stride_pad = 0) {
  SCOPED_TRACE("vocab " + std::to_string(vocab) + " rows " + std::to_string(n_rows));
  const int64_t stride = vocab + stride_pad;
  std::vector<float> logits(size_t(n_rows * stride), 0.0f);
  ops::test::parallel_fill(logits, [&](uint64_t k) {
    const int64_t row = int64_t(k) / stride, i = int64_t(k) % stride;
    return i < vocab ? test_logit(seed, row, i) : kNaN;
  });
  std::vector<RowSetup> setups;
  std::vector<RowParams> rows;
  std::vector<PenaltyEntry> entries;
  for (int64_t r = 0; r < n_rows; ++r) {
    setups.push_back(make_setup(seed, r, vocab));
    RowParams rp = make_row_params(setups.back().params, setups.back().rng);
    PG_ASSERT_OK(append_penalties(setups.back().params, &setups.back().history, rp, entries));
    rows.push_back(rp);
  }
  entries.push_back({});  // never empty: a zero-size DeviceBuffer is null

  // CPU reference, rows in parallel (one Sampler per chunk: not thread-safe).
  std::vector<SampledToken> want(static_cast<size_t>(n_rows));
  ThreadPool::global().parallel_for(n_rows, [&](int64_t b, int64_t e) {
    Sampler s;
    for (int64_t r = b; r < e; ++r) {
      const RowSetup& su = setups[size_t(r)];
      want[size_t(r)] = s.sample(std::span<const float>(logits.data() + r * stride, size_t(vocab)), su.params, su.rng,
                                 su.params.has_penalties() ? &su.history : nullptr);
    }
  });

  auto d_logits = to_device(logits);
  auto d_rows = to_device(rows);
  auto d_entries = to_device(entries);
  auto d_tokens = DeviceBuffer<int32_t>::create(size_t(n_rows)).value();
  auto d_logprobs = DeviceBuffer<float>::create(size_t(n_rows)).value();
  constexpr int64_t kTop = kMaxTopLogprobs;
  auto d_top_ids = DeviceBuffer<int32_t>::create(size_t(n_rows * kTop)).value();
  auto d_top_vals = DeviceBuffer<float>::create(size_t(n_rows * kTop)).value();
  auto d_ws = DeviceBuffer<float>::create(sample_workspace_bytes(n_rows, vocab) / sizeof(float)).value();
  PG_ASSERT_OK(d_tokens.fill_bytes(0xff));
  PG_ASSERT_OK(d_logprobs.fill_bytes(0xff));
  PG_ASSERT_OK(d_top_ids.fill_bytes(0xff));
  PG_ASSERT_OK(d_top_vals.fill_bytes(0xff));
  PG_ASSERT_OK(d_ws.fill_bytes(0xff));

  SampleArgs a;
  a.logits = d_logits.data();
  a.n_rows = n_rows;
  a.vocab = vocab;
  a.logits_stride = stride;
  a.rows = d_rows.data();
  a.penalties = d_entries.data();
  a.tokens = d_tokens.data();
  a.logprobs = d_logprobs.data();
  a.top_ids = d_top_ids.data();
  a.top_logprobs = d_top_vals.data();
  a.top_stride = kTop;
  a.workspace = d_ws.data();
  a.workspace_bytes = d_ws.bytes();
  PG_ASSERT_OK(sample(a, nullptr));
  ASSERT_TRUE(sync_ok());
  const auto tokens = to_host(d_tokens);
  const auto logprobs = to_host(d_logprobs);
  const auto top_ids = to_host(d_top_ids);
  const auto top_vals = to_host(d_top_vals);

  int64_t n_bad_tokens = 0, n_bad_logprobs = 0;
  double worst_logprob = 0;
  auto close = [&](float got, float ref) {
    if (std::isinf(ref)) return got == ref;
    const double err = std::fabs(double(got) - double(ref));
    worst_logprob = std::max(worst_logprob, err);
    return err <= kLogprobTol;
  };
  for (int64_t r = 0; r < n_rows; ++r) {
    const SampledToken& w = want[size_t(r)];
    const RowSetup& su = setups[size_t(r)];
    if (tokens[size_t(r)] != w.token_id) {
      if (++n_bad_tokens <= 10)
        ADD_FAILURE() << "row " << r << " (" << describe(su) << "): gpu token " << tokens[size_t(r)] << ", cpu "
                      << w.token_id;
      continue;
    }
    if (!su.params.logprobs) continue;
    bool ok = close(logprobs[size_t(r)], w.logprob);
    for (size_t j = 0; j < w.top_logprobs.size(); ++j) {
      ok = ok && top_ids[size_t(r * kTop) + j] == w.top_logprobs[j].first;
      ok = ok && close(top_vals[size_t(r * kTop) + j], w.top_logprobs[j].second);
    }
    if (!ok && ++n_bad_logprobs <= 10) {
      std::string msg = "row " + std::to_string(r) + " logprob gpu " + std::to_string(logprobs[size_t(r)]) + " cpu " +
                        std::to_string(w.logprob) + "; top:";
      for (size_t j = 0; j < w.top_logprobs.size(); ++j)
        msg += " (" + std::to_string(top_ids[size_t(r * kTop) + j]) + "|" + std::to_string(w.top_logprobs[j].first) +
               ", " + std::to_string(top_vals[size_t(r * kTop) + j]) + "|" +
               std::to_string(w.top_logprobs[j].second) + ")";
      ADD_FAILURE() << msg;
    }
  }
  EXPECT_EQ(n_bad_tokens, 0);
  EXPECT_EQ(n_bad_logprobs, 0);
  std::printf("vocab %lld: %lld rows, worst logprob error %.3g\n", (long long)vocab, (long long)n_rows, worst_logprob);
}

TEST(SampleCuda, MatchesCpuSmallVocabs) {
  PG_REQUIRE_CUDA();
  for (int64_t vocab : {1, 2, 3, 7, 37, 1000, 4099}) {
    run_batch(vocab, 160, 11 + uint64_t(vocab));
    if (HasFailure()) return;
  }
  run_batch(1001, 64, 5, /*stride_pad=*/3);  // rows not 16-byte aligned
}

TEST(SampleCuda, MatchesCpuVocab8192) {
  PG_REQUIRE_CUDA();
  run_batch(8192, 2048, 1);
}

TEST(SampleCuda, MatchesCpuVocab129280) {
  PG_REQUIRE_CUDA();
  run_batch(129280, 320, 2);
}

TEST(SampleCuda, MatchesCpuVocab163840) {
  PG_REQUIRE_CUDA();
  run_batch(163840, 320, 3);
}

// The plain argmax against the CPU's greedy choice: ties, NaN, +-inf, degenerate rows, strides.
TEST(ArgmaxCuda, MatchesCpuGreedy) {
  PG_REQUIRE_CUDA();
  for (int64_t vocab : {1, 5, 8192, 129280, 163840}) {
    for (int64_t pad : {0, 1}) {
      const int64_t n_rows = vocab > 10000 ? 48 : 200, stride = vocab + pad;
      std::vector<float> logits(static_cast<size_t>(n_rows * stride));
      ops::test::parallel_fill(logits, [&](uint64_t k) {
        const int64_t row = int64_t(k) / stride, i = int64_t(k) % stride;
        return i < vocab ? test_logit(9 + uint64_t(vocab), row, i) : kNaN;
      });
      std::vector<int32_t> want(static_cast<size_t>(n_rows));
      Sampler s;
      SamplingParams greedy;
      greedy.temperature = 0.0;
      for (int64_t r = 0; r < n_rows; ++r)
        want[size_t(r)] = s.sample(std::span<const float>(logits.data() + r * stride, size_t(vocab)), greedy, {}).token_id;
      auto d_logits = to_device(logits);
      auto d_tokens = DeviceBuffer<int32_t>::create(size_t(n_rows)).value();
      PG_ASSERT_OK(d_tokens.fill_bytes(0xff));
      ArgmaxArgs a;
      a.logits = d_logits.data();
      a.n_rows = n_rows;
      a.vocab = vocab;
      a.logits_stride = stride;
      a.tokens = d_tokens.data();
      PG_ASSERT_OK(argmax(a, nullptr));
      ASSERT_TRUE(sync_ok());
      EXPECT_EQ(to_host(d_tokens), want) << "vocab " << vocab << " pad " << pad;
    }
  }
}

TEST(SampleCuda, Validation) {
  SampleArgs a;
  a.n_rows = 2;
  a.vocab = 0;
  EXPECT_FALSE(validate(a).ok());
  a.vocab = sampling::kMaxVocab + 1;
  EXPECT_FALSE(validate(a).ok());
  a.vocab = 100;
  a.logits_stride = 50;
  EXPECT_FALSE(validate(a).ok());
  a.logits_stride = 0;
  EXPECT_FALSE(validate(a).ok());  // no pointers
  float dummy[4];
  a.logits = dummy;
  a.rows = reinterpret_cast<const RowParams*>(dummy);
  a.tokens = reinterpret_cast<int32_t*>(dummy);
  alignas(16) static float ws[200];
  a.workspace = ws;
  a.workspace_bytes = sample_workspace_bytes(2, 100) - 4;
  EXPECT_FALSE(validate(a).ok());  // workspace too small
  a.workspace_bytes = sample_workspace_bytes(2, 100);
  EXPECT_TRUE(validate(a).ok());
  a.top_ids = reinterpret_cast<int32_t*>(dummy);
  EXPECT_FALSE(validate(a).ok());  // top_ids without top_logprobs
  a.top_logprobs = dummy;
  a.top_stride = 21;
  EXPECT_FALSE(validate(a).ok());
  a.top_stride = 20;
  EXPECT_TRUE(validate(a).ok());

  SamplingParams p;
  p.repetition_penalty = 1.2;
  RowParams row = make_row_params(p, {});
  std::vector<PenaltyEntry> entries(3);
  EXPECT_FALSE(append_penalties(p, nullptr, row, entries).ok());  // penalties need a history
  TokenHistory h(std::vector<int32_t>{4, 9, 4});
  h.add_output(9);
  PG_ASSERT_OK(append_penalties(p, &h, row, entries));
  EXPECT_EQ(row.penalty_begin, 3);
  EXPECT_EQ(row.penalty_end, 5);
  p.repetition_penalty = 1.0;
  PG_ASSERT_OK(append_penalties(p, &h, row, entries));
  EXPECT_EQ(row.penalty_begin, row.penalty_end);
}

// Batches built once; sample() replayed from a CUDA graph draws the same tokens, and the timings.
TEST(SampleCuda, GraphReplayAndTiming) {
  PG_REQUIRE_CUDA();
  constexpr int64_t kVocab = 163840, kRows = 64;
  std::vector<float> logits(static_cast<size_t>(kRows * kVocab));
  ops::test::parallel_fill(logits, [&](uint64_t k) { return 3.0f * uniform_pm1(77, k); });
  std::vector<RowParams> rows;
  for (int64_t r = 0; r < kRows; ++r) {
    SamplingParams p;
    p.temperature = 1.0;
    p.top_p = 0.9;
    rows.push_back(make_row_params(p, RngPosition{uint64_t(r), 0, r}));
  }
  auto d_logits = to_device(logits);
  auto d_rows = to_device(rows);
  auto d_tokens = DeviceBuffer<int32_t>::create(size_t(kRows)).value();
  auto d_ws = DeviceBuffer<float>::create(sample_workspace_bytes(kRows, kVocab) / sizeof(float)).value();
  SampleArgs a;
  a.logits = d_logits.data();
  a.n_rows = kRows;
  a.vocab = kVocab;
  a.rows = d_rows.data();
  a.tokens = d_tokens.data();
  a.workspace = d_ws.data();
  a.workspace_bytes = d_ws.bytes();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  PG_ASSERT_OK(sample(a, stream));
  ASSERT_TRUE(sync_ok());
  const auto direct = to_host(d_tokens);
  PG_ASSERT_OK(d_tokens.fill_bytes(0xff));

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status captured = sample(a, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  PG_ASSERT_OK(captured);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_TRUE(sync_ok());
  EXPECT_EQ(to_host(d_tokens), direct);

  // Timings (printed, not asserted): top-p 0.9 at vocab 163840, for 1 row and for kRows rows.
  cudaEvent_t t0, t1;
  ASSERT_EQ(cudaEventCreate(&t0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&t1), cudaSuccess);
  for (int64_t n : {int64_t(1), kRows}) {
    a.n_rows = n;
    constexpr int kIters = 20;
    PG_ASSERT_OK(sample(a, stream));
    ASSERT_EQ(cudaEventRecord(t0, stream), cudaSuccess);
    for (int it = 0; it < kIters; ++it) PG_ASSERT_OK(sample(a, stream));
    ASSERT_EQ(cudaEventRecord(t1, stream), cudaSuccess);
    ASSERT_TRUE(sync_ok());
    float ms = 0;
    ASSERT_EQ(cudaEventElapsedTime(&ms, t0, t1), cudaSuccess);
    std::printf("sample top-p 0.9, vocab %lld, %lld rows: %.1f us per launch\n", (long long)kVocab, (long long)n,
                1000.0 * ms / kIters);
    ArgmaxArgs g;
    g.logits = d_logits.data();
    g.n_rows = n;
    g.vocab = kVocab;
    g.tokens = d_tokens.data();
    ASSERT_EQ(cudaEventRecord(t0, stream), cudaSuccess);
    for (int it = 0; it < kIters; ++it) PG_ASSERT_OK(argmax(g, stream));
    ASSERT_EQ(cudaEventRecord(t1, stream), cudaSuccess);
    ASSERT_TRUE(sync_ok());
    ASSERT_EQ(cudaEventElapsedTime(&ms, t0, t1), cudaSuccess);
    std::printf("argmax, vocab %lld, %lld rows: %.1f us per launch\n", (long long)kVocab, (long long)n,
                1000.0 * ms / kIters);
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace pg::cuda_sampling
