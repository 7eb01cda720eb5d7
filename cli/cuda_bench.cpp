// `peregrine bench` on CUDA (../shared/benchmarks.md): the HBM read ceiling and the bf16
// tensor-core rate of this GPU, then prefill (1K and 8K prompts), per-user decode at batch 1 after
// the prompt, per-layer decode time, decode throughput at larger batches, bytes read per token
// and the share of the bandwidth roofline reached; with --speculative-tokens, the verify and draft
// step costs per draft depth against their bytes bound. Table on stdout, JSON on request.
#include "cli/cuda_bench.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <memory>
#include <random>
#include <span>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/cuda/device_sampler_cuda.h"
#include "model/cuda/cuda_runner.h"
#include "model/cuda/device_weights.h"
#include "model/synthetic_config.h"
#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/common/device.h"
#include "ops/cuda/common/device_buffer.h"
#include "ops/cuda/common/probe.h"
#include "ops/cuda/gemm/gemm.h"

namespace pg::cli {
namespace {

namespace cu = ops::cuda;
using Json = nlohmann::ordered_json;

// The engine's greedy draft choice for draft_chain: on the GPU sampler's picker (the device
// chain), on the host by argmax where the runner falls back to its host loop.
class GreedyDraftPicker final : public DraftPicker {
 public:
  explicit GreedyDraftPicker(DeviceDraftPicker* device) : device_(device) {}
  int32_t pick(size_t, int64_t, std::span<const float> logits) override {
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  DeviceDraftPicker* device() override { return device_; }

 private:
  DeviceDraftPicker* device_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Times `fn` (which enqueues work on `s`) with device events: median ms of `reps` after a warm-up.
template <typename Fn>
Result<double> time_ms(cudaStream_t s, int reps, Fn&& fn) {
  cudaEvent_t e0, e1;
  PG_CUDA_TRY(cudaEventCreate(&e0));
  PG_CUDA_TRY(cudaEventCreate(&e1));
  std::vector<double> ms;
  Status st = ok_status();
  for (int r = -1; r < reps && st.ok(); ++r) {
    cudaEventRecord(e0, s);
    st = fn();
    cudaEventRecord(e1, s);
    if (cudaError_t err = cudaEventSynchronize(e1); err != cudaSuccess && st.ok())
      st = cu::cuda_error(err, "cudaEventSynchronize", __FILE__, __LINE__);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    if (r >= 0) ms.push_back(double(t));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  PG_TRY(st);
  return median(ms);
}

// The HBM read ceiling: a read-only reduction over 2 GiB (35x the L2), best of a few launch shapes.
Result<double> read_ceiling_gbps(cudaStream_t s) {
  const size_t bytes = size_t(2) << 30;
  PG_ASSIGN_OR_RETURN(auto buf, cu::DeviceBuffer<uint8_t>::create(bytes));
  PG_ASSIGN_OR_RETURN(auto sink, cu::DeviceBuffer<uint32_t>::create(1));
  PG_CUDA_TRY(cu::launch_fill(buf.data(), bytes / 4, cu::FillKind::kF32Pm1, 7, s));
  const int sms = cu::current_device_props().sm_count;
  double best = 0;
  for (cu::LoadKind kind : {cu::LoadKind::kNc, cu::LoadKind::kNcNoAlloc})
    for (int bps : {2, 4}) {
      PG_ASSIGN_OR_RETURN(double ms, time_ms(s, 10, [&]() -> Status {
        PG_CUDA_TRY(cu::launch_read_ceiling(buf.data(), bytes, sms * bps, 512, 8, kind, sink.data(), s));
        return ok_status();
      }));
      best = std::max(best, double(bytes) / (ms * 1e-3) / 1e9);
    }
  return best;
}

// The bf16 tensor-core rate through our prefill GEMM path: 8192^3.
Result<double> tensor_tflops(cudaStream_t s) {
  const int64_t n = 8192;
  PG_ASSIGN_OR_RETURN(auto x, cu::DeviceBuffer<float>::create(size_t(n * n)));
  PG_ASSIGN_OR_RETURN(auto wb, cu::DeviceBuffer<uint16_t>::create(size_t(n * n)));
  PG_ASSIGN_OR_RETURN(auto y, cu::DeviceBuffer<float>::create(size_t(n * n)));
  PG_CUDA_TRY(cu::launch_fill(x.data(), size_t(n * n), cu::FillKind::kF32Pm1, 1, s));
  PG_CUDA_TRY(cu::launch_fill(wb.data(), size_t(n * n), cu::FillKind::kBf16Pm1, 2, s));
  PG_ASSIGN_OR_RETURN(cu::GemmContext ctx, cu::GemmContext::create(n, n, n));
  const ops::Matrix w{ops::WeightFormat::kBF16, n, n, wb.data()};
  ops::LinearArgs a;
  a.x = x.data(), a.w = &w, a.y = y.data(), a.m = n;
  PG_ASSIGN_OR_RETURN(double ms, time_ms(s, 5, [&] { return cu::gemm_linear(ctx, a, s); }));
  return 2.0 * double(n) * double(n) * double(n) / (ms * 1e-3) / 1e12;
}

// FLOPs of a prefill of `T` tokens: 2 x the active parameters per token for every projection
// (experts at top_k + shared), plus the absorbed attention's 2 x heads x (2R + P) per attended
// position (T^2/2 positions causal), plus lm_head for the last token.
double prefill_flops(const ModelConfig& c, int64_t T) {
  const double H = double(c.hidden_size), nh = double(c.num_attention_heads), R = double(c.kv_lora_rank);
  const double P = double(c.qk_rope_head_dim), nope = double(c.qk_nope_head_dim), V = double(c.v_head_dim);
  double attn_params = (c.q_lora_rank ? H * double(*c.q_lora_rank) + double(*c.q_lora_rank) * nh * (nope + P)
                                      : H * nh * (nope + P)) +
                       H * (R + P) + nh * V * H + nh * (R * nope + V * R);
  double per_token = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const bool moe = c.n_routed_experts > 0 && l >= c.first_k_dense_replace;
    per_token += attn_params;
    per_token += moe ? 3.0 * H * double(c.moe_intermediate_size) * double(c.num_experts_per_tok + c.n_shared_experts) +
                           H * double(c.n_routed_experts)
                     : 3.0 * H * double(c.intermediate_size);
  }
  const double t = double(T);
  const double attn = double(c.num_hidden_layers) * 2.0 * nh * (2.0 * R + P) * t * (t + 1) / 2.0;
  return 2.0 * per_token * t + attn + 2.0 * H * double(c.vocab_size);
}

struct Seq {
  std::vector<int32_t> table;
};

int fail(const Status& st) {
  std::fprintf(stderr, "peregrine bench: %s\n", st.to_string().c_str());
  return 1;
}

}  // namespace

int run_cuda_bench(const CudaBenchOptions& o) {
  if (!cu::cuda_available()) return fail(failed_precondition("no usable GPU: {}", cu::cuda_unavailable_reason()));
  const int64_t max_batch = std::max<int64_t>(1, o.batches.empty() ? 1 : *std::max_element(o.batches.begin(), o.batches.end()));
  CudaRunnerOptions ro;
  ro.gpu_memory_utilization = o.gpu_memory_utilization;
  ro.max_num_seqs = max_batch;
  ro.use_graphs = o.graphs;
  if (o.kv_cache_dtype != "auto") ro.kv_bf16 = o.kv_cache_dtype == "bf16";
  // As the engine's runner when it drafts.
  ro.draft_head = o.speculative_tokens.empty() ? DraftHead::kModel : kEngineDraftHead;
  ro.max_tokens_per_step = std::max<int64_t>({2048, o.context, std::min<int64_t>(o.long_prefill, 8192)});
  ro.progress = [](const std::string& what, double f) {
    std::fprintf(stderr, "\rloading %5.1f%% %-24s", 100.0 * f, what.c_str());
    if (f >= 1.0) std::fprintf(stderr, "\n");
  };
  std::unique_ptr<CudaRunner> runner;
  std::string model_name;
  if (!o.synthetic.empty()) {
    auto cfg = synthetic_model_config(o.synthetic, o.layers);
    if (!cfg.ok()) return fail(cfg.status());
    // Drafting needs an MTP layer: one of the model's own shapes (an MoE block) when it has none.
    if (!o.speculative_tokens.empty()) cfg->num_nextn_predict_layers = std::max<int64_t>(1, cfg->num_nextn_predict_layers);
    if (o.dtype != "bf16" && o.dtype != "fp8" && o.dtype != "nvfp4")
      return fail(invalid_argument("--dtype must be bf16, fp8 or nvfp4, got '{}'", o.dtype));
    // KV for the largest batch at the measured context, or the long prefill, whichever is more.
    const int64_t ctx_need = o.context + o.decode_tokens + 8;
    ro.max_model_len = std::min<int64_t>(cfg->max_position_embeddings, std::max<int64_t>(ctx_need, o.long_prefill));
    ro.kv_blocks = std::max<int64_t>(max_batch * ((ctx_need + 63) / 64), (ro.max_model_len + 63) / 64) + 1;
    const SyntheticDtype dt = o.dtype == "fp8"     ? SyntheticDtype::kFp8
                              : o.dtype == "nvfp4" ? SyntheticDtype::kNvfp4
                                                   : SyntheticDtype::kBF16;
    auto r = CudaRunner::synthetic(*cfg, dt, 1234, ro);
    if (!r.ok()) return fail(r.status());
    runner = std::move(r).value();
    model_name = o.synthetic + (o.layers ? " (" + std::to_string(o.layers) + " layers)" : "") + " " + o.dtype;
  } else {
    auto host = DeepseekModel::load(o.model_dir);
    if (!host.ok()) return fail(host.status());
    auto r = CudaRunner::create(std::move(host).value(), ro);
    if (!r.ok()) return fail(r.status());
    runner = std::move(r).value();
    model_name = o.model_dir;
  }
  CudaRunner& R = *runner;
  const ModelConfig& c = R.config();
  cudaStream_t s = R.stream();
  const int64_t bs = R.kv_block_size();
  if (o.context + o.decode_tokens + 1 > c.max_position_embeddings)
    return fail(invalid_argument("--context {} + --decode-tokens {} exceed the model's context of {}", o.context,
                                 o.decode_tokens, c.max_position_embeddings));

  Json j;
  j["model"] = model_name;
  j["gpu"] = cu::current_device_props().name;
  j["runner"] = R.describe();
  j["weights_gb"] = double(R.weight_bytes()) / 1e9;
  j["kv_cache_gb"] = double(R.kv_cache_bytes()) / 1e9;

  auto bw = read_ceiling_gbps(s);
  if (!bw.ok()) return fail(bw.status());
  j["hbm_read_ceiling_gbps"] = *bw;
  std::fprintf(stderr, "HBM read ceiling %.0f GB/s\n", *bw);
  auto tf = tensor_tflops(s);
  if (!tf.ok()) return fail(tf.status());
  j["bf16_tensor_tflops"] = *tf;
  std::fprintf(stderr, "bf16 tensor-core rate (8192^3 through gemm_linear) %.0f TFLOP/s\n", *tf);

  std::mt19937 rng(7);
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& v : t) v = int32_t(rng() % uint32_t(c.vocab_size));
    return t;
  };
  auto blocks_from = [&](int64_t first, int64_t n_pos) {
    std::vector<int32_t> t(static_cast<size_t>((n_pos + bs - 1) / bs));
    std::iota(t.begin(), t.end(), int32_t(first));
    return t;
  };

