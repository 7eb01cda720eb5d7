// The tensor-core prefill paths against the CPU definitions: ops::cuda::moe_experts_gemm vs
// ops::cpu::moe_experts (moonlight bf16 / FP8 128x128 at m = 64, 1000, 4096, DeepSeek-V3 FP8 at
// m = 256, the tiny models' odd dims, FP8 32x32 and 8x8 blocks, dense and routed-only layers,
// duplicate and skipped ids, accumulate with a row gap, workspace chunking), and
// ops::cuda::head_linear_gemm vs ops::cpu::head_linear (moonlight / V3 W_UK and W_UV, odd dims,
// heads-major layouts, small scratch). The CPU references take x pre-rounded to bf16 and the
// weights' bf16 image, so the GPU differs only by summation order (and, in the MoE, by the bf16
// rounding of h). Timing of moonlight at m = 8192 is printed, never checked.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/mla_ops.h"
#include "ops/cpu/moe_experts.h"
#include "ops/cuda/gemm/gemm.h"
#include "ops/cuda/head_linear_gemm.h"
#include "ops/cuda/mla_ops.h"
#include "ops/cuda/moe_experts_gemm.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {
namespace {

// Tolerances, derived as in gemm_test.cpp and moe_experts_test.cpp. x and the weights are exactly
// bf16 on both sides, so every product is exact in f32 and a dot product differs only by the
// order of its f32 additions: the CPU sums 16 chains of ceil(K/16) terms plus a 4-level tree
// (ops::cpu::dot; +2 for slack as gemm_test), the tensor cores at most K sequential additions
// plus split-K / stream-K reductions (< 32). Higham & Mary's probabilistic bound with lambda = 10
// (failure probability < 1e-18 per output): |d_gpu - d_cpu| <= lambda (sqrt(n_cpu) + sqrt(n_gpu)) u sum|x w|.
// MoE, per pair and inter column j (e = that bound; g, v the gate and up dots):
//   h = silu(g) v:  |dh| <= 1.1 e_g |v| + (|silu(g)| + 1.1 e_g) e_v + 8 u |h|   (|silu'| <= 1.1;
//                   expf and the divide differ by a few ulps between host and device),
//   then the GPU rounds h to bf16: + 2^-8 (|h| + |dh|)                    (unit roundoff of bf16);
//   down:           ez = sum_j |d_j| dh_j + lambda (...) u sum_j |d_j| (|h_j| + dh_j)   (K = inter);
//   combine:        sum_p |w_p| ez_p + (n_terms + 2) u sum_p |w_p| |z_p|;  accumulate: + 2 u (|y0| + ...).
constexpr double kLambda = 10.0;
constexpr double kMinCosine = 1.0 - 1e-5;  // h in bf16 costs ~2^-9 relative per term
constexpr double kBf16Unit = 1.0 / 256;
// Sampled tokens checked against the CPU per case (the GPU always runs every token).
constexpr int64_t kMaxCheckedTokens = 48;

double chains(int64_t k) { return std::sqrt(std::ceil(double(k) / 16) + 6) + std::sqrt(double(k) + 32); }

float bf16_round(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// Evenly spread tokens (first and last included), all when m <= max_n.
std::vector<int64_t> sample_tokens(int64_t m, int64_t max_n) {
  std::vector<int64_t> s;
  if (m <= max_n) {
    s.resize(size_t(m));
    std::iota(s.begin(), s.end(), 0);
    return s;
  }
  for (int64_t i = 0; i < max_n; ++i) s.push_back(i * (m - 1) / (max_n - 1));
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

Result<cuda::GemmContext> small_context() { return cuda::GemmContext::create(1, 8, 8, 0); }

// ------------------------------------------------------------------------------------------------
// moe_experts_gemm

enum class Routing { kRandom, kSameExperts, kDuplicates, kSubset, kSkippedIds };

struct MoeCase {
  const char* name;
  WeightFormat format;
  int64_t n_experts, n_shared, top_k, hidden, inter;
  std::vector<int64_t> ms;
  int64_t block = 128;
  Routing routing = Routing::kRandom;
  bool accumulate = false;
  int64_t y_pad = 0;
  int64_t ws_max_m = 0;  // workspace tokens (0: m); smaller runs in chunks
  int64_t checked = kMaxCheckedTokens;
};
void PrintTo(const MoeCase& c, std::ostream* os) { *os << c.name; }

// One stacked weight: the device copy in the stored format (poisoned with 0xff: NaN in bf16,
// e4m3 and f32 alike, so a read of an unselected expert shows), and the host bf16 image of the
// experts in use (what the GPU multiplies: f32 and fp8 * scale rounded to nearest even).
struct Stack {
  Matrix dev, image;
  int64_t elem_bytes = 0, rows_per_expert = 0;
  std::unique_ptr<uint16_t[]> image_data;  // [rows, cols], allocated untouched; used experts filled
  void* ddata = nullptr;
  float* dscale = nullptr;     // fp8 scale_inv, or NVFP4 scale_2 per expert part
  uint8_t* dscale8 = nullptr;  // NVFP4 e4m3 block scales
  int64_t parts = 1;           // NVFP4: ModelOpt tensors per expert (gate and up: 2)
  ~Stack() {
    if (ddata) cudaFree(ddata);
    if (dscale) cudaFree(dscale);
    if (dscale8) cudaFree(dscale8);
  }
  bool fp4() const { return dev.format == WeightFormat::kNvfp4; }
  int64_t row_bytes(int64_t rows) const { return fp4() ? rows * dev.cols / 2 : rows * dev.cols * elem_bytes; }
};

bool make_stack(Stack& s, WeightFormat f, int64_t n_all, int64_t rows_per_expert, int64_t cols, int64_t block,
                int64_t parts = 1) {
  s.elem_bytes = f == WeightFormat::kF32 ? 4 : f == WeightFormat::kBF16 ? 2 : 1;
  s.rows_per_expert = rows_per_expert;
  s.parts = parts;
  const int64_t rows = n_all * rows_per_expert;
  s.dev = Matrix{f, rows, cols, nullptr, nullptr, block, block};
  const size_t bytes = size_t(s.row_bytes(rows));
  if (cudaMalloc(&s.ddata, bytes) != cudaSuccess || cudaMemset(s.ddata, 0xff, bytes) != cudaSuccess) return false;
  s.dev.data = s.ddata;
  if (f == WeightFormat::kFp8Block) {
    const size_t n = size_t(((rows + block - 1) / block) * s.dev.scale_cols());
    if (cudaMalloc(reinterpret_cast<void**>(&s.dscale), n * 4) != cudaSuccess ||
        cudaMemset(s.dscale, 0xff, n * 4) != cudaSuccess)
      return false;
    s.dev.scale_inv = s.dscale;
  }
  if (f == WeightFormat::kNvfp4) {  // NaN block scales (0xff) and scale_2 until an expert is filled
    const size_t n8 = size_t(rows * cols / 16), n2 = size_t(n_all * parts);
    if (cudaMalloc(reinterpret_cast<void**>(&s.dscale8), n8) != cudaSuccess || cudaMemset(s.dscale8, 0xff, n8) != cudaSuccess ||
        cudaMalloc(reinterpret_cast<void**>(&s.dscale), n2 * 4) != cudaSuccess ||
        cudaMemset(s.dscale, 0xff, n2 * 4) != cudaSuccess)
      return false;
    s.dev.scale_fp8 = s.dscale8;
    s.dev.scale_2_rows = s.dscale;
    s.dev.scale_2_group_rows = rows_per_expert / parts;
  }
  s.image_data.reset(new uint16_t[size_t(rows * cols)]);
  s.image = Matrix{WeightFormat::kBF16, rows, cols, s.image_data.get()};
  return true;
}

// Fills expert e's rows with seeded values (stored format on the device, bf16 image on the host).
bool fill_expert(Stack& s, int64_t e, uint64_t seed) {
  const int64_t cols = s.dev.cols, r0 = e * s.rows_per_expert;
  const int64_t n = s.fp4() ? s.row_bytes(s.rows_per_expert) : s.rows_per_expert * cols;  // NVFP4: bytes
  std::vector<uint8_t> stored(size_t(s.row_bytes(s.rows_per_expert)));
  std::vector<float> scale;
  std::vector<uint8_t> scale8;
  Matrix host = s.dev;  // the expert's rows as a host matrix (for the fp8 / NVFP4 image)
  host.rows = s.rows_per_expert;
  host.data = stored.data();
  if (s.fp4()) {  // e4m3 block scales of exponent field 4..11, a scale_2 per part
    scale8.resize(size_t(s.rows_per_expert * cols / 16));
    for (size_t i = 0; i < scale8.size(); ++i) {
      const uint64_t rr = splitmix64((seed + 1) ^ ((uint64_t(e) * 100003 + i) * 0x9e3779b97f4a7c15ull));
      scale8[i] = uint8_t(((4 + (rr >> 60) % 8) << 3) | ((rr >> 20) & 7));
    }
    for (int64_t q = 0; q < s.parts; ++q)
      scale.push_back((1.6f / (96.0f * std::sqrt(float(cols)))) * (1.5f + uniform_pm1(seed + 2, uint64_t(e * s.parts + q))));
    host.scale_fp8 = scale8.data();
    host.scale_2_rows = scale.data();
  }
  if (s.dev.format == WeightFormat::kFp8Block) {  // rows_per_expert is a multiple of block_rows
    scale.resize(size_t(s.rows_per_expert / s.dev.block_rows * s.dev.scale_cols()));
    for (size_t i = 0; i < scale.size(); ++i) scale[i] = std::exp2(-9.0f + 3.0f * uniform_pm1(seed + 1, uint64_t(e) * 100003 + i));
    host.scale_inv = scale.data();
  }
  const float amp = 2.0f / std::sqrt(float(cols));
  ThreadPool::global().parallel_for(n, [&](int64_t b, int64_t end) {
    for (int64_t i = b; i < end; ++i) {
      const uint64_t gi = uint64_t(r0 * cols + i);
      switch (s.dev.format) {
        case WeightFormat::kNvfp4: stored[size_t(i)] = uint8_t(splitmix64(seed ^ (gi * 0x9e3779b97f4a7c15ull)) >> 56); break;
        case WeightFormat::kF32: reinterpret_cast<float*>(stored.data())[i] = amp * uniform_pm1(seed, gi); break;
        case WeightFormat::kBF16:
          reinterpret_cast<uint16_t*>(stored.data())[i] = f32_to_bf16(amp * uniform_pm1(seed, gi));
          break;
        case WeightFormat::kFp8Block: {  // every finite e4m3 code (the NaN codes become +-448)
          const uint8_t v = uint8_t(splitmix64(seed ^ (gi * 0x9e3779b97f4a7c15ull)) >> 56);
          stored[size_t(i)] = (v & 0x7f) == 0x7f ? uint8_t(v ^ 1) : v;
          break;
        }
      }
    }
  }, 1 << 16);
  uint16_t* img = s.image_data.get() + r0 * cols;
  ThreadPool::global().parallel_for(s.rows_per_expert, [&](int64_t rb, int64_t re) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = rb; r < re; ++r) {
      matrix_row_to_f32(host, r, row.data());  // fp8: value * scale in f32, as the GPU expands it
      for (int64_t j = 0; j < cols; ++j) img[r * cols + j] = f32_to_bf16(row[size_t(j)]);
    }
  });
  if (cudaMemcpy(static_cast<uint8_t*>(s.ddata) + s.row_bytes(r0), stored.data(), stored.size(),
                 cudaMemcpyHostToDevice) != cudaSuccess)
    return false;
  if (s.fp4() && cuda::nvfp4_to_device_layout(static_cast<uint8_t*>(s.ddata) + s.row_bytes(r0), stored.size(),
                                              nullptr) != cudaSuccess)
    return false;
  if (s.fp4())
    return cudaMemcpy(s.dscale8 + r0 * cols / 16, scale8.data(), scale8.size(), cudaMemcpyHostToDevice) == cudaSuccess &&
           cudaMemcpy(s.dscale + e * s.parts, scale.data(), scale.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess;
  if (!scale.empty()) {
    const int64_t s0 = r0 / s.dev.block_rows * s.dev.scale_cols();
    if (cudaMemcpy(s.dscale + s0, scale.data(), scale.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess) return false;
  }
  return true;
}

struct Routed {
  std::vector<int32_t> idx;      // what the GPU gets
  std::vector<int32_t> ref_idx;  // what the CPU gets (a skipped id becomes expert 0 with weight 0)
  std::vector<float> weight, ref_weight;
};

Routed route(const MoeCase& c, int64_t m, uint64_t seed) {
  Routed r;
  const size_t n = size_t(m * c.top_k);
  r.idx.resize(n), r.weight.resize(n);
  // kSubset: 24 experts spread over the range (V3's 256 would need every expert's weights).
  std::vector<int32_t> pool;
  if (c.routing == Routing::kSubset)
    for (int64_t i = 0; i < std::min<int64_t>(24, c.n_experts); ++i) pool.push_back(int32_t(i * c.n_experts / 24 + 3) % int32_t(c.n_experts));
  else
    for (int64_t i = 0; i < c.n_experts; ++i) pool.push_back(int32_t(i));
  const int64_t np = int64_t(pool.size());
  std::vector<int32_t> perm(pool.size());
  for (int64_t t = 0; t < m; ++t) {
    perm = pool;
    for (int64_t k = 0; k < c.top_k; ++k) {  // partial Fisher-Yates: top_k distinct experts
      const int64_t j = k + int64_t(splitmix64(seed + uint64_t(t * 977 + k)) % uint64_t(np - k));
      std::swap(perm[size_t(k)], perm[size_t(j)]);
      int32_t e = perm[size_t(k)];
      if (c.routing == Routing::kSameExperts) e = int32_t((3 + 7 * k) % c.n_experts);
      if (c.routing == Routing::kDuplicates && k == 1) e = r.idx[size_t(t * c.top_k)];
      r.idx[size_t(t * c.top_k + k)] = e;
      r.weight[size_t(t * c.top_k + k)] = 0.05f + 0.5f * (1.0f + uniform_pm1(seed + 5, uint64_t(t * c.top_k + k)));
    }
  }
  r.ref_idx = r.idx, r.ref_weight = r.weight;
  if (c.routing == Routing::kSkippedIds)
    for (int64_t t = 0; t < m; t += 3) {  // one slot per third token out of range (both sides)
      const size_t i = size_t(t * c.top_k + (t / 3) % c.top_k);
      r.idx[i] = (t / 3) % 2 ? int32_t(c.n_experts) : -1;
      r.ref_idx[i] = 0, r.ref_weight[i] = 0.0f;  // adds 0 * z: the same sum
    }
  return r;
}

// Per-output tolerance of the sampled tokens (see the top of the file), in double.
std::vector<double> moe_tolerance(const MoeCase& c, const Stack& gu, const Stack& dn, const std::vector<float>& x_s,
                                  const std::vector<int32_t>& idx_s, const std::vector<float>& w_s, int64_t ns,
                                  const std::vector<float>& y0_s) {
  const int64_t H = c.hidden, I = c.inter, K = c.top_k;
  const double u = kF32Unit;
  struct P {
    int64_t t, e;
    double w;
  };
  std::vector<P> pairs;
  for (int64_t t = 0; t < ns; ++t)
    for (int64_t k = 0; k < K; ++k) pairs.push_back({t, idx_s[size_t(t * K + k)], std::fabs(double(w_s[size_t(t * K + k)]))});
  for (int64_t s = 0; s < c.n_shared; ++s)
    for (int64_t t = 0; t < ns; ++t) pairs.push_back({t, c.n_experts + s, 1.0});
  const int64_t np = int64_t(pairs.size());
  std::map<int64_t, std::vector<int64_t>> of_expert;
  for (int64_t p = 0; p < np; ++p) of_expert[pairs[size_t(p)].e].push_back(p);
  std::vector<int64_t> experts;
  for (const auto& [e, ps] : of_expert) experts.push_back(e);
  const int64_t ne = int64_t(experts.size());

  // Stage 1: |h| and dh per (pair, j), parallel over (expert, j): the expert's rows read once.
  std::vector<double> habs(size_t(np * I)), eh(size_t(np * I));
  const double cg = kLambda * chains(H) * u;
  ThreadPool::global().parallel_for(ne * I, [&](int64_t i0, int64_t i1) {
    std::vector<float> g(static_cast<size_t>(H)), v(static_cast<size_t>(H));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t e = experts[size_t(i / I)], j = i % I;
      matrix_row_to_f32(gu.image, e * 2 * I + j, g.data());
      matrix_row_to_f32(gu.image, e * 2 * I + I + j, v.data());
      for (int64_t p : of_expert.at(e)) {
        const float* xt = x_s.data() + pairs[size_t(p)].t * H;
        double gs = 0, vs = 0, ga = 0, va = 0;
        for (int64_t q = 0; q < H; ++q) {
          const double xq = xt[q];
          gs += xq * g[size_t(q)], ga += std::fabs(xq * g[size_t(q)]);
          vs += xq * v[size_t(q)], va += std::fabs(xq * v[size_t(q)]);
        }
        const double eg = cg * ga, ev = cg * va, sg = gs / (1 + std::exp(-gs)), h = std::fabs(sg * vs);
        const double e0 = 1.1 * eg * std::fabs(vs) + (std::fabs(sg) + 1.1 * eg) * ev + 8 * u * h;
        habs[size_t(p * I + j)] = h;
        eh[size_t(p * I + j)] = e0 + kBf16Unit * (h + e0);
      }
    }
  }, 4);

  // Stage 2: per output column o, each pair's ez and magnitude; then per token the weighted sums.
  std::vector<std::vector<int64_t>> of_token(static_cast<size_t>(ns));
  for (int64_t p = 0; p < np; ++p) of_token[size_t(pairs[size_t(p)].t)].push_back(p);
  const int64_t ys = H + c.y_pad;
  const double cd = kLambda * chains(I) * u;
  std::vector<double> tol(static_cast<size_t>(ns * H));
  ThreadPool::global().parallel_for(H, [&](int64_t o0, int64_t o1) {
    std::vector<float> d(static_cast<size_t>(I));
    std::vector<double> ez(static_cast<size_t>(np)), mag(static_cast<size_t>(np));
    for (int64_t o = o0; o < o1; ++o) {
      for (int64_t e : experts) {
        matrix_row_to_f32(dn.image, e * H + o, d.data());
        for (int64_t p : of_expert.at(e)) {
          double s1 = 0, s2 = 0;
          for (int64_t j = 0; j < I; ++j) {
            const double dj = std::fabs(double(d[size_t(j)]));
            s1 += dj * eh[size_t(p * I + j)];
            s2 += dj * habs[size_t(p * I + j)];
          }
          ez[size_t(p)] = s1 + cd * (s2 + s1);
          mag[size_t(p)] = s2 + s1;
        }
      }
      for (int64_t t = 0; t < ns; ++t) {
        double sum = 0, m = 0;
        for (int64_t p : of_token[size_t(t)]) sum += pairs[size_t(p)].w * ez[size_t(p)], m += pairs[size_t(p)].w * mag[size_t(p)];
        double tt = sum + double(of_token[size_t(t)].size() + 2) * u * m;
        if (c.accumulate) tt += 2 * u * (std::fabs(double(y0_s[size_t(t * ys + o)])) + m);
        tol[size_t(t * H + o)] = tt;
      }
    }
  });
  return tol;
}

void run_moe_case(const MoeCase& c) {
  const uint64_t seed = seed_of(c.name);
  const int64_t n_all = c.n_experts + c.n_shared, H = c.hidden, K = c.top_k, ys = c.hidden + c.y_pad;
  std::vector<Routed> routes;
  std::set<int64_t> used;
  for (int64_t s = 0; s < c.n_shared; ++s) used.insert(c.n_experts + s);
  for (int64_t m : c.ms) {
    routes.push_back(route(c, m, seed + uint64_t(m)));
    for (int32_t e : routes.back().ref_idx) used.insert(e);
  }
  Stack gu, dn;
  ASSERT_TRUE(make_stack(gu, c.format, n_all, 2 * c.inter, c.hidden, c.block, /*parts=*/2));
  ASSERT_TRUE(make_stack(dn, c.format, n_all, c.hidden, c.inter, c.block));
  for (int64_t e : used) {
    ASSERT_TRUE(fill_expert(gu, e, seed + 11));
    ASSERT_TRUE(fill_expert(dn, e, seed + 13));
  }
  auto ctx_r = small_context();
  PG_ASSERT_OK(ctx_r.status());
  cuda::GemmContext& ctx = *ctx_r;

  for (size_t mi = 0; mi < c.ms.size(); ++mi) {
    const int64_t m = c.ms[mi];
    const Routed& r = routes[mi];
    SCOPED_TRACE("m=" + std::to_string(m));
    std::vector<float> x(static_cast<size_t>(m * H));  // exactly bf16
    parallel_fill(x, [&](uint64_t i) { return bf16_round(uniform_pm1(seed + 2 + uint64_t(m), i)); });
    std::vector<float> y0(static_cast<size_t>(m * ys));
    if (c.accumulate) parallel_fill(y0, [&](uint64_t i) { return 4.0f * uniform_pm1(seed + 3, i); });

    // GPU: every token.
    auto dx = to_device(x);
    auto didx = to_device(r.idx.empty() ? std::vector<int32_t>{0} : r.idx);
    auto dw = to_device(r.weight.empty() ? std::vector<float>{0.0f} : r.weight);
    auto dy = to_device(y0);
    if (!c.accumulate) PG_ASSERT_OK(dy.fill_bytes(0xff));
    MoeExpertsArgs da;
    da.x = dx.data(), da.expert_idx = K ? didx.data() : nullptr, da.expert_weight = K ? dw.data() : nullptr;
    da.gate_up = &gu.dev, da.down = &dn.dev, da.y = dy.data();
    da.m = m, da.hidden = H, da.inter = c.inter, da.n_experts = c.n_experts, da.top_k = K, da.n_shared = c.n_shared;
    da.y_stride = ys, da.accumulate = c.accumulate;
    // ws_max_m < m: the workspace holds fewer tokens, the call makes several passes.
    const size_t ws_bytes = cuda::moe_experts_gemm_workspace_bytes(cuda::moe_gemm_dims(da, c.ws_max_m ? c.ws_max_m : m));
    auto ws_r = cuda::DeviceBuffer<uint8_t>::create(ws_bytes);
    PG_ASSERT_OK(ws_r.status());
    cuda::DeviceBuffer<uint8_t> ws_buf = std::move(ws_r).value();
    PG_ASSERT_OK(ws_buf.fill_bytes(0xff));  // nothing may rely on a zeroed workspace
    const cuda::MoeGemmWorkspace ws{ws_buf.data(), ws_buf.size()};
    PG_ASSERT_OK(cuda::moe_experts_gemm(ctx, da, ws, nullptr));
    ASSERT_TRUE(sync_ok());
    const std::vector<float> y_gpu = to_host(dy);

    // Every token's outputs finite (NaN weights of unselected experts or unwritten rows show),
    // the row gaps untouched.
    int64_t bad = 0, gap_touched = 0;
    for (int64_t t = 0; t < m; ++t)
      for (int64_t o = 0; o < ys; ++o) {
        const size_t i = size_t(t * ys + o);
        if (o < H) bad += !std::isfinite(y_gpu[i]);
        else gap_touched += c.accumulate ? y_gpu[i] != y0[i] : !is_poison(y_gpu[i]);
      }
    EXPECT_EQ(bad, 0) << "non-finite or unwritten outputs";
    EXPECT_EQ(gap_touched, 0) << "elements between rows (y_stride > hidden) were written";

    // CPU on the sampled tokens (a token's output depends on its own row and routing only).
    const std::vector<int64_t> toks = sample_tokens(m, c.checked);
    const int64_t ns = int64_t(toks.size());
    std::vector<float> x_s(size_t(ns * H)), w_s(size_t(ns * K)), y0_s(size_t(ns * ys));
    std::vector<int32_t> idx_s(size_t(ns * K));
    for (int64_t s = 0; s < ns; ++s) {
      const int64_t t = toks[size_t(s)];
      std::copy_n(x.begin() + t * H, H, x_s.begin() + s * H);
      std::copy_n(r.ref_idx.begin() + t * K, K, idx_s.begin() + s * K);
      std::copy_n(r.ref_weight.begin() + t * K, K, w_s.begin() + s * K);
      std::copy_n(y0.begin() + t * ys, ys, y0_s.begin() + s * ys);
    }
    MoeExpertsArgs ha = da;
    std::vector<float> y_cpu = y0_s;
    ha.x = x_s.data(), ha.expert_idx = idx_s.data(), ha.expert_weight = w_s.data();
    ha.gate_up = &gu.image, ha.down = &dn.image, ha.y = y_cpu.data(), ha.m = ns;
    PG_ASSERT_OK(validate(ha));
    cpu::moe_experts(ha, ThreadPool::global());
    const std::vector<double> tol = moe_tolerance(c, gu, dn, x_s, idx_s, w_s, ns, y0_s);

    std::vector<float> got, ref;
    for (int64_t s = 0; s < ns; ++s)
      for (int64_t o = 0; o < H; ++o)
        got.push_back(y_gpu[size_t(toks[size_t(s)] * ys + o)]), ref.push_back(y_cpu[size_t(s * ys + o)]);
    const Diff d = compare(got.data(), ref.data(), int64_t(got.size()), [&](int64_t i) { return tol[size_t(i)]; });
    EXPECT_EQ(d.non_finite, 0) << d.summary();
    EXPECT_EQ(d.over_tol, 0) << d.summary();
    EXPECT_GE(d.cosine, kMinCosine) << d.summary();

    // Deterministic: a second run gives the same bits (fixed orders, no float atomics).
    if (!c.accumulate) {
      PG_ASSERT_OK(dy.fill_bytes(0xff));
      PG_ASSERT_OK(cuda::moe_experts_gemm(ctx, da, ws, nullptr));
      ASSERT_TRUE(sync_ok());
      const std::vector<float> again = to_host(dy);
      EXPECT_EQ(0, std::memcmp(again.data(), y_gpu.data(), again.size() * sizeof(float))) << "run-to-run difference";
    }
    std::printf("[ moe_gemm ] %-30s m=%-5lld checked=%-3lld %s\n", c.name, (long long)m, (long long)ns,
                d.summary().c_str());
  }
}

constexpr WeightFormat kF32 = WeightFormat::kF32, kBF16 = WeightFormat::kBF16, kFp8 = WeightFormat::kFp8Block,
                       kFp4 = WeightFormat::kNvfp4;

const MoeCase kMoeCases[] = {
    // moonlight-16b-a3b: 64 routed + 2 shared, top 6, moe inter 1408, hidden 2048.
    {"moonlight_bf16", kBF16, 64, 2, 6, 2048, 1408, {64, 1000, 4096}},
    {"moonlight_fp8", kFp8, 64, 2, 6, 2048, 1408, {64, 1000, 4096}},
    {"moonlight_bf16_same_experts", kBF16, 64, 2, 6, 2048, 1408, {512}, 128, Routing::kSameExperts},
    {"moonlight_bf16_accumulate_gap", kBF16, 64, 2, 6, 2048, 1408, {1000}, 128, Routing::kRandom, true, 5},
    {"moonlight_bf16_chunked", kBF16, 64, 2, 6, 2048, 1408, {1000}, 128, Routing::kRandom, true, 0, 384},
    {"moonlight_bf16_skipped_ids", kBF16, 64, 2, 6, 2048, 1408, {200}, 128, Routing::kSkippedIds},
    // DeepSeek-V3: 256 routed + 1 shared, top 8, moe inter 2048, hidden 7168, FP8 128x128.
    {"v3_fp8", kFp8, 256, 1, 8, 7168, 2048, {256}, 128, Routing::kSubset, false, 0, 0, 12},
    // The tiny golden models' odd dims (rows re-strided into the workspace).
    {"tiny_bf16", kBF16, 8, 2, 3, 52, 22, {64, 300, 1000}},
    {"tiny_f32_accumulate_gap", kF32, 8, 2, 3, 52, 22, {64, 77}, 128, Routing::kRandom, true, 3},
    {"tiny_fp8_8x8_blocks", kFp8, 8, 1, 2, 40, 24, {64, 129}, 8},
    {"tiny_bf16_duplicate_ids", kBF16, 8, 2, 3, 52, 22, {100}, 128, Routing::kDuplicates},
    {"tiny_bf16_routed_only", kBF16, 8, 0, 3, 52, 22, {100}},
    {"tiny_bf16_chunked", kBF16, 8, 2, 3, 52, 22, {300}, 128, Routing::kRandom, false, 0, 70},
    {"small_fp8_32x32", kFp8, 16, 1, 4, 160, 96, {70, 513}, 32},
    // A dense MLP as the runner lays it out: no routed expert, one "shared" expert.
    {"tiny_bf16_dense", kBF16, 0, 1, 0, 52, 22, {64, 300}},
    {"moonlight_dense_bf16_accumulate", kBF16, 0, 1, 0, 2048, 11264, {64, 512}, 128, Routing::kRandom, true, 0, 0, 32},
    // NVFP4 (ModelOpt, a scale_2 per expert part): each step's experts staged as bf16.
    {"moonlight_nvfp4", kFp4, 64, 2, 6, 2048, 1408, {64, 1000}},
    {"moonlight_nvfp4_chunked", kFp4, 64, 2, 6, 2048, 1408, {1000}, 128, Routing::kRandom, true, 0, 384},
    {"v3_nvfp4", kFp4, 256, 1, 8, 7168, 2048, {256}, 128, Routing::kSubset, false, 0, 0, 12},
    {"tiny_nvfp4_odd_k", kFp4, 8, 2, 3, 48, 80, {64, 300}},
};

class MoeExpertsGemmCuda : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeExpertsGemmCuda, MatchesCpu) {
  PG_REQUIRE_CUDA();
  run_moe_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeExpertsGemmCuda, ::testing::ValuesIn(kMoeCases),
                         [](const ::testing::TestParamInfo<MoeCase>& i) { return std::string(i.param.name); });

TEST(MoeExpertsGemmWorkspace, SizesGrowWithTheDims) {  // host only
  const cuda::MoeGemmDims moon{8192, 6, 2, 64, 2048, 1408};
  const size_t b = cuda::moe_experts_gemm_workspace_bytes(moon);
  // Pair rows 2 * 8192 + 8192 * 6 + 64 * 31 = 67520: bf16 [rows, 2048] + f32 [rows, 2816] + plan.
  const size_t staging = size_t(67520) * (2048 * 2 + 2816 * 4);
  EXPECT_GT(b, staging);
  EXPECT_LT(b, staging + (size_t(4) << 20));
  cuda::MoeGemmDims half = moon, staged = moon;
  half.max_m = 4096;
  staged.stage_weights = true;  // + one expert's gate_up rows in bf16
  EXPECT_LT(cuda::moe_experts_gemm_workspace_bytes(half), b);
  EXPECT_GE(cuda::moe_experts_gemm_workspace_bytes(staged), b + size_t(2 * 1408 * 2048) * 2);
  std::printf("[ moe_gemm ] workspace: moonlight max_m 8192 %.3f GB, 4096 %.3f GB, dense (inter 11264) 8192 %.3f GB; "
              "V3 fp8 4096 %.3f GB\n",
              double(b) / 1e9, double(cuda::moe_experts_gemm_workspace_bytes(half)) / 1e9,
              double(cuda::moe_experts_gemm_workspace_bytes({8192, 0, 1, 0, 2048, 11264})) / 1e9,
              double(cuda::moe_experts_gemm_workspace_bytes({4096, 8, 1, 256, 7168, 2048, true})) / 1e9);
}

TEST(MoeExpertsGemmArgs, BadArgumentsAreStatusNotCrash) {
  PG_REQUIRE_CUDA();
  auto ctx = small_context();
  PG_ASSERT_OK(ctx.status());
  MoeExpertsArgs a;  // no weights
  EXPECT_FALSE(cuda::moe_experts_gemm(*ctx, a, {}, nullptr).ok());
  // Shapes valid, workspace missing or too small for one token: rejected before any launch.
  Matrix gu{kBF16, (4 + 1) * 2 * 16, 32, reinterpret_cast<const void*>(uintptr_t(256))};
  Matrix dn{kBF16, (4 + 1) * 32, 16, reinterpret_cast<const void*>(uintptr_t(256))};
  float* fake = reinterpret_cast<float*>(uintptr_t(256));
  int32_t* fake_idx = reinterpret_cast<int32_t*>(uintptr_t(256));
  a.x = fake, a.y = fake, a.expert_weight = fake, a.expert_idx = fake_idx, a.gate_up = &gu, a.down = &dn;
  a.m = 100, a.hidden = 32, a.inter = 16, a.n_experts = 4, a.top_k = 2, a.n_shared = 1;
  EXPECT_TRUE(validate(a).ok());
  EXPECT_FALSE(cuda::moe_experts_gemm(*ctx, a, {nullptr, 0}, nullptr).ok());
  EXPECT_FALSE(cuda::moe_experts_gemm(*ctx, a, {fake, 1024}, nullptr).ok());
  // Beyond the path's limits: Unsupported (the caller keeps ops::cuda::moe_experts).
  a.top_k = 40;
  a.n_experts = 40;
  gu.rows = (40 + 1) * 2 * 16, dn.rows = (40 + 1) * 32;
  EXPECT_TRUE(validate(a).ok());
  EXPECT_EQ(cuda::moe_experts_gemm(*ctx, a, {fake, size_t(1) << 30}, nullptr).code(), StatusCode::kUnsupported);
}

// ------------------------------------------------------------------------------------------------
// head_linear_gemm

struct HeadCase {
  const char* name;
  HeadWeight format;
  int64_t n_heads, n, k;
  std::vector<int64_t> ms;
  int64_t x_head_stride = 0;   // 0: k (heads packed in a row); x_row_stride = n_heads * x_head_stride
  int64_t y_head_gap = 0;      // y_head_stride = n + gap, y_row_stride = n_heads * y_head_stride
  bool heads_major = false;    // x and y stored [n_heads][m][...] (rows inside heads)
  int64_t scratch_tokens = 0;  // scratch for this many tokens (0: m): smaller runs in passes
  float y_scale = 1.0f;        // outputs times this (the GEMM's alpha)
};
void PrintTo(const HeadCase& c, std::ostream* os) { *os << c.name; }

void run_head_case(const HeadCase& c) {
  const uint64_t seed = seed_of(c.name);
  const int64_t nh = c.n_heads, n = c.n, k = c.k;
  // W [nh, n, k]: bf16 values (stored as f32 for kF32, so the GPU's expansion is exact).
  std::vector<float> w_img(size_t(nh * n * k));
  const float amp = 2.0f / std::sqrt(float(k));
  parallel_fill(w_img, [&](uint64_t i) { return bf16_round(amp * uniform_pm1(seed, i)); });
  // FP8: e4m3 codes with a power-of-two scale per row and 16 columns (the staged bf16 is exact).
  constexpr int64_t kFp8Group = 16;
  const int64_t groups = (k + kFp8Group - 1) / kFp8Group;
  std::vector<uint8_t> w_q;
  std::vector<float> w_s;
  if (c.format == HeadWeight::kFp8) {
    w_q.resize(w_img.size()), w_s.resize(size_t(nh * n * groups));
    for (size_t i = 0; i < w_s.size(); ++i) w_s[i] = std::exp2(float(-8 + int(splitmix64(seed + 9 + i) % 5)));
    for (int64_t r = 0; r < nh * n; ++r)
      for (int64_t j = 0; j < k; ++j) {
        const size_t i = size_t(r * k + j);
        const float s = w_s[size_t(r * groups + j / kFp8Group)];
        w_q[i] = f32_to_f8e4m3(w_img[i] / s);
        w_img[i] = f8e4m3_to_f32(w_q[i]) * s;
      }
  }
  std::vector<uint16_t> w_bf16(w_img.size());
  for (size_t i = 0; i < w_img.size(); ++i) w_bf16[i] = f32_to_bf16(w_img[i]);
  std::vector<float> w_abs(w_img.size());
  for (size_t i = 0; i < w_img.size(); ++i) w_abs[i] = std::fabs(w_img[i]);
  auto dwf = to_device(w_img);
  auto dwb = to_device(w_bf16);
  auto dwq = c.format == HeadWeight::kFp8 ? to_device(w_q) : cuda::DeviceBuffer<uint8_t>();
  auto dws = c.format == HeadWeight::kFp8 ? to_device(w_s) : cuda::DeviceBuffer<float>();
  const void* dw = c.format == HeadWeight::kF32   ? static_cast<const void*>(dwf.data())
                   : c.format == HeadWeight::kFp8 ? static_cast<const void*>(dwq.data())
                                                  : dwb.data();
  auto ctx_r = small_context();
  PG_ASSERT_OK(ctx_r.status());

  for (int64_t m : c.ms) {
    SCOPED_TRACE("m=" + std::to_string(m));
    const int64_t xhs0 = c.x_head_stride ? c.x_head_stride : k, yhs0 = n + c.y_head_gap;
    int64_t xrs, xhs, yrs, yhs;
    if (c.heads_major) xrs = xhs0, xhs = m * xhs0, yrs = yhs0, yhs = m * yhs0;
    else xrs = nh * xhs0, xhs = xhs0, yrs = nh * yhs0, yhs = yhs0;
    const int64_t x_elems = c.heads_major ? nh * m * xhs0 : m * nh * xhs0, y_elems = nh * m * yhs0;
    std::vector<float> x(static_cast<size_t>(x_elems));
    parallel_fill(x, [&](uint64_t i) { return bf16_round(uniform_pm1(seed + 2 + uint64_t(m), i)); });
    auto dx = to_device(x);
    auto dy_r = cuda::DeviceBuffer<float>::create(size_t(y_elems));
    PG_ASSERT_OK(dy_r.status());
    cuda::DeviceBuffer<float> dy = std::move(dy_r).value();
    PG_ASSERT_OK(dy.fill_bytes(0xff));
    const int64_t st = c.scratch_tokens ? c.scratch_tokens : m;
    const size_t scratch_bytes = cuda::head_linear_gemm_scratch_bytes(st, nh, n, k, c.format, dw);
    auto scr_r = cuda::DeviceBuffer<uint8_t>::create(scratch_bytes);
    PG_ASSERT_OK(scr_r.status());
    cuda::DeviceBuffer<uint8_t> scr = std::move(scr_r).value();
    PG_ASSERT_OK(scr.fill_bytes(0xff));

    HeadLinearArgs da;
    da.x = dx.data(), da.x_row_stride = xrs, da.x_head_stride = xhs, da.w = dw, da.w_format = c.format;
    if (c.format == HeadWeight::kFp8) da.w_scale = dws.data(), da.scale_group = kFp8Group;
    da.y_scale = c.y_scale;
    da.y = dy.data(), da.y_row_stride = yrs, da.y_head_stride = yhs, da.m = m, da.n_heads = nh, da.n = n, da.k = k;
    PG_ASSERT_OK(cuda::head_linear_gemm(*ctx_r, da, scr.data(), scr.size(), nullptr));
    ASSERT_TRUE(sync_ok());
    const std::vector<float> y_gpu = to_host(dy);

    // Every output written; the gaps between heads untouched.
    int64_t bad = 0, gap_touched = 0;
    std::vector<char> is_out(size_t(y_elems), 0);
    for (int64_t t = 0; t < m; ++t)
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t i = 0; i < n; ++i) is_out[size_t(t * yrs + h * yhs + i)] = 1;
    for (int64_t i = 0; i < y_elems; ++i)
      if (is_out[size_t(i)]) bad += !std::isfinite(y_gpu[size_t(i)]);
      else gap_touched += !is_poison(y_gpu[size_t(i)]);
    EXPECT_EQ(bad, 0) << "non-finite or unwritten outputs";
    EXPECT_EQ(gap_touched, 0) << "elements outside the outputs were written";

    // CPU on sampled tokens, compact [ns, nh, k] -> [ns, nh, n]; |x| |W| for the error scale.
    const std::vector<int64_t> toks = sample_tokens(m, 256);
    const int64_t ns = int64_t(toks.size());
    std::vector<float> xs(size_t(ns * nh * k)), xa(xs.size()), ref(size_t(ns * nh * n)), mag(ref.size());
    for (int64_t s = 0; s < ns; ++s)
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t j = 0; j < k; ++j) {
          const float v = x[size_t(toks[size_t(s)] * xrs + h * xhs + j)];
          xs[size_t((s * nh + h) * k + j)] = v, xa[size_t((s * nh + h) * k + j)] = std::fabs(v);
        }
    HeadLinearArgs ha;
    ha.x = xs.data(), ha.x_row_stride = nh * k, ha.x_head_stride = k, ha.w = w_img.data();
    ha.w_format = HeadWeight::kF32, ha.y = ref.data(), ha.y_row_stride = nh * n, ha.y_head_stride = n;
    ha.m = ns, ha.n_heads = nh, ha.n = n, ha.k = k, ha.y_scale = c.y_scale;
    PG_ASSERT_OK(validate(ha));
    cpu::head_linear(ha, ThreadPool::global());
    ha.x = xa.data(), ha.w = w_abs.data(), ha.y = mag.data(), ha.y_scale = std::fabs(c.y_scale);
    cpu::head_linear(ha, ThreadPool::global());

