// Server-sent events framing for streamed responses (the OpenAI streaming wire format:
// `data: <json>\n\n` per chunk, ending with `data: [DONE]\n\n`).
#pragma once

#include <string>
#include <string_view>

namespace pg::server {

// One SSE event carrying `payload` as its data. Payload lines are split on '\n' into several
// `data:` fields, as the SSE grammar requires (JSON from our serializer never holds a raw newline).
std::string sse_event(std::string_view payload);

// The terminator OpenAI clients wait for.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace pg::server
