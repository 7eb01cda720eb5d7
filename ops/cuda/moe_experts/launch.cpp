// ops::cuda::moe_experts: validates, checks the CUDA path's limits, lays out the workspace, picks
// the vector or scalar path per weight stack and the pair tile (config.h), and enqueues the plan,
// gate_up and down kernels. Host C++ (no nvcc): the kernels are behind moe_experts/params.h.
#include "ops/cuda/common/weight_format.h"
#include "ops/cuda/moe_experts/moe_experts.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "ops/cuda/common/align.h"
#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/common/device.h"
#include "ops/cuda/common/env.h"
#include "ops/cuda/cuda_ops.h"  // moe_routing
#include "ops/cuda/moe_router.h"  // moe_routing_params
#include "ops/cuda/moe_experts/fp8_params.h"
#include "ops/cuda/moe_experts/nvfp4_params.h"
#include "ops/cuda/moe_experts/params.h"

namespace pg::ops::cuda {
namespace {

MoeNvfp4Variant moe_nvfp4_variant_from_env();  // below: the environment's variant, read once

MoeWeightParams weight_params(const Matrix& w) {
  MoeWeightParams p;
  p.data = w.data;
  p.scale_inv = w.scale_inv;
  p.block_rows = w.block_rows;
  p.block_cols = w.block_cols;
  if (w.format == WeightFormat::kFp8Block) {
    p.scale_cols = w.scale_cols();
    p.log2_block_cols = std::countr_zero(uint64_t(w.block_cols));
  }
  if (w.format == WeightFormat::kNvfp4) {
    p.scale_fp8 = w.scale_fp8;
    p.scale_fp8_cols = w.cols / kNvfp4GroupSize;
    p.scale_2 = w.scale_2;
    p.scale_2_rows = w.scale_2_rows;
    p.scale_2_group_rows = w.scale_2_rows ? w.scale_2_group_rows : 1;
  }
  return p;
}

// 16-byte chunks: whole chunks per row (so rows stay 16-byte aligned), aligned weights and
// activations (`x` rows are w.cols floats), fp8 chunks inside one scale block found by a shift.
bool vector_path_ok(const Matrix& w, const void* x) {
  const LinearWeight f = to_kernel_format(w.format);
  if (w.cols % linear_vec_elems(f) || !aligned16(w.data) || !aligned16(x)) return false;
  if (f == LinearWeight::kFp8Block)
    return w.block_cols >= linear_vec_elems(f) && std::has_single_bit(uint64_t(w.block_cols));
  if (f == LinearWeight::kNvfp4)  // a chunk's two block scales are one 2-byte load
    return (reinterpret_cast<uintptr_t>(w.scale_fp8) & 1u) == 0;
  return true;
}

}  // namespace

// Whether the one-token NVFP4 kernels may route the token themselves: on unless PEREGRINE_MOE_SELF_ROUTING=0.
bool moe_self_routing_enabled() {
  static const bool on = env_switch("PEREGRINE_MOE_SELF_ROUTING", true);
  return on;
}
bool moe_fp8_self_routing_enabled() {
  static const bool on = env_switch("PEREGRINE_MOE_FP8_SELF_ROUTING", true);
  return on;
}

namespace {
// The one-token FP8 down's 16-row tiles per warp under variant v: its own, or moe_fp8_down_direct_tiles'
// choice for this GPU. The launch and the self-routing condition both ask here.
int fp8_down_tiles(const MoeNvfp4Variant& v, int64_t hidden) {
  return v.fp8_down_tiles ? v.fp8_down_tiles : moe_fp8_down_direct_tiles(hidden, current_device_props().sm_count);
}
}  // namespace

// The kernels route the token themselves (MoeExpertsParams::self_routing) on the direct one-token path of
// the NVFP4 tensor-core kernels (both stacks), under PDL after the router, with the routing's outputs
// the experts' inputs and its shape within the block routine's (block_routing.cuh), where down
// prefetches its weights (moe_nvfp4_down_prefetch_fits: one block per SM, each routing once before
// its wait); and on the FP8 tensor-core kernels' one-token path (gate_up routes, down reads after its
// wait). Not V3's 448 down blocks of 512 threads: those past the first wave routed on the layer's path
// (H200, 2026-12-04, 27e47fc, V3 4L nvfp4 886.6 -> 872.6 tok/s with them). h lives in the workspace,
// 256-byte aligned (moe_experts checks it), so down's vector path is its weights'.
// Under variant v (moe_experts_variant's; the environment's for moe_experts_self_routing), these
// conditions imply the direct path, both stacks on the tensor-core kernels and gate_up under PDL.
namespace {
bool self_routing_ok(const MoeExpertsArgs& a, const MoeRoutingArgs& r, const MoeNvfp4Variant& v) {
  const auto nvfp4_mma = [&](const Matrix* w, const void* x) {
    return w && w->format == WeightFormat::kNvfp4 && vector_path_ok(*w, x);
  };
  MoeExpertsParams p;  // the fields moe_nvfp4_down_prefetch_fits reads
  p.top_k = int(a.top_k), p.n_shared = int(a.n_shared), p.hidden = int(a.hidden), p.inter = int(a.inter);
  if (a.down) p.down = weight_params(*a.down);
  MmaTile t = moe_nvfp4_down_tile();
  if (v.down_tiles) t.tiles = v.down_tiles;
  if (v.down_unroll) t.unroll = v.down_unroll;
  const bool nvfp4 = nvfp4_mma(a.gate_up, a.x) && nvfp4_mma(a.down, /*h: aligned*/ nullptr) && v.down_prefetch &&
                     moe_nvfp4_down_prefetch_fits(p, t.tiles, t.unroll, moe_block_routing_bytes(a.n_experts),
                                                  current_device_props().sm_count);
  // The FP8 tensor-core kernels at one token (fp8_kernel.cu): gate_up's routed blocks route the token,
  // down reads the routing gate_up's block (0, 0, 0) wrote, after its wait (PEREGRINE_MOE_FP8_SELF_ROUTING=0:
  // the router's routing for them). Only with the one-tile down (moe_fp8_down_direct_tiles: moonlight's
  // 128 blocks staging h), whose first weight loads before the wait are half the two-tile one's: H200,
  // 2026-12-04, alternating against PEREGRINE_MOE_FP8_SELF_ROUTING=0, moonlight fp8 586.5 vs 571.0 tok/s
  // (+2.7%), V3 4L fp8 (two tiles, 224 blocks) 777.1 vs 783.1 (-0.8%).
  const auto fp8_mma = [&](const Matrix* w, const void* x, int64_t k) {
    return w && v.fp8_mma && vector_path_ok(*w, x) && fp8_experts_mma(*w, k);
  };
  const bool fp8 = moe_fp8_self_routing_enabled() && fp8_down_tiles(v, a.hidden) == 1 && fp8_mma(a.gate_up, a.x, a.hidden) &&
                   fp8_mma(a.down, /*h: aligned*/ nullptr, a.inter);
  return moe_self_routing_enabled() && (nvfp4 || fp8) && a.after_router && a.f16_activations && a.m == 1 &&
         r.m == 1 && a.top_k >= 1 && a.top_k <= a.n_experts && a.top_k + a.n_shared <= kMoeDirectMaxSlots &&
         r.n_experts == a.n_experts && r.top_k == a.top_k && r.expert_idx == a.expert_idx &&
         r.expert_weight == a.expert_weight && a.n_experts <= kMoeSelfRoutingMaxExperts &&
         r.top_k <= kMoeBlockRoutingMaxTopK && r.n_group >= 1 && r.n_group <= 32 && a.n_experts % r.n_group == 0;
}
}  // namespace

bool moe_experts_self_routing(const MoeExpertsArgs& a, const MoeRoutingArgs& r) {
  return self_routing_ok(a, r, moe_nvfp4_variant_from_env());
}

// The direct multi path (m = 2..8 without the plan kernel) is on unless PEREGRINE_MOE_DIRECT_MULTI=0.
// Its first H200 run (2026-12-01, c9f193b) hung every golden test that decoded 2..8 tokens per step
// (a __match_any_sync with the full mask skipped by some lanes, fixed in 95185b2); at 9d5def8 the
// op tests and goldens passed with it (H200, 2026-12-01) and moonlight bf16's verify step went
// 4.49 -> 3.90 ms (its MoE op at 2 tokens 112 -> 78 us), so it became the default.
bool moe_direct_multi_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("PEREGRINE_MOE_DIRECT_MULTI");
    return !(v && v[0] == '0');
  }();
  return on;
}

