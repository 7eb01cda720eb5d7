// ops::cuda::moe_routing against ops::cpu::moe_routing: DeepSeek-V3 (noaux_tc, 8 groups keep 4),
// moonlight, Kimi-K2, V2-Lite (softmax greedy), V2 (group-limited greedy), the kernel's limits,
// and tie-heavy logits on a coarse grid, where only the tie order decides. Indices: exact.
// moe_router (router GEMV + routing in one launch) against ops::cuda::linear + moe_routing: bit for bit.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/moe_router.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {
namespace {

// Weights: both sides run the same IEEE operations in the same order except exp, which the GPU
// evaluates in double and rounds once while the host's expf is within 0.502 ulp: a score may
// differ by 1 ulp, and a 1-ulp difference in one term moves a sequential sum of up to 1024
// terms by a few ulps (rounding flips random-walk). 64 ulps bounds that with room; an actual
// bug (a wrong expert, a missed normalisation) is off by far more.
constexpr double kWeightMaxRel = 64 * kF32Unit;

struct RoutingCase {
  const char* name;
  int64_t m, n_experts, top_k, n_group, topk_group;
  MoeScoring scoring;
  MoeTopk method;
  bool norm_topk_prob;
  float routed_scaling_factor;
  bool grid = false;  // logits in {-1, -0.5, 0, 0.5, 1}, bias in {0, 0.25}: many exact ties
};
// gtest prints a case by its name (test names and failure messages stay readable).
void PrintTo(const RoutingCase& c, std::ostream* os) { *os << c.name; }

constexpr MoeScoring kSig = MoeScoring::kSigmoid, kSoft = MoeScoring::kSoftmax;
constexpr MoeTopk kNoAux = MoeTopk::kNoAuxTc, kGreedy = MoeTopk::kGreedy, kGroupGreedy = MoeTopk::kGroupLimitedGreedy;

const RoutingCase kCases[] = {
    {"v3_m1", 1, 256, 8, 8, 4, kSig, kNoAux, true, 2.5f},
    {"v3_m7", 7, 256, 8, 8, 4, kSig, kNoAux, true, 2.5f},
    {"v3_m2048", 2048, 256, 8, 8, 4, kSig, kNoAux, true, 2.5f},
    {"v3_ties", 512, 256, 8, 8, 4, kSig, kNoAux, true, 2.5f, true},
    {"moonlight", 300, 64, 6, 1, 1, kSig, kNoAux, true, 2.446f},
    {"moonlight_ties", 300, 64, 6, 1, 1, kSig, kNoAux, true, 2.446f, true},
    {"kimi_k2", 100, 384, 8, 1, 1, kSig, kNoAux, true, 2.827f},
    {"v2_lite_greedy", 300, 64, 6, 1, 1, kSoft, kGreedy, false, 1.0f},
    {"v2_group_limited", 300, 160, 6, 8, 3, kSoft, kGroupGreedy, false, 16.0f},
    {"v2_group_limited_ties", 300, 160, 6, 8, 3, kSoft, kGroupGreedy, true, 16.0f, true},
    {"softmax_top1_norm", 50, 64, 1, 1, 1, kSoft, kGreedy, true, 1.0f},
    {"one_expert_per_group", 40, 8, 3, 8, 3, kSig, kNoAux, true, 1.0f, true},
    {"odd_groups", 33, 9, 3, 3, 2, kSig, kNoAux, false, 1.5f},
    {"single_expert", 5, 1, 1, 1, 1, kSig, kNoAux, true, 1.0f},
    {"kernel_limits", 50, 1024, 16, 32, 8, kSig, kNoAux, true, 2.0f},
    {"top_k_limit", 40, 256, 32, 8, 4, kSig, kNoAux, true, 2.5f, true},  // kRoutingMaxTopK: every lane keeps a choice
};

MoeRoutingArgs args_of(const RoutingCase& c) {
  MoeRoutingArgs a;
  a.m = c.m, a.n_experts = c.n_experts, a.top_k = c.top_k, a.n_group = c.n_group, a.topk_group = c.topk_group;
  a.scoring = c.scoring, a.method = c.method, a.norm_topk_prob = c.norm_topk_prob;
  a.routed_scaling_factor = c.routed_scaling_factor;
  return a;
}

class MoeRoutingCuda : public ::testing::TestWithParam<RoutingCase> {};

TEST_P(MoeRoutingCuda, SameExpertsAndWeightsAsCpu) {
  PG_REQUIRE_CUDA();
  const RoutingCase& c = GetParam();
  const uint64_t seed = 1000 + uint64_t(c.m) * 31 + uint64_t(c.n_experts);
  std::vector<float> logits(size_t(c.m * c.n_experts)), bias(size_t(c.n_experts));
  if (c.grid) {
    parallel_fill(logits, [&](uint64_t i) { return 0.5f * float(int(splitmix64(seed + i) % 5) - 2); });
    parallel_fill(bias, [&](uint64_t i) { return 0.25f * float(splitmix64(seed + 7 + i) % 2); });
  } else {
    // Roughly normal logits (sum of three uniforms, sd 1.5) and small correction biases.
    parallel_fill(logits, [&](uint64_t i) {
      return 1.5f * (uniform_pm1(seed, 3 * i) + uniform_pm1(seed, 3 * i + 1) + uniform_pm1(seed, 3 * i + 2));
    });
    parallel_fill(bias, [&](uint64_t i) { return 0.1f * uniform_pm1(seed + 5, i); });
  }
  const size_t out = size_t(c.m * c.top_k);
  std::vector<int32_t> idx_cpu(out, -1);
  std::vector<float> w_cpu(out);
  MoeRoutingArgs ha = args_of(c);
  ha.logits = logits.data(), ha.bias = c.method == kNoAux ? bias.data() : nullptr;
  ha.expert_idx = idx_cpu.data(), ha.expert_weight = w_cpu.data();
  ASSERT_TRUE(validate(ha).ok()) << validate(ha).to_string();
  cpu::moe_routing(ha);

  auto dl = to_device(logits), db = to_device(bias);
  auto ri = cuda::DeviceBuffer<int32_t>::create(out);
  auto rw = cuda::DeviceBuffer<float>::create(out);
  PG_ASSERT_OK(ri.status());
  PG_ASSERT_OK(rw.status());
  cuda::DeviceBuffer<int32_t> di = std::move(ri).value();
  cuda::DeviceBuffer<float> dw = std::move(rw).value();
  PG_ASSERT_OK(di.fill_bytes(0xff));  // -1 indices, NaN weights
  PG_ASSERT_OK(dw.fill_bytes(0xff));
  MoeRoutingArgs da = ha;
  da.logits = dl.data(), da.bias = c.method == kNoAux ? db.data() : nullptr;
  da.expert_idx = di.data(), da.expert_weight = dw.data();
  PG_ASSERT_OK(cuda::moe_routing(da, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int32_t> idx_gpu = to_host(di);
  const std::vector<float> w_gpu = to_host(dw);

  int64_t bad_tokens = 0, first_bad = -1;
  for (int64_t t = 0; t < c.m; ++t)
    for (int64_t k = 0; k < c.top_k; ++k)
      if (idx_gpu[size_t(t * c.top_k + k)] != idx_cpu[size_t(t * c.top_k + k)]) {
        if (first_bad < 0) first_bad = t;
        ++bad_tokens;
        break;
      }
  std::string detail;
  if (first_bad >= 0)
    for (int64_t k = 0; k < c.top_k; ++k)
      detail += " " + std::to_string(idx_cpu[size_t(first_bad * c.top_k + k)]) + "/" +
                std::to_string(idx_gpu[size_t(first_bad * c.top_k + k)]);
  EXPECT_EQ(bad_tokens, 0) << "tokens whose experts differ; first token " << first_bad << " (cpu/gpu):" << detail;
  const Diff d = compare(w_gpu.data(), w_cpu.data(), int64_t(out),
                         [&](int64_t i) { return kWeightMaxRel * std::fabs(double(w_cpu[size_t(i)])); });
  EXPECT_EQ(d.non_finite, 0) << d.summary();
  EXPECT_EQ(d.over_tol, 0) << d.summary();
  std::printf("[ routing  ] %-22s m=%-5lld E=%-5lld k=%-3lld index mismatches=%lld weights %s\n", c.name,
              (long long)c.m, (long long)c.n_experts, (long long)c.top_k, (long long)bad_tokens, d.summary().c_str());
}

INSTANTIATE_TEST_SUITE_P(Models, MoeRoutingCuda, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<RoutingCase>& i) { return std::string(i.param.name); });

// The kernel's selection order rests on moe_routing_order_key (kernels.h): for every pair of numbers, the
// keys compare as the floats do (-0 == +0 included), NaN sits below every number, and no number takes
// the "no candidate" key 0. Host code: it runs without a GPU.
TEST(MoeRoutingOrderKey, OrdersAsTheFloatComparisons) {
  std::vector<float> v = {-INFINITY, -FLT_MAX, -1.0f, -FLT_MIN, -FLT_TRUE_MIN, -0.0f, 0.0f, FLT_TRUE_MIN, FLT_MIN,
                          0.5f, 1.0f, FLT_MAX, INFINITY};
  for (uint64_t i = 0; v.size() < 4096; ++i) {
    const uint32_t bits = uint32_t(splitmix64(77 + i));
    float f;
    std::memcpy(&f, &bits, 4);
    if (!std::isnan(f)) v.push_back(f);
  }
  int64_t bad = 0;
  for (float a : v) {
    const uint32_t ka = cuda::moe_routing_order_key(a);
    if (ka < 2) ++bad;
    for (float b : v) {
      const uint32_t kb = cuda::moe_routing_order_key(b);
      if ((ka > kb) != (a > b) || (ka == kb) != (a == b)) ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << "pairs whose keys do not compare as their floats";
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0xffffffffu}) {
    float nan;
    std::memcpy(&nan, &nan_bits, 4);
    EXPECT_EQ(cuda::moe_routing_order_key(nan), 1u) << std::hex << nan_bits;
  }
}

TEST(MoeRoutingCudaArgs, OverTheKernelLimitsIsUnsupportedNotACrash) {
  MoeRoutingArgs a;
  a.m = 1, a.n_experts = 2048, a.top_k = 8, a.n_group = 1, a.topk_group = 1;
  float dummy = 0;
  int32_t idx = 0;
  a.logits = &dummy, a.bias = &dummy, a.expert_idx = &idx, a.expert_weight = &dummy;
  const Status s = cuda::moe_routing(a, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.to_string();
  a.n_experts = 64, a.top_k = 33;  // past kRoutingMaxTopK
  const Status k = cuda::moe_routing(a, nullptr);
  EXPECT_EQ(k.code(), StatusCode::kUnsupported) << k.to_string();
}

// ---------------------------------------------------------------------------------------------
// moe_router: the fused launch against cuda::linear then cuda::moe_routing, bit for bit (logits,
// indices, weights), launched three times in a row (the last-block counter must reset), with
// outputs poisoned first: at the fused kernel's own limit (every case up to 64 tokens takes it) and
// at the default one (past kRouterFusedTokens the two launches). Cases past the fused kernel's
// limits (m > 64, a scalar-path router) take the two launches and must agree too.
struct RouterCase {
  const char* name;
  WeightFormat format;
  int64_t m, hidden, x_pad;
  RoutingCase routing;
};
void PrintTo(const RouterCase& c, std::ostream* os) { *os << c.name; }

const RouterCase kRouterCases[] = {
    {"moonlight_bf16_m1", WeightFormat::kBF16, 1, 2048, 0, {"", 1, 64, 6, 1, 1, kSig, kNoAux, true, 2.446f}},
    {"moonlight_bf16_m3", WeightFormat::kBF16, 3, 2048, 0, {"", 3, 64, 6, 1, 1, kSig, kNoAux, true, 2.446f}},
    {"moonlight_bf16_m8", WeightFormat::kBF16, 8, 2048, 0, {"", 8, 64, 6, 1, 1, kSig, kNoAux, true, 2.446f}},
    // More shapes for the fused kernel: softmax scoring, a row count that is not a multiple of the
    // block's rows, a short K (another k_split), few experts.
    {"v2_lite_softmax_bf16_m2", WeightFormat::kBF16, 2, 2048, 0, {"", 2, 64, 6, 1, 1, kSoft, kGreedy, false, 1.0f}},
    {"rows60_bf16_m4", WeightFormat::kBF16, 4, 1024, 0, {"", 4, 60, 4, 1, 1, kSig, kNoAux, true, 1.5f}},
    {"experts12_bf16_m1_k512", WeightFormat::kBF16, 1, 512, 0, {"", 1, 12, 2, 1, 1, kSig, kNoAux, true, 1.0f}},
    {"moonlight_f32_m5_strided", WeightFormat::kF32, 5, 2048, 8, {"", 5, 64, 6, 1, 1, kSig, kNoAux, true, 2.446f}},
    {"moonlight_bf16_m64", WeightFormat::kBF16, 64, 2048, 0, {"", 64, 64, 6, 1, 1, kSig, kNoAux, true, 2.446f}},
    {"moonlight_bf16_m65_unfused", WeightFormat::kBF16, 65, 2048, 0, {"", 65, 64, 6, 1, 1, kSig, kNoAux, true, 2.446f}},
    {"v3_bf16_m1", WeightFormat::kBF16, 1, 7168, 0, {"", 1, 256, 8, 8, 4, kSig, kNoAux, true, 2.5f}},
    {"v3_f32_m7", WeightFormat::kF32, 7, 7168, 0, {"", 7, 256, 8, 8, 4, kSig, kNoAux, true, 2.5f}},
    {"kimi_k2_bf16_m2", WeightFormat::kBF16, 2, 7168, 0, {"", 2, 384, 8, 1, 1, kSig, kNoAux, true, 2.827f}},
    {"v2_group_limited_f32_m4", WeightFormat::kF32, 4, 5120, 0, {"", 4, 160, 6, 8, 3, kSoft, kGroupGreedy, false, 16.0f}},
    {"tiny_f32_scalar_unfused", WeightFormat::kF32, 3, 52, 0, {"", 3, 8, 3, 2, 1, kSig, kNoAux, true, 1.0f}},
};

class MoeRouterCuda : public ::testing::TestWithParam<RouterCase> {};

TEST_P(MoeRouterCuda, SameBitsAsLinearThenRouting) {
  PG_REQUIRE_CUDA();
  const RouterCase& c = GetParam();
  const uint64_t seed = seed_of(c.name);
  const int64_t E = c.routing.n_experts, xs = c.hidden + c.x_pad, K = c.routing.top_k;
  std::vector<float> x(static_cast<size_t>(c.m * xs)), wf(static_cast<size_t>(E * c.hidden)), bias(static_cast<size_t>(E));
  parallel_fill(x, [&](uint64_t i) { return uniform_pm1(seed, i); });
  parallel_fill(wf, [&](uint64_t i) { return 0.05f * uniform_pm1(seed + 1, i); });
  parallel_fill(bias, [&](uint64_t i) { return 0.1f * uniform_pm1(seed + 2, i); });
  std::vector<uint16_t> wb(wf.size());
  for (size_t i = 0; i < wb.size(); ++i) wb[i] = f32_to_bf16(wf[i]);
  auto dx = to_device(x), db = to_device(bias), dwf = to_device(wf);
  auto dwb = to_device(wb);
  const Matrix w{c.format, E, c.hidden,
                 c.format == WeightFormat::kBF16 ? static_cast<const void*>(dwb.data()) : static_cast<const void*>(dwf.data())};
  auto dcounter = to_device(std::vector<uint32_t>(4, 0));

  struct Out {
    std::vector<float> logits, weight;
    std::vector<int32_t> idx;
  };
  auto run = [&](bool fused, Out& o, int64_t fused_max_tokens = cuda::kRouterMaxFusedTokens) {
    auto dl = poisoned<float>(size_t(c.m * E));
    auto dw = poisoned<float>(size_t(c.m * K));
    auto di = poisoned<int32_t>(size_t(c.m * K));
    MoeRoutingArgs r = args_of(c.routing);
    r.m = c.m, r.logits = dl.data(), r.bias = c.routing.method == kNoAux ? db.data() : nullptr;
    r.expert_idx = di.data(), r.expert_weight = dw.data();
    if (fused) {
      MoeRouterArgs a;
      a.x = dx.data(), a.x_stride = xs, a.router = &w, a.logits = dl.data(), a.routing = r;
      PG_ASSERT_OK(cuda::moe_router(a, dcounter.data(), nullptr, fused_max_tokens));
    } else {
      LinearArgs la;
      la.x = dx.data(), la.x_stride = xs, la.w = &w, la.y = dl.data(), la.m = c.m;
      PG_ASSERT_OK(cuda::linear(la, nullptr));
      PG_ASSERT_OK(cuda::moe_routing(r, nullptr));
    }
    ASSERT_TRUE(sync_ok());
    o.logits = to_host(dl), o.weight = to_host(dw), o.idx = to_host(di);
  };
  Out ref;
  run(false, ref);
  for (int rep = 0; rep < 4; ++rep) {
    SCOPED_TRACE("launch " + std::to_string(rep) + (rep == 3 ? " (the default token limit)" : ""));
    Out got;
    run(true, got, rep == 3 ? -1 : cuda::kRouterMaxFusedTokens);
    ASSERT_EQ(std::memcmp(got.logits.data(), ref.logits.data(), ref.logits.size() * 4), 0) << "logits differ";
    EXPECT_EQ(got.idx, ref.idx);
    EXPECT_EQ(std::memcmp(got.weight.data(), ref.weight.data(), ref.weight.size() * 4), 0) << "weights differ";
    EXPECT_EQ(to_host(dcounter), std::vector<uint32_t>(4, 0)) << "the counter was not reset";
  }
  int64_t poison = 0;
  for (float v : ref.logits) poison += is_poison(v);
  EXPECT_EQ(poison, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeRouterCuda, ::testing::ValuesIn(kRouterCases),
                         [](const ::testing::TestParamInfo<RouterCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace pg::ops::test
