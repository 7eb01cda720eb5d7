// PG_CUDA_TRY: every CUDA runtime call checked; a failure becomes a Status naming the call,
// file:line and cudaGetErrorString (style.md "Errors"). Host code only.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace pg::ops::cuda {

// Internal (a failed CUDA call is never the user's fault); sticky errors are noted as such so
// the engine can mark itself dead.
Status cuda_error(cudaError_t err, const char* call, const char* file, int line);

}  // namespace pg::ops::cuda

// Returns a non-ok Status from the enclosing function (Status or Result<T>) if `call` fails.
#define PG_CUDA_TRY(call)                                                          \
  do {                                                                             \
    const cudaError_t _pg_cuda_err = (call);                                       \
    if (_pg_cuda_err != cudaSuccess)                                               \
      return ::pg::ops::cuda::cuda_error(_pg_cuda_err, #call, __FILE__, __LINE__);      \
  } while (0)

// After a kernel launch: launch-configuration errors surface through cudaGetLastError.
#define PG_CUDA_TRY_LAUNCH() PG_CUDA_TRY(cudaGetLastError())
