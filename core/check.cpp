// Failure path of PG_CHECK.
#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace pg::detail {
void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "peregrine: check failed at %s:%d: %s%s%s\n", file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace pg::detail
