// ops::cuda::gemm_linear (cuBLASLt bf16 tensor cores) against ops::cpu::linear: prefill shapes of
// moonlight and DeepSeek-V3 (bf16, f32 and DeepSeek-FP8 128x128 / 32x32 blocks), the tiny models'
// odd dims, strides, accumulate, misaligned pointers, the algorithm cache, graph capture, and
// round_to_bf16 bit for bit.
#include "ops/cuda/gemm/gemm.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/cpu_ops.h"
#include "tests/ops/host_weights.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {
namespace {

// Tolerances, derived. The GPU rounds x to bf16 and takes the weight's bf16 image (bf16 as is;
// f32 and fp8 * scale rounded to nearest even), so the reference is ops::cpu::linear on exactly
// those bf16 values: every product is exact in f32 (8 x 8 significant bits) on both sides and
// the outputs differ only by summation order. The CPU sums in 16 chains of ceil(K/16) terms plus
// a 4-level tree; the tensor cores in at most K sequential f32 additions (whatever their tile
// order) plus split-K / stream-K reductions (< 32). Higham & Mary's probabilistic bound (SIAM J.
// Sci. Comput. 41(5), 2019, Thm 3.1) with lambda = 10 (failure probability < 1e-18 per output):
//   |y_gpu - y_cpu| <= 10 * (sqrt(n_cpu) + sqrt(n_gpu)) * u * sum_k |x_k w_k|  (+ 2u(|y0| + ...) accumulating),
// 6.3e-5 of sum|x||w| at K = 7168, 3.4e-5 at K = 2048 (tensor-core truncation in the alignment
// of a block's products stays within the same u per addition).
constexpr double kLambda = 10.0;
constexpr double kMinCosine = 1.0 - 1e-6;
// Against the unrounded definition (f32 x, stored weights): rounding to nearest bf16 (8
// significant bits, unit roundoff 2^-8) moves a factor by at most 2^-8 of its bf16 value, so a
// product of two rounded factors errs by <= (1 + 2^-8)^2 - 1 = 2^-7 + 2^-16 of |x_bf16 w_bf16|;
// 1% on top covers the f32 rounding of the CPU's sum of |x||w| (< 4.3e-4 relative at K = 7168).
constexpr double kBf16ProductRel = 0.0078125 * 1.01;
// Rows of the CPU reference per case: all when m*n*k is at most this many multiply-adds, else
// every s-th row (and the last) so that each of the three CPU passes stays under ~0.4 s.
constexpr double kMaxRefMacs = 4e8;

struct GemmCase {
  const char* name;
  WeightFormat format;
  int64_t m, n, k;
  int64_t x_pad = 0, y_pad = 0;  // row strides k + x_pad, n + y_pad
  bool accumulate = false;
  int64_t block = 128;           // fp8 block_rows = block_cols; NVFP4: > 0 and < n gives a scale_2 per
                                 //  group of this many rows (a stack of ModelOpt tensors)
  bool misalign_x = false;       // x starts 4 bytes past a 16-byte boundary (element-wise staging)
  bool misalign_y = false;       // y starts 4 bytes past a 16-byte boundary
  bool misalign_w = false;       // bf16 weight starts 2 bytes past a 16-byte boundary
};
void PrintTo(const GemmCase& c, std::ostream* os) { *os << c.name; }

float bf16_round(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// Host weights of one case in its stored format (tests/ops/host_weights.h: NVFP4 block scales of
// exponent field 4..11 and a scale_2 that is not a power of two, fp8 block scales in [2^-12, 2^-6]
// that are not either, so the products really round when they become bf16), and their bf16 image
// (what the GPU multiplies).
struct GemmWeights : HostWeights {
  std::vector<uint16_t> image;    // [n, k] bf16 of the dequantized weight
  std::vector<uint16_t> image_abs;
  Matrix w_image, w_image_abs;    // bf16 matrices over image / image_abs
};

GemmWeights make_weights(const GemmCase& c, uint64_t seed) {
  GemmWeights h;
  const bool groups = c.format == WeightFormat::kNvfp4 && c.block > 0 && c.block < c.n && c.n % c.block == 0;
  static_cast<HostWeights&>(h) =
      make_host_weights({c.format, c.n, c.k, c.block, groups ? c.block : 0, false, 0.0123f}, seed);
  const size_t nk = size_t(c.n * c.k);
  h.image.resize(nk);
  h.image_abs.resize(nk);
  ThreadPool::global().parallel_for(c.n, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(c.k));
    for (int64_t r = r0; r < r1; ++r) {
      matrix_row_to_f32(h.w, r, row.data());  // fp8: value * scale in f32, as the GPU computes it
      for (int64_t j = 0; j < c.k; ++j) {
        const uint16_t b = f32_to_bf16(row[size_t(j)]);
        h.image[size_t(r * c.k + j)] = b;
        h.image_abs[size_t(r * c.k + j)] = uint16_t(b & 0x7fffu);
      }
    }
  });
  h.w_image = Matrix{WeightFormat::kBF16, c.n, c.k, h.image.data()};
  h.w_image_abs = Matrix{WeightFormat::kBF16, c.n, c.k, h.image_abs.data()};
  return h;
}

