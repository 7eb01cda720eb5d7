// moe_routing on the GPU: one warp per token, the same arithmetic in the same order as
// ops::cpu::moe_routing, so indices (and their tie order) match exactly and weights to the bit
// whenever exp() rounds as the host's does (exp is evaluated in double, then rounded).
#include "ops/cuda/common/pdl.cuh"
#include <cfloat>
#include <climits>

#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/config.h"
#include "ops/cuda/kernels.h"

namespace pg::ops::cuda {
namespace {

// (value, index) order of the contract: value descending, then index ascending. idx == INT_MAX
// marks "no candidate", which loses to everything.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  if (bi == INT_MAX) return i != INT_MAX;
  if (i == INT_MAX) return false;
  return v > bv || (v == bv && i < bi);
}

// The best not-yet-taken element of vals[0..n) over the warp; every lane gets (value, index).
// Lane l owns elements l + 32 j; bit j of `taken` marks those already chosen.
__device__ __forceinline__ void warp_argmax(const float* vals, int n, uint32_t taken, float& bv, int& bi) {
  const int lane = threadIdx.x % kWarpSize;
  bv = -INFINITY, bi = INT_MAX;
  for (int j = 0, e = lane; e < n; ++j, e += kWarpSize)
    if (!((taken >> j) & 1u) && better(vals[e], e, bv, bi)) bv = vals[e], bi = e;
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(kFullMask, bv, o);
    const int oi = __shfl_xor_sync(kFullMask, bi, o);
    if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
}

__device__ __forceinline__ float exp_as_host(float x) { return float(exp(double(x))); }

template <int kWarps>
__global__ void __launch_bounds__(kWarps * kWarpSize) moe_routing_kernel(const __grid_constant__ MoeRoutingParams p) {
  extern __shared__ float smem[];
  pdl_trigger();
  pdl_wait();  // the router logits come from the kernel before
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int t = blockIdx.x * kWarps + warp;
  if (t >= p.m) return;  // whole warps only; no block-wide barrier below
  const int E = p.n_experts, G = p.n_group, per_group = E / G;
  float* s = smem + size_t(warp) * (2 * E + G);  // [E] scores
  float* choice = s + E;                          // [E] selection values
  float* gscore = choice + E;                     // [G]
  const float* lg = p.logits + size_t(t) * E;

  if (p.sigmoid) {
    for (int e = lane; e < E; e += kWarpSize) s[e] = 1.0f / (1.0f + exp_as_host(-lg[e]));
  } else {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += kWarpSize) mx = fmaxf(mx, lg[e]);
    mx = warp_max(mx);
    for (int e = lane; e < E; e += kWarpSize) s[e] = exp_as_host(lg[e] - mx);
    __syncwarp();
    float sum = 0.0f;
    if (lane == 0)
      for (int e = 0; e < E; ++e) sum += s[e];  // sequential, as the CPU sums
    sum = __shfl_sync(kFullMask, sum, 0);
    __syncwarp();
    for (int e = lane; e < E; e += kWarpSize) s[e] /= sum;
  }
  for (int e = lane; e < E; e += kWarpSize) choice[e] = s[e] + (p.noaux_tc ? p.bias[e] : 0.0f);
  __syncwarp();

  if (p.group_limited) {
    for (int g = lane; g < G; g += kWarpSize) {
      const float* c = choice + size_t(g) * per_group;
      float v1 = -INFINITY, v2 = -INFINITY;  // the two largest values (duplicates count twice)
      for (int i = 0; i < per_group; ++i) {
        if (c[i] > v1) v2 = v1, v1 = c[i];
        else if (c[i] > v2) v2 = c[i];
      }
      gscore[g] = p.group_top2_sum ? (per_group >= 2 ? (0.0f + v1) + v2 : 0.0f + v1) : v1;
    }
    __syncwarp();
    uint32_t keep = 0, taken = 0;  // G <= 32: lane l owns group l only
    for (int k = 0; k < p.topk_group; ++k) {
      float bv;
      int bi;
      warp_argmax(gscore, G, taken, bv, bi);
      keep |= 1u << bi;
      if (bi == lane) taken |= 1u;
    }
    for (int e = lane; e < E; e += kWarpSize)
      if (!((keep >> (e / per_group)) & 1u)) choice[e] = -INFINITY;
    __syncwarp();
  }

  uint32_t taken = 0;
  float sum = 0.0f;  // lane 0: sum of the chosen scores, in selection order as the CPU
  int32_t* out_idx = p.expert_idx + size_t(t) * p.top_k;
  float* out_w = p.expert_weight + size_t(t) * p.top_k;
  for (int k = 0; k < p.top_k; ++k) {
    float bv;
    int bi;
    warp_argmax(choice, E, taken, bv, bi);
    if (bi % kWarpSize == lane) taken |= 1u << (bi / kWarpSize);
    if (lane == 0) {
      out_idx[k] = bi;
      sum += s[bi];
    }
  }
  if (lane == 0) {
    for (int k = 0; k < p.top_k; ++k) {
      float w = s[out_idx[k]];
      if (p.normalize) w /= (sum + 1e-20f);
      out_w[k] = w * p.routed_scaling_factor;
    }
  }
}

}  // namespace

cudaError_t launch_moe_routing(const MoeRoutingParams& p, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  const size_t smem = sizeof(float) * kRoutingWarpsPerBlock * size_t(2 * p.n_experts + p.n_group);
  const unsigned blocks = unsigned((int64_t(p.m) + kRoutingWarpsPerBlock - 1) / kRoutingWarpsPerBlock);
  if (cudaError_t e = launch_pdl(moe_routing_kernel<kRoutingWarpsPerBlock>, dim3(blocks),
                                 dim3(kRoutingWarpsPerBlock * kWarpSize), smem, stream, p);
      e != cudaSuccess)
    return e;
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