  // ---- prefill, batch 1 ----
  auto prefill = [&](int64_t T, int reps) -> Result<double> {
    const std::vector<int32_t> prompt = random_tokens(T);
    const std::vector<int32_t> table = blocks_from(0, T);
    const int64_t chunk = ro.max_tokens_per_step;
    return time_ms(s, reps, [&]() -> Status {
      for (int64_t p = 0; p < T; p += chunk) {
        const int64_t n = std::min(chunk, T - p);
        SeqStep st{std::span(prompt).subspan(size_t(p), size_t(n)), p, table, false, p + n < T};
        PG_TRY(R.step_async(std::span(&st, 1)));
      }
      return ok_status();
    });
  };
  auto pf1 = prefill(o.context, 3);
  if (!pf1.ok()) return fail(pf1.status());
  j["prefill"] = Json::array();
  j["prefill"].push_back({{"tokens", o.context}, {"ms", *pf1}, {"tokens_per_s", double(o.context) / (*pf1 * 1e-3)},
                          {"tflops", prefill_flops(c, o.context) / (*pf1 * 1e-3) / 1e12}});
  std::fprintf(stderr, "prefill %lld tokens: %.1f ms\n", (long long)o.context, *pf1);

  // ---- decode, batch 1, after the prompt (the prefill above left its KV in blocks 0..) ----
  const std::vector<int32_t> table1 = blocks_from(0, o.context + o.decode_tokens + 1);
  const std::vector<int32_t> dec_tokens = random_tokens(o.decode_tokens);
  // PEREGRINE_PROFILE_DECODE=1: a profiler started with --profile-from-start off (ncu, section 5d of
  // scripts/gpu_suite.sh) sees these decode steps only, not the prefills' thousands of kernels (and,
  // with --speculative-tokens, two replays of each k's verify graph after its timing);
  // PEREGRINE_PROFILE_DECODE=verify: the verify replays only (scripts/ncu_kernels.sh's SPEC=K), so
  // that a kernel both steps launch is profiled at k + 1 tokens from its first launch.
  const char* profile_env = std::getenv("PEREGRINE_PROFILE_DECODE");
  const bool profile_decode = profile_env != nullptr;
  const bool profile_plain = profile_decode && std::string_view(profile_env) != "verify";
  if (profile_plain) cudaProfilerStart();
  auto decode1 = time_ms(s, o.repeats, [&]() -> Status {
    for (int64_t i = 0; i < o.decode_tokens; ++i) {
      SeqStep st{std::span(&dec_tokens[size_t(i)], 1), o.context + i, table1, false};
      PG_TRY(R.step_async(std::span(&st, 1)));
    }
    return ok_status();
  });
  if (profile_plain) cudaProfilerStop();
  if (!decode1.ok()) return fail(decode1.status());
  const double step_ms = *decode1 / double(o.decode_tokens);
  const int64_t mid_ctx = o.context + o.decode_tokens / 2;
  const StepBytes b1 = R.step_bytes(1, mid_ctx);
  const double tps1 = 1e3 / step_ms, roof1 = *bw * 1e9 / b1.total();
  j["decode_batch1"] = {{"context", o.context},
                        {"tokens", o.decode_tokens},
                        {"ms_per_token", step_ms},
                        {"tokens_per_s", tps1},
                        {"bytes_per_token", b1.total()},
                        {"bytes", {{"attention", b1.attention}, {"router", b1.router}, {"experts", b1.experts},
                                   {"dense_mlp", b1.dense_mlp}, {"lm_head", b1.lm_head}, {"kv_cache", b1.kv_cache},
                                   {"other", b1.other}}},
                        {"roofline_tokens_per_s", roof1},
                        {"roofline_pct", 100.0 * tps1 / roof1},
                        {"achieved_gbps", b1.total() * tps1 / 1e9}};
  std::fprintf(stderr, "decode batch 1: %.3f ms/token\n", step_ms);

