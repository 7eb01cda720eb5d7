// The small ops' kernel interface for both sides: Params structs and the launch functions the
// .cu files define (returning the launch's cudaError_t). fmt-free, so kernel files include it;
// the Status-returning launchers that validate Args and fill these are in cuda_ops.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

#include "ops/cuda/linear/config.h"  // LinearWeight: the fmt-free weight formats

namespace pg::ops::cuda {

// rmsnorm / rmsnorm_residual, one block per row (rmsnorm.cu).
struct RmsNormParams {
  const float* x = nullptr;       // [m, n] f32, row stride x_stride
  float* residual = nullptr;      // [m, n] f32, row stride r_stride; residual += x (residual variant only)
  const float* weight = nullptr;  // [n] f32
  float* y = nullptr;             // [m, n] f32, row stride y_stride; may alias x
  int64_t n = 0, x_stride = 0, r_stride = 0, y_stride = 0;
  float eps = 1e-6f;
  bool vec4 = false;              // every row and the weight 16-byte aligned, n % 4 == 0
};
cudaError_t launch_rmsnorm(const RmsNormParams& p, int64_t m, bool residual, cudaStream_t stream);

// moe_routing, one warp per token (moe_routing.cu).
struct MoeRoutingParams {
  const float* logits = nullptr;   // [m, n_experts] f32
  const float* bias = nullptr;     // [n_experts] f32 (noaux_tc)
  int32_t* expert_idx = nullptr;   // [m, top_k]
  float* expert_weight = nullptr;  // [m, top_k]
  int m = 0, n_experts = 0, top_k = 0, n_group = 1, topk_group = 1;
  bool sigmoid = true;          // else softmax
  bool noaux_tc = true;         // bias added to the selection values
  bool group_limited = false;   // restrict to the best topk_group groups
  bool group_top2_sum = true;   // group score: sum of its top-2 (noaux_tc) or its max (V2)
  bool normalize = false;
  float routed_scaling_factor = 1.0f;
};
cudaError_t launch_moe_routing(const MoeRoutingParams& p, cudaStream_t stream);

// moe_routing's order (value descending, then index ascending) as unsigned keys: a larger value has
// a larger key, -0 and +0 the same one (they compare equal), every number (-inf too) a key >= 2;
// NaN gets 1, below every number (the CPU's comparison sort leaves its place undefined), and 0
// means "no candidate". Host-callable so a CPU test checks it against the float comparisons.
__host__ __device__ inline uint32_t moe_routing_order_key(float v) {
  if (v != v) return 1u;
  uint32_t u = 0;
  if (v != 0.0f) memcpy(&u, &v, sizeof(u));
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

#ifdef __CUDACC__
// moe_routing's exp: evaluated in double, then rounded, as the host's (the CPU routing's bits).
__device__ __forceinline__ float moe_exp_as_host(float x) { return float(exp(double(x))); }

// A group's score in group-limited routing, as its order key: the sum of its two largest selection
// values (a duplicate counts twice; the CPU's order of addition) when top2_sum, else its largest.
// c: the group's per_group selection values. Both routings (route_token, moe_block_route) call this,
// so their group choice has the same bits by construction.
__device__ __forceinline__ uint32_t moe_group_score_key(const float* c, int per_group, bool top2_sum) {
  float v1 = -INFINITY, v2 = -INFINITY;
#pragma unroll 8
  for (int i = 0; i < per_group; ++i) {
    const float v = c[i];
    if (v > v1) v2 = v1, v1 = v;
    else if (v > v2) v2 = v;
  }
  return moe_routing_order_key(top2_sum ? (per_group >= 2 ? (0.0f + v1) + v2 : 0.0f + v1) : v1);
}
#endif

// moe_router: the router GEMV (f32 | bf16 weights, linear's vector path) and moe_routing in one
// launch (moe_routing.cu). kRouterThreads / 32 / k_split rows per block; tokens kRouterTokenTile
// at a time; the last block to finish routes (counter: zero between launches, reset by that block).
constexpr int kRouterThreads = 256;  // = kLinearThreads: k_split divides its 8 warps, as linear's
constexpr int kRouterTokenTile = 4;
constexpr int kRouterChunkBatch = 4;  // 16-byte W chunks a lane loads before summing them
// Steps of up to this many tokens take the one launch by default, whose last block routes them with
// kRoutingWarpsPerBlock warps, one token each; larger steps launch linear, then moe_routing, whose
// m / kRoutingWarpsPerBlock blocks route in parallel. The fused kernel serves up to
// kRouterMaxFusedTokens (its tiles re-read W from L1/L2), but routing 8 tokens a warp cost moonlight's
// fp8 MoE layer 62 us at 32 tokens against 12 at one (H200, 2026-12-02, bench's ops at b = 32).
constexpr int64_t kRouterFusedTokens = 4;
constexpr int64_t kRouterMaxFusedTokens = 64;
struct MoeRouterParams {
  const float* x = nullptr;   // [m, k] f32, row stride x_stride; 16-byte aligned rows
  const void* w = nullptr;    // [n, k] f32 | bf16, 16-byte aligned, k a whole number of 16-byte chunks
  float* logits = nullptr;    // [m, n] f32 (= routing.logits)
  unsigned* counter = nullptr;
  int m = 0;
  int64_t n = 0, k = 0, x_stride = 0;
  int k_split = 1;            // linear_plan's for the same args
  MoeRoutingParams routing;
  bool route = true;          // false: the logits only (MoeRouterMode::kLogitsOnly; counter unused)
};
cudaError_t launch_moe_router(LinearWeight f, const MoeRouterParams& p, cudaStream_t stream);

}  // namespace pg::ops::cuda
