// Instantiates the vector-path linear kernels for bf16 weights (the tiles of PG_LINEAR_TILES_BF16).
#include "ops/cuda/linear/kernel.cuh"

namespace pg::ops::cuda {

#define PG_INSTANTIATE(fmt, mt, rows, unroll) \
  template cudaError_t launch_linear_vec<LinearWeight::fmt, mt, rows, unroll>(const LinearParams&, dim3, cudaStream_t);
PG_LINEAR_TILES_BF16(PG_INSTANTIATE)
#undef PG_INSTANTIATE

}  // namespace pg::ops::cuda
