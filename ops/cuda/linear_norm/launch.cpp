// ops::cuda::linear_norm: validates, picks the path, tile and k_split by linear/config.h's
// heuristics (those ops::cuda::linear uses), and launches. Host C++ (no nvcc).
#include "ops/cuda/linear_norm/linear_norm.h"

#include <climits>

#include "ops/cuda/common/align.h"
#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/common/device.h"
#include "ops/cuda/common/weight_format.h"
#include "ops/cuda/linear/linear.h"

namespace pg::ops::cuda {
namespace {

using LaunchFn = cudaError_t (*)(const LinearNormParams&, dim3, cudaStream_t);
struct TileEntry {
  LinearWeight format;
  LinearTile tile;
  LaunchFn in, out;
};
#define PG_TILE_ENTRY(fmt, mt, rows, unroll)                                                     \
  TileEntry{LinearWeight::fmt, LinearTile{mt, rows, unroll},                                     \
            &launch_linear_norm_vec<LinearWeight::fmt, mt, rows, unroll, LinearNormMode::kIn>, \
            &launch_linear_norm_vec<LinearWeight::fmt, mt, rows, unroll, LinearNormMode::kOut>},
const TileEntry kTiles[] = {PG_LINEAR_NORM_TILES(PG_TILE_ENTRY)};
#undef PG_TILE_ENTRY

// The exact tile, else the first instantiated one of the same format and m tile (linear's
// heuristics may change without this list following: any tile gives the same sums).
const TileEntry* find_tile(LinearWeight f, const LinearTile& t) {
  const TileEntry* same_m = nullptr;
  for (const TileEntry& e : kTiles) {
    if (e.format != f || e.tile.m_tile != t.m_tile) continue;
    if (e.tile.rows_per_warp == t.rows_per_warp && e.tile.unroll == t.unroll) return &e;
    if (!same_m) same_m = &e;
  }
  return same_m;
}

}  // namespace

bool linear_norm_nvfp4_fits(const Matrix& w) {
  if (w.format != WeightFormat::kNvfp4 || w.cols % 32 != 0 || !nvfp4_x1_ok(w.cols, w.scale_fp8)) return false;
  const MmaTile t = linear_nvfp4_mma_tile(w.rows, current_device_props().sm_count);
  return t.tiles == kLinearNormNvfp4Tile.tiles && t.unroll == kLinearNormNvfp4Tile.unroll &&
         !linear_nvfp4_x1_persistent(t.tiles, w.rows, w.cols);
}

Status linear_norm(const LinearNormArgs& a, unsigned* counter, cudaStream_t stream) {
  PG_TRY(validate(a));
  PG_TRY(check_kernel_format(*a.lin.w, "linear_norm", /*nvfp4_ok=*/true));
  if (a.lin.m > kLinearNormMaxRows)
    return unsupported("linear_norm: {} rows in one launch, the CUDA kernels take up to {}", a.lin.m, kLinearNormMaxRows);
  if (a.out_norm && !counter) return invalid_argument("linear_norm: out_norm needs the counter");
  if (a.lin.m == 0) return ok_status();
  const LinearNormMode mode = a.in_norm ? LinearNormMode::kIn : LinearNormMode::kOut;
  const LinearWeight f = to_kernel_format(a.lin.w->format);
  LinearNormParams p;
  p.lin = linear_params(a.lin);
  p.in_norm = a.in_norm, p.out_norm = a.out_norm, p.y_normed = a.y_normed, p.counter = counter, p.eps = a.eps;
  p.y_normed_stride = a.y_normed_stride ? a.y_normed_stride : p.lin.n;
  if (mode == LinearNormMode::kIn)
    p.norm_vec4 = p.lin.k % 4 == 0 && p.lin.x_stride % 4 == 0 && aligned16(p.lin.x) && aligned16(a.in_norm);
  else
    p.norm_vec4 = p.lin.n % 4 == 0 && p.lin.y_stride % 4 == 0 && p.y_normed_stride % 4 == 0 && aligned16(p.lin.y) &&
                  aligned16(a.y_normed) && aligned16(a.out_norm);
  // NVFP4 on the tensor cores at one token (linear's staged-x kernel; the norms in float4).
  if (a.lin.f16_activations && a.lin.m == 1 && p.norm_vec4 && linear_norm_nvfp4_fits(*a.lin.w) &&
      linear_vector_path_ok(f, p.lin)) {
    PG_ASSIGN_OR_RETURN(const LinearPlan plan, linear_plan(a.lin));
    if (!plan.nvfp4_mma || plan.tile.rows_per_warp != kMmaRows * kLinearNormNvfp4Tile.tiles ||
        plan.tile.unroll != kLinearNormNvfp4Tile.unroll || plan.blocks > INT32_MAX)
      return internal_error("linear_norm: linear's NVFP4 plan ({} rows x {} steps) is not the fused kernel's tile",
                            plan.tile.rows_per_warp, plan.tile.unroll);
    p.lin.k_split = plan.k_split;
    PG_CUDA_TRY(launch_linear_norm_nvfp4_x1(mode, p, dim3(unsigned(plan.blocks), 1), stream));
    return ok_status();
  }
  // kIn's vector kernel reads the norm weight in float4 next to x.
  if (!linear_vector_path_ok(f, p.lin) || (mode == LinearNormMode::kIn && !p.norm_vec4)) {
    PG_CUDA_TRY(launch_linear_norm_scalar(f, mode, p, stream));
    return ok_status();
  }
  const int sms = current_device_props().sm_count;
  LinearTile t = linear_default_tile(f, linear_m_tile(p.lin.m));
  if (f == LinearWeight::kNvfp4 && t.m_tile == 1) t.rows_per_warp = linear_nvfp4_rows(p.lin.n, sms);
  const TileEntry* e = find_tile(f, t);
  if (!e) return internal_error("linear_norm: no kernel instantiated at m tile {}", t.m_tile);
  t = e->tile;
  const int64_t groups = (p.lin.n + t.rows_per_warp - 1) / t.rows_per_warp;
  p.lin.k_split = linear_k_split(groups, p.lin.k / linear_vec_elems(f), t.unroll, sms);
  const int64_t groups_per_block = kLinearWarps / p.lin.k_split;
  const int64_t blocks = (groups + groups_per_block - 1) / groups_per_block;
  const int64_t m_tiles = (p.lin.m + t.m_tile - 1) / t.m_tile;
  if (blocks > INT32_MAX) return unsupported("linear_norm: grid of {} blocks is too large", blocks);
  PG_CUDA_TRY((mode == LinearNormMode::kIn ? e->in : e->out)(p, dim3(unsigned(blocks), unsigned(m_tiles)), stream));
  return ok_status();
}

}  // namespace pg::ops::cuda
