// The MoE expert kernels and their launchers. Prefill path (m > 64): plan (group pairs by
// expert into the workspace), gate_up (h = silu(gate·x) * (up·x) per (token, expert) pair, every
// selected expert's rows streamed once per 8 of its pairs) and down (per output row, the token's
// experts summed in the contract's order). Decode path: decode.cuh. Weight rows stream in 16-byte
// chunks dequantized in registers as in linear/kernel.cuh; odd shapes take the same kernels with
// one element per "chunk". The CPU definition is ops::cpu::moe_experts.
#include <cuda_runtime.h>

#include <algorithm>

#include "ops/cuda/moe_experts/decode.cuh"
#include "ops/cuda/moe_experts/params.h"
#include "ops/cuda/moe_experts/stream.cuh"

namespace pg::ops::cuda {
namespace {

using namespace moe_detail;

// One block: counting sort of the m * top_k (token, slot) pairs by expert, stable (flat order
// within an expert, so a token range is a contiguous run). Counters in shared memory.
__global__ void __launch_bounds__(kMoePlanThreads) moe_plan_kernel(const __grid_constant__ MoeExpertsParams p) {
  extern __shared__ int32_t s_plan[];
  int32_t* count = s_plan;                 // [n_experts]
  int32_t* cursor = s_plan + p.n_experts;  // [n_experts] next free pair slot of each expert
  const int n = p.m * p.top_k, n_exp = p.n_experts;
  for (int e = threadIdx.x; e < n_exp; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int e = p.expert_idx[i];
    if (e >= 0 && e < n_exp) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (threadIdx.x >= kWarpSize) return;

  // Warp 0: exclusive scan of the counts -> segments and the active list, 32 experts per step.
  const int lane = threadIdx.x;
  const unsigned below = (1u << lane) - 1u;
  int total = 0, n_act = 0;
  for (int e0 = 0; e0 < n_exp; e0 += kWarpSize) {
    const int e = e0 + lane;
    const int c = e < n_exp ? count[e] : 0;
    int incl = c;
#pragma unroll
    for (int o = 1; o < kWarpSize; o *= 2) {
      const int t = __shfl_up_sync(kFullMask, incl, o);
      if (lane >= o) incl += t;
    }
    const unsigned act = __ballot_sync(kFullMask, c > 0);
    if (c > 0) {
      const int a = n_act + __popc(act & below);
      p.plan.active_expert[a] = e;
      p.plan.seg_begin[a] = total + incl - c;
      cursor[e] = total + incl - c;
    }
    total += __shfl_sync(kFullMask, incl, kWarpSize - 1);
    n_act += __popc(act);
  }
  if (lane == 0) {
    p.plan.seg_begin[n_act] = total;
    *p.plan.n_active = n_act;
  }
  __syncwarp();
  // Stable scatter, 32 pairs per step: equal ids in a step are ranked by lane.
  for (int i0 = 0; i0 < n; i0 += kWarpSize) {
    const int i = i0 + lane;
    const int e = i < n ? p.expert_idx[i] : -1;
    const bool valid = e >= 0 && e < n_exp;
    const unsigned peers = __match_any_sync(kFullMask, valid ? e : -1);
    int base = 0;
    if (valid) {
      base = cursor[e];
      p.plan.pair_flat[base + __popc(peers & below)] = i;
    }
    __syncwarp();
    if (valid && lane == __ffs(peers) - 1) cursor[e] = base + __popc(peers);
    __syncwarp();
  }
}

// Grid: x = inter row tiles (kMoeWarps x rows per block), y = expert slot (max_active routed
// slots, then n_shared shared), z = splits of the slot's pair passes. Warp: `rows` gate rows j and
// the matching up rows, over kM pairs per pass.
template <LinearWeight F, bool kVec, int kM>
__global__ void __launch_bounds__(kMoeThreads, kMoeMinBlocksPerSm)
    moe_gate_up_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr MoeTile kTile = moe_gate_up_tile(F, kVec, kM);
  constexpr int kR = kTile.rows, kW = 2 * kR, kU = kTile.unroll;
  constexpr int kE = chunk_elems<F, kVec>();
  static_assert(kM * kR <= kWarpSize, "one lane per output of the warp");
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int slot = blockIdx.y;
  const bool shared = slot >= p.max_active;
  int64_t expert;
  int lo, hi;
  int64_t h_base = 0;  // shared: h row of token 0
  if (!shared) {
    if (slot >= *p.plan.n_active) return;
    expert = p.plan.active_expert[slot];
    lo = p.plan.seg_begin[slot];
    hi = p.plan.seg_begin[slot + 1];
  } else {
    const int s = slot - p.max_active;
    expert = p.n_experts + s;
    lo = 0;
    hi = p.m;
    h_base = int64_t(p.m) * p.top_k + int64_t(s) * p.m;
  }
  const int64_t j0 = (int64_t(blockIdx.x) * kMoeWarps + warp) * kR;
  if (j0 >= p.inter) return;

  const uint8_t* wrow[kW];
  const float* srow[kW];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t j = min(j0 + r, int64_t(p.inter) - 1);  // rows past inter re-read the last; never written
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // gate rows, then up rows
      const int64_t row = expert * 2 * p.inter + half * int64_t(p.inter) + j;
      wrow[half * kR + r] = static_cast<const uint8_t*>(p.gate_up.data) + row * p.hidden * linear_elem_bytes(F);
      srow[half * kR + r] = scale_row<F>(p.gate_up, row);
    }
  }
  const int64_t n_chunks = p.hidden / kE;

