// The ring probe (probe.h's launch_ring_probe): the one-token NVFP4 MoE gate_up's routed streaming
// alone, with the kernel's own copy ring and stage work (linear/nvfp4_mma.cuh), every block resident
// and released together as the routed blocks are by the routing.
#include <cuda_runtime.h>

#include "ops/cuda/common/probe.h"
#include "ops/cuda/linear/nvfp4_mma.cuh"

namespace pg::ops::cuda {
namespace {

constexpr int kRingProbeWarps = 4;  // as kMoeNvfp4GateUpWarps
using ProbeStage = Nvfp4RingStage<1, 2>;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Warp w of block b streams tile 4b + w: rows 16 (4b + w) + g and + 8 of a [tiles x 16] x K matrix
// (codes K / 2 bytes a row, e4m3 scales K / 16), as the gate_up's warp streams its 8 gate and 8 up rows.
template <int kSlots, bool kWork>
__global__ void __launch_bounds__(kRingProbeWarps * kWarpSize) ring_probe_kernel(const __grid_constant__ RingProbeParams p) {
  extern __shared__ uint4 ring_probe_smem[];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, g = lane / 4;
  const int64_t tile = int64_t(blockIdx.x) * kRingProbeWarps + warp;
  const int64_t k_chunks = p.k / 32, k_steps = (k_chunks + 3) / 4;
  const int n = int((k_steps + 1) / 2);  // stages of 2 k-steps
  uint4* xs = ring_probe_smem;           // x as the kernel stages it (zeros: the mmas cost the same)
  ProbeStage* ring = reinterpret_cast<ProbeStage*>(xs + k_steps * kNvfp4MmaXStepVecs) + warp * kSlots;
  for (int64_t i = threadIdx.x; i < k_steps * kNvfp4MmaXStepVecs; i += blockDim.x) xs[i] = make_uint4(0, 0, 0, 0);
  const uint8_t* wrow[1][2];
  const uint8_t* srow[1][2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = tile * 16 + g + 8 * h;
    wrow[0][h] = p.codes + row * (p.k / 2);
    srow[0][h] = p.scales + row * (p.k / 16);
  }
  Nvfp4LaneSrc<1> src;
  src.at(wrow, srow, 0, lane % 4);
  const uint64_t policy = l2_evict_first_policy();
  const Nvfp4LaneRing<1, 2> lr(ring, lane);
  constexpr int kSlot = Nvfp4LaneRing<1, 2>::kBytes;
  const int ikc = int(k_chunks), ik = int(k_steps);
  const int nw = nvfp4_lane_whole_stages(0, ik, ikc, 2, /*whole_steps=*/true);
  // Every block resident before any streams (the launcher checks they fit at once).
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(p.counter, 1u);
    for (long long spin = 0; spin < (1ll << 26); ++spin) {
      unsigned v;
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p.counter) : "memory");
      if (v >= gridDim.x) break;
    }
  }
  __syncthreads();

  const unsigned long long t0 = global_ns();
  // The kernel's own issue order and stage work (nvfp4_mma_stream_ring's).
  // Without the L2 hint (nvfp4_lane_issue's kHint): here the slot offsets are uniform (cp_async.cuh's hazard).
  auto issue = [&](int j, int slot_off) {
    if (j < nw) nvfp4_lane_issue<1, 2, false>(src, lr.w_at(slot_off), lr.sc_at(slot_off), policy);
    else if (j < n) nvfp4_lane_issue_tail<1, 2, false>(src, lr.w_at(slot_off), lr.sc_at(slot_off), policy, 2 * j, ik, ikc, lane % 4);
    else cp_async_commit();
  };
#pragma unroll
  for (int j = 0; j < kSlots - 1; ++j) issue(j, j * kSlot);
  float acc[1][4] = {};
  uint32_t sink = 0;
  unsigned long long t_first = 0;
  Nvfp4SlotCursor<kSlots, kSlot> cur;
  const uint4* xl = xs + lane % 4;
  for (int j = 0; j < n; ++j, xl += 2 * kNvfp4MmaXStepVecs) {
    issue(j + kSlots - 1, cur.wr);
    cp_async_wait<kSlots - 1>();  // stage j's group has landed
    if (j == 0) t_first = global_ns();
    if constexpr (kWork)
      nvfp4_lane_work<1, 2>(lr.w_at(cur.rd), lr.sc_at(cur.rd), xl, j < nw ? 2 : ik - 2 * j, nvfp4_lane_scale_sel(lane), acc);
    else sink ^= lr.w_at(cur.rd)->x;  // the stage is read, as the work would read it
    cur.next();
  }
  const unsigned long long t1 = global_ns();
  if (lane == 0) {
    p.times[3 * tile] = t0;
    p.times[3 * tile + 1] = t_first;
    p.times[3 * tile + 2] = t1;
  }
  // Keeps the work: a store the compiler cannot drop depends on what each form computed. (One condition
  // over both once had `sink == ...` false at compile time in the kWork form, and the mmas went with it.)
  const bool keep = kWork ? (acc[0][0] == 1.25f && acc[0][3] == -3.5f) : (sink == 0x9e3779b9u);
  if (keep) p.times[0] = 0;
}

template <int kSlots, bool kWork>
cudaError_t launch_ring(const RingProbeParams& p, cudaStream_t stream) {
  constexpr auto kKernel = ring_probe_kernel<kSlots, kWork>;
  const int64_t k_steps = (p.k / 32 + 3) / 4;
  const size_t smem = size_t(k_steps) * kNvfp4MmaXStepVecs * sizeof(uint4) + size_t(kRingProbeWarps) * kSlots * sizeof(ProbeStage);
  if (cudaError_t e = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)); e != cudaSuccess)
    return e;
  int per_sm = 0, device = 0, sms = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, kRingProbeWarps * kWarpSize, smem);
      e != cudaSuccess)
    return e;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) return e;
  if (int64_t(p.blocks) > int64_t(per_sm) * sms) return cudaErrorInvalidConfiguration;  // the start barrier needs them all
  if (cudaError_t e = cudaMemsetAsync(p.counter, 0, sizeof(unsigned), stream); e != cudaSuccess) return e;
  kKernel<<<p.blocks, kRingProbeWarps * kWarpSize, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_ring_probe(const RingProbeParams& p, cudaStream_t stream) {
  if (p.k % 128 != 0 || p.k <= 0 || p.blocks <= 0) return cudaErrorInvalidValue;
  switch (p.slots * 2 + (p.work ? 1 : 0)) {
    case 4: return launch_ring<2, false>(p, stream);
    case 5: return launch_ring<2, true>(p, stream);
    case 8: return launch_ring<4, false>(p, stream);
    case 9: return launch_ring<4, true>(p, stream);
    case 16: return launch_ring<8, false>(p, stream);
    case 17: return launch_ring<8, true>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace pg::ops::cuda
