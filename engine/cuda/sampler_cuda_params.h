// The GPU sampler's kernel interface for both sides: the per-row parameters and penalty entries
// (device arrays the host fills), the kernel Params and the launch functions sampler_cuda.cu
// defines (returning the launch's cudaError_t). fmt-free, so the kernel file includes it; the
// Status-returning API is engine/cuda/sampler_cuda.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pg::cuda_sampling {

// One token the penalties look at (TokenHistory::Entry); the tokens of one row are distinct.
struct PenaltyEntry {
  int32_t token = 0;     // in [0, vocab)
  int32_t n_output = 0;  // occurrences among generated tokens
  int32_t in_prompt = 0; // informational: repetition applies to every entry either way
};

// How one row samples: SamplingParams + RngPosition, reduced to what the kernel needs and
// rounded as the CPU sampler rounds them (make_row_params in sampler_cuda.h fills it).
struct RowParams {
  double top_p = 1.0;   // (0, 1]; 1 = off (double: step 5 computes in double)
  double min_p = 0.0;   // [0, 1]; 0 = off
  uint64_t seed = 0;    // resolve_seed(params)
  int64_t output_idx = 0;
  float temperature = 1.0f;         // fp32(params.temperature); unused when greedy
  float repetition_penalty = 1.0f;  // fp32 of the params (step 1)
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t top_k = 0;                // 0 = off; >= vocab is off too
  uint32_t choice_idx = 0;
  uint32_t rng_stream = 0;          // Philox sub-stream of the draw (sampling_math.h): kStreamSample,
                                    // or a draft depth's (engine/device_sampler.h)
  int32_t penalty_begin = 0;        // [penalty_begin, penalty_end) into the penalty entries; empty = none
  int32_t penalty_end = 0;
  int32_t top_logprobs = 0;         // [0, 20] alternatives to report (needs logprobs)
  uint8_t greedy = 0;               // params.is_greedy() (temperature < kGreedyTemperature, in double)
  uint8_t logprobs = 0;             // report the raw logprob of the chosen token
};

// A cluster of kClusterBlocks blocks samples one row: each block owns a contiguous slice of the
// vocabulary, histograms and prefix sums are merged through distributed shared memory.
inline constexpr int kClusterBlocks = 8;  // the portable maximum cluster size
inline constexpr int kSampleThreads = 1024;
inline constexpr int kArgmaxThreads = 1024;
inline constexpr int kMaxTopLogprobsGpu = 20;  // = kMaxTopLogprobs (engine/sampling_params.h)

struct SampleParams {
  const float* logits = nullptr;          // [n_rows, vocab] f32, row stride logits_stride
  const RowParams* rows = nullptr;        // [n_rows]
  const PenaltyEntry* penalties = nullptr;  // [n_entries], indexed by the rows' ranges
  float* scores = nullptr;                // workspace [n_rows, vocab] f32: scores, then weights
  int32_t* tokens = nullptr;              // [n_rows]
  float* logprobs = nullptr;              // [n_rows] or null; written for rows with logprobs
  int32_t* top_ids = nullptr;             // [n_rows, top_stride] or null
  float* top_logprobs = nullptr;          // [n_rows, top_stride] or null
  int64_t vocab = 0, logits_stride = 0, top_stride = 0;
};
cudaError_t launch_sample(const SampleParams& p, int64_t n_rows, cudaStream_t stream);

struct ArgmaxParams {
  const float* logits = nullptr;  // [n_rows, vocab] f32, row stride logits_stride
  int32_t* tokens = nullptr;      // [n_rows]
  int64_t vocab = 0, logits_stride = 0;
};
cudaError_t launch_argmax(const ArgmaxParams& p, int64_t n_rows, cudaStream_t stream);

}  // namespace pg::cuda_sampling
