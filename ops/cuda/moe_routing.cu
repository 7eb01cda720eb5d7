// moe_routing on the GPU, and moe_router (the router GEMV + routing in one launch): one warp per token, the same arithmetic in the same order as
// ops::cpu::moe_routing, so indices (and their tie order) match exactly and weights to the bit
// whenever exp() rounds as the host's does (exp is evaluated in double, then rounded).
#include "ops/cuda/common/pdl.cuh"
#include <cfloat>
#include <climits>

#include "ops/cuda/common/env.h"
#include "ops/cuda/common/sync.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/config.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear/kernel.cuh"  // unpack_chunk: one 16-byte chunk of W -> f32

namespace pg::ops::cuda {
namespace {

// The best not-yet-taken element of key[0..n) over the warp; every lane gets its index (INT_MAX if
// none is left). Lane l owns elements l + 32 j; bit j of `taken` marks those already chosen. Two
// warp reductions (redux.sync: the largest key, then the smallest index holding it) in place of a
// shuffle tree of (value, index) pairs; within a lane, a strictly larger key keeps the lower index.
// kSync: reconverge before the reductions (the lanes' loops end apart; without it ptxas wraps
// each reduction in a divergent fallback).
template <bool kSync = false>
__device__ __forceinline__ int warp_argmax(const uint32_t* key, int n, uint32_t taken) {
  const int lane = threadIdx.x % kWarpSize;
  uint32_t bk = 0;
  int bi = INT_MAX;
#pragma unroll 4
  for (int j = 0, e = lane; e < n; ++j, e += kWarpSize) {
    const uint32_t k = ((taken >> j) & 1u) ? 0u : key[e];
    if (k > bk) bk = k, bi = e;
  }
  if constexpr (kSync) __syncwarp();
  const uint32_t top = __reduce_max_sync(kFullMask, bk);
  if (top == 0) return INT_MAX;
  return __reduce_min_sync(kFullMask, bk == top ? bi : INT_MAX);
}

// Routes token t with one warp; s_warp: its shared [2 E] floats (the scores, then the selection
// values, which become their keys once the group scores are read). The logits are read through L2
// (ld.cg): in moe_router_kernel another block of the same grid wrote them. The sums that decide
// bits (softmax's, a group's top-2, the chosen scores') run in the CPU's order. Lane k keeps the
// k-th choice (top_k <= 32). Not inlined: inlined into moe_router_kernel, ptxas spilled around
// the division slow-path calls (20 bytes), here nothing. kScore: 1 = sigmoid, 2 = softmax, known
// at compile time, with the warp reconverged before each warp-wide reduction (the default: the
// other scoring's code and the reductions' divergent fallbacks out of the kernel); 0 = p.sigmoid
// decides (PEREGRINE_ROUTER_LEAN=0).
// kTl: the calling kernel, for its timeline marks (timeline.cuh; nothing unless a probe build).
// kBiasStaged: the correction biases are in shared memory after the kRoutingWarpsPerBlock warps'
// [2 E] (moe_router_kernel's kBiasStaged), not read from p.bias here.
template <int kScore = 0, TimelineKernel kTl = TimelineKernel::kRouter, bool kBiasStaged = false>
__device__ __noinline__ void route_token(const MoeRoutingParams& params, int t, float* s_warp) {
  constexpr bool kLean = kScore != 0;
  // A local copy: read through the reference, every field was reloaded after each shared store
  // (a generic pointer that may alias them), three dependent loads an expert for the bias alone.
  const MoeRoutingParams p = params;
  const int lane = threadIdx.x % kWarpSize;
  const int E = p.n_experts, G = p.n_group, per_group = E / G;
  float* s = s_warp;                                     // [E] scores
  float* choice = s + E;                                 // [E] selection values
  uint32_t* key = reinterpret_cast<uint32_t*>(choice);  // then their keys, in place
  const float* lg = p.logits + size_t(t) * E;

  // A lane's logits and biases first, all loads in flight together (8 a lane at V3's 256 experts:
  // one round trip, where the rolled loops waited for each), into s and choice; then the scores.
  float mx = -INFINITY;
#pragma unroll 8
  for (int e = lane; e < E; e += kWarpSize) {
    const float x = __ldcg(lg + e);
    s[e] = x;
    mx = fmaxf(mx, x);
    if constexpr (kBiasStaged)  // after the kRoutingWarpsPerBlock warps' [2 E]
      choice[e] = p.noaux_tc ? s_warp[size_t(kRoutingWarpsPerBlock - int(threadIdx.x / kWarpSize)) * 2 * E + e] : 0.0f;
    else choice[e] = p.noaux_tc ? __ldg(p.bias + e) : 0.0f;
  }
  pg_tl_mark(kTl, 5);
  bool sigmoid;
  if constexpr (kLean) sigmoid = kScore == 1;
  else sigmoid = p.sigmoid;
  if (sigmoid) {
#pragma unroll 4  // independent exps in flight together
    for (int e = lane; e < E; e += kWarpSize) {
      const float v = 1.0f / (1.0f + moe_exp_as_host(-s[e]));
      s[e] = v;
      choice[e] = v + choice[e];
    }
  } else {
    mx = warp_max(mx);
    for (int e = lane; e < E; e += kWarpSize) s[e] = moe_exp_as_host(s[e] - mx);  // rolled: unrolled by 4, ptxas spilled
    __syncwarp();
    float sum = 0.0f;
    if (lane == 0) {
#pragma unroll 8
      for (int e = 0; e < E; ++e) sum += s[e];  // sequential, as the CPU sums
    }
    sum = __shfl_sync(kFullMask, sum, 0);
    __syncwarp();
    for (int e = lane; e < E; e += kWarpSize) {
      const float v = s[e] / sum;
      s[e] = v;
      choice[e] = v + choice[e];
    }
  }
  __syncwarp();

  uint32_t keep = ~0u;  // the kept groups (all unless group-limited)
  if (p.group_limited) {
    uint32_t gkey = 0;  // G <= 32: lane l owns group l
    if (lane < G) gkey = moe_group_score_key(choice + size_t(lane) * per_group, per_group, p.group_top2_sum);
    keep = 0;
    if constexpr (kLean) __syncwarp();
    for (int k = 0; k < p.topk_group; ++k) {
      const uint32_t top = __reduce_max_sync(kFullMask, gkey);
      const int bi = __reduce_min_sync(kFullMask, gkey == top ? lane : INT_MAX);
      keep |= 1u << bi;
      if (bi == lane) gkey = 0;
    }
    __syncwarp();  // every group's values are read before they become keys
  }
  pg_tl_mark(kTl, 6);
  const uint32_t masked = moe_routing_order_key(-INFINITY);
  for (int e = lane; e < E; e += kWarpSize)
    key[e] = ((keep >> (e / per_group)) & 1u) ? moe_routing_order_key(choice[e]) : masked;

  uint32_t taken = 0;
  float sum = 0.0f, mine = 0.0f;  // every lane: the chosen scores summed in selection order, as the CPU
  int mine_i = 0;
  for (int k = 0; k < p.top_k; ++k) {
    const int bi = warp_argmax<kLean>(key, E, taken);  // a lane reads only the keys it wrote
    if (bi % kWarpSize == lane) taken |= 1u << (bi / kWarpSize);
    const float v = s[bi];
    sum += v;
    if (lane == k) mine = v, mine_i = bi;
  }
  if (lane < p.top_k) {
    float w = mine;
    if (p.normalize) w /= (sum + 1e-20f);
    p.expert_idx[size_t(t) * p.top_k + lane] = mine_i;
    p.expert_weight[size_t(t) * p.top_k + lane] = w * p.routed_scaling_factor;
  }
  __syncwarp();  // s / key are rewritten by the warp's next token
}

template <int kWarps>
__global__ void __launch_bounds__(kWarps * kWarpSize) moe_routing_kernel(const __grid_constant__ MoeRoutingParams p) {
  extern __shared__ float smem[];
  pg_tl_mark(TimelineKernel::kRouting, 0);
  pdl_wait();  // the router logits come from the kernel before
  pdl_trigger();  // after the wait: gate_up's shared-expert blocks (PDL) read x at once
  const int warp = threadIdx.x / kWarpSize;
  const int t = blockIdx.x * kWarps + warp;
  if (t >= p.m) return;  // whole warps only; no block-wide barrier below
  route_token<0, TimelineKernel::kRouting>(p, t, smem + size_t(warp) * 2 * p.n_experts);
}

// ---------------------------------------------------------------------------------------------
// moe_router: the router GEMV as linear_vec_kernel sums it, then routing in the grid's last block.
// Warp w of block b: row b x (warps / k_split) + w / k_split, K slice w % k_split; per token, each
// lane sums its 16-byte chunks' dot products (an FMA chain from 0 over the chunk, then added)
// over chunks lane, lane + 32, ... of the slice, then warp_sum, then slice 0 adds slices 1.. in
// order: the order of linear_vec_kernel at any tile (its rows and unroll change which loads are
// in flight, not the sums), so the logits are linear()'s bits for the same k_split.
// kScore: route_token's. kBiasStaged (the default with kRelease; PEREGRINE_ROUTER_BIAS_STAGED=0 for
// the kernel without): every block copies the E correction biases into shared memory (after the
// routing scratch) before its wait, so the last block's routing warps find them there instead of
// loading them beside the logits after the arrival (from HBM if they left L2 since the last step;
// the timeline has 1.6 us from the last block's test to its routing warp holding the logits and
// biases). The same values: the same bits. H200, 2026-12-04, one call alternating, 3 rounds:
// moonlight nvfp4 636.9 -> 639.5 tok/s (+0.4%), fp8 +0.3%, bf16 +0.3% (1 round), V3 4L nvfp4 +0.0%,
// the k = 1 verify step 2.184 -> 2.175 ms.
template <LinearWeight F, int kScore = 0, bool kRelease = false, bool kBiasStaged = false>  // kRelease: grid_arrive's
__global__ void __launch_bounds__(kRouterThreads) moe_router_kernel(const __grid_constant__ MoeRouterParams p) {
  constexpr int kVec = linear_vec_elems(F), kWarps = kRouterThreads / kWarpSize, kT = kRouterTokenTile;
  __shared__ float partial[kWarps][kT];
  __shared__ bool last;
  extern __shared__ float smem[];  // the last block's routing: kRoutingWarpsPerBlock x [2 E]
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int k_split = p.k_split, kpart = warp % k_split;
  const int64_t row = int64_t(blockIdx.x) * (kWarps / k_split) + warp / k_split;
  const bool valid = row < p.n;
  const int64_t k_chunks = p.k / kVec, per_part = (k_chunks + k_split - 1) / k_split;
  const int64_t c_begin = kpart * per_part, c_end = min(k_chunks, c_begin + per_part);
  const uint8_t* wrow = static_cast<const uint8_t*>(p.w) + (valid ? row : 0) * p.k * linear_elem_bytes(F);

  pg_tl_mark(TimelineKernel::kRouter, 0);
  for (int64_t c = c_begin + lane; valid && c < c_end; c += kWarpSize) prefetch_l2(wrow + c * kLinearVecBytes);
  if constexpr (kBiasStaged) {  // after the routing scratch; read after the token loop's barriers
    float* const s_bias = smem + size_t(kRoutingWarpsPerBlock) * 2 * p.n;
    if (p.routing.noaux_tc && p.route)
      for (int64_t e = threadIdx.x; e < p.n; e += kRouterThreads) s_bias[e] = __ldg(p.routing.bias + e);
  }
  pdl_wait();  // x comes from the kernel before
  pg_tl_mark(TimelineKernel::kRouter, 1);
  // After the wait, so x is complete when a dependent launches: gate_up under PDL
  // (MoeExpertsParams::gate_up_pdl) starts its shared experts on it before the routing is done.
  pdl_trigger();

  for (int t0 = 0; t0 < p.m; t0 += kT) {
    const int tv = min(kT, p.m - t0);
    float acc[kT];
#pragma unroll
    for (int i = 0; i < kT; ++i) acc[i] = 0.0f;
    // kRouterChunkBatch chunks a lane at a time: their W loads, then a token's x loads, go out
    // together (one round trip each; a chunk an iteration waited for each: V3's 7 a lane took 7),
    // summed in the same chunk order.
    for (int64_t c0 = c_begin + lane; valid && c0 < c_end; c0 += kRouterChunkBatch * kWarpSize) {
      uint4 wv[kRouterChunkBatch];
#pragma unroll
      for (int b = 0; b < kRouterChunkBatch; ++b) {
        const int64_t c = c0 + b * kWarpSize;
        if (c < c_end) wv[b] = ld_stream(wrow + c * kLinearVecBytes);
      }
#pragma unroll
      for (int i = 0; i < kT; ++i) {
        if (i < tv) {
          const float* xp = p.x + int64_t(t0 + i) * p.x_stride;
          float4 xv[kRouterChunkBatch][kVec / 4];
#pragma unroll
          for (int b = 0; b < kRouterChunkBatch; ++b) {
            const int64_t c = c0 + b * kWarpSize;
            if (c < c_end)
#pragma unroll
              for (int q = 0; q < kVec / 4; ++q) xv[b][q] = ld_act4(xp + c * kVec + 4 * q);
          }
#pragma unroll
          for (int b = 0; b < kRouterChunkBatch; ++b) {
            if (c0 + b * kWarpSize < c_end) {
              float wf[kVec];
              unpack_chunk<F>(wv[b], wf);
              float d = 0.0f;
#pragma unroll
              for (int q = 0; q < kVec / 4; ++q) {
                d = fmaf(wf[4 * q], xv[b][q].x, d), d = fmaf(wf[4 * q + 1], xv[b][q].y, d);
                d = fmaf(wf[4 * q + 2], xv[b][q].z, d), d = fmaf(wf[4 * q + 3], xv[b][q].w, d);
              }
              acc[i] += d;
            }
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kT; ++i) acc[i] = warp_sum(acc[i]);
    if (lane == 0)
#pragma unroll
      for (int i = 0; i < kT; ++i) partial[warp][i] = acc[i];
    __syncthreads();
    if (kpart == 0 && valid && lane < tv) {
      float mine = partial[warp][lane];
      for (int s = 1; s < k_split; ++s) mine += partial[warp + s][lane];  // fixed order, as linear's
      p.logits[int64_t(t0 + lane) * p.n + row] = mine;
    }
    __syncthreads();  // partial is rewritten by the next token tile
  }

  // The last block to finish routes every token (threadFenceReduction: publish, then count).
  pg_tl_mark(TimelineKernel::kRouter, 2);
  if (!p.route) return;  // the expert kernels route (MoeExpertsParams::self_routing)
  const unsigned arrived = grid_arrive<kRelease>(p.counter);
  if (threadIdx.x == 0) last = arrived == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  pg_tl_mark(TimelineKernel::kRouter, 4);
  if constexpr (!kRelease) __threadfence();  // (kRelease: thread 0's acq_rel add was the acquire)
  if (threadIdx.x == 0) atomicExch(p.counter, 0u);  // every block has counted: ready for the next launch
  if (warp >= kRoutingWarpsPerBlock) return;
  for (int t = warp; t < p.m; t += kRoutingWarpsPerBlock)
    route_token<kScore, TimelineKernel::kRouter, kBiasStaged>(p.routing, t, smem + size_t(warp) * 2 * p.n);
  pg_tl_mark(TimelineKernel::kRouter, 3);
}

}  // namespace

cudaError_t launch_moe_routing(const MoeRoutingParams& p, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  const size_t smem = sizeof(float) * kRoutingWarpsPerBlock * size_t(2 * p.n_experts);
  const unsigned blocks = unsigned((int64_t(p.m) + kRoutingWarpsPerBlock - 1) / kRoutingWarpsPerBlock);
  if (cudaError_t e = launch_pdl(moe_routing_kernel<kRoutingWarpsPerBlock>, dim3(blocks),
                                 dim3(kRoutingWarpsPerBlock * kWarpSize), smem, stream, p);
      e != cudaSuccess)
    return e;
  return cudaGetLastError();
}

namespace {

// moe_router instantiated for the model's scoring (route_token<1 or 2>), reconverged before its
// warp reductions: bf16 sigmoid 3,004 -> 2,583 SASS instructions. On the H200 (2026-12-02, ca4fa8d,
// b = 1 after 1,024 tokens): moonlight bf16 +0.1%, fp8 +0.4%, nvfp4 +0.2%, and with the lean
// attention +0.1 to +0.4% over it alone; V3 4L nvfp4 -0.2% (within its noise). What a launch's code
// costs: docs/decode-status.md, session 18. PEREGRINE_ROUTER_LEAN=0 launches the instantiation
// that takes the scoring at run time (the gated test of that path).
bool router_lean() {
  static const bool on = env_switch("PEREGRINE_ROUTER_LEAN", true);
  return on;
}

// moe_router_kernel's kBiasStaged (the lean, release-arrive kernel with the biases staged before the
// wait); PEREGRINE_ROUTER_BIAS_STAGED=0 launches the kernel that loads them after it (its gated test).
bool router_bias_staged() {
  static const bool on = env_switch("PEREGRINE_ROUTER_BIAS_STAGED", true);
  return on;
}

template <LinearWeight F>
cudaError_t launch_router_f(const MoeRouterParams& p, dim3 grid, size_t smem, cudaStream_t stream) {
  const dim3 block(kRouterThreads);
  if (router_bias_staged() && router_lean() && release_arrive()) {
    const size_t staged = smem + sizeof(float) * size_t(p.n);  // the scratch, then the biases
    if (p.routing.sigmoid) PG_LAUNCH_PDL((moe_router_kernel<F, 1, true, true>), grid, block, staged, stream, p);
    else PG_LAUNCH_PDL((moe_router_kernel<F, 2, true, true>), grid, block, staged, stream, p);
    return cudaSuccess;
  }
  if (!router_lean()) PG_LAUNCH_PDL(moe_router_kernel<F>, grid, block, smem, stream, p);
  else if (release_arrive() && p.routing.sigmoid)
    PG_LAUNCH_PDL((moe_router_kernel<F, 1, true>), grid, block, smem, stream, p);
  else if (release_arrive()) PG_LAUNCH_PDL((moe_router_kernel<F, 2, true>), grid, block, smem, stream, p);
  else if (p.routing.sigmoid) PG_LAUNCH_PDL(moe_router_kernel<F, 1>, grid, block, smem, stream, p);
  else PG_LAUNCH_PDL(moe_router_kernel<F, 2>, grid, block, smem, stream, p);
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_moe_router(LinearWeight f, const MoeRouterParams& p, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  const int rows_per_block = kRouterThreads / kWarpSize / p.k_split;
  const dim3 grid(unsigned((p.n + rows_per_block - 1) / rows_per_block));
  const size_t smem = sizeof(float) * kRoutingWarpsPerBlock * size_t(2 * p.n);
  cudaError_t e = cudaErrorInvalidValue;
  switch (f) {
    case LinearWeight::kF32: e = launch_router_f<LinearWeight::kF32>(p, grid, smem, stream); break;
    case LinearWeight::kBF16: e = launch_router_f<LinearWeight::kBF16>(p, grid, smem, stream); break;
    default: break;
  }
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
