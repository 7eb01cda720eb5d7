// Server-sent events framing (see sse.h).
#include "server/sse.h"

namespace pg::server {

std::string sse_event(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  size_t start = 0;
  while (true) {
    size_t nl = payload.find('\n', start);
    std::string_view line = payload.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out += "data: ";
    out += line;
    out += '\n';
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out += '\n';
  return out;
}

}  // namespace pg::server