    std::vector<float> got(ref.size());
    for (int64_t s = 0; s < ns; ++s)
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t i = 0; i < n; ++i) got[size_t((s * nh + h) * n + i)] = y_gpu[size_t(toks[size_t(s)] * yrs + h * yhs + i)];
    const double rel = kLambda * chains(k) * kF32Unit;
    const Diff d = compare(got.data(), ref.data(), int64_t(got.size()), [&](int64_t i) { return rel * mag[size_t(i)]; });
    EXPECT_EQ(d.non_finite, 0) << d.summary();
    EXPECT_EQ(d.over_tol, 0) << d.summary();
    EXPECT_GE(d.cosine, 1.0 - 1e-6) << d.summary();
    std::printf("[ head_gemm] %-30s m=%-5lld checked=%-3lld %s\n", c.name, (long long)m, (long long)ns,
                d.summary().c_str());
  }
}

constexpr HeadWeight kHF32 = HeadWeight::kF32, kHBF16 = HeadWeight::kBF16, kHFP8 = HeadWeight::kFp8;

const HeadCase kHeadCases[] = {
    // moonlight: 16 heads, kv_lora 512, nope 128 (x = q_nope inside q rows of 16 x 192), v 128.
    {"moonlight_w_uk", kHBF16, 16, 512, 128, {64, 1000, 4096}, 192},
    {"moonlight_w_uv", kHBF16, 16, 128, 512, {64, 1000, 4096}},
    {"moonlight_w_uv_small_scratch", kHBF16, 16, 128, 512, {1000}, 0, 0, false, 300},
    // DeepSeek-V3: 128 heads.
    {"v3_w_uk", kHBF16, 128, 512, 128, {256}, 192},
    {"v3_w_uv_f32", kHF32, 128, 128, 512, {256}},
    // The tiny models: 3 heads, kv_lora 27, nope 11 (q rows of 3 x 17), v 13; gaps between heads.
    {"tiny_w_uk_f32", kHF32, 3, 27, 11, {64, 300}, 17, 2},
    {"tiny_w_uv_bf16", kHBF16, 3, 13, 27, {64, 100}, 0, 3},
    {"heads_major_bf16", kHBF16, 4, 64, 64, {100}, 0, 0, true},
    {"heads_major_odd_f32", kHF32, 3, 13, 27, {70}, 0, 1, true},
    // FP8 heads (a DeepSeek-FP8 kv_b_proj's codes and scales), staged as bf16: V3's W_UV, odd dims.
    {"v3_w_uv_fp8", kHFP8, 128, 128, 512, {256}},
    {"tiny_w_uk_fp8", kHFP8, 3, 27, 11, {64}, 17, 2},
    // bf16 heads with y_scale (an NVFP4 kv_b_proj's scale_2): the GEMM's alpha.
    {"moonlight_w_uv_y_scale", kHBF16, 16, 128, 512, {64}, 0, 0, false, 0, 0.0371f},
};

