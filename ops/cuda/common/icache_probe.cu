// The instruction probe (probe.h): what a decode kernel's own code costs it. A launch of one block
// per SM whose warps run kN FFMAs of straight-line code (8 independent chains: about one issue a
// cycle a warp when the code is at hand), launched back to back under PDL as the decode step's
// kernels are. The same kernel every launch finds its code in the SMs' instruction caches; eight
// kernels of identical bodies at distinct addresses, taken in turn, find it cold when 8 x kN x 16
// bytes exceed those caches (as a decode layer's ~9 kernels of 2-6K instructions each likely do), and
// fetch it from L2. The difference per launch is the cold code's price per kN instructions.
#include "ops/cuda/common/pdl.cuh"
#include "ops/cuda/common/probe.h"

namespace pg::ops::cuda {
namespace {

constexpr int kIcacheThreads = 128;
constexpr int kIcacheChains = 8;

// kVariant only makes each instantiation a function of its own (its own code addresses).
template <int kVariant, int kN>
__global__ void __launch_bounds__(kIcacheThreads) icache_probe_kernel(float* sink, float a, float b) {
  static_assert(kN % kIcacheChains == 0, "whole rounds of the chains");
  pdl_trigger();
  pdl_wait();
  float acc[kIcacheChains];
#pragma unroll
  for (int j = 0; j < kIcacheChains; ++j) acc[j] = float(threadIdx.x + j + kVariant);
#pragma unroll
  for (int i = 0; i < kN / kIcacheChains; ++i)
#pragma unroll
    for (int j = 0; j < kIcacheChains; ++j) acc[j] = fmaf(acc[j], a, b);
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < kIcacheChains; ++j) s += acc[j];
  if (s == 1234.5f) sink[threadIdx.x] = s;  // keeps the chains live; never true for the bench's a, b
}

using ProbeFn = void (*)(float*, float, float);
template <int kN>
constexpr ProbeFn kVariants[kIcacheVariants] = {
    icache_probe_kernel<0, kN>, icache_probe_kernel<1, kN>, icache_probe_kernel<2, kN>, icache_probe_kernel<3, kN>,
    icache_probe_kernel<4, kN>, icache_probe_kernel<5, kN>, icache_probe_kernel<6, kN>, icache_probe_kernel<7, kN>};

}  // namespace

cudaError_t launch_icache_probe(int n_instructions, int variant, int blocks, float* sink, cudaStream_t stream) {
  if (variant < 0 || variant >= kIcacheVariants || blocks < 1) return cudaErrorInvalidValue;
  ProbeFn f = nullptr;
  switch (n_instructions) {
    case 256: f = kVariants<256>[variant]; break;
    case 1024: f = kVariants<1024>[variant]; break;
    case 4096: f = kVariants<4096>[variant]; break;
    default: return cudaErrorInvalidValue;
  }
  // a = 1, b = 0: every chain keeps its start value (never the sink's test value).
  return launch_pdl(f, dim3(unsigned(blocks)), dim3(kIcacheThreads), 0, stream, sink, 1.0f, 0.0f);
}

}  // namespace pg::ops::cuda
