// moe_routing on the GPU, one warp per token, and moe_router (the router GEMV + routing in one
// launch of one thread-block cluster): the same arithmetic in the same order as
// ops::cpu::moe_routing, so indices (and their tie order) match exactly and weights to the bit
// whenever exp() rounds as the host's does (exp is evaluated in double, then rounded).
#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <mutex>
#include <utility>

#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/smem_limit.cuh"
#include "ops/cuda/common/warp.cuh"
#include "ops/cuda/config.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear/kernel.cuh"  // unpack_chunk: one 16-byte chunk of W -> f32
#include "ops/cuda/linear_norm/norm.cuh"  // rms_inv_rows: the folded RMSNorm's inverse RMS

namespace pg::ops::cuda {
namespace {

namespace cg = cooperative_groups;

// (value, index) order of the contract: value descending, then index ascending. idx == INT_MAX
// marks "no candidate", which loses to everything.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  if (bi == INT_MAX) return i != INT_MAX;
  if (i == INT_MAX) return false;
  return v > bv || (v == bv && i < bi);
}

// Every lane gets the best (value, index) of the lanes' candidates (bv, bi): butterfly shuffles.
__device__ __forceinline__ void warp_best(float& bv, int& bi) {
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(kFullMask, bv, o);
    const int oi = __shfl_xor_sync(kFullMask, bi, o);
    if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
}

// The best not-yet-taken element of vals[0..n) over the warp; every lane gets (value, index).
// Lane l owns elements l + 32 j; bit j of `taken` marks those already chosen.
__device__ __forceinline__ void warp_argmax(const float* vals, int n, uint32_t taken, float& bv, int& bi) {
  const int lane = threadIdx.x % kWarpSize;
  bv = -INFINITY, bi = INT_MAX;
  for (int j = 0, e = lane; e < n; ++j, e += kWarpSize)
    if (!((taken >> j) & 1u) && better(vals[e], e, bv, bi)) bv = vals[e], bi = e;
  warp_best(bv, bi);
}

__device__ __forceinline__ float exp_as_host(float x) { return float(exp(double(x))); }

// Routes token t with one warp. lg: its [E] logits, bias: the [E] noaux_tc bias (global or
// shared memory: plain loads, written before this kernel or before a cluster barrier); s_warp:
// the warp's shared [2 E] floats.
__device__ void route_token(const MoeRoutingParams& p, int t, const float* lg, const float* bias, float* s_warp) {
  const int lane = threadIdx.x % kWarpSize;
  const int E = p.n_experts, G = p.n_group, per_group = E / G;
  float* s = s_warp;       // [E] scores
  float* choice = s + E;   // [E] selection values

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
  for (int e = lane; e < E; e += kWarpSize) choice[e] = s[e] + (p.noaux_tc ? bias[e] : 0.0f);
  __syncwarp();

  if (p.group_limited) {
    // Lane g < G scores group g and keeps the score in a register: the group top-k needs no
    // shared round trip (G <= 32).
    float gv = -INFINITY;
    if (lane < G) {
      const float* c = choice + size_t(lane) * per_group;
      float v1 = -INFINITY, v2 = -INFINITY;  // the two largest values (duplicates count twice)
      for (int i = 0; i < per_group; ++i) {
        if (c[i] > v1) v2 = v1, v1 = c[i];
        else if (c[i] > v2) v2 = c[i];
      }
      gv = p.group_top2_sum ? (per_group >= 2 ? (0.0f + v1) + v2 : 0.0f + v1) : v1;
    }
    uint32_t keep = 0;
    bool taken = false;
    for (int k = 0; k < p.topk_group; ++k) {
      const bool open = lane < G && !taken;
      float bv = open ? gv : -INFINITY;
      int bi = open ? lane : INT_MAX;
      warp_best(bv, bi);
      keep |= 1u << bi;
      taken |= bi == lane;
    }
    for (int e = lane; e < E; e += kWarpSize)
      if (!((keep >> (e / per_group)) & 1u)) choice[e] = -INFINITY;
    __syncwarp();
  }

  // Selection k is stored by lane k % 32, and lane k < 32 keeps it in a register for its weight
  // (no read-back of out_idx from global memory for the usual top_k <= 32).
  uint32_t taken = 0;
  float sum = 0.0f;  // lane 0: sum of the chosen scores, in selection order as the CPU
  int my_idx = 0;
  int32_t* out_idx = p.expert_idx + size_t(t) * p.top_k;
  float* out_w = p.expert_weight + size_t(t) * p.top_k;
  for (int k = 0; k < p.top_k; ++k) {
    float bv;
    int bi;
    warp_argmax(choice, E, taken, bv, bi);
    if (bi % kWarpSize == lane) taken |= 1u << (bi / kWarpSize);
    if (k % kWarpSize == lane) out_idx[k] = bi;
    if (k == lane) my_idx = bi;
    if (lane == 0) sum += s[bi];
  }
  sum = __shfl_sync(kFullMask, sum, 0);
  // One weight per lane: the CPU's operations on each weight (no order across weights to keep).
  for (int k = lane; k < p.top_k; k += kWarpSize) {
    float w = s[k < kWarpSize ? my_idx : out_idx[k]];  // k >= 32: this lane's own store above
    if (p.normalize) w /= (sum + 1e-20f);
    out_w[k] = w * p.routed_scaling_factor;
  }
}

template <int kWarps>
__global__ void __launch_bounds__(kWarps * kWarpSize) moe_routing_kernel(const __grid_constant__ MoeRoutingParams p) {
  extern __shared__ float smem[];
  pdl_trigger();
  pdl_wait();  // the router logits come from the kernel before
  const int warp = threadIdx.x / kWarpSize;
  const int t = blockIdx.x * kWarps + warp;
  if (t >= p.m) return;  // whole warps only; no block-wide barrier below
  route_token(p, t, p.logits + size_t(t) * p.n_experts, p.bias, smem + size_t(warp) * 2 * p.n_experts);
}

// ---------------------------------------------------------------------------------------------
// moe_router: the router GEMV as linear_vec_kernel sums it, then routing, in ONE thread-block
// cluster (the whole grid). Warp w of block b owns rows b x groups + w / k_split + j x stride
// (groups = warps / k_split rows per block, stride = blocks x groups rows per pass), K slice
// w % k_split. Per row and token each lane sums its 16-byte chunks' dot products (an FMA chain
// from 0 over the chunk, then added) over chunks lane, lane + 32, ... of the slice, then
// warp_sum, then slice 0 adds slices 1.. in order: the order of linear_vec_kernel at any tile
// (rows in flight and unroll change which loads are in flight, not the sums), so the logits are
// linear()'s bits for the same k_split. Each logit goes to p.logits and, through distributed
// shared memory, into cluster rank 0's shared copy; one cluster barrier (release / acquire)
// then publishes them and rank 0 routes from shared memory: no fence, counter or L2 read-back.
// Launch bounds (256, 1): the cluster wants one block per SM; ptxas then takes ~180 registers for
// the 16 loads in flight (without the 1 it capped the f32 kernel at 128 and spilled).
template <LinearWeight F>
__global__ void __launch_bounds__(kRouterThreads, 1) moe_router_kernel(const __grid_constant__ MoeRouterParams p) {
  constexpr int kVec = linear_vec_elems(F), kWarps = kRouterThreads / kWarpSize, kT = kRouterTokenTile;
  constexpr int kRows = kRouterRowsPerWarp, kUnroll = kRouterUnroll, kOut = kT * kRows;
  static_assert(kOut <= kWarpSize, "one lane per (token, row) output of the warp");
  __shared__ float partial[kWarps][kOut];
  __shared__ float norm_scratch[kLinearWarps][kLinearNormMaxRows];  // rms_inv_rows' warp sums
  static_assert(kRouterThreads == kLinearThreads && kT <= kLinearNormMaxRows, "rms_inv_rows' block and rows");
  extern __shared__ float smem[];  // moe_router_smem_bytes; only rank 0's is read
  float* s_logits = smem;                          // [m, n] f32: every block's logits
  float* s_bias = s_logits + int64_t(p.m) * p.n;   // [n] f32 (noaux_tc)
  float* s_route = s_bias + p.n;                   // kWarps x [2 n] f32: route_token's scratch
  const cg::cluster_group cluster = cg::this_cluster();
  const bool rank0 = cluster.block_rank() == 0;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int k_split = p.k_split, kpart = warp % k_split, groups = kWarps / k_split;
  const int64_t stride = int64_t(gridDim.x) * groups;  // the grid is the cluster
  const int64_t first = int64_t(blockIdx.x) * groups + warp / k_split;
  const int64_t passes = (p.n - int64_t(blockIdx.x) * groups + stride - 1) / stride;  // uniform over the block
  const int64_t k_chunks = p.k / kVec, per_part = (k_chunks + k_split - 1) / k_split;
  const int64_t c_begin = kpart * per_part, c_end = min(k_chunks, c_begin + per_part);
  const int64_t row_bytes = p.k * linear_elem_bytes(F);
  const uint8_t* w = static_cast<const uint8_t*>(p.w);

  // Before pdl_wait: what depends on no kernel (W into L2, the bias into rank 0's shared memory)
  // and the cluster barrier that lets blocks store into rank 0's shared memory (it has started).
  pdl_trigger();
  auto started = cluster.barrier_arrive();
  for (int64_t row = first; row < p.n; row += stride)
    for (int64_t c = c_begin + lane; c < c_end; c += kWarpSize) prefetch_l2(w + row * row_bytes + c * kLinearVecBytes);
  if (rank0 && p.routing.noaux_tc)
    for (int64_t e = threadIdx.x; e < p.n; e += kRouterThreads) s_bias[e] = p.routing.bias[e];
  cluster.barrier_wait(std::move(started));
  pdl_wait();  // x comes from the kernel before
  float* const rank0_logits = cluster.map_shared_rank(s_logits, 0);

  // The folded RMSNorm: every block computes the tokens' inverse RMS (one fixed order: the same
  // bits in every block) and writes its slice of x' = in_norm * (x * inv) for the experts.
  float inv[kT] = {};
  if (p.in_norm) {
    rms_inv_rows<kT, false>(p.x, p.x_stride, p.m, p.k, p.eps, p.norm_vec4, inv, norm_scratch);
    const int64_t slice = (p.k + gridDim.x - 1) / gridDim.x, j_begin = int64_t(blockIdx.x) * slice;
    const int64_t j_end = min(p.k, j_begin + slice);
#pragma unroll
    for (int i = 0; i < kT; ++i)  // p.m <= kT here (the launcher's condition)
      for (int64_t j = j_begin + threadIdx.x; i < p.m && j < j_end; j += kRouterThreads)
        p.x_normed[int64_t(i) * p.k + j] = p.in_norm[j] * (ld_act(p.x + int64_t(i) * p.x_stride + j) * inv[i]);
  }

  for (int64_t j0 = 0; j0 < passes; j0 += kRows) {
    const uint8_t* wrow[kRows];
    bool rvalid[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = first + (j0 + r) * stride;
      rvalid[r] = row < p.n;
      wrow[r] = w + (rvalid[r] ? row : 0) * row_bytes;
    }
    for (int t0 = 0; t0 < p.m; t0 += kT) {
      const int tv = min(kT, p.m - t0);
      float acc[kT][kRows];
#pragma unroll
      for (int i = 0; i < kT; ++i)
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[i][r] = 0.0f;
      for (int64_t c = c_begin + lane; c < c_end; c += int64_t(kWarpSize) * kUnroll) {
        uint4 wv[kUnroll][kRows];  // all of this step's loads first: kUnroll x kRows in flight
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const int64_t cc = c + int64_t(kWarpSize) * u;
            wv[u][r] = cc < c_end && rvalid[r] ? ld_stream(wrow[r] + cc * kLinearVecBytes) : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t cc = c + int64_t(kWarpSize) * u;
          if (cc >= c_end) break;
          float wf[kRows][kVec];
#pragma unroll
          for (int r = 0; r < kRows; ++r) unpack_chunk<F>(wv[u][r], wf[r]);
#pragma unroll
          for (int i = 0; i < kT; ++i) {
            if (i < tv) {
              const float* xp = p.x + int64_t(t0 + i) * p.x_stride + cc * kVec;
              float xf[kVec];
#pragma unroll
              for (int q = 0; q < kVec / 4; ++q) {
                const float4 v = ld_act4(xp + 4 * q);
                xf[4 * q] = v.x, xf[4 * q + 1] = v.y, xf[4 * q + 2] = v.z, xf[4 * q + 3] = v.w;
              }
              if (p.in_norm) {  // ops::cpu::rmsnorm's y_j, as written to x_normed above
#pragma unroll
                for (int q = 0; q < kVec / 4; ++q) {
                  const float4 g = ld_f4(p.in_norm + cc * kVec + 4 * q);
                  const float gf[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
                  for (int e = 0; e < 4; ++e) xf[4 * q + e] = gf[e] * (xf[4 * q + e] * inv[i]);
                }
              }
#pragma unroll
              for (int r = 0; r < kRows; ++r) {
                float d = 0.0f;
#pragma unroll
                for (int e = 0; e < kVec; ++e) d = fmaf(wf[r][e], xf[e], d);
                acc[i][r] += d;
              }
            }
          }
        }
      }
      float mine = 0.0f;  // lane i x kRows + r: token t0 + i of row r
#pragma unroll
      for (int i = 0; i < kT; ++i)
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float v = warp_sum(acc[i][r]);
          if (lane == i * kRows + r) mine = v;
        }
      if (lane < kOut) partial[warp][lane] = mine;
      __syncthreads();
      const int i = lane / kRows;
      const int64_t row = first + (j0 + lane % kRows) * stride;
      if (kpart == 0 && lane < kOut && i < tv && row < p.n) {
        for (int s = 1; s < k_split; ++s) mine += partial[warp + s][lane];  // fixed order, as linear's
        const int64_t at = int64_t(t0 + i) * p.n + row;
        p.logits[at] = mine;
        rank0_logits[at] = mine;  // a distributed shared memory store (mapa + st)
      }
      __syncthreads();  // partial is rewritten by the next tile
    }
  }

