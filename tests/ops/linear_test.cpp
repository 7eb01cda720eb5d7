// ops::cuda::linear against ops::cpu::linear on seeded random inputs: the decode shapes of
// moonlight / DeepSeek-V3 (bf16, DeepSeek-FP8 128x128 blocks, NVFP4), vocab-sized N, m = 1..33,
// primes, strides, accumulate, misaligned inputs (scalar path), and every instantiated tile.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/linear/linear.h"
#include "tests/ops/host_weights.h"
#include "tests/ops/test_util.h"

namespace pg::ops::test {
namespace {

// Tolerance, derived. CPU and GPU sum the same K exact products (bf16/fp8 weights are exact in
// f32; the fp8 block scale is applied per element on the CPU, per 16-element chunk on the GPU)
// in different orders: the CPU in 16 interleaved chains of ceil(K/16) terms then a 4-level tree,
// the GPU in one chain per lane of at most 2*ceil(K/32) roundings (chunk dot + chunk add), a
// 5-level shuffle tree and <= 3 k_split adds. Higham & Mary's probabilistic bound (SIAM J. Sci.
// Comput. 41(5), 2019, Thm 3.1): a computed sum of n rounded terms errs by at most
// lambda*sqrt(n)*u*sum|terms| with probability >= 1 - 2n*exp(-lambda^2 (1-u)^2 / 2). With
// lambda = 10 that failure probability is < 1e-18 per output, so per output
//   |y_gpu - y_cpu| <= 10 * (sqrt(n_cpu) + sqrt(n_gpu)) * u * sum_k |x_k w_k|  (+ 2u(|y0| + ...) when accumulating).
constexpr double kLambda = 10.0;
// A wrong chunk or row shows up in the cosine long before the bound; with the bound above the
// relative error norm stays < 1e-4, so the cosine stays > 1 - 1e-8.
constexpr double kMinCosine = 1.0 - 1e-6;

// NVFP4 on the f16 tensor cores (LinearArgs::f16_activations, the default): x is rounded to f16
// (relative 2^-11, or 2^-25 absolute below f16's normal range) and the weights stay exact, so the
// kernel is compared twice:
//  - against the CPU on x rounded to f16 (the same exact products): the CPU's f32 chains as above,
//    plus the tensor core's f32 accumulation. Its adds truncate (not round to nearest; Fasi et al.,
//    "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021), so no probabilistic bound: an mma
//    aligns its 16 exact products and the accumulator to the largest and truncates each, < 1 ulp
//    (2^-23 relative) of that largest apiece, so each of the ceil(K/16) mmas errs by < 17 x 2^-23
//    of the sum of |terms| so far; the k_split adds and the scale multiply add a few more:
//      |dy| <= (17 ceil(K/16) + 16) 2^-23 sum_k |x_k w_k|  (deterministic);
//  - against the CPU on f32 x: the above plus the rounding of x, sum_k |w_k| |x_k - f16(x_k)| <=
//      2^-11 sum_k |x_k w_k| + 2^-25 sum_k |w_k|.
constexpr double kF16Unit = 1.0 / 2048;          // 2^-11
constexpr double kF16SubnormalAbs = 0x1p-25;     // half of f16's smallest subnormal step
constexpr double kTruncUnit = 0x1p-23;           // one truncating f32 add, relative
double mma_accum_bound(int64_t k) { return (17 * std::ceil(double(k) / 16) + 16) * kTruncUnit; }

float round_f16(float v) { return f16_to_f32(f32_to_f16(std::clamp(v, -65504.0f, 65504.0f))); }

struct LinearCase {
  const char* name;
  WeightFormat format;
  int64_t m, n, k;
  int64_t x_pad = 0, y_pad = 0;  // row strides k + x_pad, n + y_pad
  bool accumulate = false;
  bool misalign_x = false;       // x starts 4 bytes past a 16-byte boundary: scalar path
  int64_t block = 128;           // fp8 block_rows = block_cols
  int64_t scale_2_group = 0;     // nvfp4: > 0 gives every group of this many rows its own scale_2
  bool exact = false;            // f16_activations = false: the f32-x kernels
  float x_scale = 1.0f;          // x in [-x_scale, x_scale] (above 65504: f16 saturation)
  bool all_scales = false;       // nvfp4: block scales over every finite positive e4m3 (subnormals too)
};
// gtest prints a case by its name (test names and failure messages stay readable).
void PrintTo(const LinearCase& c, std::ostream* os) { *os << c.name; }

HostWeights make_weights(const LinearCase& c, uint64_t seed) {
  return make_host_weights({c.format, c.n, c.k, c.block, c.scale_2_group, c.all_scales}, seed);
}

// Runs one case on both backends and compares; `v` forces a tile / k_split on the GPU.
void run_case(const LinearCase& c, const cuda::LinearVariant& v = {}) {
  const uint64_t seed = seed_of(c.name);
  const int64_t xs = c.k + c.x_pad, ys = c.n + c.y_pad;
  const int64_t x_off = c.misalign_x ? 1 : 0;  // floats
  HostWeights hw = make_weights(c, seed);
  std::vector<float> x(size_t(c.m * xs + x_off));
  parallel_fill(x, [&](uint64_t i) { return c.x_scale * uniform_pm1(seed + 2, i); });
  std::vector<float> y0(size_t(c.m * ys));
  if (c.accumulate) parallel_fill(y0, [&](uint64_t i) { return 4.0f * uniform_pm1(seed + 3, i); });
  else std::fill(y0.begin(), y0.end(), std::numeric_limits<float>::quiet_NaN());

  // CPU reference.
  std::vector<float> y_cpu = y0;
  LinearArgs ha;
  ha.x = x.data() + x_off, ha.w = &hw.w, ha.y = y_cpu.data(), ha.m = c.m, ha.x_stride = xs, ha.y_stride = ys;
  ha.accumulate = c.accumulate;
  ASSERT_TRUE(validate(ha).ok());
  cpu::linear(ha, ThreadPool::global());

  // sum_k |x_ik w_rk| per output, the scale of the rounding error; sum_k |w_rk| for f16's subnormals.
  std::vector<double> absdot(size_t(c.m * c.n)), absw(size_t(c.n));
  ThreadPool::global().parallel_for(c.n, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(size_t(c.k));
    for (int64_t r = r0; r < r1; ++r) {
      matrix_row_to_f32(hw.w, r, row.data());
      double sw = 0;
      for (int64_t j = 0; j < c.k; ++j) sw += std::fabs(double(row[size_t(j)]));
      absw[size_t(r)] = sw;
      for (int64_t i = 0; i < c.m; ++i) {
        const float* xi = x.data() + x_off + i * xs;
        double s = 0;
        for (int64_t j = 0; j < c.k; ++j) s += std::fabs(double(xi[j]) * row[size_t(j)]);
        absdot[size_t(i * c.n + r)] = s;
      }
    }
  });