class HeadLinearGemmCuda : public ::testing::TestWithParam<HeadCase> {};

TEST_P(HeadLinearGemmCuda, MatchesCpu) {
  PG_REQUIRE_CUDA();
  run_head_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Shapes, HeadLinearGemmCuda, ::testing::ValuesIn(kHeadCases),
                         [](const ::testing::TestParamInfo<HeadCase>& i) { return std::string(i.param.name); });

TEST(HeadLinearGemmArgs, BadArgumentsAreStatusNotCrash) {
  PG_REQUIRE_CUDA();
  auto ctx = small_context();
  PG_ASSERT_OK(ctx.status());
  HeadLinearArgs a;
  EXPECT_FALSE(cuda::head_linear_gemm(*ctx, a, nullptr, 0, nullptr).ok());  // bad dims
  float* fake = reinterpret_cast<float*>(uintptr_t(256));
  a.x = fake, a.w = fake, a.y = fake, a.m = 8, a.n_heads = 2, a.n = 16, a.k = 16;
  a.x_row_stride = 32, a.x_head_stride = 16, a.y_row_stride = 32, a.y_head_stride = 16;
  EXPECT_TRUE(validate(a).ok());
  EXPECT_FALSE(cuda::head_linear_gemm(*ctx, a, nullptr, 0, nullptr).ok());  // no scratch
  EXPECT_FALSE(cuda::head_linear_gemm(*ctx, a, fake, 16, nullptr).ok());    // too small
}

