// Measurement helpers shared by bench_ops_cuda and `peregrine bench`: the HBM read-ceiling kernel
// and random fills (synthetic weights). fmt-free, like every header a .cu file includes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pg::ops::cuda {

// How the ceiling kernel loads: ops::cuda::ld_stream (the weights' load: ld.global.cs.nc, evict-first),
// plain ld.global.nc, with .L1::no_allocate, or with .L1::no_allocate.L2::256B.
enum class LoadKind { kStream, kNc, kNcNoAlloc, kNcNoAllocL2Prefetch };
const char* load_kind_name(LoadKind k);

// Reads `bytes` (a multiple of 16) once with 16-byte loads, `unroll` (4 or 8) loads in flight per
// thread, grid = blocks x threads; writes nothing unless an impossible checksum appears.
cudaError_t launch_read_ceiling(const void* p, size_t bytes, int blocks, int threads, int unroll, LoadKind kind,
                                uint32_t* sink, cudaStream_t stream);

// The read-pattern probe: reads `bytes` as units of 16 rows x row_bytes (a multiple of 128), a warp a
// unit at a time, each step 2 KB with `depth` (3 or 6) steps in flight a warp, over `blocks` blocks of 4
// warps. tiled = false: a step is 128 bytes of each row (the NVFP4 MoE gate_up's reads: 2 k-steps of
// 16 rows' codes); true: the unit's bytes in order, 2 KB runs (the same bytes in a tiled layout).
// What HBM gives each pattern says whether a tiled weight layout could pay (docs/decode-status.md).
cudaError_t launch_read_pattern(const void* p, size_t bytes, int row_bytes, bool tiled, int depth, int blocks,
                                uint32_t* sink, cudaStream_t stream);

// The ring probe (ring_probe.cu): the one-token NVFP4 MoE gate_up's routed streaming alone. `blocks`
// blocks of 4 warps (as the kernel's), warp i streaming 16 rows of K (codes K / 2 bytes a row from
// `codes`, e4m3 scales K / 16 from `scales`; rows 16 i .. 16 i + 15) through the kernel's own cp.async
// ring (linear/nvfp4_mma.cuh) of `slots` (2, the kernel's; 4 or 8) stages of 2 k-steps, each stage
// consumed by nothing but one shared load (work = false) or by the kernel's unpack and mmas (x zero).
// Every block waits at a start barrier (counter: one device word) until all are resident, as the
// routed blocks wait for the routing, so the blocks must fit at once (else cudaErrorInvalidConfiguration).
// times[3 i ..]: warp i's %globaltimer at its start, when its first stage landed, at its end.
struct RingProbeParams {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  int64_t k = 0;
  int blocks = 0, slots = 2;
  bool work = false;
  unsigned* counter = nullptr;
  unsigned long long* times = nullptr;
};
cudaError_t launch_ring_probe(const RingProbeParams& p, cudaStream_t stream);

// Random fills, a pure function of (seed, index): f32 / bf16 uniform in [-scale, scale), fp8 e4m3
// any finite code (scale unused), positive scales 2^-9 * 2^(3u) * scale, any byte (NVFP4 code
// pairs), positive e4m3 block scales in [0.5, 3.75] (exponent field 6..8, any mantissa).
enum class FillKind { kF32Pm1, kBf16Pm1, kFp8Finite, kScalePos, kBytes, kE4m3Scale };
cudaError_t launch_fill(void* p, size_t n_elems, FillKind kind, uint64_t seed, cudaStream_t stream,
                        float scale = 1.0f);

// The handoff probes (handoff_probe.cu): `stages` dependent stages over `blocks` blocks, each block of
// a stage reading the words of fan_in blocks of the stage before (1: its own producer; blocks: every
// block, a grid barrier) through L2 and writing its own: as one launch per stage under PDL
// (launch_handoff_stage, stage 1..stages), or all stages in one cooperative launch whose blocks wait
// on flags (launch_handoff_persistent; blocks <= what the SMs hold at once). words: [stages + 1]
// [blocks] (row 0 the input); flags: [stages + 1][blocks] and exit_counter zero before the first
// persistent launch, and left zero by each; timeouts counts waits that gave up (0 when all is well).
struct HandoffParams {
  unsigned* words = nullptr;
  unsigned* flags = nullptr;
  unsigned* exit_counter = nullptr;
  unsigned* timeouts = nullptr;
  int blocks = 0, stages = 0, fan_in = 1;
};
cudaError_t launch_handoff_stage(const HandoffParams& p, int stage, cudaStream_t stream);
cudaError_t launch_handoff_persistent(const HandoffParams& p, cudaStream_t stream);

// The instruction probe (icache_probe.cu): one launch of `blocks` blocks whose warps run
// n_instructions (256, 1024 or 4096) FFMAs of straight-line code, as variant 0..kIcacheVariants-1
// (identical bodies at distinct code addresses); sink is never written for the bench's inputs.
constexpr int kIcacheVariants = 8;
cudaError_t launch_icache_probe(int n_instructions, int variant, int blocks, float* sink, cudaStream_t stream);

// The knock-out probe (graph_knockout.cu; PEREGRINE_KNOCKOUT in model/cuda/cuda_runner.cpp): a
// kernel node of a captured graph becomes an empty kernel of one warp, its edges (PDL's included)
// kept, so the step computes garbage and its time says what the node cost inside the graph.
// replaced: false (and nothing done) for a node that is not a kernel. kernel_node_name: the kernel's
// (mangled) name, nullptr for other nodes.
cudaError_t knock_out_kernel_node(cudaGraphNode_t node, bool* replaced);
const char* kernel_node_name(cudaGraphNode_t node);

}  // namespace pg::ops::cuda