  // GPU: same inputs; output poisoned with NaN (0xff bytes) unless accumulating.
  auto dx = to_device(x);
  cuda::DeviceBuffer<float> dy;
  if (c.accumulate) {
    dy = to_device(y0);
  } else {
    auto r = cuda::DeviceBuffer<float>::create(y0.size());
    PG_ASSERT_OK(r.status());
    dy = std::move(r).value();
    PG_ASSERT_OK(dy.fill_bytes(0xff));
  }
  DeviceWeights dwt;
  upload(hw, dwt);
  const Matrix& dw = dwt.w;
  LinearArgs da = ha;
  da.x = dx.data() + x_off, da.w = &dw, da.y = dy.data();
  da.f16_activations = !c.exact;
  // The GPU's path: NVFP4 on the f16 tensor cores, or the f32-x kernels.
  auto plan = cuda::linear_plan(da, v);
  PG_ASSERT_OK(plan.status());
  const bool f16 = plan->nvfp4_mma || plan->fp8_mma;
  EXPECT_EQ(f16, f16_mma_gemv(dw, c.k) && !c.exact && plan->vector_path);
  EXPECT_FALSE(plan->nvfp4_mma && plan->fp8_mma);
  // The CPU on x rounded to f16 (the tensor-core path's exact products).
  std::vector<float> y_cpu16;
  if (f16) {
    std::vector<float> x16 = x;
    for (float& e : x16) e = round_f16(e);
    y_cpu16 = y0;
    LinearArgs h16 = ha;
    h16.x = x16.data() + x_off, h16.y = y_cpu16.data();
    cpu::linear(h16, ThreadPool::global());
  }
  PG_ASSERT_OK(cuda::linear_variant(da, v, nullptr));
  ASSERT_TRUE(sync_ok());
  const std::vector<float> y_gpu = to_host(dy);
  // FP8 and NVFP4 on the tensor cores at the default tile: every row has the bits it has alone
  // (m = 1), so a verify step's rows are those of its tokens decoded one at a time.
  if (f16 && c.m > 1 && !c.accumulate && v.rows_per_warp == 0 && v.k_split == 0 && v.unroll == 0) {
    int64_t differ = 0;
    for (int64_t i = 0; i < c.m; ++i) {
      auto dy1 = cuda::DeviceBuffer<float>::create(size_t(c.n));
      PG_ASSERT_OK(dy1.status());
      LinearArgs a1 = da;
      a1.m = 1, a1.x = dx.data() + x_off + i * xs, a1.y = dy1->data(), a1.y_stride = c.n;
      PG_ASSERT_OK(cuda::linear(a1, nullptr));
      ASSERT_TRUE(sync_ok());
      const std::vector<float> y1 = to_host(*dy1);
      for (int64_t r = 0; r < c.n; ++r) differ += std::memcmp(&y1[size_t(r)], &y_gpu[size_t(i * ys + r)], sizeof(float)) != 0;
    }
    EXPECT_EQ(differ, 0) << (plan->fp8_mma ? "FP8" : "NVFP4") << " rows differ from the same rows run alone";
  }