// ------------------------------------------------------------------------------------------------
// Timing (printed, never checked): moonlight at m = 8192.

// Milliseconds per call of f (after one warm-up call), over `iters` calls.
template <typename F>
double time_ms(F f, int iters) {
  if (!f().ok()) return -1;
  if (cudaDeviceSynchronize() != cudaSuccess) return -1;
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  cudaEventRecord(a, nullptr);
  for (int i = 0; i < iters; ++i)
    if (!f().ok()) return -1;
  cudaEventRecord(b, nullptr);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a), cudaEventDestroy(b);
  return double(ms) / iters;
}

// cuBLASLt's bf16 rate measured on 8192^3 (ops/cuda/gemm/gemm.h's note).
constexpr double kMeasuredTflops = 735.0;

TEST(PrefillGemmTiming, Moonlight8192) {
  PG_REQUIRE_CUDA();
  const int64_t m = 8192, E = 64, S = 2, K = 6, H = 2048, I = 1408, nh = 16, R = 512, nope = 128, V = 128;
  auto ctx_r = small_context();
  PG_ASSERT_OK(ctx_r.status());
  cuda::GemmContext& ctx = *ctx_r;
  // Weights: every bf16 0x3c3c (0.0115), x random: the timing does not depend on the values.
  auto gu = cuda::DeviceBuffer<uint16_t>::create(size_t((E + S) * 2 * I * H));
  auto dn = cuda::DeviceBuffer<uint16_t>::create(size_t((E + S) * H * I));
  PG_ASSERT_OK(gu.status());
  PG_ASSERT_OK(dn.status());
  PG_ASSERT_OK(gu->fill_bytes(0x3c));
  PG_ASSERT_OK(dn->fill_bytes(0x3c));
  Matrix wgu{kBF16, (E + S) * 2 * I, H, gu->data()}, wdn{kBF16, (E + S) * H, I, dn->data()};
  std::vector<float> x(size_t(m * H));
  parallel_fill(x, [](uint64_t i) { return uniform_pm1(77, i); });
  MoeCase rc{"timing", kBF16, E, S, K, H, I, {m}};
  const Routed r = route(rc, m, 99);
  auto dx = to_device(x);
  auto didx = to_device(r.idx);
  auto dw = to_device(r.weight);
  auto dy_r = cuda::DeviceBuffer<float>::create(size_t(m * H));
  PG_ASSERT_OK(dy_r.status());
  MoeExpertsArgs a;
  a.x = dx.data(), a.expert_idx = didx.data(), a.expert_weight = dw.data(), a.gate_up = &wgu, a.down = &wdn;
  a.y = dy_r->data(), a.m = m, a.hidden = H, a.inter = I, a.n_experts = E, a.top_k = K, a.n_shared = S;
  const double flops = 2.0 * double(m) * double(K + S) * 3.0 * double(H) * double(I);
  {
    auto ws = cuda::DeviceBuffer<uint8_t>::create(cuda::moe_experts_gemm_workspace_bytes(cuda::moe_gemm_dims(a, m)));
    PG_ASSERT_OK(ws.status());
    const cuda::MoeGemmWorkspace w{ws->data(), ws->size()};
    const double ms = time_ms([&] { return cuda::moe_experts_gemm(ctx, a, w, nullptr); }, 5);
    // Useful FLOPs only (not the padding rows). For scale: the runner's CUDA-core path ran the
    // whole moonlight prefill of 8192 tokens in ~8 s, about 1% of the tensor-core rate.
    std::printf("[ timing   ] moe_experts_gemm moonlight m=8192: %.3f ms, %.1f TFLOP/s (%.1f%% of %.0f)\n", ms,
                flops / ms / 1e9, 100.0 * flops / ms / 1e9 / kMeasuredTflops, kMeasuredTflops);
  }
  // Per-head products: W_UK [16, 512, 128] on q_nope (rows of 16 x 192), W_UV [16, 128, 512].
  struct Head {
    const char* name;
    int64_t n, k, xhs;
  };
  for (const Head& h : {Head{"w_uk", R, nope, nope + 64}, Head{"w_uv", V, R, R}}) {
    auto w = cuda::DeviceBuffer<uint16_t>::create(size_t(nh * h.n * h.k));
    auto hx = cuda::DeviceBuffer<float>::create(size_t(m * nh * h.xhs));
    auto hy = cuda::DeviceBuffer<float>::create(size_t(m * nh * h.n));
    PG_ASSERT_OK(w.status());
    PG_ASSERT_OK(hx.status());
    PG_ASSERT_OK(hy.status());
    PG_ASSERT_OK(w->fill_bytes(0x3c));
    PG_ASSERT_OK(hx->fill_bytes(0x3c));
    HeadLinearArgs ha;
    ha.x = hx->data(), ha.x_row_stride = nh * h.xhs, ha.x_head_stride = h.xhs, ha.w = w->data();
    ha.w_format = HeadWeight::kBF16, ha.y = hy->data(), ha.y_row_stride = nh * h.n, ha.y_head_stride = h.n;
    ha.m = m, ha.n_heads = nh, ha.n = h.n, ha.k = h.k;
    auto scr = cuda::DeviceBuffer<uint8_t>::create(
        cuda::head_linear_gemm_scratch_bytes(m, nh, h.n, h.k, ha.w_format, ha.w));
    PG_ASSERT_OK(scr.status());
    const double hf = 2.0 * double(m) * double(nh) * double(h.n) * double(h.k);
    const double g = time_ms([&] { return cuda::head_linear_gemm(ctx, ha, scr->data(), scr->size(), nullptr); }, 5);
    const double c = time_ms([&] { return cuda::head_linear(ha, nullptr); }, 2);
    std::printf("[ timing   ] head_linear %s m=8192: gemm %.3f ms (%.1f TFLOP/s), CUDA cores %.3f ms (%.1f TFLOP/s)\n",
                h.name, g, hf / g / 1e9, c, hf / c / 1e9);
  }
}

}  // namespace
}  // namespace pg::ops::test
