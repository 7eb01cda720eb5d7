// One token's MoE routing by a whole block, for the expert kernels that route themselves
// (MoeExpertsParams::self_routing): the router wrote only the logits (MoeRouterMode::kLogitsOnly),
// and every routed gate_up block and every down block reads them and selects the experts, in place
// of the router's last block routing and handing the selection on through expert_idx. What that
// removes from the layer's path: the router's arrival count and its last block's second L2 round
// trip, its serial top-k (six warp argmaxes), and the expert id's round trip in gate_up after the
// wait (moonlight's timeline, docs/decode-status.md session 30: 2.6 -> 7.1 us after the router's
// wait, then 7.7 -> 8.4 before the first weight load).
//
// The arithmetic is route_token's (moe_routing.cu), so the selection and the weights have its bits: the same
// scores (exp in double, then rounded), the same selection values and keys (moe_routing_order_key), the same
// group scores (moe_group_score_key, one helper for both); the selection by rank instead of by repeated
// argmax: expert e's rank is the number of experts before it in the routing order (key descending, then index
// ascending), a total order, so the experts of rank 0..top_k-1 are the ones the argmaxes take, in their
// order; the chosen scores summed in that order, as the CPU sums them. The path's length: without a group
// limit a thread writes its experts' keys as it scores them (no pass and barrier between), the ranking thread
// keeps a chosen expert's score beside its id (the weights' sums then read them directly, not through the
// ids); moonlight nvfp4 +0.4% (H200, 2026-12-04: 633.2 vs 630.6 tok/s, 3 rounds in one call).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/moe_experts/params.h"

