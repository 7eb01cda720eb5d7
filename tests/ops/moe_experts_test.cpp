// ops::cuda::moe_experts against ops::cpu::moe_experts on seeded random inputs: moonlight
// (64 + 2 experts, top 6, bf16, FP8 128x128 and NVFP4) at m = 1, 2, 8, 33, DeepSeek-V3 (256 + 1,
// top 8, FP8 and NVFP4) at m = 1, 2, 4, 8, 64, the tiny models' odd dims (scalar path), every token on the same experts,
// duplicate ids, shared-only and routed-only layers, accumulate with a row gap, prefill-sized m;
// the *_verify cases cover m = 2..8 (decode batches, speculative verify steps), whose outputs must
// also equal, bit for bit, their tokens run alone.
// Weights of experts no token chose stay NaN on the device (NVFP4: their block scales and scale_2):
// reading one poisons the output. NVFP4 stacks carry one scale_2 per expert part (gate, up, down),
// each expert being its own ModelOpt tensor.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/moe_experts.h"
#include "ops/cuda/moe_experts/moe_experts.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {
namespace {

constexpr WeightFormat kNvfp4Format = WeightFormat::kNvfp4;

// Tolerance, derived as in linear_test.cpp (Higham & Mary's probabilistic bound, lambda = 10:
// a sum of n rounded terms errs by <= lambda sqrt(n) u sum|terms| with probability 1 - 1e-18):
//  gate/up: eg = lambda (sqrt(n_cpu) + sqrt(n_gpu)) u sum_i |x_i w_i| over K = hidden, where the
//    CPU sums ceil(K/16) + 7 roundings per chain (incl. the fp8 dequantization) and the GPU
//    2 ceil(K/32) + 10 (chunk dot, chunk add, shuffle tree);
//  h = silu(g) u: |dh| <= 1.1 eg |u| + (|silu(g)| + 1.1 eg) eu + 8 u |h|  (|silu'| <= 1.1; expf
//    and the divide differ by a few ulps between host and device);
//  down: ez = sum_j |d_j| |dh_j| + lambda (sqrt(n_cpu) + sqrt(n_gpu)) u sum_j |d_j h_j| over K = inter;
//  combine: sum_p |w_p| ez_p + (n_terms + 2) u sum_p |w_p z_p|; accumulate adds 2 u (|y0| + ...).
constexpr double kLambda = 10.0;
constexpr double kMinCosine = 1.0 - 1e-6;
// NVFP4 on the f16 tensor cores (MoeExpertsArgs::f16_activations, the default, on each stack's
// vector path: K % 32 == 0): x (gate_up) and h (down) are rounded to f16, relative 2^-11 or 2^-25
// absolute below f16's normal range, and the tensor core's f32 accumulation truncates (no
// probabilistic bound): its dot over K errs by < (17 ceil(K/16) + 16) 2^-23 sum|terms| (as in
// linear_test.cpp). So eg gains (2^-11 + that) sum|x g| + 2^-25 sum|g|, the down dot
// (2^-11 + that) sum|d h| + 2^-25 sum|d| on top of the propagated dh.
constexpr double kF16Unit = 1.0 / 2048;
constexpr double kF16SubnormalAbs = 0x1p-25;
constexpr double kTruncUnit = 0x1p-23;
double mma_accum_bound(int64_t k) { return (17 * std::ceil(double(k) / 16) + 16) * kTruncUnit; }

enum class Routing { kRandom, kSameExperts, kDuplicates };

struct MoeCase {
  const char* name;
  WeightFormat format;
  int64_t n_experts, n_shared, top_k, hidden, inter;
  std::vector<int64_t> ms;
  int64_t block = 128;
  Routing routing = Routing::kRandom;
  bool accumulate = false;
  int64_t y_pad = 0;
  bool exact = false;  // f16_activations = false: the f32-x kernels
};
void PrintTo(const MoeCase& c, std::ostream* os) { *os << c.name; }

// One stacked weight on host and device. Host memory is allocated untouched: only the experts
// some token chose (and the shared ones) are filled, so V3's 11 GB stack costs what it uses.
struct Stack {
  Matrix host, dev;
  int64_t elem_bytes = 0, rows_per_expert = 0;
  int64_t parts = 1;  // NVFP4: scale_2 groups per expert (gate and up: 2)
  std::unique_ptr<uint8_t[]> data;
  std::unique_ptr<float[]> scale;      // fp8 scale_inv, or NVFP4 per-group scale_2
  std::unique_ptr<uint8_t[]> scale8;   // NVFP4 e4m3 block scales
  void* ddata = nullptr;
  float* dscale = nullptr;
  uint8_t* dscale8 = nullptr;
  ~Stack() {
    if (ddata) cudaFree(ddata);
    if (dscale) cudaFree(dscale);
    if (dscale8) cudaFree(dscale8);
  }
  // Bytes of `rows` rows of data.
  int64_t row_bytes(int64_t rows) const {
    return host.format == WeightFormat::kNvfp4 ? rows * host.cols / 2 : rows * host.cols * elem_bytes;
  }
};

bool make_stack(Stack& s, WeightFormat f, int64_t n_all, int64_t rows_per_expert, int64_t cols, int64_t block,
                int64_t parts = 1) {
  s.elem_bytes = f == WeightFormat::kF32 ? 4 : f == WeightFormat::kBF16 ? 2 : 1;
  s.rows_per_expert = rows_per_expert;
  s.parts = parts;
  s.host = Matrix{f, n_all * rows_per_expert, cols, nullptr, nullptr, block, block};
  const size_t bytes = size_t(s.row_bytes(s.host.rows));
  s.data.reset(new uint8_t[bytes]);
  s.host.data = s.data.get();
  if (cudaMalloc(&s.ddata, bytes) != cudaSuccess || cudaMemset(s.ddata, 0xff, bytes) != cudaSuccess) return false;
  s.dev = s.host;
  s.dev.data = s.ddata;
  if (f == WeightFormat::kFp8Block) {
    const size_t n = size_t(((s.host.rows + block - 1) / block) * s.host.scale_cols());
    s.scale.reset(new float[n]);
    s.host.scale_inv = s.scale.get();
    if (cudaMalloc(reinterpret_cast<void**>(&s.dscale), n * 4) != cudaSuccess || cudaMemset(s.dscale, 0xff, n * 4) != cudaSuccess) return false;
    s.dev.scale_inv = s.dscale;
  }
  if (f == WeightFormat::kNvfp4) {  // NaN block scales (0xff) and scale_2 until an expert is filled
    const size_t n8 = size_t(s.host.rows * cols / 16), n2 = size_t(n_all * parts);
    s.scale8.reset(new uint8_t[n8]);
    s.scale.reset(new float[n2]);
    s.host.scale_fp8 = s.scale8.get();
    s.host.scale_2_rows = s.scale.get();
    s.host.scale_2_group_rows = rows_per_expert / parts;
    if (cudaMalloc(reinterpret_cast<void**>(&s.dscale8), n8) != cudaSuccess || cudaMemset(s.dscale8, 0xff, n8) != cudaSuccess)
      return false;
    if (cudaMalloc(reinterpret_cast<void**>(&s.dscale), n2 * 4) != cudaSuccess || cudaMemset(s.dscale, 0xff, n2 * 4) != cudaSuccess)
      return false;
    s.dev = s.host;
    s.dev.data = s.ddata;
    s.dev.scale_fp8 = s.dscale8;
    s.dev.scale_2_rows = s.dscale;
  }
  return true;
}

// Fills expert e's rows with seeded values and uploads them.
bool fill_expert(Stack& s, int64_t e, uint64_t seed) {
  const int64_t cols = s.host.cols, r0 = e * s.rows_per_expert;
  const bool fp4 = s.host.format == WeightFormat::kNvfp4;
  const int64_t n = fp4 ? s.row_bytes(s.rows_per_expert) : s.rows_per_expert * cols;  // NVFP4: bytes
  uint8_t* base = s.data.get() + s.row_bytes(r0);
  const float amp = 2.0f / std::sqrt(float(cols));
  ThreadPool::global().parallel_for(n, [&](int64_t b, int64_t end) {
    for (int64_t i = b; i < end; ++i) {
      const uint64_t gi = uint64_t(r0 * cols + i);
      switch (s.host.format) {
        case WeightFormat::kNvfp4:  // every code pair
          base[i] = uint8_t(splitmix64(seed ^ (gi * 0x9e3779b97f4a7c15ull)) >> 56);
          break;
        case WeightFormat::kF32: reinterpret_cast<float*>(base)[i] = amp * uniform_pm1(seed, gi); break;
        case WeightFormat::kBF16: reinterpret_cast<uint16_t*>(base)[i] = f32_to_bf16(amp * uniform_pm1(seed, gi)); break;
        case WeightFormat::kFp8Block: {  // every finite e4m3 code (the NaN codes become +-448)
          const uint8_t v = uint8_t(splitmix64(seed ^ (gi * 0x9e3779b97f4a7c15ull)) >> 56);
          base[i] = (v & 0x7f) == 0x7f ? uint8_t(v ^ 1) : v;
          break;
        }
      }
    }
  }, 1 << 16);
  if (cudaMemcpy(static_cast<uint8_t*>(s.ddata) + s.row_bytes(r0), base, size_t(s.row_bytes(s.rows_per_expert)),
                 cudaMemcpyHostToDevice) != cudaSuccess)
    return false;
  if (fp4 && cuda::nvfp4_to_device_layout(static_cast<uint8_t*>(s.ddata) + s.row_bytes(r0),
                                          size_t(s.row_bytes(s.rows_per_expert)), nullptr) != cudaSuccess)
    return false;
  if (fp4) {
    // Block scales with exponent fields 4..11 (2^-3 .. 30) and scale_2 ~ 1.6 / (6 * 16 * sqrt(cols))
    // per part, so the weights' RMS is about 1 / sqrt(cols) as the other formats'.
    const int64_t n8 = s.rows_per_expert * cols / 16, s0 = r0 * cols / 16;
    for (int64_t i = 0; i < n8; ++i) {
      const uint64_t rr = splitmix64((seed + 1) ^ (uint64_t(s0 + i) * 0x9e3779b97f4a7c15ull));
      s.scale8[size_t(s0 + i)] = uint8_t(((4 + (rr >> 60) % 8) << 3) | ((rr >> 20) & 7));
    }
    for (int64_t q = 0; q < s.parts; ++q)
      s.scale[size_t(e * s.parts + q)] =
          (1.6f / (96.0f * std::sqrt(float(cols)))) * (1.5f + uniform_pm1(seed + 2, uint64_t(e * s.parts + q)));
    if (cudaMemcpy(s.dscale8 + s0, s.scale8.get() + s0, size_t(n8), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(s.dscale + e * s.parts, s.scale.get() + e * s.parts, size_t(s.parts) * 4, cudaMemcpyHostToDevice) !=
            cudaSuccess)
      return false;
  }
  if (s.host.format == WeightFormat::kFp8Block) {  // rows_per_expert is a multiple of block_rows
    const int64_t sc = s.host.scale_cols(), s0 = r0 / s.host.block_rows * sc;
    const int64_t ns = s.rows_per_expert / s.host.block_rows * sc;
    for (int64_t i = 0; i < ns; ++i) s.scale[size_t(s0 + i)] = std::exp2(-9.0f + 3.0f * uniform_pm1(seed + 1, uint64_t(s0 + i)));
    if (cudaMemcpy(s.dscale + s0, s.scale.get() + s0, size_t(ns) * 4, cudaMemcpyHostToDevice) != cudaSuccess)
      return false;
  }
  return true;
}

struct Routed {
  std::vector<int32_t> idx;
  std::vector<float> weight;
};

Routed route(const MoeCase& c, int64_t m, uint64_t seed) {
  Routed r;
  r.idx.resize(size_t(m * c.top_k));
  r.weight.resize(r.idx.size());
  std::vector<int32_t> perm(static_cast<size_t>(c.n_experts));
  for (int64_t t = 0; t < m; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t k = 0; k < c.top_k; ++k) {  // partial Fisher-Yates: top_k distinct experts
      const int64_t j = k + int64_t(splitmix64(seed + uint64_t(t * 977 + k)) % uint64_t(c.n_experts - k));
      std::swap(perm[size_t(k)], perm[size_t(j)]);
      int32_t e = perm[size_t(k)];
      if (c.routing == Routing::kSameExperts) e = int32_t((3 + 7 * k) % c.n_experts);
      if (c.routing == Routing::kDuplicates && k == 1) e = r.idx[size_t(t * c.top_k)];
      r.idx[size_t(t * c.top_k + k)] = e;
      r.weight[size_t(t * c.top_k + k)] = 0.05f + 0.5f * (1.0f + uniform_pm1(seed + 5, uint64_t(t * c.top_k + k)));
    }
  }
  return r;
}

// Per-output tolerance (see the top of the file), in double, from the host weights.
std::vector<double> tolerance(const MoeCase& c, const Stack& gu, const Stack& dn, const std::vector<float>& x,
                              const Routed& r, int64_t m, const std::vector<float>& y0) {
  // The f16 tensor-core kernels per stack (launch.cpp: NVFP4, f16 activations, K % 32 == 0; FP8
  // where ops::fp8_experts_mma accepts the stack).
  const bool fp8_gu = !c.exact && fp8_experts_mma(gu.host, c.hidden);
  const bool fp8_dn = !c.exact && fp8_experts_mma(dn.host, c.inter);
  const bool f16_gu = (c.format == WeightFormat::kNvfp4 && !c.exact && c.hidden % 32 == 0) || fp8_gu;
  const bool f16_dn = (c.format == WeightFormat::kNvfp4 && !c.exact && c.inter % 32 == 0) || fp8_dn;
  const int64_t H = c.hidden, I = c.inter, K = c.top_k;
  const double u = kF32Unit;
  // NVFP4: the GPU chains 16-term block dots and their scaled adds, then scales by scale_2 (one
  // more rounding per term on either side, as in linear_test.cpp).
  const bool fp4 = c.format == WeightFormat::kNvfp4;
  auto chains = [fp4](int64_t k) {
    return fp4 ? std::sqrt(std::ceil(k / 16.0) + 9) + std::sqrt(2 * std::ceil(k / 16.0) + 28)
               : std::sqrt(std::ceil(k / 16.0) + 7) + std::sqrt(2 * std::ceil(k / 32.0) + 10);
  };
  // Pairs (token, expert, |weight|): routed, then shared.
  struct P { int64_t t, e; double w; };
  std::vector<P> pairs;
  for (int64_t t = 0; t < m; ++t)
    for (int64_t k = 0; k < K; ++k) pairs.push_back({t, r.idx[size_t(t * K + k)], std::fabs(r.weight[size_t(t * K + k)])});
  for (int64_t s = 0; s < c.n_shared; ++s)
    for (int64_t t = 0; t < m; ++t) pairs.push_back({t, c.n_experts + s, 1.0});
  const int64_t np = int64_t(pairs.size());
  std::vector<double> habs(static_cast<size_t>(np * I)), eh(size_t(np * I));
  ThreadPool::global().parallel_for(np, [&](int64_t p0, int64_t p1) {
    std::vector<float> g(static_cast<size_t>(H)), uw(static_cast<size_t>(H));
    for (int64_t p = p0; p < p1; ++p) {
      const float* xt = x.data() + pairs[size_t(p)].t * H;
      for (int64_t j = 0; j < I; ++j) {
        matrix_row_to_f32(gu.host, pairs[size_t(p)].e * 2 * I + j, g.data());
        matrix_row_to_f32(gu.host, pairs[size_t(p)].e * 2 * I + I + j, uw.data());
        double gs = 0, us = 0, ga = 0, ua = 0, gw = 0, uww = 0;
        for (int64_t i = 0; i < H; ++i) {
          gs += double(xt[i]) * g[size_t(i)], ga += std::fabs(double(xt[i]) * g[size_t(i)]);
          us += double(xt[i]) * uw[size_t(i)], ua += std::fabs(double(xt[i]) * uw[size_t(i)]);
          gw += std::fabs(double(g[size_t(i)])), uww += std::fabs(double(uw[size_t(i)]));
        }
        double eg = kLambda * chains(H) * u * ga, eu = kLambda * chains(H) * u * ua;
        if (f16_gu) {
          eg += (kF16Unit + mma_accum_bound(H)) * ga + kF16SubnormalAbs * gw;
          eu += (kF16Unit + mma_accum_bound(H)) * ua + kF16SubnormalAbs * uww;
        }
        const double sg = gs / (1 + std::exp(-gs));
        habs[size_t(p * I + j)] = std::fabs(sg * us);
        eh[size_t(p * I + j)] = 1.1 * eg * std::fabs(us) + (std::fabs(sg) + 1.1 * eg) * eu + 8 * u * std::fabs(sg * us);
      }
    }
  });
  std::vector<std::vector<int64_t>> of_token(static_cast<size_t>(m));
  for (int64_t p = 0; p < np; ++p) of_token[size_t(pairs[size_t(p)].t)].push_back(p);
  const int64_t ys = H + c.y_pad;
  std::vector<double> tol(static_cast<size_t>(m * H));
  ThreadPool::global().parallel_for(H, [&](int64_t o0, int64_t o1) {
    std::vector<float> d(static_cast<size_t>(I));
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t t = 0; t < m; ++t) {
        double sum = 0, mag = 0;
        const auto& ps = of_token[size_t(t)];
        for (int64_t p : ps) {
          matrix_row_to_f32(dn.host, pairs[size_t(p)].e * H + o, d.data());
          double s1 = 0, s2 = 0, sd = 0;
          for (int64_t j = 0; j < I; ++j) {
            s1 += std::fabs(double(d[size_t(j)])) * eh[size_t(p * I + j)];
            s2 += std::fabs(double(d[size_t(j)])) * habs[size_t(p * I + j)];
            sd += std::fabs(double(d[size_t(j)]));
          }
          // f16: h rounded (relative to the computed h, |h| + |dh| <= habs + eh, folded into s1's
          // factor) and the truncating accumulation.
          const double down16 = f16_dn ? (kF16Unit + mma_accum_bound(I)) * (s2 + s1) + kF16SubnormalAbs * sd : 0.0;
          sum += pairs[size_t(p)].w * (s1 + kLambda * chains(I) * u * s2 + down16);
          mag += pairs[size_t(p)].w * s2;
        }
        // f16 path: the planned down sums K slices of the combine (<= 8 more roundings, nvfp4_kernel.cu).
        double tt = sum + double(ps.size() + 2 + (f16_dn ? 8 : 0)) * u * mag;
        if (c.accumulate) tt += 2 * u * (std::fabs(double(y0[size_t(t * ys + o)])) + mag);
        tol[size_t(t * H + o)] = tt;
      }
  });
  return tol;
}

