// The decode MoE launch chain under Programmatic Dependent Launch: a GEMV writes x (it lets its
// dependents launch before it is done), moe_router routes on x, moe_experts follows with
// after_router, so gate_up starts its shared experts before the routing is complete
// (MoeExpertsParams::gate_up_pdl). Its output must have the bits of the same chain with
// after_router off (gate_up an ordinary launch), on every repetition, with x poisoned before each
// chain: a shared-expert block that read x before the GEMV finished, or a routed block (or down)
// that read the routing before the router finished, gives NaNs or other experts. bf16 experts
// (moe_experts/kernel.cu) and NVFP4 experts (the tensor-core kernels, m = 1 with the staged-x ring),
// m = 1 (direct) and m = 3 (direct multi); FP8 experts (fp8_kernel.cu) too.
//
// Self-routing (MoeExpertsParams::self_routing, NVFP4 and FP8 at m = 1): the router writes only the logits
// and the expert kernels route the token themselves (moe_experts_routing). Its output, expert_idx
// and expert_weight must have the ordinary chain's bits, for the routings of the family: moonlight's
// (sigmoid, noaux_tc, one group), V3's (eight groups, four kept), V2-Lite's (softmax, greedy), V2's
// (softmax, group-limited greedy), and one with ties (router rows and biases equal in pairs: equal
// keys, taken lower index first, and the chosen scores summed in that order). With
// PEREGRINE_MOE_SELF_ROUTING=0 the same cases check the fallback (moe_routing before the experts).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/moe_experts/moe_experts.h"
#include "ops/cuda/moe_router.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {
namespace {

// The routing of a case: moonlight's by default (sigmoid, noaux_tc, one group, top 6 normalised).
struct PdlRouting {
  int64_t experts = 16, shared = 2, top_k = 6, n_group = 1, topk_group = 1;
  MoeScoring scoring = MoeScoring::kSigmoid;
  MoeTopk method = MoeTopk::kNoAuxTc;
  bool norm = true, ties = false;
  float scale = 2.446f;
};
struct PdlCase {
  const char* name;
  WeightFormat format;
  int64_t m;
  bool self_routing = false;
  PdlRouting routing = {};
};
void PrintTo(const PdlCase& c, std::ostream* os) { *os << c.name; }

constexpr int64_t kHidden = 1024, kInter = 512;
constexpr int kReps = 20;

class MoeLayerPdlCuda : public ::testing::TestWithParam<PdlCase> {};

TEST_P(MoeLayerPdlCuda, SameBitsAsOrdinaryLaunches) {
  PG_REQUIRE_CUDA();
  const PdlCase& c = GetParam();
  const PdlRouting& rt = c.routing;
  const uint64_t seed = seed_of(c.name);
  const int64_t H = kHidden, I = kInter, E = rt.experts, S = rt.shared, M = c.m, n_stack = E + S;
  const int64_t top_k = rt.top_k;

  // The producer GEMV (bf16 [H, H]) and the router (bf16 [E, H]).
  std::vector<float> x0(static_cast<size_t>(M * H)), bias(static_cast<size_t>(E));
  parallel_fill(x0, [&](uint64_t i) { return uniform_pm1(seed, i); });
  parallel_fill(bias, [&](uint64_t i) { return 0.1f * uniform_pm1(seed + 1, i); });
  std::vector<uint16_t> wp(static_cast<size_t>(H * H)), wr(static_cast<size_t>(E * H));
  for (size_t i = 0; i < wp.size(); ++i) wp[i] = f32_to_bf16(0.04f * uniform_pm1(seed + 2, i));
  for (size_t i = 0; i < wr.size(); ++i) wr[i] = f32_to_bf16(0.05f * uniform_pm1(seed + 3, i));
  if (rt.ties) {  // experts 2j + 1 as 2j: equal logits, equal biases
    for (int64_t e = 1; e < E; e += 2) {
      std::memcpy(&wr[size_t(e * H)], &wr[size_t((e - 1) * H)], size_t(H) * 2);
      bias[size_t(e)] = bias[size_t(e - 1)];
    }
  }
  auto dx0 = to_device(x0), dbias = to_device(bias);
  auto dwp = to_device(wp), dwr = to_device(wr);
  const Matrix producer{WeightFormat::kBF16, H, H, dwp.data()};
  const Matrix router{WeightFormat::kBF16, E, H, dwr.data()};

  // The expert stacks: bf16 values, or NVFP4 codes with e4m3 block scales in [2^-3, 2^0].
  const int64_t gu_rows = n_stack * 2 * I, dn_rows = n_stack * H;
  cuda::DeviceBuffer<uint16_t> gu16, dn16;
  cuda::DeviceBuffer<uint8_t> gu4, dn4, gus, dns;
  cuda::DeviceBuffer<float> gu_inv, dn_inv;
  Matrix gate_up, down;
  if (c.format == WeightFormat::kFp8Block) {  // finite e4m3 codes, 128 x 128 block scales around 2^-9
    auto codes = [&](int64_t n, uint64_t s) {
      std::vector<uint8_t> v(static_cast<size_t>(n));
      for (size_t i = 0; i < v.size(); ++i) {
        const uint8_t b = uint8_t(splitmix64(s + i) & 0xff);
        v[i] = (b & 0x7f) == 0x7f ? uint8_t(b ^ 1) : b;  // not the NaN codes
      }
      return v;
    };
    auto scales = [&](int64_t rows, int64_t cols, uint64_t s) {
      std::vector<float> v(static_cast<size_t>(((rows + 127) / 128) * ((cols + 127) / 128)));
      for (size_t i = 0; i < v.size(); ++i) v[i] = std::exp2(-9.0f + 2.0f * uniform_pm1(s, i));
      return v;
    };
    gu4 = to_device(codes(gu_rows * H, seed + 6)), dn4 = to_device(codes(dn_rows * I, seed + 7));
    gu_inv = to_device(scales(gu_rows, H, seed + 8)), dn_inv = to_device(scales(dn_rows, I, seed + 9));
    gate_up = Matrix{WeightFormat::kFp8Block, gu_rows, H, gu4.data(), gu_inv.data(), 128, 128};
    down = Matrix{WeightFormat::kFp8Block, dn_rows, I, dn4.data(), dn_inv.data(), 128, 128};
  } else if (c.format == WeightFormat::kBF16) {
    std::vector<uint16_t> g(static_cast<size_t>(gu_rows * H)), d(static_cast<size_t>(dn_rows * I));
    for (size_t i = 0; i < g.size(); ++i) g[i] = f32_to_bf16(0.04f * uniform_pm1(seed + 4, i));
    for (size_t i = 0; i < d.size(); ++i) d[i] = f32_to_bf16(0.05f * uniform_pm1(seed + 5, i));
    gu16 = to_device(g), dn16 = to_device(d);
    gate_up = Matrix{WeightFormat::kBF16, gu_rows, H, gu16.data()};
    down = Matrix{WeightFormat::kBF16, dn_rows, I, dn16.data()};
  } else {
    auto codes = [&](int64_t n, uint64_t s) {
      std::vector<uint8_t> v(static_cast<size_t>(n));
      for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(splitmix64(s + i) & 0xff);
      return v;
    };
    auto scales = [&](int64_t n, uint64_t s) {  // e4m3 exponent field 4..7, any mantissa
      std::vector<uint8_t> v(static_cast<size_t>(n));
      for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(0x20 + (splitmix64(s + i) & 0x1f));
      return v;
    };
    gu4 = to_device_nvfp4(codes(gu_rows * H / 2, seed + 6)), dn4 = to_device_nvfp4(codes(dn_rows * I / 2, seed + 7));
    gus = to_device(scales(gu_rows * H / 16, seed + 8)), dns = to_device(scales(dn_rows * I / 16, seed + 9));
    gate_up = Matrix{WeightFormat::kNvfp4, gu_rows, H, gu4.data()};
    gate_up.scale_fp8 = gus.data(), gate_up.scale_2 = 0.02f;
    down = Matrix{WeightFormat::kNvfp4, dn_rows, I, dn4.data()};
    down.scale_fp8 = dns.data(), down.scale_2 = 0.02f;
  }

  auto dx = poisoned<float>(size_t(M * H));
  auto dlogits = poisoned<float>(size_t(M * E));
  auto didx = poisoned<int32_t>(size_t(M * top_k));
  auto dw = poisoned<float>(size_t(M * top_k));
  auto dy = poisoned<float>(size_t(M * H));
  auto dcounter = to_device(std::vector<uint32_t>(4, 0));
  auto dws = poisoned<uint8_t>(cuda::moe_experts_workspace_bytes(M, top_k, S, E, I) + 256);
  void* ws = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(dws.data()) + 255) / 256 * 256);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);

  // after_router: gate_up under PDL; self_routed: the router's logits only, the experts route.
  struct Out {
    std::vector<float> y, w;
    std::vector<int32_t> idx;
  };
  // Self-routing where it is on (one token): PEREGRINE_MOE_SELF_ROUTING=0 (or, for FP8,
  // PEREGRINE_MOE_FP8_SELF_ROUTING=0) takes moe_routing, then the experts (the fallback).
  const bool self_on = cuda::moe_self_routing_enabled() &&
                       (c.format != WeightFormat::kFp8Block || cuda::moe_fp8_self_routing_enabled()) && M == 1;
  auto chain = [&](bool after_router, bool self_routed, Out& out) {
    ASSERT_EQ(cudaMemsetAsync(dx.data(), 0xff, size_t(M * H) * 4, stream), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(dy.data(), 0, size_t(M * H) * 4, stream), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(didx.data(), 0xff, size_t(M * top_k) * 4, stream), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(dw.data(), 0xff, size_t(M * top_k) * 4, stream), cudaSuccess);
    LinearArgs la;
    la.x = dx0.data(), la.w = &producer, la.y = dx.data(), la.m = M;
    PG_ASSERT_OK(cuda::linear(la, stream));
    MoeRoutingArgs r;
    r.logits = dlogits.data(), r.bias = dbias.data(), r.expert_idx = didx.data(), r.expert_weight = dw.data();
    r.m = M, r.n_experts = E, r.top_k = top_k, r.n_group = rt.n_group, r.topk_group = rt.topk_group;
    r.scoring = rt.scoring, r.method = rt.method, r.norm_topk_prob = rt.norm;
    r.routed_scaling_factor = rt.scale;
    MoeRouterArgs ro;
    ro.x = dx.data(), ro.router = &router, ro.logits = dlogits.data(), ro.routing = r;
    PG_ASSERT_OK(cuda::moe_router(ro, dcounter.data(), stream, -1,
                                  self_routed ? cuda::MoeRouterMode::kLogitsOnly : cuda::MoeRouterMode::kRoute));
    MoeExpertsArgs me;
    me.x = dx.data(), me.y = dy.data(), me.m = M, me.hidden = H, me.inter = I, me.accumulate = true;
    me.gate_up = &gate_up, me.down = &down, me.n_experts = E, me.n_shared = S, me.top_k = top_k;
    me.expert_idx = didx.data(), me.expert_weight = dw.data(), me.after_router = after_router;
    const size_t ws_bytes = cuda::moe_experts_workspace_bytes(M, top_k, S, E, I);
    if (self_routed) {
      ASSERT_EQ(cuda::moe_experts_self_routing(me, r), self_on)
          << "this case should take the self-routing kernels unless they are off";
      PG_ASSERT_OK(cuda::moe_experts_routing(me, r, ws, ws_bytes, stream));
    } else {
      PG_ASSERT_OK(cuda::moe_experts(me, ws, ws_bytes, stream));
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    out.y = to_host(dy), out.idx = to_host(didx), out.w = to_host(dw);
  };

  Out ref;
  chain(false, false, ref);
  if (HasFatalFailure()) return;
  int64_t nan = 0;
  for (float v : ref.y) nan += std::isnan(v);
  ASSERT_EQ(nan, 0) << "the ordinary chain's output has NaNs";
  for (int rep = 0; rep < kReps; ++rep) {
    SCOPED_TRACE("repetition " + std::to_string(rep));
    Out got;
    chain(true, c.self_routing, got);
    if (HasFatalFailure()) return;
    ASSERT_EQ(std::memcmp(got.y.data(), ref.y.data(), ref.y.size() * 4), 0)
        << (c.self_routing ? "the self-routed experts differ" : "gate_up under PDL differs") << " from the ordinary chain";
    ASSERT_EQ(got.idx, ref.idx) << "expert_idx";
    ASSERT_EQ(std::memcmp(got.w.data(), ref.w.data(), ref.w.size() * 4), 0) << "expert_weight";
  }
  std::printf("[ moe pdl  ] %-16s m=%lld: %d chains %s, same bits (experts %s)\n", c.name, (long long)M, kReps,
              !c.self_routing ? "under PDL" : self_on ? "self-routed" : "routed before the experts",
              [&] {
                std::string e;
                for (int32_t i : ref.idx) e += (e.empty() ? "" : " ") + std::to_string(i);
                return e;
              }().c_str());
  cudaStreamDestroy(stream);
}

