// DraftHead: the head the MTP layers draft through on the GPU (CudaRunnerOptions::draft_head,
// quantize_draft_heads in device_weights.h).
#pragma once

#include <cstdint>

namespace pg {

enum class DraftHead : uint8_t {
  kModel,  // the model's own (its lm_head, or the MTP layer's head)
  kFp8,    // an FP8 copy (e4m3, 128 x 128 block scales)
  kNvfp4,  // an NVFP4 copy (e2m1, an e4m3 scale per 16 values, a per-tensor scale)
};

// The head where the engine drafts (make_runner with RunnerOptions::speculative, and `peregrine
// bench`, which times the draft step as the engine runs it): measured in CudaRunnerOptions::draft_head.
inline constexpr DraftHead kEngineDraftHead = DraftHead::kNvfp4;

}  // namespace pg