// The checked rows: all, or every s-th and the last.
std::vector<int64_t> ref_rows(const GemmCase& c) {
  const double macs = double(c.m) * double(c.n) * double(c.k);
  const int64_t step = macs <= kMaxRefMacs ? 1 : int64_t(std::ceil(macs / kMaxRefMacs));
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < c.m; i += step) rows.push_back(i);
  if (rows.back() != c.m - 1) rows.push_back(c.m - 1);
  return rows;
}

// y_sel = x_sel · wᵀ (+ y0_sel) on the CPU; x_sel / y0_sel dense [rows, k] / [rows, n].
std::vector<float> cpu_linear(const Matrix& w, const std::vector<float>& x_sel, const std::vector<float>* y0_sel,
                              int64_t rows) {
  std::vector<float> y = y0_sel ? *y0_sel : std::vector<float>(size_t(rows * w.rows));
  LinearArgs a;
  a.x = x_sel.data(), a.w = &w, a.y = y.data(), a.m = rows, a.accumulate = y0_sel != nullptr;
  EXPECT_TRUE(validate(a).ok());
  cpu::linear(a, ThreadPool::global());
  return y;
}

// Device copies of a case's inputs; `dw` is the Matrix gemm_linear gets.
struct DeviceCase {
  cuda::DeviceBuffer<float> x, y, wf, scale;
  cuda::DeviceBuffer<uint16_t> wb;
  cuda::DeviceBuffer<uint8_t> w8, scale8;
  Matrix dw;
  LinearArgs args;
};

enum class Launch { kDirect, kGraph };