  cluster.sync();  // every block's logits are in rank 0's shared memory (release / acquire)
  if (!rank0) return;
  for (int t = warp; t < p.m; t += kWarps)
    route_token(p.routing, t, s_logits + int64_t(t) * p.n, s_bias, s_route + int64_t(warp) * 2 * p.n);
}

// The most blocks one cluster of kKernel may have here: the device's largest cluster at the
// largest shared memory the launcher asks (kRouterMaxSmemBytes), non-portable sizes allowed,
// capped at kRouterMaxClusterBlocks; the portable 8 where the device gives no answer. Once per
// kernel and device, with the kernel's shared memory opt-in (> 48 KB).
template <auto kKernel>
cudaError_t router_cluster_limit(int& blocks) {
  constexpr int kMaxDevices = 64, kPortable = 8;
  static std::mutex mu;
  static int limit[kMaxDevices] = {};  // 0: not yet asked
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  const bool cached = dev >= 0 && dev < kMaxDevices;
  std::lock_guard<std::mutex> lock(mu);
  if (cached && limit[dev]) {
    blocks = limit[dev];
    return cudaSuccess;
  }
  if (cudaError_t e = raise_smem_limit_once<kKernel>(); e != cudaSuccess) return e;
  if (cudaError_t e = cudaFuncSetAttribute(kKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1); e != cudaSuccess)
    return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(kRouterMaxClusterBlocks);
  cfg.blockDim = dim3(kRouterThreads);
  cfg.dynamicSmemBytes = kRouterMaxSmemBytes;
  int size = 0;
  if (cudaOccupancyMaxPotentialClusterSize(&size, kKernel, &cfg) != cudaSuccess || size < 1) {
    (void)cudaGetLastError();  // no answer is not an error for the launch to report: portable size
    size = kPortable;
  }
  blocks = std::min(size, kRouterMaxClusterBlocks);
  if (cached) limit[dev] = blocks;
  return cudaSuccess;
}

