// PG_CHECK: always-on invariant checks (never compiled away). A failed check is a bug
// in Peregrine, not bad input: it prints file, line, the condition and values, then aborts.
#pragma once

#include <fmt/format.h>

#include <string>

namespace pg::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace pg::detail

#define PG_CHECK(cond, ...)                                                               \
  do {                                                                                    \
    if (__builtin_expect(!(cond), 0))                                                     \
      ::pg::detail::check_failed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
  } while (0)
