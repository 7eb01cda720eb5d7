// cuda_available(), cuda_error() and the cached per-device properties (see device.h).
#include "ops/cuda/common/device.h"

#include <cuda_runtime_api.h>

#include <array>
#include <mutex>

#include "ops/cuda/common/cuda_check.h"

namespace pg::ops::cuda {

Status cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  // Sticky errors (e.g. an illegal address in a kernel) poison the context for good.
  const bool sticky = err == cudaErrorIllegalAddress || err == cudaErrorLaunchFailure ||
                      err == cudaErrorIllegalInstruction || err == cudaErrorMisalignedAddress ||
                      err == cudaErrorHardwareStackError || err == cudaErrorAssert;
  return internal_error("CUDA {} at {}:{}: {} ({}){}", call, file, line, cudaGetErrorString(err),
                        cudaGetErrorName(err), sticky ? " [sticky: the CUDA context is unusable]" : "");
}

namespace {
struct Probe {
  bool ok = false;
  std::string reason;
};
const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear, so later calls do not see it
      r.reason = std::string("no usable CUDA device: cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" +
                 cudaGetErrorString(e) + ")";
      return r;
    }
    if (n == 0) {
      r.reason = "no CUDA device";
      return r;
    }
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess) {
      cudaGetLastError();
      r.reason = "CUDA device 0: cannot read its compute capability";
      return r;
    }
    if (major != 9 || minor != 0) {
      r.reason = "CUDA device 0 is sm_" + std::to_string(major) + std::to_string(minor) +
                 "; this build holds sm_90a code only (H100/H200)";
      return r;
    }
    r.ok = true;
    return r;
  }();
  return p;
}
}  // namespace

bool cuda_available() { return probe().ok; }
std::string cuda_unavailable_reason() { return probe().reason; }

const DeviceProps& current_device_props() {
  constexpr int kMaxDevices = 64;
  static std::array<DeviceProps, kMaxDevices> cache;
  static std::array<std::once_flag, kMaxDevices> once;
  static DeviceProps none;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    cudaGetLastError();
    return none;
  }
  std::call_once(once[size_t(dev)], [dev] {
    DeviceProps& p = cache[size_t(dev)];
    p.device = dev;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    p.sm_count = prop.multiProcessorCount;
    p.l2_bytes = prop.l2CacheSize;
    p.smem_per_sm = int(prop.sharedMemPerMultiprocessor);
    p.cc_major = prop.major;
    p.cc_minor = prop.minor;
    p.name = prop.name;
  });
  return cache[size_t(dev)];
}

}  // namespace pg::ops::cuda
