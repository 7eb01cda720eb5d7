// The GPU sampler: the numbered steps of engine/sampler.h on device rows of logits, drawing the
// token pg::Sampler draws. Compiled with -fmad=false (engine/CMakeLists.txt): steps 1, 3 and
// sampling_exp are the CPU's fp32 operations, each rounded once; from step 4 on the weights are
// integers, so the cluster-wide sums, the top-p cut and the prefix-sum draw are exact in any order.
//
// One row = one cluster of kClusterBlocks blocks; block r owns the vocabulary slice
// [r * slice, (r + 1) * slice). Scores and then weights live in a global workspace row (L2-hot);
// cluster-wide maxima, sums, histograms and prefix sums go through distributed shared memory.
// Selections (top-k, top-p, top logprobs) are radix selects over 32-bit order-preserving codes
// in three levels (11, 11, 10 bits) with warp-aggregated shared histograms of a uint64 value
// (1 per token for top-k, the weight for top-p); ties at the boundary code go to the lowest ids
// through an id-ordered prefix search (find_prefix), which also performs the draw.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "engine/cuda/sampler_cuda_params.h"
#include "engine/sampling_math.h"

namespace pg::cuda_sampling {
namespace {

namespace cg = cooperative_groups;
using u64 = unsigned long long;  // the type CUDA's 64-bit atomics and shuffles take

constexpr int kWarp = 32;
constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarps = kSampleThreads / kWarp;
constexpr int kBins = 2048;  // 11-bit radix digits
static_assert(kWarps == kWarp, "block scans keep one warp total per lane");
static_assert(kBins == 2 * kSampleThreads, "each thread owns two histogram bins");
constexpr float kFltMax = 3.40282347e+38f;

__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }

// ---------------------------------------------------------------------------------------------
// The CPU's element functions (engine/sampler.cpp), on the device.

// Step 3's clean-up: NaN -> -inf, +inf -> FLT_MAX, -0 -> +0.
__device__ __forceinline__ float sanitize(float s) {
  s = s != s ? -pos_inf() : s;
  s = s == pos_inf() ? kFltMax : s;
  return s == 0.0f ? 0.0f : s;
}
// Order-preserving uint32 of a non-NaN float.
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t b = __float_as_uint(f);
  return b ^ (uint32_t(int32_t(b) >> 31) | 0x80000000u);
}
// (score desc, id asc) as one integer, larger = better (sampler.cpp pack_score).
__device__ __forceinline__ u64 pack_score(float s, int64_t id) {
  return (u64(order_key(s)) << 32) | u64(0xFFFFFFFFu - uint32_t(id));
}
// (weight desc, id asc) as one integer (sampler.cpp pack_weight): weights < 2^44, ids < 2^20.
__device__ __forceinline__ u64 pack_weight(u64 q, int64_t id) { return (q << 20) | u64(0xFFFFF - id); }

// Step 1 for one history entry, in the CPU's order and roundings.
__device__ __forceinline__ float penalize(float l, const RowParams& rp, const PenaltyEntry& e) {
  if (rp.repetition_penalty != 1.0f)
    l = l > 0.0f ? __fdiv_rn(l, rp.repetition_penalty) : __fmul_rn(l, rp.repetition_penalty);
  if (e.n_output > 0) {
    if (rp.frequency_penalty != 0.0f) l = __fsub_rn(l, __fmul_rn(rp.frequency_penalty, __int2float_rn(e.n_output)));
    if (rp.presence_penalty != 0.0f) l = __fsub_rn(l, rp.presence_penalty);
  }
  return l;
}

// A 32-bit code and a uint64 value of one token, for the radix selects.
struct CodeV {
  uint32_t code;
  u64 v;
};
// The fixed-point weight q = fixed_weight(w) and a strictly monotone 32-bit code of q: f = w * 2^42
// is exact; at f >= 2^24 a float is an integer, so q == f and f's bits (>= 0x4B800000) order q;
// below, q < 2^24 is its own code. Equal codes <=> equal weights.
__device__ __forceinline__ CodeV weight_code(float w) {
  const float f = __fmul_rn(w, 0x1p42f);
  const u64 q = u64(int64_t(f));  // = sampling::fixed_weight(w)
  return {f >= 0x1p24f ? __float_as_uint(f) : uint32_t(q), q};
}
__device__ __forceinline__ u64 weight_of_code(uint32_t c) {
  return c < (1u << 24) ? u64(c) : u64(int64_t(__uint_as_float(c)));
}

