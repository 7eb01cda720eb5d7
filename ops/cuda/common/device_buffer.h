// DeviceBuffer<T>: owning RAII handle of one cudaMalloc'd array (move-only; never throws).
// Creation and copies return Status/Result; the destructor frees and cannot report.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "core/status.h"
#include "ops/cuda/common/cuda_check.h"

namespace pg::ops::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }

  // n elements of uninitialized device memory (n == 0 gives an empty buffer).
  static Result<DeviceBuffer> create(size_t n) {
    DeviceBuffer b;
    if (n) {
      void* p = nullptr;
      PG_CUDA_TRY(cudaMalloc(&p, n * sizeof(T)));
      b.ptr_ = static_cast<T*>(p);
      b.n_ = n;
    }
    return b;
  }
  static Result<DeviceBuffer> from_host(const T* host, size_t n) {
    PG_ASSIGN_OR_RETURN(DeviceBuffer b, create(n));
    PG_TRY(b.upload(host, n));
    return b;
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

  // Synchronous copies of the first n elements (n <= size()).
  Status upload(const T* host, size_t n) {
    if (n > n_) return invalid_argument("DeviceBuffer::upload: {} elements into {}", n, n_);
    if (n) PG_CUDA_TRY(cudaMemcpy(ptr_, host, n * sizeof(T), cudaMemcpyHostToDevice));
    return ok_status();
  }
  Status download(T* host, size_t n) const {
    if (n > n_) return invalid_argument("DeviceBuffer::download: {} elements from {}", n, n_);
    if (n) PG_CUDA_TRY(cudaMemcpy(host, ptr_, n * sizeof(T), cudaMemcpyDeviceToHost));
    return ok_status();
  }
  // Every byte set to `byte` (0xff poisons f32 with NaN), done when it returns, as upload is: a
  // cudaMemset runs on the legacy stream, which work on a non-blocking stream does not wait for.
  Status fill_bytes(int byte) {
    if (n_) {
      PG_CUDA_TRY(cudaMemset(ptr_, byte, bytes()));
      PG_CUDA_TRY(cudaStreamSynchronize(nullptr));
    }
    return ok_status();
  }

  void reset() {
    if (ptr_) cudaFree(ptr_);  // cannot report from a destructor; a sticky error shows at the next call
    ptr_ = nullptr;
    n_ = 0;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

}  // namespace pg::ops::cuda
