// Instantiates the FP8 tensor-core linear kernels (the tiles of PG_LINEAR_MMA_TILES).
#include "ops/cuda/linear/fp8_mma.cuh"

namespace pg::ops::cuda {

#define PG_INSTANTIATE(tiles, unroll) \
  template cudaError_t launch_linear_fp8_mma<tiles, unroll>(const LinearParams&, dim3, cudaStream_t);
PG_LINEAR_MMA_TILES(PG_INSTANTIATE)
#undef PG_INSTANTIATE

}  // namespace pg::ops::cuda
