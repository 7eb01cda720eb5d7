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

class CudaDeviceSampler final : public DeviceSampler {
 public:
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