  // ---- speculative decoding at batch 1, after the prompt: verify and draft step costs per k ----
  // Verify: one sequence carrying 1 + k tokens at positions context.. with every row's logits
  // (a replayed graph, like the decode steps above). Its bound: the plain step plus reading the
  // routed experts its extra tokens add (distinct experts per MoE layer beyond the plain step's
  // top_k, counted from a routing record of one eager run, outside the timings) at the measured
  // HBM read rate, x1.1. Draft: draft_chain as the engine calls it (the MTP catch-up pass over the
  // positions the verify step kept, depths 1..k-1 on the device, the drafts' ids back), weighted
  // over how many drafts were accepted. Effective tokens/s: E(k) = 1 + a + ... + a^k tokens per
  // (verify + draft) at per-draft acceptance a.
  int64_t first_dense = -1, first_moe = -1;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const bool moe = c.n_routed_experts > 0 && l >= c.first_k_dense_replace;
    if (moe && first_moe < 0) first_moe = l;
    if (!moe && first_dense < 0) first_dense = l;
  }
  // Where a verify step's time goes: the first MoE layer alone at q = k + 1 tokens of one
  // sequence (positions context - q .. context - 1) next to q = 1, as a replayed graph of the
  // layer (us per layer) and eagerly with an event after each op (us per op).
  struct LayerAtQ {
    double graph_us = 0;
    std::vector<std::pair<std::string, double>> ops;
  };
  auto moe_layer_at = [&](int64_t q) -> Result<LayerAtQ> {
    LayerAtQ r;
    PG_ASSIGN_OR_RETURN(r.graph_us, R.time_layer(first_moe, 1, o.context, 20, 7, q));
    PG_ASSIGN_OR_RETURN(r.ops, R.profile_layer(first_moe, 1, o.context, 9, q));
    return r;
  };
  auto ops_json = [](const std::vector<std::pair<std::string, double>>& ops) {
    Json a = Json::array();
    for (const auto& [name, t] : ops) a.push_back({{"op", name}, {"us", t}});
    return a;
  };
  LayerAtQ moe_q1;
  if (!o.speculative_tokens.empty() && first_moe >= 0) {
    auto r = moe_layer_at(1);
    if (!r.ok()) return fail(r.status());
    moe_q1 = std::move(r).value();
  }
  // Drafts picked greedily on the GPU sampler, as the engine's device chain picks them.
  const std::shared_ptr<DeviceSampler> sampler = make_cuda_device_sampler();
  SamplingParams greedy;
  greedy.temperature = 0;
  const DeviceSampler::Row greedy_row{&greedy, RngPosition{}, nullptr};
  if (Status st = sampler->set_draft_rows(std::span(&greedy_row, 1), c.vocab_size); !st.ok()) return fail(st);
  GreedyDraftPicker draft_picker(sampler->draft_picker());
  j["speculative"] = Json::array();
  for (int64_t k : o.speculative_tokens) {
    const int64_t q = k + 1;
    if (o.context + q + k > int64_t(table1.size()) * bs) return fail(invalid_argument("k = {} exceeds the KV table", k));
    const std::vector<int32_t> vt = random_tokens(q);
    const SeqStep vs{vt, o.context, table1, /*all_logits=*/true};
    auto distinct_per_layer = [&](const SeqStep& st) -> Result<std::vector<int64_t>> {
      R.set_record_routing(true);
      Status run = R.step_async(std::span(&st, 1));
      auto rec = run.ok() ? R.last_routing() : Result<std::vector<std::vector<int32_t>>>(run);
      R.set_record_routing(false);
      if (!rec.ok()) return rec.status();
      std::vector<int64_t> d;
      for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        std::vector<int32_t> ids = (*rec)[size_t(l)];
        if (ids.empty()) continue;  // dense layer
        std::sort(ids.begin(), ids.end());
        d.push_back(int64_t(std::unique(ids.begin(), ids.end()) - ids.begin()));
      }
      return d;
    };
    auto d_verify = distinct_per_layer(vs);
    if (!d_verify.ok()) return fail(d_verify.status());
    const SeqStep ps{std::span(vt).first(1), o.context, table1, false};
    auto d_plain = distinct_per_layer(ps);
    if (!d_plain.ok()) return fail(d_plain.status());
    int64_t extra = 0, d_min = 1 << 30, d_max = 0;
    double d_sum = 0;
    for (size_t l = 0; l < d_verify->size(); ++l) {
      extra += (*d_verify)[l] - (*d_plain)[l];
      d_min = std::min(d_min, (*d_verify)[l]), d_max = std::max(d_max, (*d_verify)[l]);
      d_sum += double((*d_verify)[l]);
    }
    const double n_moe = std::max<double>(1.0, double(d_verify->size()));
    const double extra_bytes = double(extra) * R.routed_expert_bytes();
    const int inner = 16;
    auto vms = time_ms(s, std::max(o.repeats, 9), [&]() -> Status {
      for (int i = 0; i < inner; ++i) PG_TRY(R.step_async(std::span(&vs, 1)));
      return ok_status();
    });
    if (!vms.ok()) return fail(vms.status());
    const double verify_ms = *vms / inner;
    if (profile_decode) {  // two replays of this k's verify graph for the profiler (after the decode steps)
      cudaProfilerStart();
      for (int i = 0; i < 2; ++i)
        if (Status st = R.step_async(std::span(&vs, 1)); !st.ok()) return fail(st);
      if (Status st = R.synchronize(); !st.ok()) return fail(st);
      cudaProfilerStop();
    }
    // PEREGRINE_BENCH_VERIFY_LAST=1 (scripts/timeline_run.sh's verify mode): stop after this k's
    // verify replays, no draft timing and no table, so that the timeline probe's newest records
    // (written at exit) are verify steps only.
    if (const char* e = std::getenv("PEREGRINE_BENCH_VERIFY_LAST"); e && std::string_view(e) == "1") {
      if (Status st = R.synchronize(); !st.ok()) return fail(st);
      std::printf("verify k=%lld %.3f ms (stopped after it: PEREGRINE_BENCH_VERIFY_LAST=1)\n", (long long)k, verify_ms);
      return 0;
    }
    const double bound_ms = 1.1 * (step_ms + extra_bytes / (*bw * 1e9) * 1e3);
    Json row = {{"k", k},
                {"tokens", q},
                {"plain_ms", step_ms},
                {"verify_ms", verify_ms},
                {"distinct_experts_per_moe_layer", d_sum / n_moe},
                {"distinct_experts_min", d_min},
                {"distinct_experts_max", d_max},
                {"plain_experts_per_moe_layer", c.num_experts_per_tok},
                {"extra_expert_bytes", extra_bytes},
                {"bound_ms", bound_ms},
                {"meets_bound", verify_ms <= bound_ms}};
    if (R.n_mtp_layers() > 0 && draft_picker.device()) {
      // The draft as the engine runs it (Engine::draft_next): draft_chain with the GPU sampler's
      // greedy picker: the MTP catch-up pass over the 1 + m positions the verify step kept (m
      // drafts accepted), then depths 1..k-1 on the device, the drafts' ids back, one sync. Its
      // cost per m; at acceptance a, m = j with probability a^j (1 - a) (j < k) and a^k (j = k).
      const int64_t H = c.hidden_size, last = o.context + q;  // the bonus token's position
      std::vector<int32_t> ct = random_tokens(q);
      std::vector<double> draft_at;  // [m]: ms with m drafts accepted
      for (int64_t m = 0; m <= k; ++m) {
        const int64_t n_valid = 1 + m;
        const SeqStep cs{std::span(ct).first(size_t(n_valid)), last - n_valid, table1, false};
        std::vector<float> h0(static_cast<size_t>(n_valid * H));
        for (float& v : h0) v = float(int64_t(rng() % 2001) - 1000) / 1000.0f;
        DraftRow row_d;
        row_d.n_drafts = k, row_d.last_pos = last, row_d.block_table = table1;
        std::vector<double> wall;
        for (int r = -1; r < std::max(o.repeats, 9); ++r) {  // r = -1: warm-up (captures the graphs)
          if (Status st = R.synchronize(); !st.ok()) return fail(st);
          const auto t0 = std::chrono::steady_clock::now();
          DraftOutput dout;
          if (Status st = R.draft_chain(0, std::span(&cs, 1), h0, std::span(&row_d, 1), draft_picker, dout); !st.ok())
            return fail(st);
          const auto t1 = std::chrono::steady_clock::now();
          if (r >= 0) wall.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        draft_at.push_back(median(wall));
      }
      const double a = o.acceptance_rate;
      double expected = 0, pw = 1, draft_ms = 0;
      for (int64_t i = 0; i <= k; ++i) expected += pw, pw *= a;
      pw = 1;
      for (int64_t m = 0; m <= k; ++m, pw *= a) draft_ms += (m < k ? pw * (1 - a) : pw) * draft_at[size_t(m)];
      row["draft_ms"] = draft_ms;
      row["draft_ms_by_accepted"] = draft_at;
      row["acceptance_rate"] = a;
      row["expected_tokens_per_step"] = expected;
      row["effective_tokens_per_s"] = expected * 1e3 / (verify_ms + draft_ms);
      row["plain_tokens_per_s"] = 1e3 / step_ms;
    }
    if (first_moe >= 0) {
      auto lq = moe_layer_at(q);
      if (!lq.ok()) return fail(lq.status());
      row["moe_layer"] = {{"layer", first_moe},
                          {"q1_graph_us", moe_q1.graph_us},
                          {"q_graph_us", lq->graph_us},
                          {"q1_ops_eager_us", ops_json(moe_q1.ops)},
                          {"q_ops_eager_us", ops_json(lq->ops)}};
    }
    j["speculative"].push_back(row);
    std::fprintf(stderr, "verify k=%lld: %.3f ms (bound %.3f ms)\n", (long long)k, verify_ms, bound_ms);
  }

