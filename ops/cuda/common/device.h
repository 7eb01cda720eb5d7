// The CUDA device as the backend sees it: whether one usable for our sm_90a code exists (no
// device -> false, never a crash) and the properties launch heuristics need (SM count, L2).
#pragma once

#include <string>

namespace pg::ops::cuda {

// True when device 0 exists and runs our code (compute capability 9.0: we build sm_90a only).
bool cuda_available();
// Why cuda_available() is false ("no CUDA device: cudaErrorNoDevice ..."); empty when true.
std::string cuda_unavailable_reason();

struct DeviceProps {
  int device = 0;
  int sm_count = 0;
  int l2_bytes = 0;
  int smem_per_sm = 0;  // shared memory one SM holds for its resident blocks (bytes)
  int cc_major = 0, cc_minor = 0;
  std::string name;
};
// Properties of the current device (cudaGetDevice), read once per device and cached.
// On failure sm_count is 0.
const DeviceProps& current_device_props();

}  // namespace pg::ops::cuda