  for (int q = lo + int(blockIdx.z) * kM; q < hi; q += int(gridDim.z) * kM) {
    const int m_valid = min(kM, hi - q);
    const float* xrow[kM];
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      const int pi = q + min(i, m_valid - 1);
      const int64_t token = shared ? pi : p.plan.pair_flat[pi] / p.top_k;
      xrow[i] = p.x + token * p.hidden;
    }
    float acc[kM][kW];
    stream_dot<F, kVec, kM, kW, kU>(wrow, srow, xrow, m_valid, n_chunks, p.gate_up, acc);
    float g = 0.0f, u = 0.0f;  // lane i * kR + r keeps pair i, row r
#pragma unroll
    for (int i = 0; i < kM; ++i)
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const float gs = warp_sum(acc[i][r]), us = warp_sum(acc[i][kR + r]);
        if (lane == i * kR + r) g = gs, u = us;
      }
    const int i = lane / kR, r = lane % kR;
    if (lane < kM * kR && i < m_valid && j0 + r < p.inter) {
      const int64_t h_row = shared ? h_base + q + i : q + i;
      p.plan.h[h_row * p.inter + j0 + r] = silu(g) * u;
    }
  }
}

// Grid: x = hidden row tiles (kMoeWarps x rows per block), y = token tiles of kMoeTokTile. Warp:
// `rows` output rows; loops over the active experts (ascending id), then the shared experts, and
// adds weight * down·h into its per-token sums in shared memory: a fixed order, no atomics.
template <LinearWeight F, bool kVec, int kM>
__global__ void __launch_bounds__(kMoeThreads, kMoeMinBlocksPerSm)
    moe_down_kernel(const __grid_constant__ MoeExpertsParams p) {
  constexpr MoeTile kTile = moe_down_tile(F, kVec, kM);
  constexpr int kR = kTile.rows, kU = kTile.unroll;
  constexpr int kE = chunk_elems<F, kVec>();
  extern __shared__ int32_t s_slots[];  // [3][max_active]: expert id, first and end pair in this token tile
  __shared__ float s_acc[kMoeWarps][kMoeTokTile][kR];
  int32_t* s_expert = s_slots;
  int32_t* s_lo = s_slots + p.max_active;
  int32_t* s_hi = s_lo + p.max_active;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int t0 = int(blockIdx.y) * kMoeTokTile, t1 = min(p.m, t0 + kMoeTokTile);
  const int n_active = *p.plan.n_active;

  for (int a = threadIdx.x; a < n_active; a += kMoeThreads) {
    int lo = p.plan.seg_begin[a], hi = p.plan.seg_begin[a + 1];
    if (gridDim.y > 1) {  // this tile's tokens: flat pair indices [t0 * top_k, t1 * top_k)
      lo = lower_bound(p.plan.pair_flat, lo, hi, t0 * p.top_k);
      hi = lower_bound(p.plan.pair_flat, lo, hi, t1 * p.top_k);
    }
    s_expert[a] = p.plan.active_expert[a];
    s_lo[a] = lo;
    s_hi[a] = hi;
  }
  for (int i = lane; i < kMoeTokTile * kR; i += kWarpSize) (&s_acc[warp][0][0])[i] = 0.0f;
  __syncthreads();

  const int64_t row0 = (int64_t(blockIdx.x) * kMoeWarps + warp) * kR;
  if (row0 >= p.hidden) return;
  const int64_t n_chunks = p.inter / kE;
  const int n_slots = n_active + p.n_shared;
  for (int slot = 0; slot < n_slots; ++slot) {
    const bool shared = slot >= n_active;
    int64_t expert, h_base = 0;
    int lo, hi;
    if (!shared) {
      expert = s_expert[slot], lo = s_lo[slot], hi = s_hi[slot];
    } else {
      const int s = slot - n_active;
      expert = p.n_experts + s, lo = t0, hi = t1;
      h_base = int64_t(p.m) * p.top_k + int64_t(s) * p.m;
    }
    if (lo >= hi) continue;
    const uint8_t* wrow[kR];
    const float* srow[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int64_t row = expert * p.hidden + min(row0 + r, int64_t(p.hidden) - 1);  // past hidden: never written
      wrow[r] = static_cast<const uint8_t*>(p.down.data) + row * p.inter * linear_elem_bytes(F);
      srow[r] = scale_row<F>(p.down, row);
    }
    for (int q = lo; q < hi; q += kM) {
      const int m_valid = min(kM, hi - q);
      const float* xrow[kM];
#pragma unroll
      for (int i = 0; i < kM; ++i) xrow[i] = p.plan.h + (h_base + q + min(i, m_valid - 1)) * p.inter;
      float acc[kM][kR];
      stream_dot<F, kVec, kM, kR, kU>(wrow, srow, xrow, m_valid, n_chunks, p.down, acc);
#pragma unroll
      for (int i = 0; i < kM; ++i)
#pragma unroll
        for (int r = 0; r < kR; ++r) acc[i][r] = warp_sum(acc[i][r]);
      if (lane < kR) {  // lane r owns row r's sums; pairs in order
#pragma unroll
        for (int i = 0; i < kM; ++i) {
          if (i < m_valid) {
            int tok;
            float wgt;
            if (shared) {
              tok = q + i, wgt = 1.0f;
            } else {
              const int f = p.plan.pair_flat[q + i];
              tok = f / p.top_k, wgt = p.expert_weight[f];
            }
            float v = 0.0f;
#pragma unroll
            for (int r = 0; r < kR; ++r)
              if (lane == r) v = acc[i][r];
            s_acc[warp][tok - t0][lane] += wgt * v;
          }
        }
      }
    }
  }
  __syncwarp();
  for (int idx = lane; idx < (t1 - t0) * kR; idx += kWarpSize) {
    const int tl = idx / kR, r = idx % kR;
    if (row0 + r < p.hidden) {
      float* yp = p.y + int64_t(t0 + tl) * p.y_stride + row0 + r;
      const float v = s_acc[warp][tl][r];
      *yp = p.accumulate ? *yp + v : v;
    }
  }
}