void run_case(const MoeCase& c) {
  const uint64_t seed = seed_of(c.name);
  const int64_t n_all = c.n_experts + c.n_shared, H = c.hidden, ys = c.hidden + c.y_pad;
  std::vector<Routed> routes;
  std::set<int64_t> used;
  for (int64_t s = 0; s < c.n_shared; ++s) used.insert(c.n_experts + s);
  for (int64_t m : c.ms) {
    routes.push_back(route(c, m, seed + uint64_t(m)));
    used.insert(routes.back().idx.begin(), routes.back().idx.end());
  }
  Stack gu, dn;
  ASSERT_TRUE(make_stack(gu, c.format, n_all, 2 * c.inter, c.hidden, c.block, /*parts=*/2));
  ASSERT_TRUE(make_stack(dn, c.format, n_all, c.hidden, c.inter, c.block));
  for (int64_t e : used) {
    ASSERT_TRUE(fill_expert(gu, e, seed + 11));
    ASSERT_TRUE(fill_expert(dn, e, seed + 13));
  }

  for (size_t mi = 0; mi < c.ms.size(); ++mi) {
    const int64_t m = c.ms[mi];
    const Routed& r = routes[mi];
    SCOPED_TRACE("m=" + std::to_string(m));
    std::vector<float> x(static_cast<size_t>(m * H));
    parallel_fill(x, [&](uint64_t i) { return uniform_pm1(seed + 2 + uint64_t(m), i); });
    std::vector<float> y0(static_cast<size_t>(m * ys));
    if (c.accumulate) parallel_fill(y0, [&](uint64_t i) { return 4.0f * uniform_pm1(seed + 3, i); });
    else std::fill(y0.begin(), y0.end(), std::numeric_limits<float>::quiet_NaN());

    MoeExpertsArgs ha;
    ha.x = x.data(), ha.expert_idx = r.idx.data(), ha.expert_weight = r.weight.data();
    ha.gate_up = &gu.host, ha.down = &dn.host;
    ha.m = m, ha.hidden = H, ha.inter = c.inter, ha.n_experts = c.n_experts, ha.top_k = c.top_k;
    ha.n_shared = c.n_shared, ha.y_stride = ys, ha.accumulate = c.accumulate;
    ha.f16_activations = !c.exact;
    std::vector<float> y_cpu = y0;
    ha.y = y_cpu.data();
    PG_ASSERT_OK(validate(ha));
    cpu::moe_experts(ha, ThreadPool::global());
    const std::vector<double> tol = tolerance(c, gu, dn, x, r, m, y0);

    auto dx = to_device(x);
    auto didx = to_device(r.idx);
    auto dw = to_device(r.weight);
    auto dy = to_device(y0);
    if (!c.accumulate) PG_ASSERT_OK(dy.fill_bytes(0xff));
    const size_t ws_bytes = cuda::moe_experts_workspace_bytes(m, c.top_k, c.n_shared, c.n_experts, c.inter);
    auto ws_r = cuda::DeviceBuffer<uint8_t>::create(ws_bytes);
    PG_ASSERT_OK(ws_r.status());
    cuda::DeviceBuffer<uint8_t> ws = std::move(ws_r).value();
    PG_ASSERT_OK(ws.fill_bytes(0xff));  // the kernels must not rely on a zeroed workspace
    MoeExpertsArgs da = ha;
    da.x = dx.data(), da.expert_idx = didx.data(), da.expert_weight = dw.data();
    da.gate_up = &gu.dev, da.down = &dn.dev, da.y = dy.data();
    PG_ASSERT_OK(cuda::moe_experts(da, ws.data(), ws.size(), nullptr));
    ASSERT_TRUE(sync_ok());
    const std::vector<float> y_gpu = to_host(dy);

    std::vector<float> got, ref;
    int64_t gap_touched = 0;
    for (int64_t t = 0; t < m; ++t) {
      for (int64_t o = 0; o < H; ++o) got.push_back(y_gpu[size_t(t * ys + o)]), ref.push_back(y_cpu[size_t(t * ys + o)]);
      for (int64_t o = H; o < ys; ++o) {
        const size_t i = size_t(t * ys + o);
        if (c.accumulate ? y_gpu[i] != y0[i] : !is_poison(y_gpu[i])) ++gap_touched;
      }
    }
    const Diff d = compare(got.data(), ref.data(), int64_t(got.size()), [&](int64_t i) { return tol[size_t(i)]; });
    EXPECT_EQ(d.non_finite, 0) << "unwritten, non-finite or unselected-expert outputs: " << d.summary();
    EXPECT_EQ(d.over_tol, 0) << d.summary();
    EXPECT_GE(d.cosine, kMinCosine) << d.summary();
    EXPECT_EQ(gap_touched, 0) << "elements between rows (y_stride > hidden) were written";

    // Deterministic: a second run gives the same bits (no float atomics, a fixed order).
    if (!c.accumulate) {
      PG_ASSERT_OK(dy.fill_bytes(0xff));
      PG_ASSERT_OK(cuda::moe_experts(da, ws.data(), ws.size(), nullptr));
      ASSERT_TRUE(sync_ok());
      const std::vector<float> again = to_host(dy);
      EXPECT_EQ(0, std::memcmp(again.data(), y_gpu.data(), again.size() * sizeof(float))) << "run-to-run difference";
    }
    // NVFP4 at m = 1 on the tensor cores: the down kernel with every slot's h staged per block
    // (MoeNvfp4Variant::down_staged) and the one with the block's weights prefetched to shared
    // memory (down_prefetch; the default where its grid fits) must give the per-lane path's bits;
    // so must gate_up at 8 warps per block instead of the default 4.
    if (m == 1 && c.format == kNvfp4Format && !c.exact && c.hidden % 32 == 0 && c.inter % 32 == 0) {
      for (int variant : {0, 1, 2, 3, 4, 5}) {
        SCOPED_TRACE(variant == 0   ? "down per lane"
                     : variant == 1 ? "down staged"
                     : variant == 2 ? "down prefetch"
                     : variant == 3 ? "gate_up 8 warps"
                     : variant == 4 ? "down staged from h's f32 rows"
                                    : "down prefetch from h's f32 rows");
        cuda::MoeNvfp4Variant v;
        v.down_staged = variant == 1 || variant == 4;
        v.down_prefetch = variant == 2 || variant == 5;
        v.gate_up_warps = variant == 3 ? 8 : 0;
        v.h_frags = variant < 4;
        if (c.accumulate) PG_ASSERT_OK(dy.upload(y0.data(), y0.size()));  // y += ... starts from y0 again
        else PG_ASSERT_OK(dy.fill_bytes(0xff));
        PG_ASSERT_OK(cuda::moe_experts_variant(da, v, ws.data(), ws.size(), nullptr));
        ASSERT_TRUE(sync_ok());
        const std::vector<float> yv = to_host(dy);
        EXPECT_EQ(0, std::memcmp(yv.data(), y_gpu.data(), yv.size() * sizeof(float)))
            << "the m = 1 down differs from the default launch's bits";
      }
    }
    // FP8 on the tensor cores at decode sizes (the direct paths; the planned one has no variants):
    // the down (m = 1) at one tile with h staged or per lane and at two tiles, and gate_up with x
    // per lane, give the default launch's bits.
    if (!c.exact && m <= 8 && fp8_experts_mma(dn.host, c.inter) && fp8_experts_mma(gu.host, c.hidden)) {
      for (int variant : {0, 1, 2, 3, 4}) {
        SCOPED_TRACE(variant == 0   ? "fp8 down 1 tile, h staged"
                     : variant == 1 ? "fp8 down 1 tile, h per lane"
                     : variant == 2 ? "fp8 down 2 tiles, h per lane"
                     : variant == 3 ? "fp8 gate_up x per lane"
                                    : "fp8 down 1 tile, h staged from its f32 rows");
        cuda::MoeNvfp4Variant v;
        v.fp8_down_tiles = variant == 2 ? 2 : variant < 2 || variant == 4 ? 1 : 0;
        v.fp8_down_staged = variant != 1;
        v.fp8_gate_up_staged = variant != 3;
        v.h_frags = variant != 4;
        if (c.accumulate) PG_ASSERT_OK(dy.upload(y0.data(), y0.size()));
        else PG_ASSERT_OK(dy.fill_bytes(0xff));
        PG_ASSERT_OK(cuda::moe_experts_variant(da, v, ws.data(), ws.size(), nullptr));
        ASSERT_TRUE(sync_ok());
        const std::vector<float> yv = to_host(dy);
        EXPECT_EQ(0, std::memcmp(yv.data(), y_gpu.data(), yv.size() * sizeof(float)))
            << "the FP8 variant differs from the default launch's bits";
      }
    }
    // NVFP4 at m = 2..8 on the tensor cores: gate_up at 8 warps per block, gate_up with x read per
    // lane instead of staged per block, the down without its rings (h per lane), and gate_up a block a
    // (slot, row tile) unit or on its persistent grid of 3 blocks (a block takes several units, a shared
    // expert's and routed ones; K in halves at 2 blocks below) give the default's bits (the resident
    // persistent grid where a block a unit would not fit at once).
    if (m >= 2 && m <= 8 && c.format == kNvfp4Format && !c.exact && c.hidden % 32 == 0 && c.inter % 32 == 0 &&
        !c.accumulate) {
      for (int variant : {0, 1, 2, 3, 4, 5}) {
        SCOPED_TRACE(variant == 0   ? "gate_up 8 warps, x staged, down rings"
                     : variant == 1 ? "gate_up x per lane, down rings"
                     : variant == 2 ? "gate_up x staged, down h per lane"
                     : variant == 3 ? "down rings, h staged from its f32 rows"
                     : variant == 4 ? "gate_up a block a unit"
                                    : "gate_up persistent, 3 blocks");
        cuda::MoeNvfp4Variant v;
        v.gate_up_warps = variant == 0 ? 8 : 0;
        v.gate_up_multi_staged = variant != 1;
        v.down_multi_ring = variant != 2;
        v.h_frags = variant != 3;
        v.gate_up_persist_blocks = variant == 4 ? 0 : variant == 5 ? 3 : -1;
        PG_ASSERT_OK(dy.fill_bytes(0xff));
        PG_ASSERT_OK(cuda::moe_experts_variant(da, v, ws.data(), ws.size(), nullptr));
        ASSERT_TRUE(sync_ok());
        const std::vector<float> yv = to_host(dy);
        EXPECT_EQ(0, std::memcmp(yv.data(), y_gpu.data(), yv.size() * sizeof(float)))
            << "the gate_up variant differs from the default's bits";
      }
    }
    // m = 2..8 take the direct multi path (bf16 / f32, NVFP4 and FP8 on the f16 tensor cores):
    // each token's output must have the bits it has when the token runs alone (m = 1, the direct
    // path): the same dot products in the same order (NVFP4, FP8: the token as any of the mma's 8
    // columns, K cut in the same slices, x staged or per lane), the same adds in the contract's order.
    // (Only while that path is on: the plan path sums the same terms, not always in the same bits.)
    const bool multi_kernels = c.format != kNvfp4Format || (!c.exact && c.hidden % 32 == 0 && c.inter % 32 == 0);
    if (cuda::moe_direct_multi_enabled() && m >= 2 && m <= 8 && m * c.top_k <= 64 && multi_kernels &&
        !c.accumulate) {
      int64_t differ = 0, first_bad = -1;
      for (int64_t t = 0; t < m; ++t) {
        const std::vector<float> x1(x.begin() + t * H, x.begin() + (t + 1) * H);
        const std::vector<int32_t> i1(r.idx.begin() + t * c.top_k, r.idx.begin() + (t + 1) * c.top_k);
        const std::vector<float> w1(r.weight.begin() + t * c.top_k, r.weight.begin() + (t + 1) * c.top_k);
        auto dx1 = to_device(x1);
        auto di1 = to_device(i1);
        auto dw1 = to_device(w1);
        auto dy1 = to_device(std::vector<float>(static_cast<size_t>(ys), 0.0f));
        PG_ASSERT_OK(dy1.fill_bytes(0xff));
        MoeExpertsArgs a1 = da;
        a1.m = 1, a1.x = dx1.data(), a1.y = dy1.data();
        a1.expert_idx = c.top_k ? di1.data() : nullptr, a1.expert_weight = c.top_k ? dw1.data() : nullptr;
        PG_ASSERT_OK(cuda::moe_experts(a1, ws.data(), ws.size(), nullptr));
        ASSERT_TRUE(sync_ok());
        const std::vector<float> y1 = to_host(dy1);
        for (int64_t o = 0; o < H; ++o)
          if (std::memcmp(&y1[size_t(o)], &y_gpu[size_t(t * ys + o)], sizeof(float)) != 0) {
            if (first_bad < 0) first_bad = t * H + o;
            ++differ;
          }
      }
      EXPECT_EQ(differ, 0) << differ << " outputs differ from the tokens run alone, first at token "
                           << first_bad / std::max<int64_t>(H, 1) << " row " << first_bad % std::max<int64_t>(H, 1);
    }
    // NVFP4 gate_up with K in two halves (MoeNvfp4Variant::gate_up_k_split = 2, the default at V3's
    // hidden; other bits than one K by design): within the split every path agrees, so decode,
    // verify and batches stay bit-identical per token: x staged (the 4-rows'-warps x 2-halves
    // blocks) and x per lane (one warp, two sums), and at m = 2..8 each token run alone at m = 1.
    if (c.format == kNvfp4Format && !c.exact && c.hidden % 32 == 0 && c.inter % 32 == 0 && !c.accumulate && m <= 8) {
      auto run = [&](int64_t mm, const float* xp, const int32_t* ip, const float* wp, bool staged, float* yp,
                     int persist_blocks = 0) {
        cuda::MoeNvfp4Variant v;
        v.gate_up_k_split = 2;
        v.gate_up_multi_staged = staged;
        v.gate_up_persist_blocks = persist_blocks;
        MoeExpertsArgs a = da;
        a.m = mm, a.x = xp, a.y = yp;
        a.expert_idx = c.top_k ? ip : nullptr, a.expert_weight = c.top_k ? wp : nullptr;
        return cuda::moe_experts_variant(a, v, ws.data(), ws.size(), nullptr);
      };
      PG_ASSERT_OK(dy.fill_bytes(0xff));
      PG_ASSERT_OK(run(m, dx.data(), didx.data(), dw.data(), true, dy.data()));
      ASSERT_TRUE(sync_ok());
      const std::vector<float> y_split = to_host(dy);
      std::vector<float> got_split;  // against the CPU within the same derived tolerance
      for (int64_t t = 0; t < m; ++t)
        for (int64_t o = 0; o < H; ++o) got_split.push_back(y_split[size_t(t * ys + o)]);
      const Diff ds =
          compare(got_split.data(), ref.data(), int64_t(got_split.size()), [&](int64_t i) { return tol[size_t(i)]; });
      EXPECT_EQ(ds.non_finite, 0) << "K in halves: " << ds.summary();
      EXPECT_EQ(ds.over_tol, 0) << "K in halves: " << ds.summary();
      if (m >= 2) {
        PG_ASSERT_OK(dy.fill_bytes(0xff));
        PG_ASSERT_OK(run(m, dx.data(), didx.data(), dw.data(), false, dy.data()));
        ASSERT_TRUE(sync_ok());
        const std::vector<float> y_lane = to_host(dy);
        EXPECT_EQ(0, std::memcmp(y_lane.data(), y_split.data(), y_lane.size() * sizeof(float)))
            << "K in halves: x per lane differs from x staged";
        PG_ASSERT_OK(dy.fill_bytes(0xff));  // the persistent grid, 2 blocks: several units a block
        PG_ASSERT_OK(run(m, dx.data(), didx.data(), dw.data(), true, dy.data(), 2));
        ASSERT_TRUE(sync_ok());
        const std::vector<float> y_persist = to_host(dy);
        EXPECT_EQ(0, std::memcmp(y_persist.data(), y_split.data(), y_persist.size() * sizeof(float)))
            << "K in halves: the persistent grid differs from a block a unit";
        int64_t differ = 0;
        for (int64_t t = 0; t < m; ++t) {
          const int64_t k0 = t * c.top_k, k1 = (t + 1) * c.top_k;
          auto dx1 = to_device(std::vector<float>(x.begin() + t * H, x.begin() + (t + 1) * H));
          auto di1 = to_device(std::vector<int32_t>(r.idx.begin() + k0, r.idx.begin() + k1));
          auto dw1 = to_device(std::vector<float>(r.weight.begin() + k0, r.weight.begin() + k1));
          auto dy1 = to_device(std::vector<float>(static_cast<size_t>(ys), 0.0f));
          PG_ASSERT_OK(run(1, dx1.data(), di1.data(), dw1.data(), true, dy1.data()));
          ASSERT_TRUE(sync_ok());
          const std::vector<float> y1 = to_host(dy1);
          for (int64_t o = 0; o < H; ++o)
            differ += std::memcmp(&y1[size_t(o)], &y_split[size_t(t * ys + o)], sizeof(float)) != 0;
        }
        EXPECT_EQ(differ, 0) << "K in halves: " << differ << " outputs differ from the tokens run alone";
      }
    }
    std::printf("[ moe      ] %-28s m=%-5lld %s\n", c.name, (long long)m, d.summary().c_str());
  }
}

