// The timeline probe's host side (timeline.h): the setters' registry, the buffer, the dump at exit.
#include "ops/cuda/common/timeline.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace pg::ops::cuda {
namespace {

std::vector<TimelineSetter>& setters() {
  static std::vector<TimelineSetter> s;
  return s;
}
TimelineBuffer* g_buffer = nullptr;

void dump_at_exit() {
  const char* path = std::getenv("PEREGRINE_TIMELINE_OUT");
  if (!g_buffer || !path || !*path) return;
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::fprintf(stderr, "timeline: the device failed before the dump; nothing written\n");
    return;
  }
  unsigned long long count = 0;
  if (cudaMemcpy(&count, &g_buffer->count, sizeof count, cudaMemcpyDeviceToHost) != cudaSuccess) return;
  const uint64_t n = count < kTimelineCapacity ? count : kTimelineCapacity;
  std::vector<TimelineRecord> rec(kTimelineCapacity);
  if (cudaMemcpy(rec.data(), g_buffer->rec, sizeof(TimelineRecord) * kTimelineCapacity, cudaMemcpyDeviceToHost) !=
      cudaSuccess)
    return;
  std::FILE* f = std::fopen(path, "w");
  if (!f) {
    std::fprintf(stderr, "timeline: cannot write %s\n", path);
    return;
  }
  std::fprintf(f, "t_ns,kernel,point,block,sm\n");
  for (uint64_t j = count - n; j < count; ++j) {
    const TimelineRecord& r = rec[j % kTimelineCapacity];
    if (r.t_ns == 0) continue;  // a point its block did not mark
    std::fprintf(f, "%llu,%u,%u,%u,%u\n", static_cast<unsigned long long>(r.t_ns), r.kernel_point >> 8,
                 r.kernel_point & 0xffu, r.block_sm >> 8, r.block_sm & 0xffu);
  }
  std::fclose(f);
  std::fprintf(stderr, "timeline: the newest %llu of %llu records -> %s\n", static_cast<unsigned long long>(n), count, path);
}

}  // namespace

int timeline_register(TimelineSetter set) {
  setters().push_back(set);
  return int(setters().size());
}

void timeline_start() {
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    if (cudaMalloc(&p, sizeof(TimelineBuffer)) != cudaSuccess || cudaMemset(p, 0, sizeof(TimelineBuffer)) != cudaSuccess) {
      std::fprintf(stderr, "timeline: cannot allocate the buffer (%zu bytes); no marks\n", sizeof(TimelineBuffer));
      cudaGetLastError();
      return;
    }
    g_buffer = static_cast<TimelineBuffer*>(p);
    for (TimelineSetter set : setters())
      if (set(g_buffer) != cudaSuccess) std::fprintf(stderr, "timeline: a setter failed\n");
    std::atexit(dump_at_exit);
  });
}

}  // namespace pg::ops::cuda