// Whether the CUDA runner asks for gate_up under PDL after the router (MoeExpertsArgs::after_router):
// on unless PEREGRINE_MOE_GATE_UP_PDL=0. Measured off at first (H200, 2026-12-01, 2224e11: moonlight
// nvfp4 491.1 / 492.8 tok/s with it, 494.3 without; V3 nvfp4 4 layers 732.3 vs 736.0); with the router
// and kernels since, it pays on the f32-x and FP8 experts and costs nothing on NVFP4 (H200, 2026-12-02,
// 54a3cee, alternating in one call: moonlight bf16 432.1 -> 436.3 tok/s, fp8 502.4 -> 514.3, nvfp4 557.0
// -> 556.8; V3 4 layers bf16 564.6 -> 566.2, nvfp4 799.1 -> 799.0; the same signs in two earlier calls
// that day), and the goldens pass with it.
bool moe_gate_up_pdl_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("PEREGRINE_MOE_GATE_UP_PDL");
    return !(v && v[0] == '0');
  }();
  return on;
}

size_t moe_experts_workspace_bytes(int64_t m, int64_t top_k, int64_t n_shared, int64_t n_experts, int64_t inter) {
  return moe_workspace_layout(m, top_k, n_shared, n_experts, inter).total;
}

// PEREGRINE_MOE_NVFP4_TILES="TxU,TxU" (gate_up, down: 16-row tiles x k-steps per warp; "TxU" sets
// gate_up's alone), read once:
// a sweep of the NVFP4 expert kernels' tiles inside a model benchmark, without a rebuild. Unset or
// malformed: the defaults; a pair not instantiated fails the launch. The m = 1 down with h per lane
// instead of staged: PEREGRINE_MOE_NVFP4_DOWN_STAGED=0; the prefetching one off: PEREGRINE_MOE_NVFP4_DOWN_PREFETCH=0;
// gate_up's warps per block: PEREGRINE_MOE_NVFP4_GATE_UP_WARPS=4|8; gate_up at 2..8 tokens with x read
// per lane from L2 instead of staged: PEREGRINE_MOE_NVFP4_GATE_UP_MULTI_STAGED=0; down at 2..8 tokens
// without its rings: PEREGRINE_MOE_NVFP4_DOWN_MULTI_RING=0; h staged from its f32 rows instead of
// gate_up's f16 fragments: PEREGRINE_MOE_NVFP4_H_FRAGS=0; at most N staged gate_up blocks per SM:
// PEREGRINE_MOE_NVFP4_GATE_UP_BLOCKS_PER_SM=N (0: no cap; unset: one even wave at one token); the 2..8-token
// gate_up on a block a unit instead of its persistent grid: PEREGRINE_MOE_NVFP4_GATE_UP_PERSIST=0 (N > 1: at
// most N blocks, at every size). FP8 at decode
// sizes on the f32-x kernels instead of the tensor cores: PEREGRINE_MOE_FP8_MMA=0; its m = 1 down with h per
// lane: PEREGRINE_MOE_FP8_DOWN_STAGED=0, with N 16-row tiles per warp: PEREGRINE_MOE_FP8_DOWN_TILES=N (1, 2);
// its gate_up with x per lane: PEREGRINE_MOE_FP8_GATE_UP_STAGED=0.
namespace {
MoeNvfp4Variant moe_nvfp4_variant_from_env() {
  static const MoeNvfp4Variant v = [] {
    MoeNvfp4Variant r;
    const char* e = std::getenv("PEREGRINE_MOE_NVFP4_TILES");
    const int got = e ? std::sscanf(e, "%dx%d,%dx%d", &r.gate_up_tiles, &r.gate_up_unroll, &r.down_tiles, &r.down_unroll) : 0;
    if (got != 4 && got != 2) r = MoeNvfp4Variant{};  // "TxU" alone: gate_up's tile only
    const char* st = std::getenv("PEREGRINE_MOE_NVFP4_DOWN_STAGED");
    r.down_staged = !(st && st[0] == '0');
    const char* pf = std::getenv("PEREGRINE_MOE_NVFP4_DOWN_PREFETCH");
    r.down_prefetch = !(pf && pf[0] == '0');
    const char* ms = std::getenv("PEREGRINE_MOE_NVFP4_GATE_UP_MULTI_STAGED");
    r.gate_up_multi_staged = !(ms && ms[0] == '0');
    const char* mr = std::getenv("PEREGRINE_MOE_NVFP4_DOWN_MULTI_RING");
    r.down_multi_ring = !(mr && mr[0] == '0');
    r.h_frags = env_switch("PEREGRINE_MOE_NVFP4_H_FRAGS", true);
    const char* bs = std::getenv("PEREGRINE_MOE_NVFP4_GATE_UP_BLOCKS_PER_SM");
    r.gate_up_blocks_per_sm = bs ? std::max(0, std::atoi(bs)) : -1;
    const int persist = env_int("PEREGRINE_MOE_NVFP4_GATE_UP_PERSIST", 1);  // 1: the resident grid
    r.gate_up_persist_blocks = persist == 1 ? -1 : persist;
    const char* gw = std::getenv("PEREGRINE_MOE_NVFP4_GATE_UP_WARPS");
    r.gate_up_warps = gw ? std::atoi(gw) : 0;
    const char* fm = std::getenv("PEREGRINE_MOE_FP8_MMA");
    r.fp8_mma = !(fm && fm[0] == '0');
    const char* fs = std::getenv("PEREGRINE_MOE_FP8_DOWN_STAGED");
    r.fp8_down_staged = !(fs && fs[0] == '0');
    const char* fg = std::getenv("PEREGRINE_MOE_FP8_GATE_UP_STAGED");
    r.fp8_gate_up_staged = !(fg && fg[0] == '0');
    const char* ft = std::getenv("PEREGRINE_MOE_FP8_DOWN_TILES");
    r.fp8_down_tiles = ft ? std::atoi(ft) : 0;
    return r;
  }();
  return v;
}
}  // namespace