  // ---- per-layer decode time at batch 1 (graph of one layer, replayed) ----
  j["layers"] = Json::array();
  for (int64_t l : {first_dense, first_moe}) {
    if (l < 0) continue;
    auto us = R.time_layer(l, 1, o.context, 20, 7);
    if (!us.ok()) return fail(us.status());
    const bool moe = l == first_moe;
    // Bytes of this one layer: the step's per-layer share of its kind.
    const StepBytes one = R.step_bytes(1, o.context);
    const int64_t n_moe = std::max<int64_t>(1, c.num_hidden_layers - c.first_k_dense_replace);
    const int64_t n_dense = std::max<int64_t>(1, c.first_k_dense_replace);
    const double bytes = one.attention / double(c.num_hidden_layers) + one.kv_cache / double(c.num_hidden_layers) +
                         (moe ? (one.experts + one.router) / double(n_moe) : one.dense_mlp / double(n_dense));
    const double floor_us = bytes / (*bw * 1e9) * 1e6;
    auto prof = R.profile_layer(l, 1, o.context, 9);
    if (!prof.ok()) return fail(prof.status());
    Json ops = Json::array();
    for (const auto& [name, t] : *prof) ops.push_back({{"op", name}, {"us", t}});
    j["layers"].push_back({{"layer", l}, {"kind", moe ? "moe" : "dense"}, {"us", *us}, {"bytes", bytes},
                           {"floor_us", floor_us}, {"x_floor", *us / floor_us}, {"ops_eager_us", ops}});
  }