// ---------------------------------------------------------------------------------------------
// Block and cluster reductions.

struct Best {  // argmax candidate: value desc, id asc
  float v;
  int32_t i;
};
__device__ __forceinline__ Best better(Best a, Best b) { return (a.v > b.v || (a.v == b.v && a.i < b.i)) ? a : b; }

struct Shared {
  u64 hist_v[kBins];  // histogram values; also find_prefix's tile sums. Zero at rest.
  uint32_t hist_n[kBins];  // tokens per bin. Zero at rest.
  int32_t hist_id[kBins];  // some token of the bin (the only one when hist_n == 1)
  u64 scan[kWarps];
  double red_f64[kWarps];
  float red_f32[kWarps];
  int32_t red_i32[kWarps];
  // Read by the other blocks of the cluster.
  float x_f32;
  int32_t x_i32;
  double x_f64;
  u64 x_u64;
  int32_t found;
  u64 gather[kMaxTopLogprobsGpu];
  int32_t n_gather;
  // Block-wide broadcast of a boundary search.
  int32_t sel_bin;
  uint32_t sel_n;
  int32_t sel_id;
  u64 sel_above, sel_v;
  int32_t tile;
  u64 tile_base;
};

template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
// Every thread gets the block's result (same bits in every thread). Call from all threads.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, T* scratch, Op op) {
  v = warp_reduce(v, op);
  __syncthreads();
  if (threadIdx.x % kWarp == 0) scratch[threadIdx.x / kWarp] = v;
  __syncthreads();
  return warp_reduce(scratch[threadIdx.x % kWarp], op);
}
__device__ __forceinline__ Best block_best(Best b, Shared& sh) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2)
    b = better(b, Best{__shfl_xor_sync(kFull, b.v, o), __shfl_xor_sync(kFull, b.i, o)});
  __syncthreads();
  if (threadIdx.x % kWarp == 0) sh.red_f32[threadIdx.x / kWarp] = b.v, sh.red_i32[threadIdx.x / kWarp] = b.i;
  __syncthreads();
  b = Best{sh.red_f32[threadIdx.x % kWarp], sh.red_i32[threadIdx.x % kWarp]};
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2)
    b = better(b, Best{__shfl_xor_sync(kFull, b.v, o), __shfl_xor_sync(kFull, b.i, o)});
  return b;
}

// Exclusive prefix sum over the block in thread order; `total` = the block's sum.
__device__ __forceinline__ u64 block_exclusive_scan(u64 v, u64* scratch, u64& total) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  u64 incl = v;
#pragma unroll
  for (int o = 1; o < kWarp; o *= 2) {
    const u64 y = __shfl_up_sync(kFull, incl, o);
    if (lane >= o) incl += y;
  }
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == kWarp - 1) scratch[warp] = incl;
  __syncthreads();
  const u64 own = scratch[lane];
  u64 w = own;  // inclusive scan of the warp totals, redundantly in every warp
#pragma unroll
  for (int o = 1; o < kWarp; o *= 2) {
    const u64 y = __shfl_up_sync(kFull, w, o);
    if (lane >= o) w += y;
  }
  total = __shfl_sync(kFull, w, kWarp - 1);
  const u64 warp_excl = __shfl_sync(kFull, w - own, warp);
  return warp_excl + incl - v;
}

// Combines one block-uniform value per block over the cluster, in rank order (so every block
// gets the same bits). Contains cluster barriers: call from all threads of every block.
template <class T, class Op>
__device__ __forceinline__ T cluster_reduce(cg::cluster_group& cl, T* slot, T v, Op op) {
  if (threadIdx.x == 0) *slot = v;
  cl.sync();
  T r = *cl.map_shared_rank(slot, 0);
  for (unsigned k = 1; k < kClusterBlocks; ++k) r = op(r, *cl.map_shared_rank(slot, k));
  cl.sync();  // every block has read the slots before they are reused
  return r;
}
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};

