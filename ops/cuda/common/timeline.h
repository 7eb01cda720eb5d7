// The timeline probe (a build option, off by default: cmake -DPEREGRINE_TIMELINE=ON): kernels mark
// points of their blocks (timeline.cuh's pg_tl_mark: %globaltimer, the SM, the block) into one
// device ring of records, and the process writes the ring out at exit, so the order of events
// inside a replayed CUDA graph can be read: when a kernel's blocks start, when their PDL wait
// returns, when they end, on which SMs, against the kernel before and after. What a graph's kernels
// cost in place (scripts/knockout_table.sh) says how much; this says where. The marks perturb what
// they measure (a block's first mark waits for one global atomic, every mark is a store): read
// orders and gaps, not absolute speed. Without the option the marks compile to nothing and this
// file's functions are never called.
//   PEREGRINE_TIMELINE_OUT=FILE: where the records go at exit (CSV: t_ns,kernel,point,block,sm;
//   the newest blocks' records that fit kTimelineCapacity, oldest first), else nothing is written.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pg::ops::cuda {

// The kernels that mark (the `kernel` column) and their points (the `point` column: 0 the block's
// start, which every marking kernel marks first; 1 its PDL wait returned; 2.. the kernel's own, below
// kTimelinePointsPerBlock; scripts/timeline_report.py names them).
enum class TimelineKernel : uint32_t {
  kRmsnorm = 1, kRouter = 2, kGateUp = 3, kDown = 4, kRouting = 5, kAttention = 6, kMlaPrep = 7, kLinearNvfp4X1 = 8,
  kHeadCombine = 9, kLinearNvfp4Mma = 10
};
constexpr uint32_t kTimelinePointsPerBlock = 8;

struct TimelineRecord {
  uint64_t t_ns;  // %globaltimer
  uint32_t kernel_point;  // kernel << 8 | point
  uint32_t block_sm;      // linear block index << 8 | SM
};
constexpr uint64_t kTimelineCapacity = uint64_t(1) << 22;  // records (64 MB): a few decode steps
struct TimelineBuffer {
  unsigned long long count;  // records ever reserved (kTimelinePointsPerBlock a block); record i at
                             // i % kTimelineCapacity; a reserved point never marked stays zero
  unsigned long long pad;
  TimelineRecord rec[kTimelineCapacity];
};

// Each translation unit with marks registers the setter of its own device pointer (at static
// initialisation); timeline_start() allocates the buffer once and hands it to every setter.
using TimelineSetter = cudaError_t (*)(TimelineBuffer*);
int timeline_register(TimelineSetter set);
// Once per process, outside any stream capture (the setters copy to device symbols): allocates and
// zeroes the buffer, sets every registered pointer, and registers the dump at exit.
void timeline_start();

}  // namespace pg::ops::cuda