  std::vector<float> got, ref, ref16;
  std::vector<double> tol, tol16;
  int64_t gap_touched = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t r = 0; r < c.n; ++r) {
      const size_t o = size_t(i * ys + r);
      got.push_back(y_gpu[o]);
      ref.push_back(y_cpu[o]);
      const double a = absdot[size_t(i * c.n + r)];
      // NVFP4: the GPU chains per lane the 16-term block dots and their scaled adds (2 per 16
      // elements), then multiplies by scale_2; the CPU rounds each weight once (x scale_2):
      // one more rounding per term on either side, counted as 2 more terms.
      // FP8 on the tensor cores: exact products, the block scale applied to each 64-element step's
      // sum; the CPU rounds each weight times its scale: one more rounding per term (2 terms).
      const double n_cpu = std::ceil(double(c.k) / 16) + 6 + (c.format == WeightFormat::kNvfp4 || f16 ? 2 : 0);
      const double n_gpu = c.format == WeightFormat::kNvfp4 ? 2 * std::ceil(double(c.k) / 16) + 16 + 12
                                                              : 2 * std::ceil(double(c.k) / 32) + 10;
      double t = kLambda * (std::sqrt(n_cpu) + std::sqrt(n_gpu)) * kF32Unit * a;
      if (f16) {
        // a bounds sum |f16(x) w| up to (1 + 2^-11): the 2^-10 margin below covers it.
        const double t16 = (kLambda * std::sqrt(n_cpu) * kF32Unit + mma_accum_bound(c.k)) * a * (1 + 2 * kF16Unit) +
                           (c.accumulate ? 2 * kF32Unit * (std::fabs(double(y0[o])) + a) : 0.0);
        ref16.push_back(y_cpu16[o]);
        tol16.push_back(t16);
        t = t16 + kF16Unit * a + kF16SubnormalAbs * absw[size_t(r)] * c.x_scale;
      }
      if (c.accumulate) t += 2 * kF32Unit * (std::fabs(double(y0[o])) + a);
      tol.push_back(t);
    }
    for (int64_t j = c.n; j < ys; ++j) {  // the row gap is never written
      const size_t o = size_t(i * ys + j);
      if (c.accumulate ? y_gpu[o] != y0[o] : !is_poison(y_gpu[o])) ++gap_touched;
    }
  }
  if (f16) {  // the tight comparison: the same f16 x on both sides
    const Diff d16 =
        compare(got.data(), ref16.data(), int64_t(got.size()), [&](int64_t i) { return tol16[size_t(i)]; });
    EXPECT_EQ(d16.over_tol, 0) << "vs the CPU on f16-rounded x: " << d16.summary();
    EXPECT_GE(d16.cosine, kMinCosine) << d16.summary();
  }
  const Diff d = compare(got.data(), ref.data(), int64_t(got.size()), [&](int64_t i) { return tol[size_t(i)]; });
  EXPECT_EQ(d.non_finite, 0) << "unwritten or non-finite outputs: " << d.summary();
  if (c.x_scale <= 65504.0f) {  // saturated x: only the comparison on f16-rounded x holds
    EXPECT_EQ(d.over_tol, 0) << d.summary();
    EXPECT_GE(d.cosine, kMinCosine) << d.summary();
  }
  EXPECT_EQ(gap_touched, 0) << "elements between rows (y_stride > n) were written";
  std::printf("[ linear   ] %-34s m=%-3lld n=%-6lld k=%-6lld %s%s\n", c.name, (long long)c.m, (long long)c.n,
              (long long)c.k, f16 ? "f16-x mma " : "", d.summary().c_str());
}

