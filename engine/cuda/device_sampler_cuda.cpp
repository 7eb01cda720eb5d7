// CudaDeviceSampler: host staging of RowParams / penalties, one sample() launch, results back.
#include "engine/cuda/device_sampler_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

#include "engine/cuda/sampler_cuda.h"
#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/common/device_buffer.h"

namespace pg {
namespace {

namespace cs = cuda_sampling;
namespace cu = ops::cuda;

// Grows a device buffer to at least n elements (rarely: capacities double).
template <typename T>
Status reserve(cu::DeviceBuffer<T>& b, size_t n) {
  if (b.size() >= n) return ok_status();
  PG_ASSIGN_OR_RETURN(b, cu::DeviceBuffer<T>::create(std::max(n, 2 * b.size())));
  return ok_status();
}

// Draws drafts inside a runner's draft chain: RowParams of every (depth, row) at fixed device
// addresses (depth-major, a stride of cap_rows_ rows), refreshed by begin() before each chain;
// pick() is one sample() launch. Buffers only grow, and growing starts a new generation (the
// runner captures its chain graphs again).
class CudaDraftPicker final : public DeviceDraftPicker {
 public:
  Status set_rows(std::span<const DeviceSampler::Row> rows, int64_t vocab) {
    if (vocab < 1) return invalid_argument("cuda draft picker: vocab {} < 1", vocab);
    rows_.clear();
    penalties_.clear();
    for (const DeviceSampler::Row& r : rows) {
      cs::RowParams p = cs::make_row_params(*r.params, r.rng);
      PG_TRY(cs::append_penalties(*r.params, r.history, p, penalties_));
      p.logprobs = 0, p.top_logprobs = 0;  // drafts report nothing
      rows_.push_back(p);
    }
    if (vocab != vocab_) ++generation_;  // the kernel's vocabulary is a captured argument
    vocab_ = vocab;
    return ok_status();
  }

  Status begin(int64_t n_rows, int64_t n_depths, void* stream_ptr) override {
    auto stream = static_cast<cudaStream_t>(stream_ptr);
    if (n_rows < int64_t(rows_.size()) || n_depths < 1 || n_depths > kMaxDraftDepth)
      return invalid_argument("cuda draft picker: {} rows x {} depths for {} rows set", n_rows, n_depths, rows_.size());
    if (n_rows > cap_rows_) {
      cap_rows_ = std::max<int64_t>(n_rows, 2 * cap_rows_);
      PG_ASSIGN_OR_RETURN(d_params_, cu::DeviceBuffer<cs::RowParams>::create(size_t(cap_rows_ * kMaxDraftDepth)));
      ++generation_;
    }
    if (d_ws_.size() < cs::sample_workspace_bytes(cap_rows_, vocab_)) {
      PG_ASSIGN_OR_RETURN(d_ws_, cu::DeviceBuffer<uint8_t>::create(cs::sample_workspace_bytes(cap_rows_, vocab_)));
      ++generation_;
    }
    if (d_pen_.size() < std::max<size_t>(penalties_.size(), 1)) {
      // At least one entry: an empty buffer would be "grown" (and the chain graphs recaptured) on every chain.
      PG_ASSIGN_OR_RETURN(d_pen_, cu::DeviceBuffer<cs::PenaltyEntry>::create(
                                      std::max<size_t>({penalties_.size(), 2 * d_pen_.size(), 16})));
      ++generation_;
    }
    // Depth d of row i: its RNG position moved d outputs on, on the depth's sub-stream. Padding
    // rows draw greedily from whatever logits they have.
    cs::RowParams pad;
    pad.greedy = 1;
    staged_.assign(size_t(n_depths * cap_rows_), pad);
    for (int64_t d = 0; d < n_depths; ++d)
      for (size_t i = 0; i < rows_.size(); ++i) {
        cs::RowParams p = rows_[i];
        p.output_idx += d;
        p.rng_stream = kDraftRngStream + uint32_t(d);
        staged_[size_t(d * cap_rows_) + i] = p;
      }
    // Pageable sources: the copies are staged at once, the host does not wait for the device.
    PG_CUDA_TRY(cudaMemcpyAsync(d_params_.data(), staged_.data(), staged_.size() * sizeof(cs::RowParams),
                                cudaMemcpyHostToDevice, stream));
    if (!penalties_.empty())
      PG_CUDA_TRY(cudaMemcpyAsync(d_pen_.data(), penalties_.data(), penalties_.size() * sizeof(cs::PenaltyEntry),
                                  cudaMemcpyHostToDevice, stream));
    n_rows_ = n_rows;
    return ok_status();
  }

  Status pick(int64_t depth, const float* logits, int64_t n_rows, int64_t stride, int32_t* tokens,
              void* stream) override {
    if (depth < 0 || depth >= kMaxDraftDepth || n_rows > n_rows_)
      return invalid_argument("cuda draft picker: depth {} of {} rows, begun for {}", depth, n_rows, n_rows_);
    cs::SampleArgs a;
    a.logits = logits, a.n_rows = n_rows, a.vocab = vocab_, a.logits_stride = stride;
    a.rows = d_params_.data() + depth * cap_rows_;
    a.penalties = d_pen_.data();  // always the buffer: a captured null would hide later penalties
    a.tokens = tokens;
    a.workspace = d_ws_.data(), a.workspace_bytes = d_ws_.size();
    return cs::sample(a, static_cast<cudaStream_t>(stream));
  }

  uint64_t generation() const override { return generation_; }