// Runs one case on the GPU with `ctx` and compares with the CPU; `launch` = kGraph captures the
// call in a CUDA graph (after one eager warm-up) and replays it into a re-poisoned y.
void run_case(const GemmCase& c, cuda::GemmContext& ctx, Launch launch = Launch::kDirect) {
  const uint64_t seed = seed_of(c.name);
  const int64_t xs = c.k + c.x_pad, ys = c.n + c.y_pad;
  const int64_t x_off = c.misalign_x ? 1 : 0, y_off = c.misalign_y ? 1 : 0;  // floats
  GemmWeights hw = make_weights(c, seed);
  std::vector<float> x(static_cast<size_t>(c.m * xs + x_off));
  parallel_fill(x, [&](uint64_t i) { return uniform_pm1(seed + 2, i); });
  std::vector<float> y0(static_cast<size_t>(c.m * ys + y_off));
  if (c.accumulate) parallel_fill(y0, [&](uint64_t i) { return 4.0f * uniform_pm1(seed + 3, i); });

  // GPU inputs; y poisoned with NaN (0xff bytes) unless accumulating.
  DeviceCase d;
  d.x = to_device(x);
  if (c.accumulate) {
    d.y = to_device(y0);
  } else {
    auto r = cuda::DeviceBuffer<float>::create(y0.size());
    PG_ASSERT_OK(r.status());
    d.y = std::move(r).value();
  }
  d.dw = hw.w;
  switch (c.format) {
    case WeightFormat::kNvfp4:
      d.w8 = to_device_nvfp4(hw.fp8), d.dw.data = d.w8.data();
      d.scale8 = to_device(hw.scale8), d.dw.scale_fp8 = d.scale8.data();
      if (hw.w.scale_2_rows) d.scale = to_device(hw.scale), d.dw.scale_2_rows = d.scale.data();
      break;
    case WeightFormat::kF32: d.wf = to_device(hw.f32), d.dw.data = d.wf.data(); break;
    case WeightFormat::kBF16: {
      // misalign_w: the matrix starts one element into the buffer.
      std::vector<uint16_t> buf(hw.bf16.size() + 1);
      std::copy(hw.bf16.begin(), hw.bf16.end(), buf.begin() + (c.misalign_w ? 1 : 0));
      d.wb = to_device(buf), d.dw.data = d.wb.data() + (c.misalign_w ? 1 : 0);
      break;
    }
    case WeightFormat::kFp8Block:
      d.w8 = to_device(hw.fp8), d.dw.data = d.w8.data();
      d.scale = to_device(hw.scale), d.dw.scale_inv = d.scale.data();
      break;
  }
  LinearArgs& da = d.args;
  da.x = d.x.data() + x_off, da.w = &d.dw, da.y = d.y.data() + y_off, da.m = c.m, da.x_stride = xs,
  da.y_stride = ys, da.accumulate = c.accumulate;
  auto reset_y = [&]() -> Status {
    return c.accumulate ? d.y.upload(y0.data(), y0.size()) : d.y.fill_bytes(0xff);
  };
  PG_ASSERT_OK(reset_y());

  if (launch == Launch::kDirect) {
    PG_ASSERT_OK(cuda::gemm_linear(ctx, da, nullptr));
  } else {
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    // The uploads and the poisoning ran on the legacy stream, which a non-blocking one does not wait for.
    ASSERT_TRUE(sync_ok());
    PG_ASSERT_OK(cuda::gemm_linear(ctx, da, stream));  // warm-up: fills the cache, loads the kernels
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const int64_t calls = ctx.heuristic_calls();
    cudaGraph_t graph = nullptr;
    // Global mode: any allocation or synchronization inside the call breaks the capture.
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    const Status s = cuda::gemm_linear(ctx, da, stream);
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    PG_ASSERT_OK(s);
    ASSERT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
    EXPECT_EQ(ctx.heuristic_calls(), calls) << "the captured call asked the heuristic again";
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    PG_ASSERT_OK(reset_y());
    ASSERT_TRUE(sync_ok());
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
  ASSERT_TRUE(sync_ok());
  const std::vector<float> y_gpu = to_host(d.y);

  // Every output written, the row gaps untouched.
  int64_t unwritten = 0, gap_touched = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t r = 0; r < ys; ++r) {
      const size_t o = size_t(y_off + i * ys + r);
      if (r < c.n) unwritten += !std::isfinite(y_gpu[o]);
      else gap_touched += c.accumulate ? y_gpu[o] != y0[o] : !is_poison(y_gpu[o]);
    }
  }
  EXPECT_EQ(unwritten, 0) << "unwritten or non-finite outputs";
  EXPECT_EQ(gap_touched, 0) << "elements between rows (y_stride > n) were written";

  // CPU on the checked rows: the bf16 image (the exact comparison), |x| |w| (the error scale) and
  // the stored weight with the unrounded x (the precision contract).
  const std::vector<int64_t> rows = ref_rows(c);
  const int64_t nr = int64_t(rows.size());
  std::vector<float> x_sel(static_cast<size_t>(nr * c.k)), xr_sel(x_sel.size()), xa_sel(x_sel.size()), y0_sel(size_t(nr * c.n));
  for (int64_t s = 0; s < nr; ++s)
    for (int64_t j = 0; j < c.k; ++j) {
      const float v = x[size_t(x_off + rows[size_t(s)] * xs + j)];
      x_sel[size_t(s * c.k + j)] = v;
      xr_sel[size_t(s * c.k + j)] = bf16_round(v);
      xa_sel[size_t(s * c.k + j)] = std::fabs(bf16_round(v));
    }
  if (c.accumulate)
    for (int64_t s = 0; s < nr; ++s)
      for (int64_t r = 0; r < c.n; ++r) y0_sel[size_t(s * c.n + r)] = y0[size_t(y_off + rows[size_t(s)] * ys + r)];
  const std::vector<float>* y0p = c.accumulate ? &y0_sel : nullptr;
  const std::vector<float> ref = cpu_linear(hw.w_image, xr_sel, y0p, nr);
  const std::vector<float> absdot = cpu_linear(hw.w_image_abs, xa_sel, nullptr, nr);
  const std::vector<float> exact = cpu_linear(hw.w, x_sel, y0p, nr);

  std::vector<float> got(static_cast<size_t>(nr * c.n));
  std::vector<double> tol(got.size()), tol_exact(got.size());
  const double n_cpu = std::ceil(double(c.k) / 16) + 6, n_gpu = double(c.k) + 32;
  const double rel = kLambda * (std::sqrt(n_cpu) + std::sqrt(n_gpu)) * kF32Unit;
  for (int64_t s = 0; s < nr; ++s)
    for (int64_t r = 0; r < c.n; ++r) {
      const size_t o = size_t(s * c.n + r);
      got[o] = y_gpu[size_t(y_off + rows[size_t(s)] * ys + r)];
      const double a = absdot[o];
      tol[o] = rel * a;
      if (c.accumulate) tol[o] += 2 * kF32Unit * (std::fabs(double(y0_sel[o])) + a);
      tol_exact[o] = tol[o] + kBf16ProductRel * a;
    }
  const Diff dr = compare(got.data(), ref.data(), int64_t(got.size()), [&](int64_t i) { return tol[size_t(i)]; });
  EXPECT_EQ(dr.non_finite, 0) << dr.summary();
  EXPECT_EQ(dr.over_tol, 0) << "vs the bf16-rounded reference: " << dr.summary();
  EXPECT_GE(dr.cosine, kMinCosine) << dr.summary();
  const Diff de =
      compare(got.data(), exact.data(), int64_t(got.size()), [&](int64_t i) { return tol_exact[size_t(i)]; });
  EXPECT_EQ(de.over_tol, 0) << "vs the unrounded definition: " << de.summary();
  std::printf("[ gemm     ] %-30s m=%-5lld n=%-6lld k=%-5lld rows=%-5lld bf16-ref: %s\n", c.name, (long long)c.m,
              (long long)c.n, (long long)c.k, (long long)nr, dr.summary().c_str());
  std::printf("[ gemm     ] %-30s vs unrounded: max_rel=%.3g cosine=%.9f\n", c.name, de.max_rel, de.cosine);
}

