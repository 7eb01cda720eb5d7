// The timeline probe's device side (timeline.h): pg_tl_mark(kernel, point) records, from the
// block's thread 0, %globaltimer, the SM and the block into the process's ring. Point 0 (every
// marking kernel's first mark, at the block's start) reserves the block's kTimelinePointsPerBlock
// records with one atomic, which its thread 0 waits for; the later points are plain stores into
// them, so the marks on a kernel's critical path cost it no round trip. Compiled to nothing
// unless the build defines PG_TIMELINE=1 (cmake -DPEREGRINE_TIMELINE=ON): the default kernels'
// code is untouched. Each translation unit that includes this holds its own device pointer to the
// ring, registered at static initialisation and set by timeline_start() (launch_pdl_if calls it
// at the first launch outside a stream capture).
#pragma once

#include <cstdint>

#include "ops/cuda/common/timeline.h"

#if defined(PG_TIMELINE) && PG_TIMELINE
namespace pg::ops::cuda {
namespace {
__device__ TimelineBuffer* g_timeline;
cudaError_t set_timeline(TimelineBuffer* b) { return cudaMemcpyToSymbol(g_timeline, &b, sizeof b); }
[[maybe_unused]] const int g_timeline_registered = timeline_register(set_timeline);
}  // namespace
}  // namespace pg::ops::cuda
#endif

namespace pg::ops::cuda {

__device__ __forceinline__ void pg_tl_mark([[maybe_unused]] TimelineKernel kernel, [[maybe_unused]] uint32_t point) {
#if defined(PG_TIMELINE) && PG_TIMELINE
  __shared__ unsigned long long base;  // the block's records, reserved at point 0 (thread 0's alone)
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0 || point >= kTimelinePointsPerBlock) return;
  TimelineBuffer* b = g_timeline;
  if (b == nullptr) return;
  uint64_t t;
  uint32_t sm;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  const uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (point == 0) {
    base = atomicAdd(&b->count, static_cast<unsigned long long>(kTimelinePointsPerBlock));
    for (uint32_t i = 1; i < kTimelinePointsPerBlock; ++i) b->rec[(base + i) % kTimelineCapacity] = TimelineRecord{};
  }
  b->rec[(base + point) % kTimelineCapacity] = TimelineRecord{t, uint32_t(kernel) << 8 | point, block << 8 | (sm & 0xffu)};
#endif
}

}  // namespace pg::ops::cuda