namespace pg::ops::cuda {

// The block's scratch in shared memory (params.h's moe_block_routing_bytes): E scores, E selection
// values (then their keys), E staged biases, then the results: the top_k experts in selection order
// and their weights, and room for the block's reductions.
struct MoeBlockRouting {
  float* score;       // [E]
  float* choice;      // [E] selection values, then (as uint32) their keys
  float* bias;        // [E] the correction biases (0 without noaux_tc)
  int32_t* idx;       // [kMoeBlockRoutingMaxTopK] the chosen experts, in selection order
  float* weight;      // [kMoeBlockRoutingMaxTopK] their scores, then their weights (normalised, scaled)
  float* red;         // [32] a reduction's per-warp values
  __device__ MoeBlockRouting(void* smem, int E) {
    float* f = static_cast<float*>(smem);
    score = f, choice = f + E, bias = f + 2 * E;
    idx = reinterpret_cast<int32_t*>(f + 3 * E);
    weight = f + 3 * E + kMoeBlockRoutingMaxTopK;
    red = f + 3 * E + 2 * kMoeBlockRoutingMaxTopK;
  }
};

// Before the wait (the biases are weights): every thread copies its share into the scratch. Read
// after moe_block_route's first barrier.
__device__ __forceinline__ void moe_block_route_stage_bias(const MoeRoutingParams& p, const MoeBlockRouting& s,
                                                           unsigned tid, unsigned nt) {
  for (int e = int(tid); e < p.n_experts; e += int(nt)) s.bias[e] = p.noaux_tc ? __ldg(p.bias + e) : 0.0f;
}

// Token t's routing into s.idx / s.weight; every thread of the block calls it (it has barriers),
// after moe_block_route_stage_bias and after the logits are complete. Ends with a barrier: the
// results are readable by every thread on return. The logits are read through L2 (another grid
// wrote them). Inlined into gate_up, where it is on the layer's path (no call, no saved registers);
// down calls moe_block_route_call (inlined there, ptxas spilled 20-32 bytes in every m = 1 down).
__device__ __forceinline__ void moe_block_route(const MoeRoutingParams& params, int t, const MoeBlockRouting& s) {
  const MoeRoutingParams p = params;  // a local copy: no reload after each shared store
  const int tid = int(threadIdx.x), nt = int(blockDim.x), warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int E = p.n_experts, G = p.n_group, per_group = E / G;
  const float* lg = p.logits + size_t(t) * E;
  // Without a group limit every expert's key follows from its own selection value, so a thread
  // writes its experts' keys as it scores them (no pass and no barrier between).
  uint32_t* key = reinterpret_cast<uint32_t*>(s.choice);
  const bool direct_keys = !p.group_limited;
  float mx = -INFINITY;
  for (int e = tid; e < E; e += nt) {
    const float x = __ldcg(lg + e);
    s.score[e] = x;
    mx = fmaxf(mx, x);
  }
  if (p.sigmoid) {
    for (int e = tid; e < E; e += nt) {  // a thread's own elements: no barrier before
      const float v = 1.0f / (1.0f + moe_exp_as_host(-s.score[e]));
      s.score[e] = v;
      if (direct_keys) key[e] = moe_routing_order_key(v + s.bias[e]);
      else s.choice[e] = v + s.bias[e];
    }
  } else {  // softmax: the maximum (order-free), the exps, their sum in index order by one thread
    mx = warp_max(mx);
    if (lane == 0) s.red[warp] = mx;
    __syncthreads();
    mx = -INFINITY;
    for (int w = 0; w < (nt + kWarpSize - 1) / kWarpSize; ++w) mx = fmaxf(mx, s.red[w]);
    for (int e = tid; e < E; e += nt) s.score[e] = moe_exp_as_host(s.score[e] - mx);
    __syncthreads();
    if (tid == 0) {
      float sum = 0.0f;
      int e = 0;
      for (; (E & 3) == 0 && e < E; e += 4) {  // sequential, as the CPU sums; 16-byte loads
        const float4 v = *reinterpret_cast<const float4*>(s.score + e);
        sum += v.x, sum += v.y, sum += v.z, sum += v.w;
      }
      for (; e < E; ++e) sum += s.score[e];
      s.red[kWarpSize] = sum;  // past the per-warp values (read above, before the barrier)
    }
    __syncthreads();
    const float sum = s.red[kWarpSize];
    for (int e = tid; e < E; e += nt) {
      const float v = s.score[e] / sum;
      s.score[e] = v;
      if (direct_keys) key[e] = moe_routing_order_key(v + s.bias[e]);
      else s.choice[e] = v + s.bias[e];
    }
  }
  __syncthreads();

  if (!direct_keys) {
    uint32_t* gkey = reinterpret_cast<uint32_t*>(s.red);
    if (tid < G)  // group tid's score (route_token's helper: the same bits)
      gkey[tid] = moe_group_score_key(s.choice + size_t(tid) * per_group, per_group, p.group_top2_sum);
    __syncthreads();
    uint32_t keep = 0;  // the topk_group groups first in the order (key descending, then index)
    for (int g = 0; g < G; ++g) {
      const uint32_t kg = gkey[g];
      int rank = 0;
      for (int h = 0; h < G; ++h) {
        const uint32_t kh = gkey[h];
        rank += kh > kg || (kh == kg && h < g);
      }
      if (rank < p.topk_group) keep |= 1u << g;
    }
    const uint32_t masked = moe_routing_order_key(-INFINITY);
    for (int e = tid; e < E; e += nt)
      key[e] = ((keep >> (e / per_group)) & 1u) ? moe_routing_order_key(s.choice[e]) : masked;
    __syncthreads();
  }
  // e's rank: the experts before it in the routing order. One thread an expert: splitting an
  // expert's count over 2..8 lanes summed by shuffles (every thread of the block busy) made moonlight
  // nvfp4 1.0% slower (H200, 2026-12-04, 3 rounds in one call: 624.2 vs 630.6 tok/s).
  for (int e = tid; e < E; e += nt) {
    const uint32_t ke = key[e];
    int rank = 0;
    int j = 0;
    for (; (E & 3) == 0 && j < E; j += 4) {  // 16-byte loads where the keys are aligned (E % 4 == 0)
      const uint4 k4 = *reinterpret_cast<const uint4*>(key + j);
      rank += (k4.x > ke || (k4.x == ke && j < e)) + (k4.y > ke || (k4.y == ke && j + 1 < e)) +
              (k4.z > ke || (k4.z == ke && j + 2 < e)) + (k4.w > ke || (k4.w == ke && j + 3 < e));
    }
    for (; j < E; ++j) rank += key[j] > ke || (key[j] == ke && j < e);
    if (rank < p.top_k) s.idx[rank] = e, s.weight[rank] = s.score[e];  // the chosen score beside its id
  }
  __syncthreads();
  if (tid < p.top_k) {  // each its own choice's weight, over the chosen scores summed in order (warp 0)
    float sum = 0.0f;
    for (int k = 0; k < p.top_k; ++k) sum += s.weight[k];
    float w = s.weight[tid];
    __syncwarp(__activemask());  // every lane's reads before any lane's write
    if (p.normalize) w /= (sum + 1e-20f);
    s.weight[tid] = w * p.routed_scaling_factor;
  }
  __syncthreads();
}

static __device__ __noinline__ void moe_block_route_call(const MoeRoutingParams& params, int t, const MoeBlockRouting& s) {
  moe_block_route(params, t, s);
}

// The routing's results where later readers (tests, the routing record) expect them: one block writes.
__device__ __forceinline__ void moe_block_route_publish(const MoeRoutingParams& p, int t, const MoeBlockRouting& s,
                                                        unsigned tid) {
  if (int(tid) < p.top_k) {
    p.expert_idx[size_t(t) * p.top_k + tid] = s.idx[tid];
    p.expert_weight[size_t(t) * p.top_k + tid] = s.weight[tid];
  }
}

}  // namespace pg::ops::cuda