Result<cuda::GemmContext> context_for(const GemmCase& c) { return cuda::GemmContext::create(c.m, c.k, c.n); }

constexpr WeightFormat kF32 = WeightFormat::kF32, kBF16 = WeightFormat::kBF16, kFp8 = WeightFormat::kFp8Block,
                       kFp4 = WeightFormat::kNvfp4;

const GemmCase kCases[] = {
    // moonlight-16b-a3b prefill (hidden 2048): q_proj 2048 -> 3072, kv_a 2048 -> 576, o_proj
    // 2048 -> 2048, experts 2048 -> 1408 (gate/up) and 1408 -> 2048 (down).
    {"moonlight_q_proj_m1024", kBF16, 1024, 3072, 2048},
    {"moonlight_q_proj_m8192", kBF16, 8192, 3072, 2048},
    {"moonlight_kv_a_m1024", kBF16, 1024, 576, 2048},
    {"moonlight_kv_a_m8192", kBF16, 8192, 576, 2048},
    {"moonlight_o_proj_m1024", kBF16, 1024, 2048, 2048},
    {"moonlight_o_proj_m8192", kBF16, 8192, 2048, 2048},
    {"moonlight_expert_gate_m1024", kBF16, 1024, 1408, 2048},
    {"moonlight_expert_down_m333", kBF16, 333, 2048, 1408},
    {"moonlight_router_f32_m1024", kF32, 1024, 64, 2048},
    {"o_proj_f32_m257", kF32, 257, 2048, 2048},
    // DeepSeek-V3 at m = 512: q_a 7168 -> 1536 and q_b 1536 -> 24576, FP8 128x128 and bf16.
    {"v3_q_a_fp8_m512", kFp8, 512, 1536, 7168},
    {"v3_q_b_fp8_m512", kFp8, 512, 24576, 1536},
    {"v3_q_a_bf16_m512", kBF16, 512, 1536, 7168},
    {"v3_expert_down_fp8_m100", kFp8, 100, 7168, 2048},
    // FP8 with partial 128-blocks and the tiny models' 32x32 blocks.
    {"partial_blocks_fp8", kFp8, 65, 257, 1040},
    {"blocks32_fp8", kFp8, 130, 200, 512, 0, 0, false, 32},
    {"blocks32_tiny_fp8", kFp8, 37, 22, 52, 0, 0, false, 32},
    {"blocks32_odd_k_fp8", kFp8, 9, 39, 27, 0, 0, false, 32},
    {"blocks48_odd_fp8", kFp8, 17, 150, 480, 0, 0, false, 48},
    // Tiny golden models' odd dims (hidden 52, inter 22, kv_lora 27, nope 11, v 13, 3 heads).
    {"tiny_k11_bf16", kBF16, 7, 13, 11},
    {"tiny_k52_bf16", kBF16, 5, 22, 52},
    {"tiny_k27_bf16", kBF16, 9, 39, 27},
    {"tiny_k22_f32", kF32, 3, 52, 22},
    {"tiny_m1_bf16", kBF16, 1, 52, 52},
    {"one_by_one_bf16", kBF16, 1, 1, 1},
    // Strides, accumulate, misalignment, m off any tile.
    {"strided_bf16", kBF16, 300, 1408, 2048, 5, 3},
    {"strided_fp8", kFp8, 64, 576, 2048, 4, 4},
    {"accumulate_bf16", kBF16, 300, 576, 2048, 0, 5, true},
    {"accumulate_fp8", kFp8, 128, 2048, 1408, 0, 0, true},
    {"accumulate_tiny_f32", kF32, 6, 13, 11, 1, 2, true},
    {"misaligned_x_bf16", kBF16, 96, 1408, 2048, 0, 0, false, 128, true},
    // NVFP4 (ModelOpt): dequantized to bf16 by the staging kernel (prefill of NVFP4 checkpoints).
    {"moonlight_q_kv_a_nvfp4_m1024", kFp4, 1024, 3648, 2048, 0, 0, false, 0},
    {"v3_q_b_nvfp4_m512", kFp4, 512, 24576, 1536, 0, 0, false, 0},
    {"v3_o_proj_nvfp4_m256", kFp4, 256, 7168, 16384, 0, 0, false, 0},
    {"joined_scale_2_groups_nvfp4", kFp4, 300, 2112, 7168, 0, 0, false, 64},
    {"odd_k_nvfp4", kFp4, 37, 39, 48, 0, 0, true, 0},
    {"accumulate_strided_nvfp4", kFp4, 65, 576, 2048, 4, 3, true, 0},
    {"misaligned_y_bf16", kBF16, 96, 1408, 2048, 0, 0, false, 128, false, true},
    {"misaligned_w_bf16", kBF16, 96, 1408, 2048, 0, 0, false, 128, false, false, true},
    {"m1023_bf16", kBF16, 1023, 3072, 2048},
};