constexpr WeightFormat kF32 = WeightFormat::kF32, kBF16 = WeightFormat::kBF16, kFp8 = WeightFormat::kFp8Block,
                       kFp4 = WeightFormat::kNvfp4;

const LinearCase kCases[] = {
    // DeepSeek-V3 (hidden 7168, dense inter 18432, moe inter 2048, q_lora 1536, vocab 129280).
    {"v3_dense_gate_up_bf16", kBF16, 1, 18432, 7168},
    {"v3_dense_down_bf16", kBF16, 1, 7168, 18432},
    {"v3_dense_down_fp8", kFp8, 1, 7168, 18432},
    {"v3_expert_gate_fp8", kFp8, 1, 2048, 7168},
    {"v3_expert_down_fp8", kFp8, 1, 7168, 2048},
    {"v3_q_a_kv_a_fp8", kFp8, 1, 2112, 7168},
    {"v3_q_b_fp8", kFp8, 1, 24576, 1536},
    {"v3_o_proj_fp8", kFp8, 1, 7168, 16384},
    {"v3_router_bf16", kBF16, 1, 256, 7168},
    {"vocab_129280_bf16", kBF16, 1, 129280, 2048},
    // moonlight-16b-a3b (hidden 2048, dense inter 11264, moe inter 1408).
    {"moonlight_dense_gate_bf16", kBF16, 1, 11264, 2048},
    {"moonlight_dense_down_bf16", kBF16, 1, 2048, 11264},
    {"moonlight_q_proj_bf16", kBF16, 1, 3072, 2048},
    {"moonlight_kv_a_bf16", kBF16, 1, 576, 2048},
    {"moonlight_kv_b_bf16", kBF16, 1, 4096, 512},
    {"moonlight_expert_gate_up_bf16", kBF16, 1, 2816, 2048},
    {"moonlight_expert_down_bf16", kBF16, 1, 2048, 1408},
    {"moonlight_router_f32", kF32, 1, 64, 2048},
    {"moonlight_o_proj_f32", kF32, 1, 2048, 2048},
    // Small M (verification of drafts, small batches): every m tile and the masked rows.
    {"m2_bf16", kBF16, 2, 2048, 7168},
    {"m3_bf16", kBF16, 3, 2048, 7168},
    {"m5_fp8", kFp8, 5, 2048, 7168},
    {"m8_fp8", kFp8, 8, 1408, 2048},
    {"m13_bf16", kBF16, 13, 1408, 2048},
    {"m16_bf16", kBF16, 16, 2048, 7168},
    {"m16_fp8", kFp8, 16, 2048, 7168},
    {"m17_bf16", kBF16, 17, 1408, 2048},
    {"m33_fp8", kFp8, 33, 576, 2048},
    // Primes, ones, partial blocks, strides, accumulate, misalignment.
    {"one_by_one_f32", kF32, 1, 1, 1},
    {"prime_nk_scalar_bf16", kBF16, 3, 97, 131},
    {"prime_nk_scalar_fp8", kFp8, 2, 131, 263},
    {"prime_n_bf16", kBF16, 1, 4099, 2048},
    {"partial_blocks_fp8", kFp8, 5, 257, 1040},
    {"small_blocks_fp8", kFp8, 3, 200, 512, 0, 0, false, false, 32},
    {"odd_blocks_scalar_fp8", kFp8, 2, 150, 480, 0, 0, false, false, 48},
    {"strided_bf16", kBF16, 3, 1408, 2048, 4, 3},
    {"accumulate_bf16", kBF16, 4, 2048, 2048, 0, 5, true},
    {"accumulate_fp8", kFp8, 1, 7168, 2048, 0, 0, true},
    {"misaligned_x_scalar_bf16", kBF16, 1, 1408, 2048, 0, 0, false, true},
    {"k_not_vector_bf16", kBF16, 2, 300, 2044},
    // NVFP4 (ModelOpt): every projection of moonlight and V3 at m = 1, 2, 8, 64, stacked experts with
    // a scale_2 per expert, the scalar path (K not a multiple of 32, misaligned x).
    {"v3_dense_gate_up_nvfp4", kFp4, 1, 18432, 7168},
    {"v3_dense_down_nvfp4", kFp4, 1, 7168, 18432},
    {"v3_expert_gate_up_nvfp4", kFp4, 1, 4096, 7168},
    {"v3_expert_down_nvfp4", kFp4, 1, 7168, 2048},
    {"v3_q_a_kv_a_nvfp4", kFp4, 1, 2112, 7168},
    {"v3_q_b_nvfp4", kFp4, 1, 24576, 1536},
    {"v3_o_proj_nvfp4", kFp4, 1, 7168, 16384},
    {"v3_lm_head_nvfp4", kFp4, 1, 129280, 7168},
    {"moonlight_q_proj_nvfp4", kFp4, 1, 3072, 2048},
    {"moonlight_q_kv_a_nvfp4", kFp4, 1, 3648, 2048},
    {"moonlight_kv_b_nvfp4", kFp4, 1, 4096, 512},
    {"moonlight_o_proj_nvfp4", kFp4, 1, 2048, 2048},
    {"moonlight_expert_gate_up_nvfp4", kFp4, 1, 2816, 2048},
    {"moonlight_expert_down_nvfp4", kFp4, 1, 2048, 1408},
    {"moonlight_lm_head_nvfp4", kFp4, 1, 163840, 2048},
    {"m2_nvfp4", kFp4, 2, 2048, 7168},
    {"m3_nvfp4", kFp4, 3, 2816, 2048},
    {"m8_nvfp4", kFp4, 8, 1408, 2048},
    {"m8_v3_nvfp4", kFp4, 8, 2048, 7168},
    {"m13_nvfp4", kFp4, 13, 2048, 1408},
    {"m64_nvfp4", kFp4, 64, 2048, 2048},
    {"m64_v3_nvfp4", kFp4, 64, 7168, 2048},
    {"expert_stack_scale_2_nvfp4", kFp4, 2, 8 * 2816, 2048, 0, 0, false, false, 128, 2816},
    {"accumulate_strided_nvfp4", kFp4, 3, 2048, 1408, 32, 5, true},
    {"prime_n_nvfp4", kFp4, 1, 4099, 2048},
    {"scalar_k_nvfp4", kFp4, 2, 131, 2064},
    {"scalar_small_nvfp4", kFp4, 3, 7, 16},
    {"misaligned_x_scalar_nvfp4", kFp4, 1, 1408, 2048, 0, 0, false, true},
    {"scalar_scale_2_group_nvfp4", kFp4, 2, 96, 80, 0, 0, false, false, 128, 32},
    // NVFP4 on the f16 tensor cores: every m of one mma column tile, tails (K = 33 chunks of 32,
    // not whole 128-element steps; prime n), f16 saturation, and the exact (f32-x) path kept.
    {"mma_m4_nvfp4", kFp4, 4, 2816, 2048},
    {"mma_m5_nvfp4", kFp4, 5, 2048, 7168},
    {"mma_m6_nvfp4", kFp4, 6, 2112, 7168},
    {"mma_m7_nvfp4", kFp4, 7, 2048, 1408},
    {"mma_m9_nvfp4", kFp4, 9, 1408, 2048},
    {"mma_k1056_prime_n_nvfp4", kFp4, 3, 263, 1056},
    {"mma_v3_o_proj_scale_2_rows_nvfp4", kFp4, 1, 7168, 16384, 0, 0, false, false, 128, 512},
    {"mma_saturated_x_nvfp4", kFp4, 2, 1408, 2048, 0, 0, false, false, 128, 0, false, 1.0e5f},
    // 2..8 tokens staged per block (nvfp4_mma_staged_rows_bytes) up to 64 KB, else per lane; the
    // persistent m = 1 kernel's shape at 3 tokens (the per-block kernel at its k_split).
    {"mma_m2_k16384_staged_nvfp4", kFp4, 2, 1000, 16384},
    {"mma_m4_k16384_per_lane_nvfp4", kFp4, 4, 1000, 16384},
    {"mma_m12_two_tiles_nvfp4", kFp4, 12, 700, 2048},
    {"mma_m3_persistent_shape_nvfp4", kFp4, 3, 18432, 7168},
    // The x staging's one-item path (nvfp4_mma_stage_x_rows: at most one item a thread) where a block
    // is wider than a staged row: K of one or two k-steps, the last one partial, its chunks past K
    // staged as zeros, at one token and over 8 rows (256 items: row = item / 32). The batched walk on
    // such rows: mma_m7_nvfp4 above (7 rows of K = 1408, 1,232 items over 256 threads).
    {"mma_m1_k64_wide_block_nvfp4", kFp4, 1, 512, 64},
    {"mma_m8_k192_wide_block_nvfp4", kFp4, 8, 300, 192},
    // One token at the edge of kNvfp4OneItemMaxK (2048): 15 k-steps (240 items, no walk in the
    // kernel), 17 (272 items over 256 threads: the walk), for the per-block and the persistent kernel
    // (n x K / 2 >= kNvfp4X1PersistentMinBytes).
    {"mma_m1_k1920_one_item_nvfp4", kFp4, 1, 1408, 1920},
    {"mma_m1_k2176_walk_nvfp4", kFp4, 1, 1408, 2176},
    {"mma_m1_k1920_one_item_persistent_nvfp4", kFp4, 1, 53000, 1920},
    {"mma_m1_k2176_walk_persistent_nvfp4", kFp4, 1, 47000, 2176},
    // code x scale down to 0.5 x 2^-9 (an f16 subnormal after the 2^-14 placement): still exact.
    {"mma_all_e4m3_scales_nvfp4", kFp4, 3, 2048, 2048, 0, 0, false, false, 128, 0, false, 1.0f, true},
    {"exact_v3_o_proj_nvfp4", kFp4, 1, 7168, 16384, 0, 0, false, false, 128, 0, true},
    {"exact_m8_nvfp4", kFp4, 8, 1408, 2048, 0, 0, false, false, 128, 0, true},
    {"exact_accumulate_strided_nvfp4", kFp4, 3, 2048, 1408, 32, 5, true, false, 128, 0, true},
    // DeepSeek-FP8 on the f16 tensor cores (K % 64 == 0, 128 x 128 or 64 x 64 blocks; the cases
    // above with such shapes take it too): every m of one mma column tile and two, K past the
    // staged-x limit at m = 1 (x per lane), a partial row block, 64 x 64 blocks, accumulation
    // into strided y, f16 saturation, and the exact (f32-x) kernels kept at the same shapes.
    {"mma_m1_fp8", kFp8, 1, 2816, 2048},
    {"mma_m2_fp8", kFp8, 2, 2112, 7168},
    {"mma_m3_fp8", kFp8, 3, 1408, 2048},
    {"mma_m4_fp8", kFp8, 4, 2048, 1408 + 64},
    {"mma_m6_fp8", kFp8, 6, 576, 2048},
    {"mma_m7_fp8", kFp8, 7, 4096, 512},
    {"mma_m9_fp8", kFp8, 9, 1408, 2048},
    {"mma_m1_k32832_fp8", kFp8, 1, 300, 32832},  // x per lane (past kFp8StagedMaxBytes)
    {"mma_m8_k7168_fp8", kFp8, 8, 1000, 7168},    // x per lane
    {"mma_m12_k4096_fp8", kFp8, 12, 700, 4096},   // 8 staged rows, then 4
    {"mma_partial_row_block_fp8", kFp8, 2, 200, 1024},
    {"mma_blocks_64_fp8", kFp8, 3, 1000, 1536, 0, 0, false, false, 64},
    {"mma_accumulate_strided_fp8", kFp8, 3, 2048, 1408 + 64, 32, 5, true},
    {"mma_saturated_x_fp8", kFp8, 2, 1408, 2048, 0, 0, false, false, 128, 0, false, 1.0e5f},
    {"exact_v3_o_proj_fp8", kFp8, 1, 7168, 16384, 0, 0, false, false, 128, 0, true},
    {"exact_m5_fp8", kFp8, 5, 2048, 7168, 0, 0, false, false, 128, 0, true},
    {"exact_accumulate_fp8", kFp8, 1, 7168, 2048, 0, 0, true, false, 128, 0, true},
};

