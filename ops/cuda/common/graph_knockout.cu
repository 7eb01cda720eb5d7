// The knock-out probe (probe.h): kernel nodes of a captured graph replaced by an empty kernel, so a
// step's time without them says what they cost inside the graph (PDL overlap, launch and drain
// included), which per-kernel timings in isolation (ncu, profile_layer) cannot.
#include "ops/cuda/common/probe.h"

namespace pg::ops::cuda {
namespace {

__global__ void knocked_out_kernel() {}

}  // namespace

const char* kernel_node_name(cudaGraphNode_t node) {
  cudaGraphNodeType type;
  if (cudaGraphNodeGetType(node, &type) != cudaSuccess || type != cudaGraphNodeTypeKernel) return nullptr;
  cudaKernelNodeParams kp{};
  if (cudaGraphKernelNodeGetParams(node, &kp) != cudaSuccess) return nullptr;
  const char* name = nullptr;
  return cudaFuncGetName(&name, kp.func) == cudaSuccess ? name : nullptr;
}

cudaError_t knock_out_kernel_node(cudaGraphNode_t node, bool* replaced) {
  *replaced = false;
  cudaGraphNodeType type;
  if (cudaError_t e = cudaGraphNodeGetType(node, &type); e != cudaSuccess) return e;
  if (type != cudaGraphNodeTypeKernel) return cudaSuccess;
  cudaKernelNodeParams empty{};
  empty.func = reinterpret_cast<void*>(knocked_out_kernel);
  empty.gridDim = dim3(1), empty.blockDim = dim3(32), empty.sharedMemBytes = 0;
  empty.kernelParams = nullptr, empty.extra = nullptr;
  if (cudaError_t e = cudaGraphKernelNodeSetParams(node, &empty); e != cudaSuccess) return e;
  *replaced = true;
  return cudaSuccess;
}

}  // namespace pg::ops::cuda