class GemmCuda : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmCuda, MatchesCpu) {
  PG_REQUIRE_CUDA();
  auto ctx = context_for(GetParam());
  PG_ASSERT_OK(ctx.status());
  run_case(GetParam(), *ctx);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmCuda, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<GemmCase>& i) { return std::string(i.param.name); });

TEST(GemmCudaCache, SecondCallOfAShapeReusesTheAlgorithm) {
  PG_REQUIRE_CUDA();
  const GemmCase c{"cache_bf16", kBF16, 256, 576, 2048};
  auto r = cuda::GemmContext::create(1024, 2048, 3072);
  PG_ASSERT_OK(r.status());
  cuda::GemmContext& ctx = *r;
  EXPECT_EQ(ctx.heuristic_calls(), 0);
  run_case(c, ctx);
  EXPECT_EQ(ctx.cached_shapes(), 1);
  const int64_t calls = ctx.heuristic_calls();
  EXPECT_GE(calls, 1);
  run_case(c, ctx);  // same shape, new buffers of the same alignment
  EXPECT_EQ(ctx.cached_shapes(), 1);
  EXPECT_EQ(ctx.heuristic_calls(), calls) << "the second call of a shape asked the heuristic again";
  // Another m is another shape.
  const GemmCase c2{"cache_bf16_m255", kBF16, 255, 576, 2048};
  run_case(c2, ctx);
  EXPECT_EQ(ctx.cached_shapes(), 2);
}

