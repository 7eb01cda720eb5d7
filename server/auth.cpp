// API-key checks (see auth.h).
#include "server/auth.h"

#include <cstddef>
#include <cstdint>

namespace pg::server {

bool constant_time_equals(std::string_view a, std::string_view b) {
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  // volatile keeps the compiler from turning the loop into an early-exit memcmp.
  volatile uint8_t diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t x = i < a.size() ? uint8_t(a[i]) : 0;
    const uint8_t y = i < b.size() ? uint8_t(b[i]) : 0;
    diff = uint8_t(diff | (x ^ y));
  }
  return diff == 0;
}

static std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool authorized(std::string_view authorization, std::string_view api_key) {
  if (api_key.empty()) return true;
  std::string_view v = trim(authorization);
  constexpr std::string_view kScheme = "bearer ";
  if (v.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    char c = v[i];
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (c != kScheme[i]) return false;
  }
  return constant_time_equals(trim(v.substr(kScheme.size())), api_key);
}

}  // namespace pg::server
