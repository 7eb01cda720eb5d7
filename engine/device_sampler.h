// DeviceSampler: draws the next tokens from logits that stay on the device the model ran on,
// exactly as pg::Sampler would from the same rows (engine/sampler.h defines the draw bit for bit),
// so a decode step copies token ids, not a vocabulary of logits per row, back to the host.
// engine/cuda/ implements it for the CUDA runner; the engine uses it when the runner exposes its
// logits (ModelRunner::device_logits) and the step has no speculative rows.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"

namespace pg {

class DeviceSampler {
 public:
  struct Row {
    const SamplingParams* params = nullptr;  // validated
    RngPosition rng;
    const TokenHistory* history = nullptr;   // required when params->has_penalties()
  };
  virtual ~DeviceSampler() = default;
  // logits: device rows [rows.size(), stride] f32; only ids [0, vocab) are candidates (ids past
  // it are padding the tokenizer lacks, as if -inf). Waits for `stream` before returning.
  virtual Status sample(const float* logits, int64_t stride, int64_t vocab, std::span<const Row> rows,
                        void* stream, std::vector<SampledToken>& out) = 0;
};

}  // namespace pg
