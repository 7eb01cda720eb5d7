// pg::cuda_sampling: validation, the host-side row builders and the Status-returning launchers of
// the GPU sampler (kernels in sampler_cuda.cu, behind the fmt-free sampler_cuda_params.h).
#include "engine/cuda/sampler_cuda.h"

#include <algorithm>
#include <climits>

#include "ops/cuda/common/cuda_check.h"

namespace pg::cuda_sampling {
namespace {

static_assert(kMaxTopLogprobsGpu == kMaxTopLogprobs, "the kernel's top-logprob bound is the API's");

bool aligned(const void* p, size_t n) { return (reinterpret_cast<uintptr_t>(p) % n) == 0; }

}  // namespace

size_t sample_workspace_bytes(int64_t n_rows, int64_t vocab) {
  if (n_rows <= 0 || vocab <= 0) return 0;
  return size_t(n_rows) * size_t(vocab) * sizeof(float);
}

Status validate(const SampleArgs& a) {
  if (a.n_rows < 0) return invalid_argument("cuda sample: n_rows {} < 0", a.n_rows);
  if (a.vocab < 1 || a.vocab > sampling::kMaxVocab)
    return invalid_argument("cuda sample: vocab {} outside [1, {}]", a.vocab, sampling::kMaxVocab);
  const int64_t stride = a.logits_stride ? a.logits_stride : a.vocab;
  if (stride < a.vocab) return invalid_argument("cuda sample: logits_stride {} < vocab {}", stride, a.vocab);
  if (a.n_rows > INT_MAX / kClusterBlocks)
    return invalid_argument("cuda sample: {} rows, at most {}", a.n_rows, INT_MAX / kClusterBlocks);
  if (a.n_rows == 0) return ok_status();
  if (!a.logits || !a.rows || !a.tokens) return invalid_argument("cuda sample: logits, rows and tokens are required");
  if ((a.top_ids == nullptr) != (a.top_logprobs == nullptr))
    return invalid_argument("cuda sample: top_ids and top_logprobs go together");
  if (a.top_ids && (a.top_stride < 1 || a.top_stride > kMaxTopLogprobs))
    return invalid_argument("cuda sample: top_stride {} outside [1, {}]", a.top_stride, kMaxTopLogprobs);
  const size_t need = sample_workspace_bytes(a.n_rows, a.vocab);
  if (!a.workspace || a.workspace_bytes < need || !aligned(a.workspace, 16))
    return invalid_argument("cuda sample: workspace of {} bytes (16-byte aligned) needed, got {} bytes", need,
                            a.workspace_bytes);
  return ok_status();
}

Status sample(const SampleArgs& a, cudaStream_t stream) {
  PG_TRY(validate(a));
  if (a.n_rows == 0) return ok_status();
  SampleParams p;
  p.logits = a.logits;
  p.rows = a.rows;
  p.penalties = a.penalties;
  p.scores = static_cast<float*>(a.workspace);
  p.tokens = a.tokens;
  p.logprobs = a.logprobs;
  p.top_ids = a.top_ids;
  p.top_logprobs = a.top_logprobs;
  p.vocab = a.vocab;
  p.logits_stride = a.logits_stride ? a.logits_stride : a.vocab;
  p.top_stride = a.top_ids ? a.top_stride : 0;
  PG_CUDA_TRY(launch_sample(p, a.n_rows, stream));
  return ok_status();
}

Status validate(const ArgmaxArgs& a) {
  if (a.n_rows < 0 || a.n_rows > INT_MAX) return invalid_argument("cuda argmax: n_rows {} outside [0, {}]", a.n_rows, INT_MAX);
  if (a.vocab < 1 || a.vocab > INT32_MAX) return invalid_argument("cuda argmax: vocab {} outside [1, {}]", a.vocab, INT32_MAX);
  const int64_t stride = a.logits_stride ? a.logits_stride : a.vocab;
  if (stride < a.vocab) return invalid_argument("cuda argmax: logits_stride {} < vocab {}", stride, a.vocab);
  if (a.n_rows > 0 && (!a.logits || !a.tokens)) return invalid_argument("cuda argmax: logits and tokens are required");
  return ok_status();
}

Status argmax(const ArgmaxArgs& a, cudaStream_t stream) {
  PG_TRY(validate(a));
  ArgmaxParams p;
  p.logits = a.logits;
  p.tokens = a.tokens;
  p.vocab = a.vocab;
  p.logits_stride = a.logits_stride ? a.logits_stride : a.vocab;
  PG_CUDA_TRY(launch_argmax(p, a.n_rows, stream));
  return ok_status();
}

RowParams make_row_params(const SamplingParams& params, const RngPosition& rng) {
  RowParams r;
  r.top_p = params.top_p;
  r.min_p = params.min_p;
  r.seed = rng.seed;
  r.output_idx = rng.output_idx;
  r.temperature = float(params.temperature);
  r.repetition_penalty = float(params.repetition_penalty);
  r.frequency_penalty = float(params.frequency_penalty);
  r.presence_penalty = float(params.presence_penalty);
  r.top_k = params.top_k > 0 ? int32_t(std::min<int64_t>(params.top_k, INT32_MAX)) : 0;
  r.choice_idx = rng.choice_idx;
  r.rng_stream = sampling::kStreamSample;
  r.top_logprobs = params.logprobs ? int32_t(std::clamp<int64_t>(params.top_logprobs, 0, kMaxTopLogprobs)) : 0;
  r.greedy = params.is_greedy() ? 1 : 0;
  r.logprobs = params.logprobs ? 1 : 0;
  return r;
}

Status append_penalties(const SamplingParams& params, const TokenHistory* history, RowParams& row,
                        std::vector<PenaltyEntry>& entries) {
  row.penalty_begin = row.penalty_end = int32_t(std::min<size_t>(entries.size(), INT32_MAX));
  if (!params.has_penalties()) return ok_status();
  if (!history) return invalid_argument("cuda sample: penalties are set but no token history was given");
  if (entries.size() + history->entries().size() > size_t(INT32_MAX))
    return invalid_argument("cuda sample: more than {} penalty entries", INT32_MAX);
  for (const auto& [id, e] : history->entries()) {
    if (id < 0 || id >= sampling::kMaxVocab)
      return invalid_argument("cuda sample: token {} in the history is outside the vocabulary", id);
    entries.push_back(PenaltyEntry{id, e.n_output, e.in_prompt ? 1 : 0});
  }
  row.penalty_end = int32_t(entries.size());
  return ok_status();
}

}  // namespace pg::cuda_sampling