class LinearCuda : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearCuda, MatchesCpu) {
  PG_REQUIRE_CUDA();
  run_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearCuda, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<LinearCase>& i) { return std::string(i.param.name); });

// Every instantiated tile (the benchmark's variants included) and every k_split, at a prime N
// and a K whose chunk count is no multiple of 32 x unroll, with m = the tile and m = tile - 1.
TEST(LinearCudaTiles, EveryTileAndSplitMatchesCpu) {
  PG_REQUIRE_CUDA();
  for (WeightFormat f : {kF32, kBF16, kFp8, kFp4})
    for (int mt : {1, 2, 4, 8, 16})
      for (const cuda::LinearTile& t : cuda::linear_tiles(f, mt))
        for (int ks : {1, 2, 8})
          for (int64_t m : {int64_t(mt), int64_t(std::max(1, mt - 1))}) {
            const std::string name = "tile_f" + std::to_string(int(f)) + "_m" + std::to_string(m) + "_r" +
                                     std::to_string(t.rows_per_warp) + "_u" + std::to_string(t.unroll) + "_ks" +
                                     std::to_string(ks);
            SCOPED_TRACE(name);
            // NVFP4's vector path needs K % 32 == 0: 1056 = 33 chunks of 32. NVFP4's f32-x tiles: exact.
            LinearCase c{name.c_str(), f, m, 263, f == kFp4 ? 1056 : 1040};
            c.exact = f == kFp4 || f == kFp8;
            run_case(c, cuda::LinearVariant{mt, t.rows_per_warp, t.unroll, ks});
            if (HasFatalFailure()) return;
          }
}