Status moe_experts(const MoeExpertsArgs& a, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  return moe_experts_variant(a, moe_nvfp4_variant_from_env(), workspace, workspace_bytes, stream);
}

Status moe_experts_routing(const MoeExpertsArgs& a, const MoeRoutingArgs& routing, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream) {
  return moe_experts_variant(a, moe_nvfp4_variant_from_env(), workspace, workspace_bytes, stream, &routing);
}

Status moe_experts_variant(const MoeExpertsArgs& a, const MoeNvfp4Variant& v, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream, const MoeRoutingArgs* routing) {
  if (routing) PG_TRY(validate(*routing));
  if (a.gate_up) PG_TRY(check_kernel_format(*a.gate_up, "moe_experts", /*nvfp4_ok=*/true));
  if (a.down) PG_TRY(check_kernel_format(*a.down, "moe_experts", /*nvfp4_ok=*/true));
  PG_TRY(validate(a));
  if (v.gate_up_warps != 0 && v.gate_up_warps != 4 && v.gate_up_warps != kMoeWarps)
    return invalid_argument("moe_experts: gate_up at {} warps per block (PEREGRINE_MOE_NVFP4_GATE_UP_WARPS): 4 or {}",
                            v.gate_up_warps, kMoeWarps);
  if (v.gate_up_k_split != 0 && v.gate_up_k_split != 1 && v.gate_up_k_split != 2)
    return invalid_argument("moe_experts: gate_up's K in {} parts (PEREGRINE_MOE_NVFP4_GATE_UP_KSPLIT): 1 or 2",
                            v.gate_up_k_split);
  if (a.m == 0) return ok_status();
  // The kernels index pairs, tokens and rows in 32-bit ints and launch a fixed grid.
  const int64_t n_pairs = a.m * (a.top_k + a.n_shared), max_active = std::min(a.n_experts, a.m * a.top_k);
  if (n_pairs > INT32_MAX || a.hidden > INT32_MAX || a.inter > INT32_MAX)
    return unsupported("moe_experts: {} pairs, hidden {}, inter {} exceed the CUDA path's 32-bit indices", n_pairs,
                       a.hidden, a.inter);
  if (a.n_experts > kMoePlanMaxExperts || max_active > kMoeMaxActiveSlots)
    return unsupported("moe_experts: {} experts ({} active at most): the CUDA path takes {} ({})", a.n_experts,
                       max_active, kMoePlanMaxExperts, kMoeMaxActiveSlots);
  const MoeWorkspaceLayout l = moe_workspace_layout(a.m, a.top_k, a.n_shared, a.n_experts, a.inter);
  if (!workspace || workspace_bytes < l.total)
    return invalid_argument("moe_experts: workspace of {} bytes, need {}", workspace_bytes, l.total);
  if (reinterpret_cast<uintptr_t>(workspace) % 256)
    return invalid_argument("moe_experts: workspace must be 256-byte aligned");

  uint8_t* ws = static_cast<uint8_t*>(workspace);
  MoeExpertsParams p;
  p.x = a.x;
  p.expert_idx = a.expert_idx;
  p.expert_weight = a.expert_weight;
  p.gate_up = weight_params(*a.gate_up);
  p.down = weight_params(*a.down);
  p.y = a.y;
  p.plan.n_active = reinterpret_cast<int32_t*>(ws + l.n_active);
  p.plan.active_expert = reinterpret_cast<int32_t*>(ws + l.active_expert);
  p.plan.seg_begin = reinterpret_cast<int32_t*>(ws + l.seg_begin);
  p.plan.pair_flat = reinterpret_cast<int32_t*>(ws + l.pair_flat);
  p.plan.h = reinterpret_cast<float*>(ws + l.h);
  p.m = int(a.m);
  p.hidden = int(a.hidden);
  p.inter = int(a.inter);
  p.n_experts = int(a.n_experts);
  p.top_k = int(a.top_k);
  p.n_shared = int(a.n_shared);
  p.max_active = int(max_active);
  p.y_stride = a.y_stride ? a.y_stride : a.hidden;
  p.accumulate = a.accumulate;

  p.direct = a.m == 1 && a.top_k <= a.n_experts && a.top_k + a.n_shared >= 1 &&
             a.top_k + a.n_shared <= kMoeDirectMaxSlots;
  // NVFP4 with f16 activations: the tensor-core kernels (nvfp4_kernel.cu), per stack on its vector path.
  const bool gu_vec = vector_path_ok(*a.gate_up, a.x), dn_vec = vector_path_ok(*a.down, p.plan.h);
  const bool gu_mma = a.f16_activations && a.gate_up->format == WeightFormat::kNvfp4 && gu_vec;
  const bool dn_mma = a.f16_activations && a.down->format == WeightFormat::kNvfp4 && dn_vec;
  // m = 2..8 (decode batches, verify steps): no plan either. An NVFP4 stack takes it on the
  // tensor-core kernels only (the f32-x NVFP4 kernels of kernel.cu have no multi down kernel).
  const bool nvfp4 = a.gate_up->format == WeightFormat::kNvfp4 || a.down->format == WeightFormat::kNvfp4;
  p.direct_multi = moe_direct_multi_enabled() && !p.direct && (!nvfp4 || (gu_mma && dn_mma)) &&
                   moe_direct_multi_fits(a.m, a.top_k, a.n_shared);
  // FP8 with f16 activations: the tensor-core kernels (fp8_kernel.cu), per stack, at every size.
  const bool fp8_paths = v.fp8_mma && a.f16_activations;
  const bool gu_fp8 = fp8_paths && gu_vec && fp8_experts_mma(*a.gate_up, a.hidden);
  const bool dn_fp8 = fp8_paths && dn_vec && fp8_experts_mma(*a.down, a.inter);
  // Both stacks on the NVFP4 tensor-core kernels at one token or 2..8, or both on FP8's at one token
  // (its 2..8-token down reads h per lane): gate_up writes h's f16 fragments beside h (each kernel
  // family's staged layout), and the down modes that stage h copy them (the per-lane ones read h).
  const bool h_frags = v.h_frags && ((gu_mma && dn_mma) || (gu_fp8 && dn_fp8 && p.direct));
  p.multi_groups = moe_down_multi_groups(max_active + a.n_shared);
  p.gate_up_pdl = a.after_router && a.top_k > 0 && (p.direct || p.direct_multi);
  if (h_frags && (p.direct || p.direct_multi)) p.plan.h16 = reinterpret_cast<uint4*>(ws + l.h16);
  // The routing left by the router (MoeRouterMode::kLogitsOnly): the kernels' own, or moe_routing's first.
  if (routing && self_routing_ok(a, *routing, v)) {
    p.self_routing = true;
    p.routing = moe_routing_params(*routing);
  } else if (routing) {
    PG_TRY(moe_routing(*routing, stream));
  }
  const int m_tile = moe_m_tile(a.m);
  // The tensor-core gate_up kernels: a grid.y slot per 8-pair pass of each shared expert.
  if ((gu_mma || gu_fp8) && !p.direct && !p.direct_multi) p.shared_slots = moe_shared_gate_up_slots(a.m);
  // grid.y: gate_up's expert slots, the planned down's token tiles (the tensor-core kernels' smaller tile).
  const int64_t gate_up_slots = max_active + a.n_shared * p.shared_slots;
  const int64_t tok_tile = dn_mma || dn_fp8 ? kMoeMmaTokTile : kMoeTokTile;
  if (gate_up_slots > 65535 || (a.m + tok_tile - 1) / tok_tile > 65535)
    return unsupported("moe_experts: m={} with {} expert slots exceeds the grid", a.m, gate_up_slots);
  if (!p.direct && !p.direct_multi) PG_CUDA_TRY(launch_moe_plan(p, stream));
  if (gu_mma) {
    MmaTile t = moe_nvfp4_gate_up_tile();
    if (v.gate_up_tiles) t.tiles = v.gate_up_tiles;
    if (v.gate_up_unroll) t.unroll = v.gate_up_unroll;
    const bool four_ok = t.tiles == 1 && (t.unroll == 2 || t.unroll == 4);  // the 4-warp instantiations
    const int warps = v.gate_up_warps ? v.gate_up_warps : four_ok ? kMoeNvfp4GateUpWarps : kMoeWarps;
    const int k_split = v.gate_up_k_split ? v.gate_up_k_split : moe_nvfp4_gate_up_k_split(a.hidden);
    if (k_split == 2 && !(t.tiles == 1 && t.unroll == 2))
      return unsupported(
          "moe_experts: gate_up's K in halves runs the 1x2 tile, not {}x{} (PEREGRINE_MOE_NVFP4_TILES); "
          "set PEREGRINE_MOE_NVFP4_GATE_UP_KSPLIT=1 to sweep tiles",
          t.tiles, t.unroll);
    PG_CUDA_TRY(
        launch_moe_gate_up_nvfp4(p, t, warps, k_split, v.gate_up_multi_staged, v.gate_up_blocks_per_sm,
                                 v.gate_up_persist_blocks, stream));
  } else if (gu_fp8) {
    PG_CUDA_TRY(launch_moe_gate_up_fp8(p, v.fp8_gate_up_staged, stream));
  } else {
    PG_CUDA_TRY(launch_moe_gate_up(p, to_kernel_format(a.gate_up->format), gu_vec, m_tile, stream));
  }
  if (dn_mma) {
    MmaTile t = moe_nvfp4_down_tile();
    if (v.down_tiles) t.tiles = v.down_tiles;
    if (v.down_unroll) t.unroll = v.down_unroll;
    PG_CUDA_TRY(launch_moe_down_nvfp4(p, t, v.down_staged, v.down_prefetch, v.down_multi_ring, stream));
  } else if (dn_fp8) {
    const int tiles = fp8_down_tiles(v, a.hidden);
    PG_CUDA_TRY(launch_moe_down_fp8(p, v.fp8_down_staged && tiles == 1, tiles, stream));
  } else {
    PG_CUDA_TRY(launch_moe_down(p, to_kernel_format(a.down->format), dn_vec, m_tile, stream));
  }
  return ok_status();
}

}  // namespace pg::ops::cuda
