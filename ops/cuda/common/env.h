// The PEREGRINE_* switches of the CUDA kernels' launchers (host code, fmt-free: .cu files include it).
#pragma once

#include <cstdlib>
#include <cstring>

namespace pg::ops::cuda {

// A switch read from the environment: "1" turns it on, "0" off; unset or anything else leaves the
// default. Callers read it once (a function-local static): launchers run inside captured graphs.
inline bool env_switch(const char* name, bool default_on) {
  const char* v = std::getenv(name);
  if (v && std::strcmp(v, "1") == 0) return true;
  if (v && std::strcmp(v, "0") == 0) return false;
  return default_on;
}

}  // namespace pg::ops::cuda