TEST(GemmCudaGraph, CapturedCallMatchesCpu) {
  PG_REQUIRE_CUDA();
  for (const GemmCase& c : {GemmCase{"graph_bf16", kBF16, 512, 1408, 2048},
                            GemmCase{"graph_fp8", kFp8, 512, 1536, 7168},
                            GemmCase{"graph_tiny_f32_accumulate", kF32, 5, 22, 52, 0, 3, true}}) {
    SCOPED_TRACE(c.name);
    auto ctx = context_for(c);
    PG_ASSERT_OK(ctx.status());
    run_case(c, *ctx, Launch::kGraph);
    if (HasFatalFailure()) return;
  }
}

TEST(GemmCudaPrepare, PrepareFillsTheCacheWithoutLaunching) {
  PG_REQUIRE_CUDA();
  const GemmCase c{"prepare_fp8", kFp8, 200, 576, 2048};
  auto ctx = context_for(c);
  PG_ASSERT_OK(ctx.status());
  // gemm_prepare looks only at the pointers' alignment: any 256-aligned stand-ins will do.
  auto buf = cuda::DeviceBuffer<float>::create(1);
  PG_ASSERT_OK(buf.status());
  float scale = 1.0f;
  Matrix w{kFp8, c.n, c.k, buf->data(), &scale};
  LinearArgs a;
  a.x = buf->data(), a.w = &w, a.y = buf->data(), a.m = c.m;
  PG_ASSERT_OK(cuda::gemm_prepare(*ctx, a));
  EXPECT_EQ(ctx->cached_shapes(), 1);
  const int64_t calls = ctx->heuristic_calls();
  run_case(c, *ctx);
  EXPECT_EQ(ctx->heuristic_calls(), calls);
  EXPECT_EQ(ctx->cached_shapes(), 1);
}

