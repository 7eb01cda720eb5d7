// moe_routing on the GPU, and moe_router (the router GEMV + routing in one launch): one warp per token, the same arithmetic in the same order as
// ops::cpu::moe_routing, so indices (and their tie order) match exactly and weights to the bit
// whenever exp() rounds as the host's does (exp is evaluated in double, then rounded).
#include "ops/cuda/common/pdl.cuh"
#include <cfloat>
#include <climits>

#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/config.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear/kernel.cuh"  // unpack_chunk: one 16-byte chunk of W -> f32

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

// Routes token t with one warp; s_warp: its shared [2 E + G] floats. The logits are read through
// L2 (ld.cg): in moe_router_kernel another block of the same grid wrote them.
__device__ void route_token(const MoeRoutingParams& p, int t, float* s_warp) {
  const int lane = threadIdx.x % kWarpSize;
  const int E = p.n_experts, G = p.n_group, per_group = E / G;
  float* s = s_warp;            // [E] scores
  float* choice = s + E;        // [E] selection values
  float* gscore = choice + E;   // [G]
  const float* lg = p.logits + size_t(t) * E;

  if (p.sigmoid) {
    for (int e = lane; e < E; e += kWarpSize) s[e] = 1.0f / (1.0f + exp_as_host(-__ldcg(lg + e)));
  } else {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += kWarpSize) mx = fmaxf(mx, __ldcg(lg + e));
    mx = warp_max(mx);
    for (int e = lane; e < E; e += kWarpSize) s[e] = exp_as_host(__ldcg(lg + e) - mx);
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

template <int kWarps>
__global__ void __launch_bounds__(kWarps * kWarpSize) moe_routing_kernel(const __grid_constant__ MoeRoutingParams p) {
  extern __shared__ float smem[];
  pdl_wait();  // the router logits come from the kernel before
  pdl_trigger();  // after the wait: gate_up's shared-expert blocks (PDL) read x at once
  const int warp = threadIdx.x / kWarpSize;
  const int t = blockIdx.x * kWarps + warp;
  if (t >= p.m) return;  // whole warps only; no block-wide barrier below
  route_token(p, t, smem + size_t(warp) * (2 * p.n_experts + p.n_group));
}

// ---------------------------------------------------------------------------------------------
// moe_router: the router GEMV as linear_vec_kernel sums it, then routing in the grid's last block.
// Warp w of block b: row b x (warps / k_split) + w / k_split, K slice w % k_split; per token, each
// lane sums its 16-byte chunks' dot products (an FMA chain from 0 over the chunk, then added)
// over chunks lane, lane + 32, ... of the slice, then warp_sum, then slice 0 adds slices 1.. in
// order: the order of linear_vec_kernel at any tile (its rows and unroll change which loads are
// in flight, not the sums), so the logits are linear()'s bits for the same k_split.
template <LinearWeight F>
__global__ void __launch_bounds__(kRouterThreads) moe_router_kernel(const __grid_constant__ MoeRouterParams p) {
  constexpr int kVec = linear_vec_elems(F), kWarps = kRouterThreads / kWarpSize, kT = kRouterTokenTile;
  __shared__ float partial[kWarps][kT];
  __shared__ bool last;
  extern __shared__ float smem[];  // the last block's routing: kRoutingWarpsPerBlock x [2 E + G]
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int k_split = p.k_split, kpart = warp % k_split;
  const int64_t row = int64_t(blockIdx.x) * (kWarps / k_split) + warp / k_split;
  const bool valid = row < p.n;
  const int64_t k_chunks = p.k / kVec, per_part = (k_chunks + k_split - 1) / k_split;
  const int64_t c_begin = kpart * per_part, c_end = min(k_chunks, c_begin + per_part);
  const uint8_t* wrow = static_cast<const uint8_t*>(p.w) + (valid ? row : 0) * p.k * linear_elem_bytes(F);

  for (int64_t c = c_begin + lane; valid && c < c_end; c += kWarpSize) prefetch_l2(wrow + c * kLinearVecBytes);
  pdl_wait();  // x comes from the kernel before
  // After the wait, so x is complete when a dependent launches: gate_up under PDL
  // (MoeExpertsParams::gate_up_pdl) starts its shared experts on it before the routing is done.
  pdl_trigger();

  for (int t0 = 0; t0 < p.m; t0 += kT) {
    const int tv = min(kT, p.m - t0);
    float acc[kT];
#pragma unroll
    for (int i = 0; i < kT; ++i) acc[i] = 0.0f;
    for (int64_t c = c_begin + lane; valid && c < c_end; c += kWarpSize) {
      float wf[kVec];
      unpack_chunk<F>(ld_stream(wrow + c * kLinearVecBytes), wf);
#pragma unroll
      for (int i = 0; i < kT; ++i) {
        if (i < tv) {
          const float* xp = p.x + int64_t(t0 + i) * p.x_stride + c * kVec;
          float xf[kVec];
#pragma unroll
          for (int q = 0; q < kVec / 4; ++q) {
            const float4 v = ld_act4(xp + 4 * q);
            xf[4 * q] = v.x, xf[4 * q + 1] = v.y, xf[4 * q + 2] = v.z, xf[4 * q + 3] = v.w;
          }
          float d = 0.0f;
#pragma unroll
          for (int e = 0; e < kVec; ++e) d = fmaf(wf[e], xf[e], d);
          acc[i] += d;
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
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(p.counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (threadIdx.x == 0) atomicExch(p.counter, 0u);  // every block has counted: ready for the next launch
  if (warp >= kRoutingWarpsPerBlock) return;
  for (int t = warp; t < p.m; t += kRoutingWarpsPerBlock)
    route_token(p.routing, t, smem + size_t(warp) * (2 * p.n + p.routing.n_group));
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

cudaError_t launch_moe_router(LinearWeight f, const MoeRouterParams& p, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  const int rows_per_block = kRouterThreads / kWarpSize / p.k_split;
  const dim3 grid(unsigned((p.n + rows_per_block - 1) / rows_per_block));
  const size_t smem = sizeof(float) * kRoutingWarpsPerBlock * size_t(2 * p.n + p.routing.n_group);
  switch (f) {
    case LinearWeight::kF32: PG_LAUNCH_PDL(moe_router_kernel<LinearWeight::kF32>, grid, dim3(kRouterThreads), smem, stream, p); break;
    case LinearWeight::kBF16: PG_LAUNCH_PDL(moe_router_kernel<LinearWeight::kBF16>, grid, dim3(kRouterThreads), smem, stream, p); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace pg::ops::cuda