// f(i, valid) over this block's slice [begin, end): i = begin + k * kSampleThreads + threadIdx.x.
// The loop is warp-uniform (lanes past `end` run with valid = false), so f may use warp collectives.
template <class F>
__device__ __forceinline__ void for_slice(int64_t begin, int64_t end, F f) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t b = begin + (threadIdx.x - lane); b < end; b += kSampleThreads) f(b + lane, b + lane < end);
}

// ---------------------------------------------------------------------------------------------
// Radix select over the cluster.

// Radix levels of a 32-bit code: bits [31:21], [20:10], [9:0]. At level L > 0 a token takes
// part when its code's higher bits equal the prefix chosen so far.
__device__ __forceinline__ int level_shift(int level) { return level == 0 ? 21 : level == 1 ? 10 : 0; }
__device__ __forceinline__ uint32_t level_mask(int level) { return level == 2 ? 1023u : 2047u; }
__device__ __forceinline__ int prefix_shift(int level) { return level == 1 ? 21 : 10; }

// Adds v to `bin` for the lanes with `take` (warp-collective: every lane calls it). Lanes of
// one bin are combined first (one shared atomic per distinct bin, not per lane: the top digits of
// a vocabulary's scores are few). v < 2^43: summed as 22 + 21 bits in 32-bit warp reductions.
__device__ __forceinline__ void hist_add(Shared& sh, bool take, uint32_t bin, u64 v, int64_t id) {
  const unsigned active = __ballot_sync(kFull, take);
  if (!take) return;
  const unsigned grp = __match_any_sync(active, bin);
  const unsigned lo = __reduce_add_sync(grp, unsigned(v & 0x3FFFFFu));
  const unsigned hi = __reduce_add_sync(grp, unsigned(v >> 22));
  if (int(threadIdx.x % kWarp) == __ffs(grp) - 1) {
    atomicAdd(&sh.hist_v[bin], (u64(hi) << 22) + lo);
    atomicAdd(&sh.hist_n[bin], unsigned(__popc(grp)));
    sh.hist_id[bin] = int32_t(id);
  }
}
__device__ __forceinline__ void clear_hist(Shared& sh) {
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += kSampleThreads) sh.hist_v[b] = 0, sh.hist_n[b] = 0;
  __syncthreads();
}

// Merges the cluster's histograms and finds the bin, in descending bin order, where the running
// sum reaches `target` (above < target <= above + bins up to it), into sh.sel_*. Clears the
// histogram. Needs target <= above + the histogram's total.
__device__ void cluster_boundary(Shared& sh, cg::cluster_group& cl, u64 target, u64 above) {
  cl.sync();  // every block's histogram is complete
  u64 v[2];
  uint32_t n[2];
  int32_t id[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int bin = kBins - 1 - (2 * int(threadIdx.x) + j);
    v[j] = 0, n[j] = 0, id[j] = -1;
    for (unsigned r = 0; r < kClusterBlocks; ++r) {
      const Shared* rs = cl.map_shared_rank(&sh, r);
      const uint32_t rn = rs->hist_n[bin];
      if (rn) v[j] += rs->hist_v[bin], n[j] += rn, id[j] = rs->hist_id[bin];
    }
  }
  u64 total;
  u64 base = above + block_exclusive_scan(v[0] + v[1], sh.scan, total);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    if (base < target && target <= base + v[j]) {
      sh.sel_bin = kBins - 1 - (2 * int(threadIdx.x) + j);
      sh.sel_n = n[j], sh.sel_id = id[j], sh.sel_above = base, sh.sel_v = v[j];
    }
    base += v[j];
  }
  cl.sync();  // every block has read the histograms before they are cleared
  clear_hist(sh);
}