// V3's routing at 64 experts (8 groups of 8, 4 kept, top 8, one shared); V2-Lite's (softmax, greedy,
// top 6 unnormalised, scale 1); V2's (softmax, group-limited greedy: 8 groups, 3 kept, a group's max).
constexpr PdlRouting kV3{64, 1, 8, 8, 4, MoeScoring::kSigmoid, MoeTopk::kNoAuxTc, true, false, 2.5f};
constexpr PdlRouting kV2Lite{64, 2, 6, 1, 1, MoeScoring::kSoftmax, MoeTopk::kGreedy, false, false, 1.0f};
constexpr PdlRouting kV2{64, 2, 6, 8, 3, MoeScoring::kSoftmax, MoeTopk::kGroupLimitedGreedy, false, false, 16.0f};
constexpr PdlRouting kTies{16, 2, 5, 1, 1, MoeScoring::kSigmoid, MoeTopk::kNoAuxTc, true, true, 2.446f};
// The block routing's rank count at other splits of the keys over a block's threads: V3's and V2's
// whole expert counts (256: more experts than gate_up's threads; 160: groups of 20), and 18 experts
// (no 16-byte key loads).
constexpr PdlRouting kV3Full{256, 1, 8, 8, 4, MoeScoring::kSigmoid, MoeTopk::kNoAuxTc, true, false, 2.5f};
constexpr PdlRouting kV2Full{160, 2, 6, 8, 3, MoeScoring::kSoftmax, MoeTopk::kGroupLimitedGreedy, false, false, 16.0f};
constexpr PdlRouting kE18{18, 1, 4, 1, 1, MoeScoring::kSigmoid, MoeTopk::kNoAuxTc, true, false, 2.446f};
const PdlCase kPdlCases[] = {
    {"bf16_m1", WeightFormat::kBF16, 1},
    {"bf16_m3", WeightFormat::kBF16, 3},
    {"nvfp4_m1", WeightFormat::kNvfp4, 1},
    {"nvfp4_m3", WeightFormat::kNvfp4, 3},
    {"nvfp4_m1_self", WeightFormat::kNvfp4, 1, true},
    {"nvfp4_m1_self_v3", WeightFormat::kNvfp4, 1, true, kV3},
    {"nvfp4_m1_self_v2lite", WeightFormat::kNvfp4, 1, true, kV2Lite},
    {"nvfp4_m1_self_v2", WeightFormat::kNvfp4, 1, true, kV2},
    {"nvfp4_m1_self_ties", WeightFormat::kNvfp4, 1, true, kTies},
    {"nvfp4_m1_self_v3_256", WeightFormat::kNvfp4, 1, true, kV3Full},
    {"nvfp4_m1_self_v2_160", WeightFormat::kNvfp4, 1, true, kV2Full},
    {"nvfp4_m1_self_e18", WeightFormat::kNvfp4, 1, true, kE18},
    // 2..8 tokens: self-routing is one token's, so these take moe_routing, then the experts, under PDL
    // (a 2..8-token self-routing, session 43, measured 6.8% slower at moonlight's k = 3 verify step).
    {"nvfp4_m2_self", WeightFormat::kNvfp4, 2, true},
    {"nvfp4_m3_self_v3", WeightFormat::kNvfp4, 3, true, kV3},
    {"nvfp4_m4_self_v2lite", WeightFormat::kNvfp4, 4, true, kV2Lite},
    {"nvfp4_m4_self_v2", WeightFormat::kNvfp4, 4, true, kV2},
    {"nvfp4_m2_self_ties", WeightFormat::kNvfp4, 2, true, kTies},
    {"nvfp4_m8_self_v3_256", WeightFormat::kNvfp4, 8, true, kV3Full},
    {"nvfp4_m5_self_v2_160", WeightFormat::kNvfp4, 5, true, kV2Full},
    {"nvfp4_m8_self_e18", WeightFormat::kNvfp4, 8, true, kE18},
    // The FP8 tensor-core experts: under PDL at 1 and 3 tokens, self-routed at one token (down reads
    // gate_up's published routing after its wait).
    {"fp8_m1", WeightFormat::kFp8Block, 1},
    {"fp8_m3", WeightFormat::kFp8Block, 3},
    {"fp8_m1_self", WeightFormat::kFp8Block, 1, true},
    {"fp8_m1_self_v3", WeightFormat::kFp8Block, 1, true, kV3},
    {"fp8_m1_self_v2", WeightFormat::kFp8Block, 1, true, kV2},
    {"fp8_m1_self_ties", WeightFormat::kFp8Block, 1, true, kTies},
    {"fp8_m1_self_v3_256", WeightFormat::kFp8Block, 1, true, kV3Full},
};

INSTANTIATE_TEST_SUITE_P(Chains, MoeLayerPdlCuda, ::testing::ValuesIn(kPdlCases),
                         [](const ::testing::TestParamInfo<PdlCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace pg::ops::test