using LaunchFn = cudaError_t (*)(const MoeExpertsParams&, cudaStream_t);

template <LinearWeight F, bool kVec, int kM>
cudaError_t gate_up_launch(const MoeExpertsParams& p, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kMoeWarps * moe_gate_up_tile(F, kVec, kM).rows;
  const int64_t bx = (int64_t(p.inter) + kRowsPerBlock - 1) / kRowsPerBlock;
  const dim3 grid(unsigned(bx), unsigned(p.max_active + p.n_shared), unsigned(moe_gate_up_splits(p.m)));
  moe_gate_up_kernel<F, kVec, kM><<<grid, kMoeThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <LinearWeight F, bool kVec, int kM>
cudaError_t down_launch(const MoeExpertsParams& p, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kMoeWarps * moe_down_tile(F, kVec, kM).rows;
  const int64_t bx = (int64_t(p.hidden) + kRowsPerBlock - 1) / kRowsPerBlock;
  const dim3 grid(unsigned(bx), unsigned((p.m + kMoeTokTile - 1) / kMoeTokTile));
  const size_t smem = size_t(3) * size_t(p.max_active) * sizeof(int32_t);
  moe_down_kernel<F, kVec, kM><<<grid, kMoeThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

// Prefill: the pair tile is 8 on the vector path, 1 on the scalar path.
template <bool kGateUp>
LaunchFn pick(LinearWeight f, bool vec) {
#define PG_MOE_PICK(F) \
  return vec ? (kGateUp ? &gate_up_launch<F, true, 8> : &down_launch<F, true, 8>) \
             : (kGateUp ? &gate_up_launch<F, false, 1> : &down_launch<F, false, 1>)
  switch (f) {
    case LinearWeight::kF32: PG_MOE_PICK(LinearWeight::kF32);
    case LinearWeight::kBF16: PG_MOE_PICK(LinearWeight::kBF16);
    case LinearWeight::kFp8Block: PG_MOE_PICK(LinearWeight::kFp8Block);
  }
#undef PG_MOE_PICK
  return nullptr;
}

// Decode gate_up: a grid of one wave (all blocks resident, items split evenly over the warps),
// no larger than the items of max_active experts need.
template <LinearWeight F, bool kVec, int kM>
cudaError_t gate_up_decode_launch(const MoeExpertsParams& p, int sm_count, cudaStream_t stream) {
  const auto kernel = &moe_gate_up_decode_kernel<F, kVec, kM>;
  const size_t smem = moe_decode_plan_smem_bytes(p.m, p.top_k, p.n_experts);
  static const int occupancy = [&] {  // per instantiation, at the largest plan (the grid stays valid)
    int n = 0;
    const size_t max_smem = moe_decode_plan_smem_bytes(kMoeDecodeMaxPairs, 1, kMoeDecodeMaxExperts);
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kMoeThreads, max_smem) == cudaSuccess && n > 0
               ? n
               : kMoeMinBlocksPerSm;
  }();
  constexpr int kR = moe_gate_up_decode_tile(F, kVec, kM).rows;
  const int64_t max_items = int64_t(p.max_active + p.n_shared) * ((int64_t(p.inter) + kR - 1) / kR);
  const int64_t blocks =
      std::max<int64_t>(1, std::min<int64_t>(int64_t(sm_count) * occupancy, (max_items + kMoeWarps - 1) / kMoeWarps));
  kernel<<<unsigned(blocks), kMoeThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

// Decode down: launched with Programmatic Dependent Launch after gate_up (same stream), so its
// blocks plan and prefetch while gate_up drains; pdl_wait() orders every read of h and y.
// The legacy and per-thread default streams take a plain launch (PDL is documented for
// created streams; pdl_wait() is then a no-op), which the parity tests also exercise.
template <typename Kernel>
cudaError_t launch_pdl(Kernel kernel, dim3 grid, size_t smem, const MoeExpertsParams& p, cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    kernel<<<grid, kMoeThreads, smem, stream>>>(p);
    return cudaGetLastError();
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kMoeThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, p);
}

template <LinearWeight F, bool kVec, int kM>
cudaError_t down_decode_launch(const MoeExpertsParams& p, cudaStream_t stream) {
  const size_t smem = moe_decode_plan_smem_bytes(p.m, p.top_k, p.n_experts);
  if constexpr (kM == 0) {  // m = 1: the term kernel
    constexpr int kRowsPerBlock = kMoeWarps * moe_down_term_tile(F, kVec).rows;
    const dim3 grid(unsigned((int64_t(p.hidden) + kRowsPerBlock - 1) / kRowsPerBlock));
    return launch_pdl(&moe_down_term_kernel<F, kVec>, grid, smem, p, stream);
  } else {
    constexpr int kRowsPerBlock = kMoeWarps * moe_down_tile(F, kVec, kM).rows;
    const dim3 grid(unsigned((int64_t(p.hidden) + kRowsPerBlock - 1) / kRowsPerBlock));
    return launch_pdl(&moe_down_decode_kernel<F, kVec, kM>, grid, smem, p, stream);
  }
}

template <LinearWeight F>
cudaError_t decode_gate_up(const MoeExpertsParams& p, bool vec, int sm_count, cudaStream_t stream) {
  if (!vec) return gate_up_decode_launch<F, false, 1>(p, sm_count, stream);
  switch (moe_m_tile(p.m)) {
    case 1: return gate_up_decode_launch<F, true, 1>(p, sm_count, stream);
    case 2: return gate_up_decode_launch<F, true, 2>(p, sm_count, stream);
    case 4: return gate_up_decode_launch<F, true, 4>(p, sm_count, stream);
    default: return gate_up_decode_launch<F, true, 8>(p, sm_count, stream);
  }
}

// m = 1 takes the term kernel (kM 0 here); the scalar path's slot kernel runs one pair per pass.
template <LinearWeight F>
cudaError_t decode_down(const MoeExpertsParams& p, bool vec, cudaStream_t stream) {
  if (p.m == 1) return vec ? down_decode_launch<F, true, 0>(p, stream) : down_decode_launch<F, false, 0>(p, stream);
  if (!vec) return down_decode_launch<F, false, 1>(p, stream);
  switch (moe_m_tile(p.m)) {
    case 2: return down_decode_launch<F, true, 2>(p, stream);
    case 4: return down_decode_launch<F, true, 4>(p, stream);
    default: return down_decode_launch<F, true, 8>(p, stream);
  }
}

}  // namespace