 private:
  std::vector<cs::RowParams> rows_, staged_;
  std::vector<cs::PenaltyEntry> penalties_;
  int64_t vocab_ = 0, cap_rows_ = 0, n_rows_ = 0;
  uint64_t generation_ = 0;
  cu::DeviceBuffer<cs::RowParams> d_params_;
  cu::DeviceBuffer<cs::PenaltyEntry> d_pen_;
  cu::DeviceBuffer<uint8_t> d_ws_;
};

class CudaDeviceSampler final : public DeviceSampler {
 public:
  Status set_draft_rows(std::span<const Row> rows, int64_t vocab) override { return draft_.set_rows(rows, vocab); }
  DeviceDraftPicker* draft_picker() override { return &draft_; }

  Status sample(const float* logits, int64_t stride, int64_t vocab, std::span<const Row> rows, void* stream_ptr,
                std::vector<SampledToken>& out) override {
    auto stream = static_cast<cudaStream_t>(stream_ptr);
    const int64_t n = int64_t(rows.size());
    out.assign(rows.size(), SampledToken{});
    if (n == 0) return ok_status();
    params_.clear();
    penalties_.clear();
    int64_t top = 0;
    bool any_logprobs = false;
    for (const Row& r : rows) {
      cs::RowParams p = cs::make_row_params(*r.params, r.rng);
      PG_TRY(cs::append_penalties(*r.params, r.history, p, penalties_));
      params_.push_back(p);
      any_logprobs = any_logprobs || r.params->logprobs;
      if (r.params->logprobs) top = std::max<int64_t>(top, r.params->top_logprobs);
    }
    PG_TRY(reserve(d_params_, params_.size()));
    PG_TRY(reserve(d_pen_, std::max<size_t>(penalties_.size(), 1)));
    PG_TRY(reserve(d_tokens_, size_t(n)));
    PG_TRY(reserve(d_logprobs_, size_t(n)));
    PG_TRY(reserve(d_top_ids_, size_t(n * cs::kMaxTopLogprobsGpu)));
    PG_TRY(reserve(d_top_lp_, size_t(n * cs::kMaxTopLogprobsGpu)));
    PG_TRY(reserve(d_ws_, cs::sample_workspace_bytes(n, vocab)));
    PG_CUDA_TRY(cudaMemcpyAsync(d_params_.data(), params_.data(), params_.size() * sizeof(cs::RowParams),
                                cudaMemcpyHostToDevice, stream));
    if (!penalties_.empty())
      PG_CUDA_TRY(cudaMemcpyAsync(d_pen_.data(), penalties_.data(), penalties_.size() * sizeof(cs::PenaltyEntry),
                                  cudaMemcpyHostToDevice, stream));
    cs::SampleArgs a;
    a.logits = logits, a.n_rows = n, a.vocab = vocab, a.logits_stride = stride;
    a.rows = d_params_.data(), a.penalties = penalties_.empty() ? nullptr : d_pen_.data();
    a.tokens = d_tokens_.data();
    if (any_logprobs) {
      a.logprobs = d_logprobs_.data();
      if (top > 0) a.top_ids = d_top_ids_.data(), a.top_logprobs = d_top_lp_.data(), a.top_stride = top;
    }
    a.workspace = d_ws_.data(), a.workspace_bytes = d_ws_.size();
    PG_TRY(cs::sample(a, stream));
    tokens_.resize(size_t(n));
    PG_CUDA_TRY(cudaMemcpyAsync(tokens_.data(), d_tokens_.data(), size_t(n) * 4, cudaMemcpyDeviceToHost, stream));
    if (any_logprobs) {
      logprobs_.resize(size_t(n));
      PG_CUDA_TRY(cudaMemcpyAsync(logprobs_.data(), d_logprobs_.data(), size_t(n) * 4, cudaMemcpyDeviceToHost, stream));
      if (top > 0) {
        top_ids_.resize(size_t(n * top));
        top_lp_.resize(size_t(n * top));
        PG_CUDA_TRY(cudaMemcpyAsync(top_ids_.data(), d_top_ids_.data(), top_ids_.size() * 4, cudaMemcpyDeviceToHost, stream));
        PG_CUDA_TRY(cudaMemcpyAsync(top_lp_.data(), d_top_lp_.data(), top_lp_.size() * 4, cudaMemcpyDeviceToHost, stream));
      }
    }
    PG_CUDA_TRY(cudaStreamSynchronize(stream));
    for (int64_t i = 0; i < n; ++i) {
      SampledToken& t = out[size_t(i)];
      t.token_id = tokens_[size_t(i)];
      const SamplingParams& p = *rows[size_t(i)].params;
      if (!p.logprobs) continue;
      t.logprob = logprobs_[size_t(i)];
      for (int64_t k = 0; k < std::min<int64_t>(p.top_logprobs, top); ++k)
        t.top_logprobs.emplace_back(top_ids_[size_t(i * top + k)], top_lp_[size_t(i * top + k)]);
    }
    return ok_status();
  }

 private:
  CudaDraftPicker draft_;
  std::vector<cs::RowParams> params_;
  std::vector<cs::PenaltyEntry> penalties_;
  std::vector<int32_t> tokens_, top_ids_;
  std::vector<float> logprobs_, top_lp_;
  cu::DeviceBuffer<cs::RowParams> d_params_;
  cu::DeviceBuffer<cs::PenaltyEntry> d_pen_;
  cu::DeviceBuffer<int32_t> d_tokens_, d_top_ids_;
  cu::DeviceBuffer<float> d_logprobs_, d_top_lp_;
  cu::DeviceBuffer<uint8_t> d_ws_;
};

}  // namespace

std::shared_ptr<DeviceSampler> make_cuda_device_sampler() { return std::make_shared<CudaDeviceSampler>(); }

}  // namespace pg