struct Boundary {
  uint32_t code;  // the boundary code (valid when n > 1: all three levels were resolved)
  u64 above;      // sum of the values of codes above it
  uint32_t n;     // tokens with that code (n == 1: the single token `id` of value `v`)
  int32_t id;
  u64 v;
};
// The code at which the descending cumulative sum of f(i).v reaches target. Level 0's histogram
// may have been built by an earlier pass (level0_built).
template <class F>
__device__ Boundary radix_boundary(Shared& sh, cg::cluster_group& cl, int64_t begin, int64_t end, F f, u64 target,
                                   bool level0_built) {
  uint32_t prefix = 0;
  u64 above = 0;
  for (int level = 0;; ++level) {
    if (level > 0 || !level0_built) {
      for_slice(begin, end, [&](int64_t i, bool valid) {
        const CodeV c = valid ? f(i) : CodeV{0, 0};
        const bool take = c.v != 0 && (level == 0 || (c.code >> prefix_shift(level)) == prefix);
        hist_add(sh, take, (c.code >> level_shift(level)) & level_mask(level), c.v, i);
      });
    }
    cluster_boundary(sh, cl, target, above);
    prefix = (prefix << (level == 2 ? 10 : 11)) | uint32_t(sh.sel_bin);
    above = sh.sel_above;
    if (sh.sel_n == 1 || level == 2) return Boundary{prefix, above, sh.sel_n, sh.sel_id, sh.sel_v};
  }
}

// The first token id (id order over the whole row) whose inclusive prefix sum of f(i) exceeds
// R = r_of(total), total = the row's sum of f; -1 when R >= total. Tiles of 32 * per_lane ids
// (at most kBins per slice): tile sums, a block scan, the cluster's slice sums, then one warp
// scans the tile that holds R.
template <class F, class RFn>
__device__ int32_t find_prefix(Shared& sh, cg::cluster_group& cl, int64_t begin, int64_t end, F f, RFn r_of) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t len = end - begin;
  const int64_t per_lane = len > int64_t(kBins) * kWarp ? (len + int64_t(kBins) * kWarp - 1) / (int64_t(kBins) * kWarp) : 1;
  const int64_t tile = kWarp * per_lane;
  const int n_tiles = int((len + tile - 1) / tile);
  for (int t = warp; t < n_tiles; t += kWarps) {
    u64 s = 0;
    for (int64_t j = 0; j < per_lane; ++j) {
      const int64_t i = begin + t * tile + j * kWarp + lane;
      if (i < end) s += f(i);
    }
    s = warp_reduce(s, SumOp{});
    if (lane == 0) sh.hist_v[t] = s;
  }
  __syncthreads();
  const int t0 = 2 * int(threadIdx.x);
  const u64 s0 = t0 < n_tiles ? sh.hist_v[t0] : 0, s1 = t0 + 1 < n_tiles ? sh.hist_v[t0 + 1] : 0;
  u64 block_total;
  const u64 excl = block_exclusive_scan(s0 + s1, sh.scan, block_total);
  if (threadIdx.x == 0) sh.x_u64 = block_total, sh.found = -1;
  cl.sync();
  u64 slice_base = 0, total = 0;
  for (unsigned r = 0; r < kClusterBlocks; ++r) {
    const u64 b = *cl.map_shared_rank(&sh.x_u64, r);
    slice_base += r < cl.block_rank() ? b : 0;
    total += b;
  }
  const u64 big_r = r_of(total);
  if (big_r >= slice_base && big_r - slice_base < block_total) {  // block-uniform
    const u64 r = big_r - slice_base;
    if (excl <= r && r < excl + s0) sh.tile = t0, sh.tile_base = excl;
    else if (excl + s0 <= r && r < excl + s0 + s1) sh.tile = t0 + 1, sh.tile_base = excl + s0;
    __syncthreads();
    if (warp == 0) {
      u64 run = sh.tile_base;
      for (int64_t j = 0; j < per_lane; ++j) {
        const int64_t i = begin + sh.tile * tile + j * kWarp + lane;
        const u64 v = i < end ? f(i) : 0;
        u64 incl = v;
#pragma unroll
        for (int o = 1; o < kWarp; o *= 2) {
          const u64 y = __shfl_up_sync(kFull, incl, o);
          if (lane >= o) incl += y;
        }
        const unsigned hit = __ballot_sync(kFull, run + incl > r);
        if (hit) {
          if (lane == __ffs(hit) - 1) sh.found = int32_t(i);
          break;
        }
        run += __shfl_sync(kFull, incl, kWarp - 1);
      }
    }
  }
  cl.sync();  // the finding block has written `found`; every block has read x_u64
  int32_t id = -1;
  for (unsigned r = 0; r < kClusterBlocks; ++r) {
    const int32_t v = *cl.map_shared_rank(&sh.found, r);
    id = v >= 0 ? v : id;
  }
  cl.sync();  // `found` read everywhere before it is reset
  for (int t = threadIdx.x; t < n_tiles; t += kSampleThreads) sh.hist_v[t] = 0;
  __syncthreads();
  return id;
}

