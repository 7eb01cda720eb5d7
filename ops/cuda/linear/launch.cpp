// ops::cuda::linear: validates, picks the path (vector kernel when W rows are whole 16-byte
// chunks and pointers are aligned, else the scalar kernel), the tile and k_split (config.h),
// and launches. Host C++ (no nvcc): the kernels are behind linear/params.h.
#include <algorithm>
#include <bit>
#include <climits>

#include "ops/cuda/common/align.h"
#include "ops/cuda/common/weight_format.h"
#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/common/device.h"
#include "ops/cuda/common/env.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/linear/linear.h"
#include "ops/cuda/linear/params.h"

namespace pg::ops::cuda {
namespace {

using LaunchFn = cudaError_t (*)(const LinearParams&, dim3, cudaStream_t);
struct TileEntry {
  LinearWeight format;
  LinearTile tile;
  LaunchFn launch;
};

#define PG_TILE_ENTRY(fmt, mt, rows, unroll) \
  TileEntry{LinearWeight::fmt, LinearTile{mt, rows, unroll}, &launch_linear_vec<LinearWeight::fmt, mt, rows, unroll>},
const TileEntry kTiles[] = {PG_LINEAR_TILES_F32(PG_TILE_ENTRY) PG_LINEAR_TILES_BF16(PG_TILE_ENTRY)
                                PG_LINEAR_TILES_FP8(PG_TILE_ENTRY) PG_LINEAR_TILES_NVFP4(PG_TILE_ENTRY)};
#undef PG_TILE_ENTRY

using MmaLaunchFn = cudaError_t (*)(const LinearParams&, dim3, cudaStream_t);
struct MmaEntry {
  MmaTile tile;
  MmaLaunchFn launch;       // NVFP4
  MmaLaunchFn launch_fp8;   // FP8
  int (*x1_blocks_per_sm)(int64_t k);
};
#define PG_MMA_ENTRY(tiles, unroll)                                              \
  MmaEntry{MmaTile{tiles, unroll}, &launch_linear_nvfp4_mma<tiles, unroll>, \
           &launch_linear_fp8_mma<tiles, unroll>, &linear_nvfp4_x1_blocks_per_sm<tiles, unroll>},
const MmaEntry kMmaTiles[] = {PG_LINEAR_MMA_TILES(PG_MMA_ENTRY)};
#undef PG_MMA_ENTRY

const MmaEntry* find_mma_tile(int tiles, int unroll) {
  for (const MmaEntry& e : kMmaTiles)
    if (e.tile.tiles == tiles && e.tile.unroll == unroll) return &e;
  return nullptr;
}

// PEREGRINE_LINEAR_MMA_WARPS_PER_SM=N (1..64; default kLinearMmaMinWarpsPerSm = 8, config.h, where
// the sweep that chose it is): the warps per SM the per-block NVFP4 / FP8 tensor-core kernels split K
// for (linear_nvfp4_mma_k_split), read once, the same at every m (a token's row keeps its bits in a
// verify step). bench_ops_cuda (H200, 2026-12-03, single launches, 1 tile x 2 steps) timed V3's o_proj
// 16384 -> 7168 at k_split 4 in 34.8 us against 16's 8 at 38.5: at 8 each block stages all 32 KB of x
// for 16 rows (448 blocks, 14.7 MB of L2 reads), at 4 for 32.
int linear_mma_warps_per_sm() {
  static const int n = [] {
    const int v = env_int("PEREGRINE_LINEAR_MMA_WARPS_PER_SM", kLinearMmaMinWarpsPerSm);
    return v >= 1 && v <= 64 ? v : kLinearMmaMinWarpsPerSm;
  }();
  return n;
}

}  // namespace

bool linear_nvfp4_x1_columns() {
  static const bool on = env_switch("PEREGRINE_LINEAR_NVFP4_X1_COLUMNS", false);
  return on;
}

namespace {

const TileEntry* find_tile(LinearWeight f, const LinearTile& t) {
  for (const TileEntry& e : kTiles)
    if (e.format == f && e.tile.m_tile == t.m_tile && e.tile.rows_per_warp == t.rows_per_warp && e.tile.unroll == t.unroll)
      return &e;
  return nullptr;
}

}  // namespace

LinearParams linear_params(const LinearArgs& a) {
  const Matrix& w = *a.w;
  LinearParams p;
  p.x = a.x;
  p.w = w.data;
  p.scale_inv = w.scale_inv;
  p.scale_fp8 = w.scale_fp8;
  p.scale_2 = w.scale_2;
  p.scale_2_rows = w.scale_2_rows;
  p.scale_2_group_rows = w.scale_2_rows ? w.scale_2_group_rows : 1;
  p.y = a.y;
  p.m = a.m;
  p.n = w.rows;
  p.k = w.cols;
  p.x_stride = a.x_stride ? a.x_stride : w.cols;
  p.y_stride = a.y_stride ? a.y_stride : w.rows;
  p.block_rows = w.block_rows;
  p.block_cols = w.block_cols;
  p.scale_cols = w.format == WeightFormat::kFp8Block ? w.scale_cols() : 0;
  p.log2_block_cols = w.format == WeightFormat::kFp8Block && w.block_cols > 0 ? std::countr_zero(uint64_t(w.block_cols)) : 0;
  p.accumulate = a.accumulate;
  return p;
}

bool linear_vector_path_ok(LinearWeight f, const LinearParams& p) {
  const int vec = linear_vec_elems(f);
  if (p.k % vec || !aligned16(p.w) || !aligned16(p.x) || p.x_stride % 4) return false;
  if (f == LinearWeight::kFp8Block)  // a chunk must lie in one scale block, found by a shift
    return p.block_cols >= vec && std::has_single_bit(uint64_t(p.block_cols));
  if (f == LinearWeight::kNvfp4)  // a chunk's two block scales are one 2-byte load
    return (reinterpret_cast<uintptr_t>(p.scale_fp8) & 1u) == 0;
  return true;
}

std::vector<LinearTile> linear_tiles(WeightFormat f, int m_tile) {
  std::vector<LinearTile> out;
  for (const TileEntry& e : kTiles)
    if (e.format == to_kernel_format(f) && e.tile.m_tile == m_tile) out.push_back(e.tile);
  return out;
}

std::vector<MmaTile> linear_mma_tiles() {
  std::vector<MmaTile> out;
  for (const MmaEntry& e : kMmaTiles) out.push_back(e.tile);
  return out;
}

Result<LinearPlan> linear_plan(const LinearArgs& a, const LinearVariant& v) {
  PG_TRY(validate(a));
  const LinearParams p = linear_params(a);
  const LinearWeight f = to_kernel_format(a.w->format);
  LinearPlan plan;
  plan.vector_path = linear_vector_path_ok(f, p);
  if (!plan.vector_path) {
    plan.blocks = (p.n + kLinearWarps - 1) / kLinearWarps;
    return plan;
  }
  const bool fp8_mma = f == LinearWeight::kFp8Block && a.f16_activations && f16_mma_gemv(*a.w, p.k);
  if ((f == LinearWeight::kNvfp4 && a.f16_activations) || fp8_mma) {  // linear/nvfp4_mma.cuh, fp8_mma.cuh
    const int sms = current_device_props().sm_count;
    MmaTile t = fp8_mma ? linear_fp8_mma_tile(p.n, sms) : linear_nvfp4_mma_tile(p.n, sms);
    if (v.rows_per_warp) t.tiles = v.rows_per_warp / kMmaRows;
    if (v.unroll) t.unroll = v.unroll;
    if (v.rows_per_warp % kMmaRows || !find_mma_tile(t.tiles, t.unroll))
      return unsupported("linear: no {} tensor-core kernel instantiated for rows={} unroll={}",
                         fp8_mma ? "FP8" : "NVFP4", v.rows_per_warp, t.unroll);
    plan.nvfp4_mma = !fp8_mma;
    plan.fp8_mma = fp8_mma;
    plan.tile = LinearTile{kMmaTokens, kMmaRows * t.tiles, t.unroll};
    const int64_t groups = (p.n + plan.tile.rows_per_warp - 1) / plan.tile.rows_per_warp;
    const int64_t k_steps = fp8_mma ? p.k / kFp8MmaStepElems : (p.k / 32 + 3) / 4;
    // m = 1 with x staged: a persistent grid of at most `slots` blocks (linear_nvfp4_x1_kernel).
    // Larger m takes the per-block kernel at the same k_split (the same sums for every token).
    int64_t slots = 0;
    if (!fp8_mma && nvfp4_x1_ok(p.k, p.scale_fp8) && linear_nvfp4_x1_persistent(t.tiles, p.n, p.k)) {
      const int per_sm = find_mma_tile(t.tiles, t.unroll)->x1_blocks_per_sm(p.k);
      if (per_sm < 1) return internal_error("linear: the NVFP4 m = 1 kernel fits no SM at k={} (or a CUDA error)", p.k);
      slots = int64_t(sms > 0 ? sms : 132) * per_sm;
    }
    plan.k_split = v.k_split     ? v.k_split
                   : slots > 0   ? linear_nvfp4_x1_k_split(groups, k_steps, t.unroll, slots)
                                 : linear_nvfp4_mma_k_split(groups, k_steps, t.unroll, sms, linear_mma_warps_per_sm());
    if (plan.k_split < 1 || plan.k_split > kLinearWarps || kLinearWarps % plan.k_split)
      return invalid_argument("linear: k_split {} must divide {}", plan.k_split, kLinearWarps);
    const int64_t groups_per_block = kLinearWarps / plan.k_split;
    plan.blocks = (groups + groups_per_block - 1) / groups_per_block;
    if (slots > 0 && p.m == 1) plan.blocks = std::min(plan.blocks, slots);
    return plan;
  }
  plan.tile = linear_default_tile(f, v.m_tile ? v.m_tile : linear_m_tile(p.m));
  if (f == LinearWeight::kNvfp4 && plan.tile.m_tile == 1)
    plan.tile.rows_per_warp = linear_nvfp4_rows(p.n, current_device_props().sm_count);
  if (v.rows_per_warp) plan.tile.rows_per_warp = v.rows_per_warp;
  if (v.unroll) plan.tile.unroll = v.unroll;
  if (!find_tile(f, plan.tile))
    return unsupported("linear: no kernel instantiated for tile m={} rows={} unroll={}", plan.tile.m_tile,
                       plan.tile.rows_per_warp, plan.tile.unroll);
  const int64_t groups = (p.n + plan.tile.rows_per_warp - 1) / plan.tile.rows_per_warp;
  const int64_t k_chunks = p.k / linear_vec_elems(f);
  plan.k_split = v.k_split ? v.k_split : linear_k_split(groups, k_chunks, plan.tile.unroll, current_device_props().sm_count);
  if (plan.k_split < 1 || plan.k_split > kLinearWarps || kLinearWarps % plan.k_split)
    return invalid_argument("linear: k_split {} must divide {}", plan.k_split, kLinearWarps);
  const int64_t groups_per_block = kLinearWarps / plan.k_split;
  plan.blocks = (groups + groups_per_block - 1) / groups_per_block;
  return plan;
}

Status linear_variant(const LinearArgs& a, const LinearVariant& v, cudaStream_t stream) {
  if (a.w) PG_TRY(check_kernel_format(*a.w, "linear", /*nvfp4_ok=*/true));
  PG_ASSIGN_OR_RETURN(const LinearPlan plan, linear_plan(a, v));
  if (a.m == 0) return ok_status();
  LinearParams p = linear_params(a);
  const LinearWeight f = to_kernel_format(a.w->format);
  if (!plan.vector_path) {
    PG_CUDA_TRY(launch_linear_scalar(f, p, stream));
    return ok_status();
  }
  p.k_split = plan.k_split;
  if (plan.nvfp4_mma || plan.fp8_mma) {
    const int64_t m_tiles = (p.m + kMmaTokens - 1) / kMmaTokens;
    if (plan.blocks > INT32_MAX || m_tiles > 65535)
      return unsupported("linear: grid {} x {} is too large", plan.blocks, m_tiles);
    const MmaEntry* e = find_mma_tile(plan.tile.rows_per_warp / kMmaRows, plan.tile.unroll);
    PG_CUDA_TRY((plan.fp8_mma ? e->launch_fp8 : e->launch)(p, dim3(unsigned(plan.blocks), unsigned(m_tiles)), stream));
    return ok_status();
  }
  const int64_t m_tiles = (p.m + plan.tile.m_tile - 1) / plan.tile.m_tile;
  if (plan.blocks > INT32_MAX || m_tiles > 65535)
    return unsupported("linear: grid {} x {} is too large", plan.blocks, m_tiles);
  PG_CUDA_TRY(find_tile(f, plan.tile)->launch(p, dim3(unsigned(plan.blocks), unsigned(m_tiles)), stream));
  return ok_status();
}

Status linear(const LinearArgs& a, cudaStream_t stream) { return linear_variant(a, LinearVariant{}, stream); }

}  // namespace pg::ops::cuda
