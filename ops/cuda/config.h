// Launch heuristics of the small CUDA ops (rmsnorm, moe_routing), kept out of kernel bodies.
// linear/ has its own config.h.
#pragma once

#include <cstdint>

namespace pg::ops::cuda {

// rmsnorm / rmsnorm_residual: one block per row. 256 threads for the hidden sizes (2048, 7168:
// 2..7 float4 per thread), 128 for the short rows (kv_lora_rank 512, q_lora_rank 1536) so that
// few threads idle.
constexpr int kRmsNormThreadsLarge = 256;
constexpr int kRmsNormThreadsSmall = 128;
constexpr int64_t kRmsNormSmallMaxN = 2047;
inline int rmsnorm_threads(int64_t n) { return n <= kRmsNormSmallMaxN ? kRmsNormThreadsSmall : kRmsNormThreadsLarge; }
// Rows of up to this many float4 a thread stay in registers (rmsnorm_regs_kernel): 8192 floats at
// 256 threads (V3's 7168), 4096 at 128.
constexpr int kRmsNormRegsPerThread = 8;

// moe_routing: one warp per token; 4 warps per block keep the dynamic shared memory
// (4 x 2 x n_experts floats <= 32 KB at the CUDA path's 1024-expert limit) under the 48 KB default.
constexpr int kRoutingWarpsPerBlock = 4;
constexpr int64_t kRoutingMaxExperts = 1024;  // one 32-bit "taken" mask per lane: 32 x 32 experts
constexpr int64_t kRoutingMaxGroups = 32;     // the kept-group set is one 32-bit mask
constexpr int64_t kRoutingMaxTopK = 32;       // lane k of the warp keeps the k-th choice

}  // namespace pg::ops::cuda
