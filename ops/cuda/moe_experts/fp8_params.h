// The DeepSeek-FP8 tensor-core MoE expert kernels (moe_experts/fp8_kernel.cu): launch functions and
// constants, fmt-free. Taken by moe_experts/launch.cpp, at decode sizes (the direct paths: one token,
// or 2..8 tokens without a plan) and on the planned path, when MoeExpertsArgs::f16_activations is set
// and ops::fp8_experts_mma accepts the stack (ops/moe_experts.h); the plan kernel, the workspace and
// the h layout are kernel.cu's (params.h).
#pragma once

#include <cuda_runtime_api.h>

#include "ops/cuda/linear/config.h"
#include "ops/cuda/moe_experts/config.h"
#include "ops/cuda/moe_experts/params.h"

namespace pg::ops::cuda {

// gate_up: 4 warps per block (as the NVFP4 kernel's, so the grid's blocks spread evenly over the
// SMs: moonlight 44 x 8 slots = 352 blocks, V3 64 x 9 = 576), one tile of 8 gate + 8 up rows per
// warp, 2 k-steps per register stage (two stages alternate). down: one 16-row tile per warp, 2
// k-steps per stage. Not yet swept on the H200.
constexpr int kMoeFp8GateUpWarps = 4;
// Blocks per SM gate_up's registers allow: 4 (118 registers with x staged), or 5 (96: two staged
// items' loads at a time) where the grid has more blocks than 4 per SM hold, so that it fits one
// wave: V3's 576 one-token blocks (9 slots x 64) in 660 instead of 1.09 waves of 528. Not where 4
// suffice: 5 resident blocks let the scheduler place moonlight's 352 unevenly (as the NVFP4 kernel's
// regression of session 11; docs/decode-status.md). H200, 2026-12-01, one call each, eager MoE op
// (f32-x kernels in brackets): V3 fp8 at 5 per SM 123.0 us (143.4), its 4-layer decode 706.4 tok/s
// (701.3); moonlight fp8 at 4 per SM (0692b99) 30.1 us (32.0), 471.0 tok/s (470.9), at 5 per SM
// (e123cd7) 33.8 us (32.0), 454.0 tok/s (470.5).
inline int moe_fp8_gate_up_min_blocks(int64_t blocks, int sm_count) {
  return blocks > 4 * int64_t(sm_count > 0 ? sm_count : 132) ? 5 : 4;
}
constexpr int kMoeFp8GateUpUnroll = 2;
constexpr int kMoeFp8DownUnroll = 2;
// down at m = 1 with every slot's h row staged per block (f16 B fragments): n_slots rows of inter
// (V3 9 x 2048: 36 KB; moonlight 8 x 1408: 22.5 KB; the dense MLPs' one slot of 18432 / 11264: 36 /
// 22.5 KB), taken up to kFp8StagedMaxBytes.
inline size_t moe_fp8_down_staged_bytes(int n_slots, int64_t inter) { return size_t(n_slots) * size_t(inter) * 2; }

// down at m = 1: 16-row tiles per warp. The grid is hidden / (16 x tiles) blocks of n_slots x k_split
// warps, two of which fit an SM (V3's 9 warps at 82-106 registers): V3's 448 one-tile blocks are
// 1.7 waves of 264; two tiles make 224 blocks, one wave. One tile where its grid fits one wave at
// two blocks per SM (moonlight's 128). The rows' sums do not change. h is staged per block only at
// one tile (two tiles with h staged take 128 registers: one block per SM).
inline int moe_fp8_down_direct_tiles(int64_t hidden, int sm_count) {
  return (hidden + 15) / 16 > 2 * int64_t(sm_count > 0 ? sm_count : 132) ? 2 : 1;
}

// down, planned path (steps past the decode sizes): config.h's token tile (kMoeMmaTokTile) and K
// split, as NVFP4's (its slices whole 64-element k-steps).
__host__ __device__ constexpr int moe_fp8_down_k_split(int64_t hidden, int64_t inter) {
  return moe_mma_down_k_split(hidden, inter);
}

// gate_up: on the direct paths (p.direct, p.direct_multi) with the step's x rows staged per block when
// `staged` and fp8_mma_staged_bytes(m, hidden) allows (else per lane), under PDL when p.gate_up_pdl;
// planned with x per lane and the pair passes split over grid.z (moe_gate_up_splits); at the blocks
// per SM moe_fp8_gate_up_min_blocks picks for its grid. down: m = 1 with h staged when `staged` and it
// fits, else per lane; 2..8 tokens and the planned path per lane.
cudaError_t launch_moe_gate_up_fp8(const MoeExpertsParams& p, bool staged, cudaStream_t stream);
// `tiles`: 16-row tiles per warp at m = 1 (1 or 2; moe_fp8_down_direct_tiles), whatever the bits.
cudaError_t launch_moe_down_fp8(const MoeExpertsParams& p, bool staged, int tiles, cudaStream_t stream);

}  // namespace pg::ops::cuda