// The packed (score desc, id asc) key of the k-th best token by key_of(i) = order_key(score),
// 1 <= k < vocab; tokens with pack_score >= it are the k best. Level 0 may be prebuilt.
template <class KeyOf>
__device__ u64 top_k_threshold(Shared& sh, cg::cluster_group& cl, int64_t begin, int64_t end, KeyOf key_of,
                               int64_t k, bool level0_built) {
  const Boundary b = radix_boundary(
      sh, cl, begin, end, [&](int64_t i) { return CodeV{key_of(i), 1}; }, u64(k), level0_built);
  if (b.n == 1) {
    const u64 thr = (u64(key_of(b.id)) << 32) | u64(0xFFFFFFFFu - uint32_t(b.id));
    cl.sync();  // b.id may lie in another block's slice, whose scores step 4 overwrites next
    return thr;
  }
  const u64 need = u64(k) - b.above;  // the `need` lowest ids of code b.code are in
  if (need == b.n) return u64(b.code) << 32;
  const int32_t id = find_prefix(
      sh, cl, begin, end, [&](int64_t i) -> u64 { return key_of(i) == b.code ? 1 : 0; },
      [&](u64) { return need - 1; });
  return (u64(b.code) << 32) | u64(0xFFFFFFFFu - uint32_t(id));
}

// ---------------------------------------------------------------------------------------------
// The kernels.

