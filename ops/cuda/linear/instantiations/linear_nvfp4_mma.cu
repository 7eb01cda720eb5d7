// Instantiates the NVFP4 tensor-core linear kernels (the tiles of PG_LINEAR_MMA_TILES).
#include "ops/cuda/linear/nvfp4_mma.cuh"

namespace pg::ops::cuda {

#define PG_INSTANTIATE(tiles, unroll)                                                               \
  template cudaError_t launch_linear_nvfp4_mma<tiles, unroll>(const LinearParams&, dim3, cudaStream_t); \
  template int linear_nvfp4_x1_blocks_per_sm<tiles, unroll>(int64_t);
PG_LINEAR_MMA_TILES(PG_INSTANTIATE)
#undef PG_INSTANTIATE

}  // namespace pg::ops::cuda