constexpr WeightFormat kF32 = WeightFormat::kF32, kBF16 = WeightFormat::kBF16, kFp8 = WeightFormat::kFp8Block,
                       kFp4 = WeightFormat::kNvfp4;

const MoeCase kCases[] = {
    // moonlight-16b-a3b: 64 routed + 2 shared, top 6, moe inter 1408, hidden 2048.
    {"moonlight_bf16", kBF16, 64, 2, 6, 2048, 1408, {1, 2, 8, 33}},
    {"moonlight_fp8", kFp8, 64, 2, 6, 2048, 1408, {1, 2, 8, 33}},
    {"moonlight_bf16_same_experts", kBF16, 64, 2, 6, 2048, 1408, {16, 64}, 128, Routing::kSameExperts},
    {"moonlight_bf16_accumulate", kBF16, 64, 2, 6, 2048, 1408, {8}, 128, Routing::kRandom, true, 5},
    // DeepSeek-V3: 256 routed + 1 shared, top 8, moe inter 2048, hidden 7168, FP8 128x128.
    {"v3_fp8", kFp8, 256, 1, 8, 7168, 2048, {1, 4}},
    // The tiny golden models' odd dims: scalar path.
    {"tiny_bf16", kBF16, 8, 2, 3, 52, 22, {1, 5, 64, 300}},
    {"tiny_f32_accumulate_gap", kF32, 8, 2, 3, 52, 22, {1, 7}, 128, Routing::kRandom, true, 3},
    {"tiny_bf16_prefill", kBF16, 8, 2, 3, 52, 22, {8192}},
    {"tiny_fp8_8x8_blocks", kFp8, 8, 1, 2, 40, 24, {1, 9}, 8},
    {"tiny_bf16_duplicate_ids", kBF16, 8, 2, 3, 52, 22, {1, 6}, 128, Routing::kDuplicates},
    {"tiny_bf16_shared_only", kBF16, 8, 2, 0, 52, 22, {1, 5}},
    {"tiny_bf16_routed_only", kBF16, 8, 0, 3, 52, 22, {1, 5}},
    // A dense MLP as the runner lays it out: no routed expert, one "shared" expert.
    {"tiny_bf16_dense", kBF16, 0, 1, 0, 52, 22, {1, 5, 300}},
    {"moonlight_dense_bf16", kBF16, 0, 1, 0, 2048, 11264, {1, 4}},
    // Small vector-path shapes: FP8 32x32 blocks, and prefill-sized m on few experts.
    {"small_fp8_32x32", kFp8, 16, 1, 4, 160, 96, {1, 3, 70}, 32},
    {"mid_bf16_prefill", kBF16, 16, 1, 4, 256, 128, {2000}},
    {"mid_f32_same_experts_prefill", kF32, 16, 1, 4, 256, 128, {1000}, 128, Routing::kSameExperts},
    // Decode batches and speculative verify steps (m = 2..8, the direct multi path: no plan
    // kernel), each also checked bit for bit against its tokens run alone at m = 1.
    {"moonlight_bf16_verify", kBF16, 64, 2, 6, 2048, 1408, {2, 3, 4, 5, 6, 7}},
    {"moonlight_fp8_verify", kFp8, 64, 2, 6, 2048, 1408, {3, 4, 5, 6, 7}},
    {"moonlight_bf16_verify_same_experts", kBF16, 64, 2, 6, 2048, 1408, {2, 5, 8}, 128, Routing::kSameExperts},
    {"moonlight_fp8_verify_duplicate_ids", kFp8, 64, 2, 6, 2048, 1408, {2, 3, 8}, 128, Routing::kDuplicates},
    {"moonlight_bf16_verify_accumulate", kBF16, 64, 2, 6, 2048, 1408, {2, 5}, 128, Routing::kRandom, true, 5},
    {"moonlight_dense_bf16_verify", kBF16, 0, 1, 0, 2048, 11264, {2, 8}},
    {"v3_fp8_verify", kFp8, 256, 1, 8, 7168, 2048, {2, 3, 5, 8}},
    {"v3_fp8_verify_same_experts", kFp8, 256, 1, 8, 7168, 2048, {3, 8}, 128, Routing::kSameExperts},
    {"v3_bf16_verify", kBF16, 256, 1, 8, 7168, 2048, {2, 8}},
    {"tiny_bf16_verify", kBF16, 8, 2, 3, 52, 22, {2, 3, 4, 6, 8}},
    {"tiny_f32_verify", kF32, 8, 2, 3, 52, 22, {2, 8}},
    {"tiny_f32_verify_accumulate_gap", kF32, 8, 2, 3, 52, 22, {3, 8}, 128, Routing::kRandom, true, 3},
    {"tiny_fp8_8x8_blocks_verify", kFp8, 8, 1, 2, 40, 24, {2, 5, 8}, 8},
    {"tiny_bf16_verify_duplicate_ids", kBF16, 8, 2, 3, 52, 22, {2, 8}, 128, Routing::kDuplicates},
    {"tiny_bf16_verify_same_experts", kBF16, 8, 2, 3, 52, 22, {4, 8}, 128, Routing::kSameExperts},
    {"tiny_bf16_verify_shared_only", kBF16, 8, 2, 0, 52, 22, {2, 8}},
    {"tiny_bf16_verify_routed_only", kBF16, 8, 0, 3, 52, 22, {2, 8}},
    {"tiny_bf16_verify_dense", kBF16, 0, 1, 0, 52, 22, {2, 8}},
    {"small_fp8_32x32_verify", kFp8, 16, 1, 4, 160, 96, {2, 5, 8}, 32},
    {"mid_f32_verify", kF32, 16, 1, 4, 256, 128, {2, 4, 8}},
    // NVFP4 (ModelOpt): a scale_2 per expert part; the vector path at moonlight and V3 shapes, the
    // scalar path at odd dims (multiples of 16 that are not of 32).
    {"moonlight_nvfp4", kFp4, 64, 2, 6, 2048, 1408, {1, 2, 8, 33, 64}},
    {"moonlight_nvfp4_same_experts", kFp4, 64, 2, 6, 2048, 1408, {16, 64}, 128, Routing::kSameExperts},
    {"moonlight_nvfp4_accumulate", kFp4, 64, 2, 6, 2048, 1408, {1, 8}, 128, Routing::kRandom, true, 5},
    {"v3_nvfp4", kFp4, 256, 1, 8, 7168, 2048, {1, 2, 8, 64}},
    {"moonlight_dense_nvfp4", kFp4, 0, 1, 0, 2048, 11264, {1, 4}},
    {"tiny_nvfp4_scalar", kFp4, 8, 2, 3, 48, 80, {1, 5, 64}},
    {"tiny_nvfp4_duplicate_ids", kFp4, 8, 2, 3, 64, 32, {1, 6}, 128, Routing::kDuplicates},
    // K = inter of 6 chunks: the last k-step of every staged h row half empty (zeros the f16
    // fragments' copy must write where gate_up writes nothing), on the prefetching and ring downs.
    {"small_nvfp4_inter192", kFp4, 16, 1, 4, 256, 192, {1, 3, 8}},
    // The exact (f32-x) NVFP4 kernels, kept for CudaRunnerOptions::exact.
    {"moonlight_nvfp4_exact", kFp4, 64, 2, 6, 2048, 1408, {1, 8, 33}, 128, Routing::kRandom, false, 0, true},
    {"v3_nvfp4_exact", kFp4, 256, 1, 8, 7168, 2048, {1, 4}, 128, Routing::kRandom, false, 0, true},
    // f16 tensor cores: duplicate ids at real dims (pair order within one mma column tile), every
    // token on the same experts at m = 8 / 9 (one and two 8-pair passes), more than one token tile.
    {"moonlight_nvfp4_duplicate_ids", kFp4, 64, 2, 6, 2048, 1408, {1, 3, 8}, 128, Routing::kDuplicates},
    {"moonlight_nvfp4_same_experts_8_9", kFp4, 64, 2, 6, 2048, 1408, {8, 9}, 128, Routing::kSameExperts},
    // NVFP4 verify steps and decode batches (m = 2..8, direct multi on the tensor cores).
    {"moonlight_nvfp4_verify", kFp4, 64, 2, 6, 2048, 1408, {2, 3, 4, 5, 7}},
    {"v3_nvfp4_verify_same_experts", kFp4, 256, 1, 8, 7168, 2048, {3, 8}, 128, Routing::kSameExperts},
    {"moonlight_dense_nvfp4_verify", kFp4, 0, 1, 0, 2048, 11264, {2, 8}},
    // A shared expert's passes over grid.y slots (planned, m > 8): 3 slots, the last partial.
    {"moonlight_dense_nvfp4_planned", kFp4, 0, 1, 0, 2048, 11264, {20}},
    // FP8 on the f16 tensor cores at decode sizes (the cases above with 128 x 128 blocks take them
    // too at m <= 8): dense MLPs (one slot; V3's 18432 columns staged at m = 1), x per lane at
    // V3's m = 8 (x past kFp8StagedMaxBytes), 64 x 64 blocks, accumulation into strided y, and
    // the exact (f32-x) kernels kept.
    {"moonlight_dense_fp8", kFp8, 0, 1, 0, 2048, 11264, {1, 4, 8}},
    {"v3_dense_fp8", kFp8, 0, 1, 0, 7168, 18432, {1, 3}},
    {"v3_fp8_m8", kFp8, 256, 1, 8, 7168, 2048, {1, 8}},
    {"mid_fp8_64x64", kFp8, 16, 1, 4, 256, 128, {1, 3, 8}, 64},
    {"moonlight_fp8_accumulate", kFp8, 64, 2, 6, 2048, 1408, {1, 5}, 128, Routing::kRandom, true, 5},
    {"moonlight_fp8_exact", kFp8, 64, 2, 6, 2048, 1408, {1, 8}, 128, Routing::kRandom, false, 0, true},
    {"v3_fp8_exact", kFp8, 256, 1, 8, 7168, 2048, {1, 4}, 128, Routing::kRandom, false, 0, true},
    // FP8 on the f16 tensor cores past the decode sizes (the planned kernels; moonlight_fp8's m = 33,
    // tiny_fp8's 9 and small_fp8's 70 above take them too): an expert's pairs in several 8-pair
    // passes, two token tiles, duplicate ids, dense MLPs, 64 x 64 blocks, accumulation.
    {"moonlight_fp8_same_experts_planned", kFp8, 64, 2, 6, 2048, 1408, {9, 16, 64}, 128, Routing::kSameExperts},
    {"moonlight_fp8_duplicate_ids_planned", kFp8, 64, 2, 6, 2048, 1408, {12}, 128, Routing::kDuplicates},
    {"moonlight_dense_fp8_planned", kFp8, 0, 1, 0, 2048, 11264, {16, 40}},
    {"v3_fp8_planned", kFp8, 256, 1, 8, 7168, 2048, {16}},
    {"v3_dense_fp8_planned", kFp8, 0, 1, 0, 7168, 18432, {12}},
    {"mid_fp8_64x64_planned", kFp8, 16, 1, 4, 256, 128, {20, 70}, 64},
    {"moonlight_fp8_accumulate_planned", kFp8, 64, 2, 6, 2048, 1408, {20}, 128, Routing::kRandom, true, 5},
};

