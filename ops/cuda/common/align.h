// Pointer alignment tests the launchers make before picking a vector path (16-byte loads).
#pragma once

#include <cstdint>

namespace pg::ops::cuda {

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace pg::ops::cuda
