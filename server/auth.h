// API-key checks for the HTTP server: `Authorization: Bearer <key>` compared in constant time
// (the comparison's duration does not depend on where the first differing byte is).
#pragma once

#include <string_view>

namespace pg::server {

// True when a and b are equal. Runs over every byte of the longer input, never stopping early.
bool constant_time_equals(std::string_view a, std::string_view b);

// True when `authorization` (the header value, possibly empty) is "Bearer <api_key>" (scheme
// case-insensitive, surrounding spaces ignored). An empty api_key disables the check.
bool authorized(std::string_view authorization, std::string_view api_key);

}  // namespace pg::server
