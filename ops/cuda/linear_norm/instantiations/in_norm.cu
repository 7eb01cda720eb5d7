// linear_norm's vector-path kernels with the norm fused before the GEMV (kIn), every tile of PG_LINEAR_NORM_TILES.
#include "ops/cuda/linear_norm/kernel.cuh"

namespace pg::ops::cuda {

#define PG_INSTANTIATE(fmt, mt, rows, unroll)                                                                  \
  template cudaError_t launch_linear_norm_vec<LinearWeight::fmt, mt, rows, unroll, LinearNormMode::kIn>( \
      const LinearNormParams&, dim3, cudaStream_t);
PG_LINEAR_NORM_TILES(PG_INSTANTIATE)
#undef PG_INSTANTIATE

}  // namespace pg::ops::cuda