// kernel<<<blocks, block, smem, stream>>> as one cluster of `blocks` blocks, with launch_pdl's
// programmatic-serialization attribute beside the cluster dimension.
template <typename... KArgs, typename... Args>
cudaError_t launch_pdl_cluster(void (*kernel)(KArgs...), unsigned blocks, dim3 block, size_t smem, cudaStream_t stream,
                               Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = blocks, attr[1].val.clusterDim.y = 1, attr[1].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// One cluster of as many blocks as the rows need (groups rows per block and pass), at most the
// device's cluster limit; the blocks then loop over the rows in passes.
template <LinearWeight F>
cudaError_t launch_moe_router_as(const MoeRouterParams& p, cudaStream_t stream) {
  constexpr auto kKernel = moe_router_kernel<F>;
  int max_blocks = 0;
  if (cudaError_t e = router_cluster_limit<kKernel>(max_blocks); e != cudaSuccess) return e;
  const int64_t groups = kRouterThreads / kWarpSize / p.k_split;
  const unsigned blocks = unsigned(std::min<int64_t>(max_blocks, (p.n + groups - 1) / groups));
  return launch_pdl_cluster(kKernel, blocks, dim3(kRouterThreads), moe_router_smem_bytes(p.m, p.n), stream, p);
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

cudaError_t launch_moe_router(LinearWeight f, const MoeRouterParams& p, cudaStream_t stream) {
  if (p.m <= 0) return cudaSuccess;
  if (p.m > kRouterMaxTokens || p.n < 1 || p.k_split < 1 || (kRouterThreads / kWarpSize) % p.k_split ||
      moe_router_smem_bytes(p.m, p.n) > kRouterMaxSmemBytes)
    return cudaErrorInvalidValue;
  cudaError_t e = cudaErrorInvalidValue;
  switch (f) {
    case LinearWeight::kF32: e = launch_moe_router_as<LinearWeight::kF32>(p, stream); break;
    case LinearWeight::kBF16: e = launch_moe_router_as<LinearWeight::kBF16>(p, stream); break;
    default: break;
  }
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace pg::ops::cuda
