// Device helpers of bench_ops_cuda (ops_cuda_bench_kernels.cu): the HBM read-ceiling kernel and
// random fills. fmt-free, like every header a .cu file includes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pg::bench {

// Reads `bytes` (a multiple of 16) once with 16-byte streaming loads, `unroll` loads in flight
// per thread, grid = blocks x threads; writes nothing unless an impossible checksum appears.
// unroll: 4 or 8; threads: 256 or 512; `ldg` picks the plain read-only path (L1 allocating).
cudaError_t launch_read_ceiling(const void* p, size_t bytes, int blocks, int threads, int unroll, bool ldg,
                                uint32_t* sink, cudaStream_t stream);

// Random fills, a pure function of (seed, index).
enum class FillKind { kF32Pm1, kBf16Pm1, kFp8Finite, kScalePos };
cudaError_t launch_fill(void* p, size_t n_elems, FillKind kind, uint64_t seed, cudaStream_t stream);

}  // namespace pg::bench