__global__ void __cluster_dims__(kClusterBlocks, 1, 1) __launch_bounds__(kSampleThreads, 1)
    sample_kernel(const __grid_constant__ SampleParams p) {
  __shared__ Shared sh;
  cg::cluster_group cl = cg::this_cluster();
  const unsigned rank = cl.block_rank();
  const int64_t row = blockIdx.x / kClusterBlocks;
  const RowParams rp = p.rows[row];
  const int64_t n = p.vocab;
  const int64_t slice = (n + kClusterBlocks - 1) / kClusterBlocks;
  const int64_t begin = min(n, int64_t(rank) * slice), end = min(n, begin + slice);
  const float* lg = p.logits + row * p.logits_stride;  // [vocab] raw logits
  float* ws = p.scores + row * n;                       // [vocab] scores, then weights
  // Workspace loads through L2: after step 1 a block may read what another block wrote.
  auto ld_ws = [&](int64_t i) { return __ldcg(ws + i); };
  const bool penalties = rp.penalty_end > rp.penalty_begin;
  const float inf = pos_inf();

  for (int b = threadIdx.x; b < kBins; b += kSampleThreads) sh.hist_v[b] = 0, sh.hist_n[b] = 0;
  __syncthreads();

  // 1. Penalties: every token's value goes to the workspace (`value(l)`), then the history's
  // tokens are overwritten with value(penalize(l)), spread over the cluster's threads.
  auto penalize_into_ws = [&](auto value) {
    for_slice(begin, end, [&](int64_t i, bool valid) {
      if (valid) ws[i] = value(lg[i]);
    });
    cl.sync();
    const int64_t stride = int64_t(kClusterBlocks) * kSampleThreads;
    for (int64_t j = rp.penalty_begin + int64_t(rank) * kSampleThreads + threadIdx.x; j < rp.penalty_end; j += stride) {
      const PenaltyEntry e = p.penalties[j];
      if (e.token >= 0 && e.token < n) ws[e.token] = value(penalize(lg[e.token], rp, e));
    }
    cl.sync();
  };

  int32_t token = 0;
  if (rp.greedy) {
    // 2. Greedy: argmax of the penalized logits, ties to the lowest id, NaN never wins.
    Best b{-inf, INT_MAX};
    if (penalties) {
      penalize_into_ws([](float l) { return l; });
      for_slice(begin, end, [&](int64_t i, bool valid) {
        const float v = valid ? ld_ws(i) : -inf;
        if (v > b.v) b = Best{v, int32_t(i)};
      });
    } else {
      for_slice(begin, end, [&](int64_t i, bool valid) {
        const float v = valid ? lg[i] : -inf;
        if (v > b.v) b = Best{v, int32_t(i)};
      });
    }
    b = block_best(b, sh);
    if (threadIdx.x == 0) sh.x_f32 = b.v, sh.x_i32 = b.i;
    cl.sync();
    b = Best{-inf, INT_MAX};
    for (unsigned r = 0; r < kClusterBlocks; ++r)
      b = better(b, Best{*cl.map_shared_rank(&sh.x_f32, r), *cl.map_shared_rank(&sh.x_i32, r)});
    cl.sync();
    token = b.v > -inf ? b.i : 0;
  } else {
    // 3. Scores s = sanitize(l / T) into the workspace, their maximum, and (top-k) level 0 of
    // the score-key histogram.
    const float temperature = rp.temperature;
    const bool top_k = rp.top_k > 0 && rp.top_k < n;
    auto score = [&](float l) { return sanitize(__fdiv_rn(l, temperature)); };
    float mx = -inf;
    auto scan_scores = [&](auto s_of) {
      for_slice(begin, end, [&](int64_t i, bool valid) {
        const float s = valid ? s_of(i) : -inf;
        mx = fmaxf(mx, s);
        if (top_k) hist_add(sh, valid, order_key(s) >> 21, 1, i);
      });
    };
    if (penalties) {
      penalize_into_ws(score);
      scan_scores(ld_ws);
    } else {
      scan_scores([&](int64_t i) {
        const float s = score(lg[i]);
        ws[i] = s;
        return s;
      });
    }
    const float m = cluster_reduce(cl, &sh.x_f32, block_reduce(mx, sh.red_f32, MaxOp{}), MaxOp{});
    // No finite score (m = -inf): every weight is 0 and the CPU returns the lowest candidate,
    // which is token 0 (with top-k, the k best of all-equal keys are the k lowest ids).
    if (m > -inf) {
      // Top-k: candidates are the tokens whose packed score key >= thr (thr = 0: all).
      u64 thr = 0;
      if (top_k)
        thr = top_k_threshold(sh, cl, begin, end, [&](int64_t i) { return order_key(ld_ws(i)); }, rp.top_k, true);
      // 4. Weights w = sampling_exp(s - m) of the candidates (0 elsewhere), in place; their
      // fixed-point sum Z; (top-p) level 0 of the weight-code histogram.
      const bool top_p = rp.top_p < 1.0;
      u64 z = 0;
      for_slice(begin, end, [&](int64_t i, bool valid) {
        float w = 0.0f;
        if (valid) {
          const float s = ld_ws(i);
          w = pack_score(s, i) >= thr ? sampling::sampling_exp(__fsub_rn(s, m)) : 0.0f;
          ws[i] = w;
        }
        const CodeV c = weight_code(w);
        z += c.v;
        if (top_p) hist_add(sh, c.v != 0, c.code >> 21, c.v, i);
      });
      z = cluster_reduce(cl, &sh.x_u64, block_reduce(z, sh.scan, SumOp{}), SumOp{});
      // Kept: pack_weight(q, id) >= cut; q >= 1 to start with.
      u64 cut = pack_weight(1, 0xFFFFF);
      auto weight_at = [&](int64_t i) { return weight_code(ld_ws(i)); };
      if (top_p) {
        // 5. Top-p: T = max(1, uint64(double(Z) * top_p)); the last kept token is where the
        // cumulative weight in (q desc, id asc) order first reaches T.
        u64 t = u64(double(z) * rp.top_p);
        t = t < 1 ? 1 : t;
        if (t >= z) {
          clear_hist(sh);  // every token is kept
        } else {
          const Boundary b = radix_boundary(sh, cl, begin, end, weight_at, t, true);
          u64 c;
          if (b.n == 1) {
            c = pack_weight(b.v, b.id);
          } else {
            const u64 q = weight_of_code(b.code);
            const u64 need = (t - b.above + q - 1) / q;  // tokens of weight q, lowest ids first
            if (need == b.n) {
              c = q << 20;
            } else {
              const int32_t id = find_prefix(
                  sh, cl, begin, end, [&](int64_t i) -> u64 { return weight_at(i).code == b.code ? q : 0; },
                  [&](u64) { return t - b.above - 1; });
              c = pack_weight(q, id);
            }
          }
          cut = c > cut ? c : cut;
        }
      }
      // 6. Min-p: q >= uint64(min_p * 2^42).
      if (rp.min_p > 0.0) {
        const u64 c = u64(rp.min_p * 0x1p42) << 20;
        cut = c > cut ? c : cut;
      }
      // 7. Draw: R = floor(u * Zk / 2^64) (scale_u64), the first kept token in id order whose
      // inclusive prefix weight exceeds R.
      const sampling::PhiloxCounter x = sampling::philox4x32_10(
          sampling::rng_counter(rp.output_idx, rp.choice_idx, rp.rng_stream), sampling::rng_key(rp.seed));
      const u64 u = sampling::uniform_u64(x);
      token = find_prefix(
          sh, cl, begin, end,
          [&](int64_t i) -> u64 {
            const CodeV c = weight_at(i);
            return pack_weight(c.v, i) >= cut ? c.v : 0;
          },
          [&](u64 total) { return __umul64hi(u, total); });
      token = token < 0 ? 0 : token;  // unreachable: the maximum's weight 2^42 is always kept
    }
  }

  // Raw logprobs (log_softmax of the sanitized logits; exps in fp32, summed in double).
  if (rp.logprobs) {
    int64_t n_top = p.top_ids ? min(int64_t(rp.top_logprobs), p.top_stride) : 0;
    n_top = max(int64_t(0), min(n_top, int64_t(kMaxTopLogprobsGpu)));
    const int64_t k = min(n_top, n);
    const bool select = k > 0 && k < n;
    float mx = -inf;
    for_slice(begin, end, [&](int64_t i, bool valid) {
      const float s = valid ? sanitize(lg[i]) : -inf;
      mx = fmaxf(mx, s);
      if (select) hist_add(sh, valid, order_key(s) >> 21, 1, i);
    });
    const float m = cluster_reduce(cl, &sh.x_f32, block_reduce(mx, sh.red_f32, MaxOp{}), MaxOp{});
    double lse = -double(inf);
    if (m > -inf) {
      double acc = 0.0;
      for_slice(begin, end, [&](int64_t i, bool valid) {
        if (valid) acc += double(sampling::sampling_exp(__fsub_rn(sanitize(lg[i]), m)));
      });
      acc = cluster_reduce(cl, &sh.x_f64, block_reduce(acc, sh.red_f64, SumOp{}), SumOp{});
      lse = double(m) + log(acc);
    }
    auto logprob = [&](int64_t id) { return lse == -double(inf) ? -inf : float(double(sanitize(lg[id])) - lse); };
    if (rank == 0 && threadIdx.x == 0 && p.logprobs) p.logprobs[row] = logprob(token);
    if (n_top > 0) {
      const u64 thr = select ? top_k_threshold(sh, cl, begin, end, [&](int64_t i) { return order_key(sanitize(lg[i])); },
                                               k, true)
                             : 0;
      if (threadIdx.x == 0) sh.n_gather = 0;
      __syncthreads();
      for_slice(begin, end, [&](int64_t i, bool valid) {
        if (!valid) return;
        const u64 key = pack_score(sanitize(lg[i]), i);
        if (key >= thr) {
          const int slot = atomicAdd(&sh.n_gather, 1);
          if (slot < kMaxTopLogprobsGpu) sh.gather[slot] = key;
        }
      });
      cl.sync();
      if (rank == 0 && threadIdx.x == 0) {
        u64 keys[kMaxTopLogprobsGpu];
        int count = 0;
        for (unsigned r = 0; r < kClusterBlocks; ++r) {
          const Shared* rs = cl.map_shared_rank(&sh, r);
          const int nr = min(rs->n_gather, kMaxTopLogprobsGpu);
          for (int j = 0; j < nr && count < kMaxTopLogprobsGpu; ++j) {
            u64 key = rs->gather[j];
            int at = count++;
            for (; at > 0 && keys[at - 1] < key; --at) keys[at] = keys[at - 1];  // insertion, descending
            keys[at] = key;
          }
        }
        int32_t* ids = p.top_ids + row * p.top_stride;
        float* vals = p.top_logprobs + row * p.top_stride;
        for (int j = 0; j < int(n_top); ++j) {
          const bool have = j < count;
          const int32_t id = have ? int32_t(0xFFFFFFFFu - uint32_t(keys[j])) : -1;
          ids[j] = id;
          vals[j] = have ? logprob(id) : -inf;
        }
      }
    }
  }
  if (rank == 0 && threadIdx.x == 0) p.tokens[row] = token;
  cl.sync();  // no block exits while another may still read its shared memory
}

