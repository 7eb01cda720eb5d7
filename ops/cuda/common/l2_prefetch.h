// Weights pulled into L2 ahead of the kernel that reads them, by the copy engine of the SM
// (cp.async.bulk.prefetch.L2: fire and forget, no registers, nothing to wait for). At one token a
// layer's attention chain is a row of latency-bound kernels that leave HBM mostly idle for tens of
// µs; the weights every token reads next (a MoE layer's shared experts, a dense MLP) can stream in
// meanwhile from a launch on a side branch of the step, so the MLP then reads them from L2.
// fmt-free (l2_prefetch.cu includes it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pg::ops::cuda {

struct L2Range {
  const void* p = nullptr;
  int64_t bytes = 0;
};

constexpr int kL2PrefetchMaxRanges = 8;
constexpr int64_t kL2PrefetchChunk = int64_t(64) << 10;  // bytes one bulk prefetch asks for

// How the bytes are asked for: bulk prefetches (a few threads, fire and forget), or plain 16-byte
// ld.global.cg loads over a wider grid (real reads: L2 keeps what they bring in).
enum class L2PrefetchKind : int { kBulk = 0, kLoad = 1 };

struct L2PrefetchParams {
  L2Range r[kL2PrefetchMaxRanges];
  int n = 0;
  bool evict_last = false;  // L2::evict_last for the prefetched lines (else the normal policy; bulk only)
  L2PrefetchKind kind = L2PrefetchKind::kBulk;
};

// Prefetches every range's 16-byte-aligned interior (a partial 16 bytes at either end is left out:
// the bulk prefetch takes aligned spans only) into L2. No dependency on anything the stream wrote:
// launch it where its bytes should start streaming.
cudaError_t launch_l2_prefetch(const L2PrefetchParams& p, cudaStream_t stream);

}  // namespace pg::ops::cuda