  // ---- decode throughput at larger batches (KV of each sequence: `context` positions, zeroed) ----
  j["decode_batches"] = Json::array();
  for (int64_t B : o.batches) {
    if (B <= 1) continue;
    const int64_t per = (o.context + 40 + bs - 1) / bs;
    if (B * per > R.n_kv_blocks()) return fail(resource_exhausted("batch {} needs {} KV blocks", B, B * per));
    std::vector<std::vector<int32_t>> tables(static_cast<size_t>(B)), toks(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) tables[size_t(b)] = blocks_from(b * per, per * bs), toks[size_t(b)] = random_tokens(1);
    const int steps = 32;
    auto ms = time_ms(s, 3, [&]() -> Status {
      for (int i = 0; i < steps; ++i) {
        std::vector<SeqStep> st;
        for (int64_t b = 0; b < B; ++b) st.push_back(SeqStep{toks[size_t(b)], o.context + i, tables[size_t(b)], false});
        PG_TRY(R.step_async(st));
      }
      return ok_status();
    });
    if (!ms.ok()) return fail(ms.status());
    const double step = *ms / steps;
    Json row = {{"batch", B}, {"context", o.context}, {"ms_per_step", step},
                {"tokens_per_s", double(B) * 1e3 / step}, {"per_user_tokens_per_s", 1e3 / step}};
    // Where the step's time goes at this batch: the first MoE layer's ops (else the first dense),
    // eager. Only below the step size at which eager steps take the prefill GEMMs for the experts
    // (graphs never do), so that the figures are those of the kernels the graph replays.
    const int64_t pl = first_moe >= 0 ? first_moe : first_dense;
    if (pl >= 0 && B < CudaRunner::kTensorCoreExpertsMinRows) {
      auto prof = R.profile_layer(pl, B, o.context, 5);
      if (!prof.ok()) return fail(prof.status());
      Json ops = Json::array();
      for (const auto& [name, t] : *prof) ops.push_back({{"op", name}, {"us", t}});
      row["layer"] = pl;
      row["ops_eager_us"] = ops;
    }
    j["decode_batches"].push_back(row);
  }

