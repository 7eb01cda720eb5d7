// The GPU sampler's public API: device rows of logits -> the tokens pg::Sampler (engine/sampler.h)
// draws for the same parameters, history and RNG position, without copying logits to the host;
// plus the raw logprobs, and a plain argmax for greedy decoding. Launchers validate, never
// allocate and never synchronize: capturable in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/cuda/sampler_cuda_params.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"

namespace pg::cuda_sampling {

// sample(): n_rows rows, each with its own RowParams; every pointer is device memory.
struct SampleArgs {
  const float* logits = nullptr;  // [n_rows, vocab] f32, row stride logits_stride (elements; 0 = vocab)
  int64_t n_rows = 0;
  int64_t vocab = 0;              // [1, sampling::kMaxVocab]
  int64_t logits_stride = 0;
  const RowParams* rows = nullptr;          // [n_rows]
  const PenaltyEntry* penalties = nullptr;  // the rows' [penalty_begin, penalty_end) ranges; may be
                                            // null when every range is empty
  int32_t* tokens = nullptr;                // [n_rows] out
  // Raw logprobs (sampler.h), written for the rows whose RowParams::logprobs is set; null = none.
  float* logprobs = nullptr;                // [n_rows] the chosen token's
  int32_t* top_ids = nullptr;               // [n_rows, top_stride] best first (logit desc, id asc);
  float* top_logprobs = nullptr;            // [n_rows, top_stride]  slots past the vocab: -1, -inf
  int64_t top_stride = 0;                   // [1, 20] when top_ids is set; a row reports
                                            // min(top_logprobs, top_stride) entries
  void* workspace = nullptr;                // sample_workspace_bytes(n_rows, vocab) bytes, 16-aligned
  size_t workspace_bytes = 0;
};

// Scratch for sample(): one f32 row of scores per row ([n_rows, vocab]).
size_t sample_workspace_bytes(int64_t n_rows, int64_t vocab);

// Shapes, pointers and workspace; device data (RowParams, penalty ranges) is not read.
[[nodiscard]] Status validate(const SampleArgs& a);
// Steps 1-7 of sampler.h per row, one 8-block cluster per row.
[[nodiscard]] Status sample(const SampleArgs& a, cudaStream_t stream);

// argmax(): greedy decode's hot path, one block per row, no penalties: token = the first index
// of the row's maximum; NaN never wins; no value above -inf gives 0 (step 2).
struct ArgmaxArgs {
  const float* logits = nullptr;  // [n_rows, vocab] f32, row stride logits_stride (0 = vocab)
  int64_t n_rows = 0;
  int64_t vocab = 0;              // [1, INT32_MAX]
  int64_t logits_stride = 0;
  int32_t* tokens = nullptr;      // [n_rows] out
};
[[nodiscard]] Status validate(const ArgmaxArgs& a);
[[nodiscard]] Status argmax(const ArgmaxArgs& a, cudaStream_t stream);

// Host side: one row's RowParams from what pg::Sampler::sample takes. `params` must have passed
// validate(); the penalty range is left empty (append_penalties sets it).
RowParams make_row_params(const SamplingParams& params, const RngPosition& rng);
// When params.has_penalties(): appends history's entries to `entries` and points row's range at
// them (history is then required, as for Sampler::sample). Otherwise the range stays empty.
[[nodiscard]] Status append_penalties(const SamplingParams& params, const TokenHistory* history, RowParams& row,
                                      std::vector<PenaltyEntry>& entries);

}  // namespace pg::cuda_sampling
