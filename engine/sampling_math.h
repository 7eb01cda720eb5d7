// The bit-exact pieces of seeded sampling that a GPU sampler must reproduce: Philox4x32-10
// (Random123, Salmon et al., SC'11), the counter/key layout, uniform conversions, the fp32 exp
// behind sampling weights and their fixed-point form. Header-only and constexpr (CUDA-callable).
#pragma once

#include <array>
#include <bit>
#include <cstdint>

// Host and device: nvcc compiles these for the GPU sampler (engine/cuda/), which needs
// --expt-relaxed-constexpr for std::array and std::bit_cast; other compilers see plain constexpr.
#if defined(__CUDACC__)
#define PG_HD __host__ __device__
#else
#define PG_HD
#endif

namespace pg::sampling {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Philox4x32 with 10 rounds, as Random123's philox4x32_10. One round:
//   (hi0, lo0) = mulhilo32(0xD2511F53, c0); (hi1, lo1) = mulhilo32(0xCD9E8D57, c2);
//   c = {hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0}
// and between rounds the key is bumped by the Weyl constants (0x9E3779B9, 0xBB67AE85).
PG_HD constexpr PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    const uint64_t p0 = uint64_t(kM0) * c[0];
    const uint64_t p1 = uint64_t(kM1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
  }
  return c;
}

// Sub-streams of one request position (counter word 3). Token sampling uses kStreamSample;
// other values are free for later uses of the same position (speculative acceptance tests).
inline constexpr uint32_t kStreamSample = 0;

// Key = the request's 64-bit seed, low word first.
PG_HD constexpr PhiloxKey rng_key(uint64_t seed) { return {uint32_t(seed), uint32_t(seed >> 32)}; }
// Counter = {output_idx low, output_idx high, choice_idx, stream}: output_idx counts the tokens
// this choice generated before the one being drawn (0 for the first), so recomputation after
// preemption and a GPU sampler draw the same numbers; choice_idx separates the n choices.
PG_HD constexpr PhiloxCounter rng_counter(int64_t output_idx, uint32_t choice_idx, uint32_t stream) {
  const auto pos = uint64_t(output_idx);
  return {uint32_t(pos), uint32_t(pos >> 32), choice_idx, stream};
}

// A uniform 64-bit integer from one Philox output: (x1 << 32) | x0. Sampling uses this.
PG_HD constexpr uint64_t uniform_u64(const PhiloxCounter& x) { return (uint64_t(x[1]) << 32) | x[0]; }
// A uniform float in [0, 1): the top 24 bits of x times 2^-24, exact in fp32 (so identical on any
// IEEE machine); the largest value is 1 - 2^-24.
PG_HD constexpr float uniform_f32(uint32_t x) { return float(x >> 8) * 0x1p-24f; }
// floor(u * n / 2^64): maps a uniform u to [0, n) with a bias of at most 2^-64 per value of n.
// (CUDA: __umul64hi(u, n).)
constexpr uint64_t scale_u64(uint64_t u, uint64_t n) {
  __extension__ using U128 = unsigned __int128;
  return uint64_t((U128(u) * U128(n)) >> 64);
}

// exp(d) for d <= 0, the weight of a token whose score is d below the maximum. Defined by the
// fp32 operations below, each rounded to nearest once: no FMA contraction (compile with
// -ffp-contract=off; on CUDA use __fmul_rn / __fadd_rn), so every IEEE machine gets the same bits.
//   d < -30 (or NaN) -> 0: e^-30 * 2^42 < 1, so such a weight is 0 in fixed point anyway;
//   d > 0 is outside the contract.
//   k = -int(0.5f - d * log2e)          round(d / ln 2), halves toward -inf; k in [-43, 0]
//   r = (d - k * ln2_hi) - k * ln2_lo    Cody-Waite: ln2_hi has 17 significant bits, so
//                                         k * ln2_hi is exact; |r| <= ln2 / 2 (+ rounding)
//   p = degree-7 Taylor polynomial of e^r by Horner (truncation error < 6e-9 on |r| <= 0.35)
//   result = p * 2^k (exact: 2^k built from its bits; no subnormals for k >= -43)
// Relative error against exp is about 2^-23 (checked in the tests); exp(0) is exactly 1.
inline constexpr float kMinExpArg = -30.0f;
PG_HD constexpr float sampling_exp(float d) {
  constexpr float kLog2e = 0x1.715476p+0f;    // fp32(1 / ln 2)
  constexpr float kLn2Hi = 0x1.62e4p-1f;      // 0.693145751953125
  constexpr float kLn2Lo = 0x1.7f7d1cp-20f;   // fp32(ln 2 - kLn2Hi)
  // Branch-free so that loops over a vocabulary vectorize: out-of-range inputs are computed on
  // a clamped value and replaced by 0 at the end.
  const bool in_range = d >= kMinExpArg;  // false for NaN
  const float x = in_range ? d : kMinExpArg;
  const float t = x * kLog2e;
  const float half_minus_t = 0.5f - t;
  const int32_t k = -static_cast<int32_t>(half_minus_t);
  const float kf = static_cast<float>(k);
  const float a = kf * kLn2Hi;
  float r = x - a;
  const float b = kf * kLn2Lo;
  r = r - b;
  // 1/n! rounded to fp32, n = 7 .. 2.
  float p = 0x1.a01a02p-13f;
  p = p * r;
  p = p + 0x1.6c16c2p-10f;
  p = p * r;
  p = p + 0x1.111112p-7f;
  p = p * r;
  p = p + 0x1.555556p-5f;
  p = p * r;
  p = p + 0x1.555556p-3f;
  p = p * r;
  p = p + 0.5f;
  p = p * r;
  p = p + 1.0f;
  p = p * r;
  p = p + 1.0f;
  const float scale = std::bit_cast<float>(uint32_t(k + 127) << 23);
  const float w = p * scale;
  return in_range ? w : 0.0f;
}

// Fixed-point weights: trunc(w * 2^42). The maximum token weighs exactly 2^42; weights below
// 2^-42 become 0 (never sampled). A vocabulary of up to 2^20 tokens sums below 2^63, so sums,
// prefix sums and thresholds are exact uint64 arithmetic, equal in any summation order.
inline constexpr int kWeightFracBits = 42;
inline constexpr uint64_t kMaxWeight = uint64_t(1) << kWeightFracBits;
inline constexpr int64_t kMaxVocab = int64_t(1) << 20;
// (Through int64: w * 2^42 < 2^63, and the signed conversion is one instruction on x86.)
PG_HD constexpr uint64_t fixed_weight(float w) { return static_cast<uint64_t>(static_cast<int64_t>(w * 0x1p42f)); }

static_assert(sampling_exp(0.0f) == 1.0f);
static_assert(fixed_weight(sampling_exp(0.0f)) == kMaxWeight);
static_assert(sampling_exp(-30.5f) == 0.0f);

}  // namespace pg::sampling
