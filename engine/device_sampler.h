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
#include "model/model_runner.h"

namespace pg {

// The Philox sub-stream of a draft drawn at depth d is kDraftRngStream + d, at output index
// n_generated + d (RequestState::draw_draft; sampling_math.h numbers the streams).
inline constexpr uint32_t kDraftRngStream = 1;

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

  // Drafting (speculative decoding): the rows of the next draft chain, one per chain row, each
  // with its RNG position at depth 0 (depth d draws at output_idx + d on the sub-stream
  // kDraftRngStream + d, from the sampler's distribution over ids [0, vocab): exactly
  // RequestState::draw_draft's token). The histories must stay alive until the chain ran.
  virtual Status set_draft_rows(std::span<const Row> rows, int64_t vocab) {
    (void)rows, (void)vocab;
    return failed_precondition("this device sampler does not draft");
  }
  // What a ModelRunner's draft chain calls to pick on the device; null when not supported.
  virtual DeviceDraftPicker* draft_picker() { return nullptr; }
};

}  // namespace pg
