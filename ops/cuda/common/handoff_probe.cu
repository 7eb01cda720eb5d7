// The handoff probes (probe.h): what passing a decode step's data from one stage to the next costs,
// as kernel boundaries under PDL or as flags inside one persistent launch (docs/decode-status.md,
// "The attention block as one persistent launch"). A stage is a dependent L2 round trip and a
// store per block: block b reads the words that fan_in blocks of the stage before wrote (b, b + 1,
// ... mod blocks), adds them up and writes its own word.
#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/probe.h"
#include "ops/cuda/common/sync.cuh"

namespace pg::ops::cuda {
namespace {

constexpr int kHandoffThreads = 128;
// Polls per wait (~0.1 s): a block that never came counts as a timeout, after which no block waits
// again (the figures are then invalid, and a broken probe costs the run ~0.1 s, not hours).
constexpr int kHandoffSpinLimit = 1 << 20;

// Stage s of block b: the sum of the fan_in words of stage s - 1 (one per lane < fan_in, read through
// L2), plus one, written as stage s's word of b.
__device__ __forceinline__ void handoff_stage(const HandoffParams& p, int s, int b) {
  const int lane = threadIdx.x % 32;
  if (threadIdx.x >= 32) return;
  unsigned v = 0;
  for (int j = lane; j < p.fan_in; j += 32) v += __ldcg(p.words + (s - 1) * p.blocks + (b + j) % p.blocks);
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) p.words[s * p.blocks + b] = v + 1;
}

// One stage per launch (PDL: the next stage's blocks launch while this one runs and wait for it).
__global__ void __launch_bounds__(kHandoffThreads) handoff_stage_kernel(const __grid_constant__ HandoffParams p,
                                                                          int s) {
  pdl_trigger();
  pdl_wait();
  handoff_stage(p, s, blockIdx.x);
}

// Every stage in one launch: block b waits for the flags of the fan_in blocks it reads (set by
// each after its word: store, fence, release), then runs its stage. The last block to finish
// clears the flags and the exit counter for the next launch. All blocks must be resident
// (cooperative launch).
__global__ void __launch_bounds__(kHandoffThreads) handoff_persistent_kernel(const __grid_constant__ HandoffParams p) {
  pdl_wait();
  const int b = blockIdx.x, lane = threadIdx.x % 32;
  for (int s = 1; s <= p.stages; ++s) {
    if (s > 1 && threadIdx.x < 32) {  // wait for stage s - 1 of the blocks read
      for (int j = lane; j < p.fan_in; j += 32) {
        const unsigned* f = p.flags + (s - 1) * p.blocks + (b + j) % p.blocks;
        int it = 0;
        while (ld_acquire(f) == 0u && ++it < kHandoffSpinLimit) {
          if ((it & 1023) == 0 && ld_acquire(p.timeouts) != 0u) break;  // given up elsewhere
        }
        if (it >= kHandoffSpinLimit) atomicAdd(p.timeouts, 1u);
      }
      __syncwarp();
    }
    handoff_stage(p, s, b);
    if (threadIdx.x == 0) {
      __threadfence();
      st_release(p.flags + s * p.blocks + b, 1u);
    }
  }
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(p.exit_counter, 1u) == unsigned(p.blocks - 1);  // every other block is past its waits
  }
  __syncthreads();
  if (last) {
    for (int i = threadIdx.x; i < (p.stages + 1) * p.blocks; i += blockDim.x) p.flags[i] = 0u;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) *p.exit_counter = 0u;
  }
}

}  // namespace

cudaError_t launch_handoff_stage(const HandoffParams& p, int stage, cudaStream_t stream) {
  if (stage < 1 || stage > p.stages || p.fan_in < 1 || p.fan_in > p.blocks) return cudaErrorInvalidValue;
  return launch_pdl(handoff_stage_kernel, dim3(unsigned(p.blocks)), dim3(kHandoffThreads), 0, stream, p, stage);
}

cudaError_t launch_handoff_persistent(const HandoffParams& p, cudaStream_t stream) {
  if (p.stages < 1 || p.fan_in < 1 || p.fan_in > p.blocks) return cudaErrorInvalidValue;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(p.blocks));
  cfg.blockDim = dim3(kHandoffThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, handoff_persistent_kernel, p);
}

}  // namespace pg::ops::cuda
