// Host-side extras of the CUDA linear for the microbenchmark (bench/ops_cuda_bench.cpp): force
// a tile or k_split, list the instantiated tiles, and see what linear() would launch; and its
// parameters for the ops that reuse its kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "core/status.h"
#include "ops/cuda/linear/config.h"
#include "ops/cuda/linear/params.h"
#include "ops/linear.h"

namespace pg::ops::cuda {

// A tile choice; 0 fields take the heuristic (config.h). NVFP4 or FP8 with f16_activations on the
// tensor-core path: rows_per_warp = 16 x tiles, unroll = k-steps in flight (m_tile is ignored).
struct LinearVariant {
  int m_tile = 0;  // 1, 2, 4, 8, 16 (m above it takes several tiles)
  int rows_per_warp = 0;
  int unroll = 0;
  int k_split = 0;
};
// linear() with a forced tile and/or k_split; unsupported when the tile is not instantiated.
Status linear_variant(const LinearArgs& a, const LinearVariant& v, cudaStream_t stream);
// The instantiated tiles of a format at one m tile.
std::vector<LinearTile> linear_tiles(WeightFormat f, int m_tile);
// The instantiated tensor-core tiles of NVFP4 and FP8 (PG_LINEAR_MMA_TILES).
std::vector<MmaTile> linear_mma_tiles();

// What linear() launches for these args.
struct LinearPlan {
  bool vector_path = false;
  bool nvfp4_mma = false;  // the NVFP4 tensor-core kernel (tile.rows_per_warp = 16 x tiles, m_tile 8)
  bool fp8_mma = false;    // the FP8 tensor-core kernel (the same tiles)
  LinearTile tile;
  int k_split = 1;
  int64_t blocks = 0;  // grid.x
};
Result<LinearPlan> linear_plan(const LinearArgs& a, const LinearVariant& v = {});

// linear()'s kernel parameters for these args, and whether its vector path takes them (W rows of
// whole 16-byte chunks, aligned W, x and x rows; fp8 chunks inside one scale block; NVFP4 scale
// pairs 2-byte aligned): for the ops built on linear's kernels (linear_norm).
LinearParams linear_params(const LinearArgs& a);
bool linear_vector_path_ok(LinearWeight f, const LinearParams& p);

}  // namespace pg::ops::cuda
