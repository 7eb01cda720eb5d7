// DeviceArena: owns many device allocations made once at load (weights, activations, the KV
// cache) and frees them together; counts the bytes for the memory plan and the logs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "ops/cuda/common/device_buffer.h"

namespace pg::ops::cuda {

class DeviceArena {
 public:
  // `bytes` of uninitialized device memory, 256-byte aligned (cudaMalloc's guarantee); 0 bytes
  // gives a valid 16-byte allocation so every tensor has a distinct address.
  Result<void*> alloc(size_t bytes) {
    PG_ASSIGN_OR_RETURN(DeviceBuffer<uint8_t> b, DeviceBuffer<uint8_t>::create(bytes ? bytes : 16));
    void* p = b.data();
    bytes_ += b.bytes();
    bufs_.push_back(std::move(b));
    return p;
  }
  size_t bytes() const { return bytes_; }

 private:
  std::vector<DeviceBuffer<uint8_t>> bufs_;
  size_t bytes_ = 0;
};

}  // namespace pg::ops::cuda
