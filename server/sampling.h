// OpenAI/vLLM sampling fields -> the engine's SamplingParams, validated by the engine's own
// validate() (whose messages name the field).
#pragma once

#include "engine/sampling_params.h"
#include "server/openai_protocol.h"

namespace pg::server {

// `choice` offsets the seed so that n > 1 choices with one seed differ but stay reproducible.
ApiResult<SamplingParams> to_sampling_params(const SamplingFields& f, int choice, int64_t vocab_size);

}  // namespace pg::server