// Every NVFP4 tensor-core tile and k_split, m = 1, 3, 8 and 11 (two column tiles), at a prime N
// and K = 33 chunks (a partial last k-step) and 4128 (k_split 8 leaves some warps no step); at
// m = 1, K % 64 == 0 takes the staged-x path (nvfp4_x1_ok): 1088 (a partial last k-step,
// fewer stages than the ring holds at k_split 8) and 4224 (whole steps), the others the per-lane one;
// at m = 3, 8, 11 those K stage the tile's rows (nvfp4_mma_staged_rows_bytes), except 8 rows of 4224
// (past 64 KB: per lane).
TEST(LinearCudaTiles, EveryNvfp4MmaTileAndSplitMatchesCpu) {
  PG_REQUIRE_CUDA();
  for (const cuda::MmaTile& t : cuda::linear_mma_tiles())
    for (int ks : {1, 2, 8})
      for (int64_t m : {1, 3, 8, 11})
        for (int64_t k : {1056, 1088, 4128, 4224}) {
          const std::string name = "mma_t" + std::to_string(t.tiles) + "_u" + std::to_string(t.unroll) + "_ks" +
                                   std::to_string(ks) + "_m" + std::to_string(m) + "_k" + std::to_string(k);
          SCOPED_TRACE(name);
          const LinearCase c{name.c_str(), kFp4, m, 263, k};
          run_case(c, cuda::LinearVariant{0, cuda::kMmaRows * t.tiles, t.unroll, ks});
          if (HasFatalFailure()) return;
        }
}