TEST(GemmCudaArgs, LimitsAndBadArgumentsAreStatusNotCrash) {
  PG_REQUIRE_CUDA();
  EXPECT_FALSE(cuda::GemmContext::create(0, 16, 16).ok());
  EXPECT_FALSE(cuda::GemmContext::create(16, 16, 16, -2).ok());
  // No weight scratch: bf16 weights only.
  auto r = cuda::GemmContext::create(64, 256, 256, 0);
  PG_ASSERT_OK(r.status());
  cuda::GemmContext& ctx = *r;
  auto buf = cuda::DeviceBuffer<float>::create(64 * 256);
  PG_ASSERT_OK(buf.status());
  float* p = buf->data();
  LinearArgs a;  // no weight
  EXPECT_FALSE(cuda::gemm_linear(ctx, a, nullptr).ok());
  Matrix wf{kF32, 256, 256, p};
  a.x = p, a.y = p, a.w = &wf, a.m = 8;
  const Status no_scratch = cuda::gemm_linear(ctx, a, nullptr);
  EXPECT_EQ(no_scratch.code(), StatusCode::kFailedPrecondition) << no_scratch.to_string();
  Matrix wb{kBF16, 256, 256, p};
  a.w = &wb;
  a.m = 65;  // > max_m
  EXPECT_EQ(cuda::gemm_linear(ctx, a, nullptr).code(), StatusCode::kFailedPrecondition);
  Matrix wk{kBF16, 16, 257, p};  // k > max_k
  a.w = &wk, a.m = 1;
  EXPECT_EQ(cuda::gemm_linear(ctx, a, nullptr).code(), StatusCode::kFailedPrecondition);
  a.w = &wb, a.m = 0;  // nothing to do
  PG_ASSERT_OK(cuda::gemm_linear(ctx, a, nullptr));
  EXPECT_TRUE(sync_ok());
}

// round_to_bf16 equals core/dtype.h's f32_to_bf16 bit for bit (NaN: any NaN), ties to even
// included, at an odd length and unaligned pointers (the element-wise path) and aligned ones.
TEST(GemmCudaRound, RoundToBf16MatchesHostBitForBit) {
  PG_REQUIRE_CUDA();
  const int64_t n = 100003;
  std::vector<float> x(size_t(n) + 1);
  parallel_fill(x, [](uint64_t i) {
    const uint32_t b = uint32_t(splitmix64(i * 7919 + 11));
    return bits_to_f32(i % 3 == 0 ? (b & 0xffff0000u) | 0x8000u : b);  // every third an exact tie
  });
  const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x00000001u, 0x80000000u, 0x7f800000u, 0xff800000u,
                              0x7f7fffffu, 0x7fc00001u, 0x007fffffu, 0xbf7fffffu};
  for (size_t i = 0; i < std::size(special); ++i) x[i] = bits_to_f32(special[i]);
  auto dx = to_device(x);
  auto ry = cuda::DeviceBuffer<uint16_t>::create(size_t(n) + 1);
  PG_ASSERT_OK(ry.status());
  for (int64_t off : {0, 1}) {
    SCOPED_TRACE("offset " + std::to_string(off));
    PG_ASSERT_OK(ry->fill_bytes(0xff));
    PG_ASSERT_OK(cuda::round_to_bf16(dx.data() + off, ry->data() + off, n - off, nullptr));
    ASSERT_TRUE(sync_ok());
    const std::vector<uint16_t> y = to_host(*ry);
    int64_t wrong = 0, first = -1;
    for (int64_t i = off; i < n; ++i) {
      const float v = x[size_t(i)];
      const uint16_t want = f32_to_bf16(v), got = y[size_t(i)];
      const bool ok = std::isnan(v) ? std::isnan(bf16_to_f32(got)) : got == want;
      if (!ok && wrong++ == 0) first = i;
    }
    EXPECT_EQ(wrong, 0) << "first at " << first << ": x bits " << f32_to_bits(x[size_t(first < 0 ? 0 : first)]);
    EXPECT_EQ(y[size_t(n)], 0xffff) << "wrote past n";
    if (off) {
      EXPECT_EQ(y[0], 0xffff) << "wrote before y";
    }
  }
}

}  // namespace
}  // namespace pg::ops::test