class MoeExpertsCuda : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeExpertsCuda, MatchesCpu) {
  PG_REQUIRE_CUDA();
  run_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeExpertsCuda, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<MoeCase>& i) { return std::string(i.param.name); });

TEST(MoeExpertsCudaArgs, BadArgumentsAreStatusNotCrash) {
  MoeExpertsArgs a;  // no weights
  EXPECT_FALSE(cuda::moe_experts(a, nullptr, 0, nullptr).ok());
  // Shapes valid, workspace missing: rejected before any launch (pointers are never touched).
  Matrix gu{kBF16, (4 + 1) * 2 * 16, 32, reinterpret_cast<const void*>(uintptr_t(256))};
  Matrix dn{kBF16, (4 + 1) * 32, 16, reinterpret_cast<const void*>(uintptr_t(256))};
  float* fake = reinterpret_cast<float*>(uintptr_t(256));
  int32_t* fake_idx = reinterpret_cast<int32_t*>(uintptr_t(256));
  a.x = fake, a.y = fake, a.expert_weight = fake, a.expert_idx = fake_idx, a.gate_up = &gu, a.down = &dn;
  a.m = 2, a.hidden = 32, a.inter = 16, a.n_experts = 4, a.top_k = 2, a.n_shared = 1;
  EXPECT_TRUE(validate(a).ok());
  EXPECT_FALSE(cuda::moe_experts(a, nullptr, 0, nullptr).ok());
  // FP8 with an expert's rows off the scale grid.
  Matrix gu8{kFp8, (4 + 1) * 2 * 16, 32, gu.data, fake, 32, 32};
  a.gate_up = &gu8;
  const Status s = validate(a);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("multiple of"), std::string::npos) << s.message();
}