// Greedy only, one block per row: the first index of the maximum; NaN never wins; a row without
// a value above -inf gives 0 (sampler.cpp argmax).
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const __grid_constant__ ArgmaxParams p) {
  __shared__ float red_v[kArgmaxThreads / kWarp];
  __shared__ int32_t red_i[kArgmaxThreads / kWarp];
  const int64_t row = blockIdx.x;
  const float* lg = p.logits + row * p.logits_stride;
  const int64_t n = p.vocab;
  const float inf = pos_inf();
  Best b{-inf, INT_MAX};
  // Each thread visits its ids in increasing order, so `>` keeps its first maximum.
  if ((reinterpret_cast<uintptr_t>(lg) & 15u) == 0 && n % 4 == 0) {
    const float4* lg4 = reinterpret_cast<const float4*>(lg);
#pragma unroll 4
    for (int64_t j = threadIdx.x; j < n / 4; j += kArgmaxThreads) {
      const float4 v = __ldg(lg4 + j);
      const int32_t i = int32_t(4 * j);
      if (v.x > b.v) b = Best{v.x, i};
      if (v.y > b.v) b = Best{v.y, i + 1};
      if (v.z > b.v) b = Best{v.z, i + 2};
      if (v.w > b.v) b = Best{v.w, i + 3};
    }
  } else {
    for (int64_t i = threadIdx.x; i < n; i += kArgmaxThreads) {
      const float v = __ldg(lg + i);
      if (v > b.v) b = Best{v, int32_t(i)};
    }
  }
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) b = better(b, Best{__shfl_xor_sync(kFull, b.v, o), __shfl_xor_sync(kFull, b.i, o)});
  if (threadIdx.x % kWarp == 0) red_v[threadIdx.x / kWarp] = b.v, red_i[threadIdx.x / kWarp] = b.i;
  __syncthreads();
  if (threadIdx.x < kWarp) {
    constexpr int kW = kArgmaxThreads / kWarp;
    b = threadIdx.x < kW ? Best{red_v[threadIdx.x], red_i[threadIdx.x]} : Best{-inf, INT_MAX};
#pragma unroll
    for (int o = kWarp / 2; o > 0; o /= 2)
      b = better(b, Best{__shfl_xor_sync(kFull, b.v, o), __shfl_xor_sync(kFull, b.i, o)});
    if (threadIdx.x == 0) p.tokens[row] = b.v > -inf ? b.i : 0;
  }
}

}  // namespace

cudaError_t launch_sample(const SampleParams& p, int64_t n_rows, cudaStream_t stream) {
  if (n_rows <= 0) return cudaSuccess;
  if (n_rows > INT_MAX / kClusterBlocks) return cudaErrorInvalidConfiguration;
  // The grid is a whole number of clusters (__cluster_dims__): kClusterBlocks blocks per row.
  sample_kernel<<<unsigned(n_rows * kClusterBlocks), kSampleThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_argmax(const ArgmaxParams& p, int64_t n_rows, cudaStream_t stream) {
  if (n_rows <= 0) return cudaSuccess;
  if (n_rows > INT_MAX) return cudaErrorInvalidConfiguration;
  argmax_kernel<<<unsigned(n_rows), kArgmaxThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace pg::cuda_sampling