  // ---- long prefill ----
  if (o.long_prefill > 0) {
    const int64_t T = std::min<int64_t>(o.long_prefill, c.max_position_embeddings);
    if ((T + bs - 1) / bs <= R.n_kv_blocks()) {
      auto ms = prefill(T, 1);
      if (!ms.ok()) return fail(ms.status());
      const double tflops = prefill_flops(c, T) / (*ms * 1e-3) / 1e12;
      j["prefill"].push_back({{"tokens", T}, {"ms", *ms}, {"tokens_per_s", double(T) / (*ms * 1e-3)},
                              {"tflops", tflops}, {"tensor_pct", 100.0 * tflops / *tf}});
    }
  }
  if (Status st = R.synchronize(); !st.ok()) return fail(st);

  if (!o.json_path.empty()) std::ofstream(o.json_path) << j.dump(2) << "\n";
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model        %s\n", model_name.c_str());
  std::printf("runner       %s\n", R.describe().c_str());
  std::printf("ceilings     HBM read %.0f GB/s, bf16 tensor %.0f TFLOP/s\n", *bw, *tf);
  std::printf("weights      %.2f GB on the GPU, KV cache %.2f GB\n", j["weights_gb"].get<double>(),
              j["kv_cache_gb"].get<double>());
  std::printf("decode b=1   %.1f tok/s (%.3f ms/token) after %lld prompt tokens; %.1f MB/token -> roofline %.0f "
              "tok/s: %.1f%% (%.0f GB/s)\n",
              tps1, step_ms, (long long)o.context, b1.total() / 1e6, roof1, 100.0 * tps1 / roof1,
              b1.total() * tps1 / 1e9);
  for (const auto& l : j["layers"])
    std::printf("layer %-3lld    %-5s %.1f us (bytes floor %.1f us, x%.2f)\n", (long long)l["layer"].get<int64_t>(),
                l["kind"].get<std::string>().c_str(), l["us"].get<double>(), l["floor_us"].get<double>(),
                l["x_floor"].get<double>());
  for (const auto& l : j["layers"]) {
    std::printf("  ops of layer %lld (eager, events between launches; us):", (long long)l["layer"].get<int64_t>());
    for (const auto& op : l["ops_eager_us"])
      std::printf(" %s %.1f", op["op"].get<std::string>().c_str(), op["us"].get<double>());
    std::printf("\n");
  }
  for (const auto& p : j["prefill"])
    std::printf("prefill      %lld tokens: %.1f ms, %.0f tok/s, %.0f TFLOP/s%s\n", (long long)p["tokens"].get<int64_t>(),
                p["ms"].get<double>(), p["tokens_per_s"].get<double>(), p["tflops"].get<double>(),
                p.contains("tensor_pct") ? (" (" + std::to_string(int(p["tensor_pct"].get<double>())) + "% of tensor)").c_str() : "");
  for (const auto& v : j["speculative"]) {
    std::printf("spec k=%lld   verify %.3f ms (plain %.3f ms; %.1f distinct experts per MoE layer, %lld..%lld, vs %lld; "
                "+%.1f MB -> bound %.3f ms: %s)",
                (long long)v["k"].get<int64_t>(), v["verify_ms"].get<double>(), v["plain_ms"].get<double>(),
                v["distinct_experts_per_moe_layer"].get<double>(), (long long)v["distinct_experts_min"].get<int64_t>(),
                (long long)v["distinct_experts_max"].get<int64_t>(),
                (long long)v["plain_experts_per_moe_layer"].get<int64_t>(), v["extra_expert_bytes"].get<double>() / 1e6,
                v["bound_ms"].get<double>(), v["meets_bound"].get<bool>() ? "met" : "MISSED");
    if (v.contains("draft_ms")) {
      std::printf("; draft %.3f ms (with 0..%lld accepted:", v["draft_ms"].get<double>(),
                  (long long)v["k"].get<int64_t>());
      for (const auto& d : v["draft_ms_by_accepted"]) std::printf(" %.3f", d.get<double>());
      std::printf("); at acceptance %.3f: %.2f tokens/step, %.0f tok/s effective vs %.0f plain",
                  v["acceptance_rate"].get<double>(),
                  v["expected_tokens_per_step"].get<double>(), v["effective_tokens_per_s"].get<double>(),
                  v["plain_tokens_per_s"].get<double>());
    }
    std::printf("\n");
    if (v.contains("moe_layer")) {
      // Ops are matched by name (a layer's op names are unique); one only at q shows "-" at q = 1.
      const Json& ml = v["moe_layer"];
      std::printf("  moe layer %lld at q=1 -> q=%lld: graph %.1f -> %.1f us; ops (eager us):",
                  (long long)ml["layer"].get<int64_t>(), (long long)v["tokens"].get<int64_t>(),
                  ml["q1_graph_us"].get<double>(), ml["q_graph_us"].get<double>());
      for (const auto& op : ml["q_ops_eager_us"]) {
        const std::string name = op["op"].get<std::string>();
        double t1 = -1;
        for (const auto& o1 : ml["q1_ops_eager_us"])
          if (o1["op"].get<std::string>() == name) t1 = o1["us"].get<double>();
        if (t1 >= 0) std::printf(" %s %.1f->%.1f", name.c_str(), t1, op["us"].get<double>());
        else std::printf(" %s -->%.1f", name.c_str(), op["us"].get<double>());
      }
      std::printf("\n");
    }
  }
  for (const auto& d : j["decode_batches"]) {
    std::printf("decode b=%-3lld %.0f tok/s total, %.1f tok/s per user (%.3f ms/step)\n",
                (long long)d["batch"].get<int64_t>(), d["tokens_per_s"].get<double>(),
                d["per_user_tokens_per_s"].get<double>(), d["ms_per_step"].get<double>());
    if (!d.contains("ops_eager_us")) continue;
    std::printf("  ops of layer %lld at b=%lld (eager, events between launches; us):", (long long)d["layer"].get<int64_t>(),
                (long long)d["batch"].get<int64_t>());
    for (const auto& op : d["ops_eager_us"]) std::printf(" %s %.1f", op["op"].get<std::string>().c_str(), op["us"].get<double>());
    std::printf("\n");
  }
  return 0;
}

}  // namespace pg::cli