// Timing of the decode shapes at m = 1 and 8: prints µs per call and GB/s of weights read (the
// selected experts' and the shared ones', scales included); never fails on time. Cold L2: a
// 256 MB buffer (5x the H200's 50 MB L2) is rewritten before every timed call. Eager launches on
// a created stream (the down kernel with PDL), so the time includes the gap between launches.
// The weights are constant bytes (no host fill): V3 bf16's full stack is 22.6 GB of device memory.
struct TimingShape {
  const char* name;
  WeightFormat format;
  int64_t n_experts, n_shared, top_k, hidden, inter;
};

TEST(MoeExpertsCudaTiming, DecodeShapesColdL2) {
  PG_REQUIRE_CUDA();
  constexpr double kCeilingGBps = 4550.0;  // the H200's measured HBM read ceiling (bench_ops_cuda)
  constexpr int kWarmup = 3, kIters = 20;
  constexpr size_t kFlushBytes = size_t(256) << 20;
  const TimingShape shapes[] = {
      {"moonlight_bf16", kBF16, 64, 2, 6, 2048, 1408},
      {"moonlight_fp8", kFp8, 64, 2, 6, 2048, 1408},
      {"moonlight_dense_bf16", kBF16, 0, 1, 0, 2048, 11264},
      {"moonlight_dense_fp8", kFp8, 0, 1, 0, 2048, 11264},
      {"v3_bf16", kBF16, 256, 1, 8, 7168, 2048},
      {"v3_fp8", kFp8, 256, 1, 8, 7168, 2048},
      {"moonlight_nvfp4", kFp4, 64, 2, 6, 2048, 1408},
      {"moonlight_dense_nvfp4", kFp4, 0, 1, 0, 2048, 11264},
      {"v3_nvfp4", kFp4, 256, 1, 8, 7168, 2048},
  };
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  void* flush = nullptr;
  ASSERT_EQ(cudaMalloc(&flush, kFlushBytes), cudaSuccess);
  cudaEvent_t ev0, ev1;
  ASSERT_EQ(cudaEventCreate(&ev0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&ev1), cudaSuccess);
  for (const TimingShape& sh : shapes) {
    const int64_t n_all = sh.n_experts + sh.n_shared, eb = sh.format == kFp8 || sh.format == kFp4 ? 1 : 2, blk = 128;
    const bool fp4 = sh.format == kFp4;
    Matrix gu{sh.format, n_all * 2 * sh.inter, sh.hidden, nullptr, nullptr, blk, blk};
    Matrix dn{sh.format, n_all * sh.hidden, sh.inter, nullptr, nullptr, blk, blk};
    void *dgu = nullptr, *ddn = nullptr;
    float *sgu = nullptr, *sdn = nullptr;
    const size_t gu_bytes = size_t(gu.rows * gu.cols * eb) / (fp4 ? 2 : 1);
    const size_t dn_bytes = size_t(dn.rows * dn.cols * eb) / (fp4 ? 2 : 1);
    uint8_t *s8gu = nullptr, *s8dn = nullptr;  // NVFP4 block scales (0x38 = 1.0), scale_2 = 1 per tensor
    const size_t gu_scales = size_t((gu.rows / blk) * gu.scale_cols()), dn_scales = size_t((dn.rows / blk) * dn.scale_cols());
    if (cudaMalloc(&dgu, gu_bytes) != cudaSuccess || cudaMalloc(&ddn, dn_bytes) != cudaSuccess) {
      std::printf("[ moe time ] %-22s skipped: %.1f GB of weights do not fit\n", sh.name, double(gu_bytes + dn_bytes) / 1e9);
      if (dgu) cudaFree(dgu);
      cudaGetLastError();
      continue;
    }
    ASSERT_EQ(cudaMemset(dgu, 0x38, gu_bytes), cudaSuccess);  // bf16 0x3838 ~ 4.4e-5, fp8 0x38 = 1.0
    ASSERT_EQ(cudaMemset(ddn, 0x38, dn_bytes), cudaSuccess);
    if (sh.format == kFp8) {
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&sgu), gu_scales * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&sdn), dn_scales * 4), cudaSuccess);
      ASSERT_EQ(cudaMemset(sgu, 0, gu_scales * 4), cudaSuccess);
      ASSERT_EQ(cudaMemset(sdn, 0, dn_scales * 4), cudaSuccess);
    }
    if (fp4) {
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&s8gu), size_t(gu.rows * gu.cols / 16)), cudaSuccess);
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&s8dn), size_t(dn.rows * dn.cols / 16)), cudaSuccess);
      ASSERT_EQ(cudaMemset(s8gu, 0x38, size_t(gu.rows * gu.cols / 16)), cudaSuccess);
      ASSERT_EQ(cudaMemset(s8dn, 0x38, size_t(dn.rows * dn.cols / 16)), cudaSuccess);
    }
    gu.data = dgu, gu.scale_inv = sgu, dn.data = ddn, dn.scale_inv = sdn;
    gu.scale_fp8 = s8gu, dn.scale_fp8 = s8dn;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the memsets ran on the legacy stream, `stream` is non-blocking
    // Bytes one expert contributes: gate/up and down rows, plus their fp8 scales.
    const double expert_bytes =
        fp4 ? double(3 * sh.inter * sh.hidden) * (0.5 + 1.0 / 16.0)  // codes + e4m3 block scales
            : double(3 * sh.inter * sh.hidden * eb) +
                  (sh.format == kFp8 ? 4.0 * double(3 * (sh.inter / blk) * (sh.hidden / blk)) : 0.0);
    for (int64_t m : {int64_t(1), int64_t(2), int64_t(4), int64_t(8)}) {  // decode, verify steps k = 1 / 3, b = 8
      MoeCase rc{sh.name, sh.format, sh.n_experts, sh.n_shared, sh.top_k, sh.hidden, sh.inter, {m}};
      const Routed r = sh.top_k ? route(rc, m, seed_of(sh.name) + uint64_t(m)) : Routed{};
      const std::set<int32_t> distinct(r.idx.begin(), r.idx.end());
      const double bytes = double(int64_t(distinct.size()) + sh.n_shared) * expert_bytes;
      std::vector<float> x(static_cast<size_t>(m * sh.hidden), 0.01f);
      auto dx = to_device(x);
      auto dy = to_device(x);
      auto didx = to_device(r.idx);
      auto dw = to_device(r.weight);
      const size_t ws_bytes = cuda::moe_experts_workspace_bytes(m, sh.top_k, sh.n_shared, sh.n_experts, sh.inter);
      auto ws_r = cuda::DeviceBuffer<uint8_t>::create(ws_bytes);
      PG_ASSERT_OK(ws_r.status());
      cuda::DeviceBuffer<uint8_t> ws = std::move(ws_r).value();
      MoeExpertsArgs a;
      a.x = dx.data(), a.y = dy.data(), a.gate_up = &gu, a.down = &dn;
      a.expert_idx = sh.top_k ? didx.data() : nullptr, a.expert_weight = sh.top_k ? dw.data() : nullptr;
      a.m = m, a.hidden = sh.hidden, a.inter = sh.inter, a.n_experts = sh.n_experts, a.top_k = sh.top_k;
      a.n_shared = sh.n_shared;
      // NVFP4: the f16 tensor-core kernels at their default tiles, a sweep of their tiles
      // (gate_up t x u, down t x u; the planned down takes 1 x 1 and 1 x 2 only), and the exact kernels.
      struct Run {
        std::string label;
        bool f16;
        cuda::MoeNvfp4Variant v;
      };
      std::vector<Run> runs{{"", true, {}}};
      if (fp4) {
        runs.push_back({" exact", false, {}});
        for (auto [t, u] : {std::pair{1, 1}, {1, 4}, {2, 1}, {2, 2}}) {
          runs.push_back({" gate_up t" + std::to_string(t) + "u" + std::to_string(u), true, {t, u, 0, 0}});
          runs.back().v.gate_up_k_split = 1;  // K in halves runs the 1x2 tile only
        }
        for (auto [t, u] : {std::pair{1, 1}, {1, 4}, {2, 1}})
          if (m == 1 || (t == 1 && u <= 2)) runs.push_back({" down t" + std::to_string(t) + "u" + std::to_string(u), true, {0, 0, t, u}});
      }
      for (const Run& run : runs) {
        a.f16_activations = run.f16;
        for (int i = 0; i < kWarmup; ++i) PG_ASSERT_OK(cuda::moe_experts_variant(a, run.v, ws.data(), ws.size(), stream));
        double total_ms = 0;
        for (int i = 0; i < kIters; ++i) {
          ASSERT_EQ(cudaMemsetAsync(flush, i & 0xff, kFlushBytes, stream), cudaSuccess);
          ASSERT_EQ(cudaEventRecord(ev0, stream), cudaSuccess);
          PG_ASSERT_OK(cuda::moe_experts_variant(a, run.v, ws.data(), ws.size(), stream));
          ASSERT_EQ(cudaEventRecord(ev1, stream), cudaSuccess);
          ASSERT_EQ(cudaEventSynchronize(ev1), cudaSuccess);
          float ms = 0;
          ASSERT_EQ(cudaEventElapsedTime(&ms, ev0, ev1), cudaSuccess);
          total_ms += ms;
        }
        const double us = 1e3 * total_ms / kIters, gbps = bytes / (us * 1e3);
        const std::string name = sh.name + run.label;
        std::printf(
            "[ moe time ] %-34s m=%-2lld %3zu experts %7.1f MB %8.1f us %7.0f GB/s %5.1f%% of %.0f GB/s (floor %.1f us)\n",
            name.c_str(), (long long)m, distinct.size() + size_t(sh.n_shared), bytes / 1e6, us, gbps,
            100.0 * gbps / kCeilingGBps, kCeilingGBps, bytes / (kCeilingGBps * 1e3));
      }
    }
    cudaFree(dgu), cudaFree(ddn);
    if (sgu) cudaFree(sgu);
    if (sdn) cudaFree(sdn);
    if (s8gu) cudaFree(s8gu);
    if (s8dn) cudaFree(s8dn);
  }
  cudaEventDestroy(ev0), cudaEventDestroy(ev1);
  cudaFree(flush);
  cudaStreamDestroy(stream);
}


}  // namespace
}  // namespace pg::ops::test