cudaError_t launch_moe_decode(const MoeExpertsParams& p, LinearWeight gate_up_f, bool gate_up_vec, LinearWeight down_f,
                              bool down_vec, int sm_count, cudaStream_t stream) {
  // gate_up always runs (even with nothing to do): the down kernel's PDL prologue reads
  // expert_idx, which is safe only behind a kernel that itself started after the routing.
  cudaError_t e = cudaSuccess;
  switch (gate_up_f) {
    case LinearWeight::kF32: e = decode_gate_up<LinearWeight::kF32>(p, gate_up_vec, sm_count, stream); break;
    case LinearWeight::kBF16: e = decode_gate_up<LinearWeight::kBF16>(p, gate_up_vec, sm_count, stream); break;
    case LinearWeight::kFp8Block: e = decode_gate_up<LinearWeight::kFp8Block>(p, gate_up_vec, sm_count, stream); break;
  }
  if (e != cudaSuccess) return e;
  switch (down_f) {
    case LinearWeight::kF32: return decode_down<LinearWeight::kF32>(p, down_vec, stream);
    case LinearWeight::kBF16: return decode_down<LinearWeight::kBF16>(p, down_vec, stream);
    case LinearWeight::kFp8Block: return decode_down<LinearWeight::kFp8Block>(p, down_vec, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_moe_plan(const MoeExpertsParams& p, cudaStream_t stream) {
  const size_t smem = size_t(2) * size_t(p.n_experts) * sizeof(int32_t);
  moe_plan_kernel<<<1, kMoePlanThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_moe_gate_up(const MoeExpertsParams& p, LinearWeight f, bool vec, cudaStream_t stream) {
  if (p.max_active + p.n_shared == 0) return cudaSuccess;  // no expert: h is never read
  return pick<true>(f, vec)(p, stream);
}

cudaError_t launch_moe_down(const MoeExpertsParams& p, LinearWeight f, bool vec, cudaStream_t stream) {
  return pick<false>(f, vec)(p, stream);
}

}  // namespace pg::ops::cuda