// Every FP8 tensor-core tile and k_split, m = 1, 3, 8 and 11 (two column tiles), at a prime N and
// K = 17 steps of 64 (odd: k_split 2 and 8 leave uneven slices, some warps none), 4096 and 8192:
// x staged per block (fp8_mma_staged_bytes) except m >= 8 at K = 8192 (per lane).
TEST(LinearCudaTiles, EveryFp8MmaTileAndSplitMatchesCpu) {
  PG_REQUIRE_CUDA();
  for (const cuda::MmaTile& t : cuda::linear_mma_tiles())
    for (int ks : {1, 2, 8})
      for (int64_t m : {1, 3, 8, 11})
        for (int64_t k : {1088, 4096, 8192}) {
          const std::string name = "fp8_mma_t" + std::to_string(t.tiles) + "_u" + std::to_string(t.unroll) + "_ks" +
                                   std::to_string(ks) + "_m" + std::to_string(m) + "_k" + std::to_string(k);
          SCOPED_TRACE(name);
          const LinearCase c{name.c_str(), kFp8, m, 263, k};
          run_case(c, cuda::LinearVariant{0, cuda::kMmaRows * t.tiles, t.unroll, ks});
          if (HasFatalFailure()) return;
        }
}

TEST(LinearCudaArgs, BadArgumentsAreStatusNotCrash) {
  LinearArgs a;  // no weight
  EXPECT_FALSE(cuda::linear(a, nullptr).ok());
  Matrix w{WeightFormat::kBF16, 4, 8, nullptr};
  a.w = &w;
  a.m = 1;
  EXPECT_FALSE(cuda::linear(a, nullptr).ok());  // null data
  Matrix q{WeightFormat::kNvfp4, 4, 40, &w};  // NVFP4 with K % 16 != 0
  a.w = &q;
  EXPECT_FALSE(cuda::linear(a, nullptr).ok());
}

}  // namespace
}  // namespace pg::ops::test
