// CudaRunner: device weights, the memory plan, the per-layer launch sequence and the step graphs
// (decode, verify, MTP draft).
// Shapes on every buffer: T = new tokens of the step, H = hidden_size, nh = heads,
// R = kv_lora_rank, P = qk_rope_head_dim, nope = qk_nope_head_dim, V = v_head_dim, D = R + P.
// The per-layer order mirrors DeepseekModel::layer_forward (the CPU reference).
#include "model/cuda/cuda_runner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>

#include "model/cuda/device_weights.h"
#include "model/rope_yarn.h"
#include "ops/cuda/common/cuda_check.h"
#include "ops/cuda/common/device.h"
#include "ops/cuda/common/env.h"
#include "ops/cuda/common/probe.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm/gemm.h"
#include "ops/cuda/head_linear_gemm.h"
#include "ops/cuda/linear_norm/linear_norm.h"
#include "ops/cuda/mla_prefill.h"
#include "ops/cuda/moe_experts_gemm.h"
#include "ops/cuda/mla_attention.h"
#include "ops/cuda/mla_ops.h"
#include "ops/cuda/moe_experts/moe_experts.h"
#include "ops/cuda/moe_router.h"

namespace pg {

namespace cu = ops::cuda;
using ops::Matrix;

namespace {

constexpr int64_t kPrefillGemmMinRows = CudaRunner::kTensorCoreExpertsMinRows;
// Pinned staging slots for step inputs: a slot is rewritten only after the copy that read it ran.
constexpr int kStageSlots = 4;

size_t align16(size_t n) { return (n + 15) & ~size_t(15); }

// One step's inputs, packed contiguously (offsets depend on T and n_seqs only, so the graph of a
// decode bucket sees fixed addresses): tokens, out_rows, token_seq [T] int32; positions,
// ctx_len [T] int64; tables [n_seqs, table_stride] int32.
struct InputLayout {
  size_t tokens = 0, out_rows = 0, token_seq = 0, positions = 0, ctx_len = 0, tables = 0, bytes = 0;
  InputLayout(int64_t T, int64_t n_seqs, int64_t stride) {
    size_t o = 0;
    tokens = o, o += align16(size_t(T) * 4);
    out_rows = o, o += align16(size_t(T) * 4);
    token_seq = o, o += align16(size_t(T) * 4);
    positions = o, o += align16(size_t(T) * 8);
    ctx_len = o, o += align16(size_t(T) * 8);
    tables = o, o += align16(size_t(n_seqs * stride) * 4);
    bytes = o;
  }
};

// A draft chain's inputs for depths 1..kMaxDraftDepth-1 at fixed offsets (the chain graphs of
// every bucket read them there): out_rows [max_seqs] int32 (identity); token_seq [depths,
// max_seqs] int32; positions, ctx_len [depths, max_seqs] int64; tables [max_seqs + 1,
// table_stride] int32 (row `bucket`: the scratch block, for rows that draft no deeper).
struct ChainLayout {
  size_t out_rows = 0, token_seq = 0, positions = 0, ctx_len = 0, tables = 0, bytes = 0;
  ChainLayout(int64_t max_seqs, int64_t stride) {
    const size_t n = size_t((kMaxDraftDepth - 1) * max_seqs);
    size_t o = 0;
    out_rows = o, o += align16(size_t(max_seqs) * 4);
    token_seq = o, o += align16(n * 4);
    positions = o, o += align16(n * 8);
    ctx_len = o, o += align16(n * 8);
    tables = o, o += align16(size_t((max_seqs + 1) * stride) * 4);
    bytes = o;
  }
};

}  // namespace

struct CudaRunner::Impl {
  ModelConfig cfg;
  CudaRunnerOptions opt;
  DeviceWeights w;
  cudaStream_t stream = nullptr;
  cu::DeviceArena acts;  // activations, KV cache, workspaces, inputs

  ops::RopeTable rope;
  float* inv_freq = nullptr;  // [P/2] f32
  float* cos_sin = nullptr;   // [Tm, P] f32: the step's rope cos / sin (rope_cos_sin), read by every layer's mla_prep
  float softmax_scale = 1.0f;

  // Paged latent KV cache [n_cache_layers][n_blocks + 1][block_size][D] f32 (kv), or bf16 (kv16:
  // opt.kv_bf16); the last block is the scratch block padded rows of a graph bucket write and read.
  float* kv = nullptr;
  uint16_t* kv16 = nullptr;
  size_t kv_elem_bytes() const { return opt.kv_bf16 ? 2 : 4; }
  int64_t n_blocks = 0, block_size = 0, D = 0, n_cache_layers = 0, max_model_len = 0, table_stride = 0;

  // Activations (f32), sized for Tm tokens.
  int64_t Tm = 0, max_seqs = 0, logit_rows = 0;
  float *x = nullptr, *a = nullptr, *qa = nullptr, *q = nullptr, *kvb = nullptr, *q_lat = nullptr,
        *o_lat = nullptr, *o = nullptr, *router_logits = nullptr, *expert_w = nullptr, *hidden_all = nullptr,
        *hidden = nullptr, *normed = nullptr, *logits = nullptr, *cat = nullptr, *qkv = nullptr;
  int32_t* expert_idx = nullptr;
  unsigned* router_counter = nullptr;  // moe_router's last-block counter (zero between launches)
  unsigned* norm_counter = nullptr;    // linear_norm's (out_norm) last-block counter, likewise
  float* mla_ws = nullptr;
  size_t mla_ws_floats = 0;
  void* moe_ws = nullptr;
  size_t moe_ws_bytes = 0;
  // Prefill on tensor cores (not in exact mode): the experts (moe_experts_gemm, which syncs the
  // host once per pass: never inside a graph) and the per-head products, sharing one scratch.
  void* prefill_ws = nullptr;
  size_t prefill_ws_bytes = 0;
  bool capturing = false;  // inside a graph capture: only the capturable ops
  std::unique_ptr<cu::GemmContext> gemm;

  uint8_t* d_inputs = nullptr;
  size_t inputs_capacity = 0;
  std::array<uint8_t*, kStageSlots> stage{};
  std::array<cudaEvent_t, kStageSlots> stage_done{};
  int stage_slot = 0;

  // Graphs by (kind, bucket, q): kind kMainStep or kMtpStep + mtp_idx; q new tokens per
  // sequence (1: decode or draft, 2.. : verify). Captured on a key's first step.
  static constexpr int64_t kMainStep = 0, kMtpStep = 1;
  std::map<std::array<int64_t, 3>, cudaGraphExec_t> graphs;
  CudaGraphCounts counts;
  int64_t last_rows = 0;  // logits rows of the last step

  // Draft chains (draft_chain): the inputs (ChainLayout) and their pinned staging (rewritten only
  // after the previous chain's closing synchronization), the picks [kMaxDraftDepth, max_seqs]
  // int32 on the device and their pinned copy, pinned room for sampled rows' logits, and the
  // chain graphs by (kind, bucket, k) with the picker generation they captured.
  uint8_t* d_chain = nullptr;
  uint8_t* chain_stage = nullptr;
  int32_t* chain_tok = nullptr;
  int32_t* chain_tok_host = nullptr;
  float* chain_logits_host = nullptr;
  size_t chain_logits_floats = 0;
  static constexpr int64_t kChainStep = 64;  // + mtp_idx
  std::map<std::array<int64_t, 3>, std::pair<cudaGraphExec_t, uint64_t>> chain_graphs;

  // Routing record (set_record_routing): [n_cache_layers][Tm * top_k] int32 on the device, and
  // the token count of the last step that ran each layer (-1: dense or not run).
  int32_t* routing_rec = nullptr;
  std::vector<int64_t> routing_T;

  ~Impl() {
    for (auto& [k, g] : graphs) cudaGraphExecDestroy(g);
    for (auto& [k, g] : chain_graphs) cudaGraphExecDestroy(g.first);
    if (chain_stage) cudaFreeHost(chain_stage);
    if (chain_tok_host) cudaFreeHost(chain_tok_host);
    if (chain_logits_host) cudaFreeHost(chain_logits_host);
    if (routing_rec) cudaFree(routing_rec);
    for (int i = 0; i < kStageSlots; ++i) {
      if (stage[i]) cudaFreeHost(stage[i]);
      if (stage_done[i]) cudaEventDestroy(stage_done[i]);
    }
    if (stream) cudaStreamDestroy(stream);
  }

  // ---- one step's device pointers ----
  struct Step {
    int64_t T = 0, n_seqs = 0, n_rows = 0, max_ctx = 0;
    bool rows_are_tokens = false;  // out rows = every token in order (no gather)
    const int32_t* tokens = nullptr;
    const int32_t* out_rows = nullptr;
    const int32_t* token_seq = nullptr;
    const int64_t* positions = nullptr;
    const int64_t* ctx_len = nullptr;
    const int32_t* tables = nullptr;
    // Host: the step's tokens as runs of one sequence at consecutive positions; filled when every
    // run has >= kPrefillGemmMinRows tokens (a prefill step: attention on tensor cores), else empty.
    std::vector<cu::MlaPrefillRun> prefill_runs;
  };

  Status init_buffers();
  Status plan_kv();
  Step stage_inputs_to(const StepLayout& L, Step s, uint8_t* host);
  Result<Step> upload(const StepLayout& L);
  // f32_input: keep this projection on the f32-activation kernels at any m (the router: a
  // routing decision must not hinge on bf16 rounding of its input).
  Status lin(const float* x_, const Matrix& W, float* y, int64_t m, bool acc = false, int64_t xs = 0, int64_t ys = 0,
             bool f32_input = false);
  // Profiling (profile_layer): an event after each op of a layer, with its name.
  Status mark(const char* name) {
    if (capturing && !knockout.empty()) {  // the capture's node count at each op's end
      cudaStreamCaptureStatus st;
      cudaGraph_t g = nullptr;
      PG_CUDA_TRY(cudaStreamGetCaptureInfo(stream, &st, nullptr, &g));
      size_t n = 0;
      if (st == cudaStreamCaptureStatusActive && g) PG_CUDA_TRY(cudaGraphGetNodes(g, nullptr, &n));
      capture_marks.push_back({n, name});
    }
    if (!prof) return ok_status();
    cudaEvent_t e;
    PG_CUDA_TRY(cudaEventCreate(&e));
    prof->push_back({name, e});
    PG_CUDA_TRY(cudaEventRecord(e, stream));
    return ok_status();
  }
  std::vector<std::pair<std::string, cudaEvent_t>>* prof = nullptr;
  // PEREGRINE_KNOCKOUT=op,op,... or op/op/... (a timing probe; the output is garbage): the kernels
  // of the ops whose mark() names (profile_layer's) contain one of the items run empty in every
  // captured graph ("tail": what follows the last mark: the final norm, lm_head), so `peregrine
  // bench` says what they cost inside the step; an item "k:NAME" empties the kernels whose mangled
  // names contain NAME wherever they are (k:moe_gate_up, k:moe_down: the two halves of moe_experts).
  // capture_marks: (nodes captured so far, name) at each mark.
  std::string knockout = [] {
    const char* v = std::getenv("PEREGRINE_KNOCKOUT");
    return std::string(v ? v : "");
  }();
  std::vector<std::pair<size_t, std::string>> capture_marks;
  Status knock_out(cudaGraph_t g);
  Status norm(const float* x_, const float* wt, float* y, int64_t m, int64_t n, int64_t xs = 0, int64_t ys = 0);
  // fused_norms (decode-sized steps): whether a projection of W at m rows takes linear_norm (the
  // GEMV lin() would launch), and the two forms. NVFP4 outside exact mode (the f16 tensor-core
  // GEMV): at one token, where linear_norm has that kernel.
  bool fuse_norm(const Matrix& W, int64_t m) const {
    if (!opt.fused_norms || m > cu::kLinearNormMaxRows || prefill_path(m)) return false;
    if (W.format != ops::WeightFormat::kNvfp4 || opt.exact) return true;
    return m == 1 && cu::linear_norm_nvfp4_fits(W);
  }
  // y = (rmsnorm(x_) * wt) · Wᵀ, x_ rows of stride xs.
  Status norm_lin(const float* x_, const float* wt, const Matrix& W, float* y, int64_t m, int64_t xs = 0);
  // y += x_ · Wᵀ, then y_normed = rmsnorm(y) * wt (y: the residual stream).
  Status lin_acc_norm(const float* x_, const Matrix& W, float* y, const float* wt, float* y_normed, int64_t m);
  Status layer(const DevLayer& L, int64_t cache_layer, const Step& s);
  bool prefill_path(int64_t T) const { return prefill_ws && !capturing && T >= kPrefillGemmMinRows; }
  // The rope cos / sin of the step's positions, once for all its layers' mla_prep (GEMV-sized steps;
  // the prefill path's rope and kv_write compute their own).
  Status step_cos_sin(const Step& s) {
    if (prefill_path(s.T)) return ok_status();
    PG_TRY(cu::rope_cos_sin(s.positions, s.T, rope, inv_freq, cos_sin, stream));
    return mark("rope_cos_sin");
  }
  bool spec_graphs() const { return opt.use_graphs && opt.spec_graphs; }
  Status heads(const ops::HeadLinearArgs& h) {
    if (prefill_path(h.m)) return cu::head_linear_gemm(*gemm, h, prefill_ws, prefill_ws_bytes, stream);
    return cu::head_linear(h, stream);
  }
  Result<Step> layer_inputs(int64_t batch, int64_t ctx, int64_t q);
  Status trunk(const Step& s);              // embedding + layers + final norm -> hidden_all
  Status forward_device(const Step& s);     // trunk + gather + lm_head (rows <= logit_rows)
  // MTP layer `mtp_idx` over the step, its previous hidden states [T, H] already in `hidden`:
  // block output of the output rows -> hidden, their logits -> logits.
  Status mtp_device(int64_t mtp_idx, const Step& s, float* logits_out = nullptr);
  // forward_mtp's device part: lays out and uploads the step, stages prev_hidden into `hidden`
  // and runs the MTP layer (a graph when one token each); results stay on the device.
  Status mtp_pass(int64_t mtp_idx, std::span<const SeqStep> seqs, std::span<const float> prev_hidden, StepLayout& L);
  // Draft chains: the inputs of depths 1..k-1 for `rows` padded to `bucket`; the inputs of depth
  // d as a Step; and the chain's launches (depth 0's pick from the catch-up logits, then per
  // depth an MTP step into logits rows [d * bucket, (d + 1) * bucket) and its pick).
  Status upload_chain(std::span<const DraftRow> rows, int64_t bucket, int64_t k);
  Step chain_step(int64_t bucket, int64_t d) const;
  Status chain_device(int64_t mtp_idx, int64_t bucket, int64_t k, DeviceDraftPicker& picker);
  Status enqueue(int64_t kind, const Step& s) {
    return kind == kMainStep ? forward_device(s) : mtp_device(kind - kMtpStep, s);
  }
  // The graph bucket of a step of n_seqs sequences of q tokens (0: none, run eagerly): see
  // pg::graph_bucket; the tensor-core line counts where lin() has one (not in exact mode).
  int64_t graph_bucket(int64_t n_seqs, int64_t q) const;
  // Uploads the padded layout and replays (capturing on first use) the graph of (kind, bucket,
  // q); `before` enqueues what the graph reads besides the inputs (the MTP's hidden states).
  Status replay(int64_t kind, const StepLayout& L, int64_t bucket, int64_t q,
                const std::function<Status(int64_t padded_T)>& before);
  // Captures what `enqueue` launches on the stream as an instantiated graph.
  Result<cudaGraphExec_t> capture(const std::function<Status()>& enqueue);
  int64_t cache_layer_elems() const { return (n_blocks + 1) * block_size * D; }
};

// ------------------------------------------------------------------------------------------------
// Memory plan

Status CudaRunner::Impl::init_buffers() {
  const ModelConfig& c = cfg;
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, R = c.kv_lora_rank, P = c.qk_rope_head_dim;
  const int64_t qk = c.qk_nope_head_dim + P, V = c.v_head_dim;
  D = R + P;
  max_model_len = opt.max_model_len > 0 ? std::min(opt.max_model_len, c.max_position_embeddings)
                                        : c.max_position_embeddings;
  block_size = opt.kv_block_size;
  if (block_size <= 0) return invalid_argument("cuda: kv block size must be > 0, got {}", block_size);
  if (opt.kv_bf16 && opt.decode_attention == cu::MlaCores::kCudaTwoPass)
    return invalid_argument("cuda: the two-pass decode attention (PEREGRINE_DECODE_ATTENTION=twopass) reads an f32 "
                            "KV cache only; use --kv-cache-dtype f32 or another decode attention");
  table_stride = (max_model_len + block_size - 1) / block_size;
  max_seqs = std::max<int64_t>(1, opt.max_num_seqs);
  // A verify step carries 1 + drafts tokens per sequence; a prefill chunk max_tokens_per_step.
  Tm = std::max<int64_t>({opt.max_tokens_per_step, max_seqs * (1 + 4), 1});
  logit_rows = std::min<int64_t>(Tm, std::max<int64_t>(max_seqs * (1 + 4), 256));
  n_cache_layers = c.num_hidden_layers + int64_t(w.mtp.size());

  PG_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int i = 0; i < kStageSlots; ++i) PG_CUDA_TRY(cudaEventCreateWithFlags(&stage_done[i], cudaEventDisableTiming));

  auto f32 = [&](float*& p, int64_t n) -> Status {
    PG_ASSIGN_OR_RETURN(void* v, acts.alloc(size_t(n) * 4));
    p = static_cast<float*>(v);
    return ok_status();
  };
  const int64_t QR = c.q_lora_rank.value_or(0);
  const int64_t K = std::max<int64_t>(c.num_experts_per_tok, 1), E = std::max<int64_t>(c.n_routed_experts, 1);
  PG_TRY(f32(x, Tm * H));
  PG_TRY(f32(a, Tm * H));
  PG_TRY(f32(qa, Tm * std::max<int64_t>(QR, 1)));
  PG_TRY(f32(q, Tm * nh * qk));
  PG_TRY(f32(kvb, Tm * D));
  PG_TRY(f32(qkv, Tm * (std::max(QR, nh * qk) + D)));
  PG_TRY(f32(q_lat, Tm * nh * R));
  PG_TRY(f32(o_lat, Tm * nh * R));
  PG_TRY(f32(o, Tm * nh * V));
  PG_TRY(f32(router_logits, Tm * E));
  PG_TRY(f32(expert_w, Tm * K));
  {
    PG_ASSIGN_OR_RETURN(void* v, acts.alloc(size_t(Tm * K) * 4));
    expert_idx = static_cast<int32_t*>(v);
  }
  {
    PG_ASSIGN_OR_RETURN(void* v, acts.alloc(16));
    router_counter = static_cast<unsigned*>(v);
    PG_CUDA_TRY(cudaMemsetAsync(router_counter, 0, 16, stream));  // on `stream`: it does not wait for the legacy one
  }
  {
    PG_ASSIGN_OR_RETURN(void* v, acts.alloc(16));
    norm_counter = static_cast<unsigned*>(v);
    PG_CUDA_TRY(cudaMemsetAsync(norm_counter, 0, 16, stream));
  }
  PG_TRY(f32(hidden_all, Tm * H));
  PG_TRY(f32(hidden, Tm * H));
  PG_TRY(f32(normed, Tm * H));
  PG_TRY(f32(cat, Tm * 2 * H));
  PG_TRY(f32(logits, logit_rows * c.vocab_size));
  PG_TRY(f32(inv_freq, int64_t(rope.inv_freq.size())));
  PG_CUDA_TRY(cudaMemcpy(inv_freq, rope.inv_freq.data(), rope.inv_freq.size() * 4, cudaMemcpyHostToDevice));
  PG_TRY(f32(cos_sin, Tm * 2 * int64_t(rope.inv_freq.size())));

  // Attention scratch: graphs run with max_ctx = max_model_len over their bucket's tokens; eager
  // steps with their own max context over up to Tm tokens. The need grows with the context and,
  // over m, stays below one wave of split blocks but not monotonically (the split count is
  // rounded down: 10 tokens of 8-head groups may need more than 8 or 16 do), so every m is
  // asked; m beyond the counter slots (1024) or half the SMs has one split and needs none.
  mla_ws_floats = 0;
  for (int64_t mm = 1; mm <= std::min<int64_t>(Tm, 1024); ++mm)
    mla_ws_floats = std::max(mla_ws_floats, cu::mla_attention_workspace_floats(mm, nh, R, max_model_len));
  PG_TRY(f32(mla_ws, int64_t(std::max<size_t>(mla_ws_floats, 1))));
  // The fused combine's counters start at zero; every launch leaves them at zero again.
  PG_TRY(cu::mla_attention_workspace_init(mla_ws, mla_ws_floats, stream));
  int64_t max_inter = std::max<int64_t>(c.moe_intermediate_size, c.intermediate_size);
  moe_ws_bytes = cu::moe_experts_workspace_bytes(Tm, K, std::max<int64_t>(c.n_shared_experts, 1), E, max_inter);
  {
    PG_ASSIGN_OR_RETURN(moe_ws, acts.alloc(moe_ws_bytes));
  }
  if (!opt.exact) {
    // The projections lin() may send to cuBLASLt: attention, router, eh_proj, lm_head.
    int64_t max_k = 0, max_n = 0, max_expand = 0;  // f32 / FP8 weights are expanded to bf16 first
    auto see = [&](const Matrix& m) {
      max_k = std::max(max_k, m.cols), max_n = std::max(max_n, m.rows);
      if (m.data && m.format != ops::WeightFormat::kBF16) max_expand = std::max(max_expand, m.rows * m.cols);
    };
    auto see_layer = [&](const DevLayer& L) {
      for (const Matrix* m : {&L.attn.q_a, &L.attn.q_b, &L.attn.q, &L.attn.kv_a, &L.attn.q_kv_a, &L.attn.o, &L.router})
        see(*m);
    };
    for (const DevLayer& L : w.layers) see_layer(L);
    for (const DevMtp& m : w.mtp) see_layer(m.block), see(m.eh_proj), see(m.head);
    see(w.lm_head);
    PG_ASSIGN_OR_RETURN(cu::GemmContext g, cu::GemmContext::create(Tm, max_k, max_n, max_expand));
    gemm = std::make_unique<cu::GemmContext>(std::move(g));
    if (Tm >= kPrefillGemmMinRows && opt.tensor_core_experts) {
      auto layer_bytes = [&](const DevLayer& L) {
        ops::MoeExpertsArgs me;
        me.gate_up = &L.mlp.gate_up, me.down = &L.mlp.down, me.hidden = H, me.inter = L.mlp.inter;
        me.n_experts = L.mlp.n_experts, me.n_shared = L.mlp.n_shared;
        me.top_k = L.is_moe ? c.num_experts_per_tok : 0;
        return std::max({cu::moe_experts_gemm_workspace_bytes(cu::moe_gemm_dims(me, Tm)),
                         cu::head_linear_gemm_scratch_bytes(Tm, nh, R, c.qk_nope_head_dim, L.attn.head_format, L.attn.w_uk_t),
                         cu::head_linear_gemm_scratch_bytes(Tm, nh, V, R, L.attn.head_format, L.attn.w_uv)});
      };
      // Prefill attention (mla_prefill): query chunks of up to ~512 MB of scores and weights
      // (6 bytes per (token, head) row and position), at least one token's heads.
      if (opt.tensor_core_attention && cu::mla_prefill_supported(R, c.qk_rope_head_dim)) {
        const int64_t C = (max_model_len + 7) / 8 * 8;
        const int64_t rows = std::clamp<int64_t>((int64_t(512) << 20) / (6 * C), nh, Tm * nh);
        prefill_ws_bytes = cu::mla_prefill_workspace_bytes(max_model_len, nh, R, c.qk_rope_head_dim, rows);
      }
      for (const DevLayer& L : w.layers) prefill_ws_bytes = std::max(prefill_ws_bytes, layer_bytes(L));
      for (const DevMtp& m : w.mtp) prefill_ws_bytes = std::max(prefill_ws_bytes, layer_bytes(m.block));
      PG_ASSIGN_OR_RETURN(prefill_ws, acts.alloc(prefill_ws_bytes));
    }
  }
  const InputLayout in(Tm, max_seqs, table_stride);
  inputs_capacity = in.bytes;
  {
    PG_ASSIGN_OR_RETURN(void* v, acts.alloc(inputs_capacity));
    d_inputs = static_cast<uint8_t*>(v);
  }
  for (int i = 0; i < kStageSlots; ++i) PG_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&stage[i]), inputs_capacity));
  if (!w.mtp.empty()) {
    const ChainLayout cl(max_seqs, table_stride);
    PG_ASSIGN_OR_RETURN(void* v, acts.alloc(cl.bytes));
    d_chain = static_cast<uint8_t*>(v);
    PG_ASSIGN_OR_RETURN(void* t, acts.alloc(size_t(kMaxDraftDepth * max_seqs) * 4));
    chain_tok = static_cast<int32_t*>(t);
    PG_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&chain_stage), cl.bytes));
    PG_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&chain_tok_host), size_t(kMaxDraftDepth * max_seqs) * 4));
    auto* rows = reinterpret_cast<int32_t*>(chain_stage + cl.out_rows);
    for (int64_t i = 0; i < max_seqs; ++i) rows[i] = int32_t(i);
  }
  return plan_kv();
}

Status CudaRunner::Impl::plan_kv() {
  const size_t block_bytes = size_t(n_cache_layers * block_size * D) * kv_elem_bytes();
  size_t free_b = 0, total_b = 0;
  PG_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  int64_t blocks = opt.kv_blocks;
  if (blocks <= 0) {
    const double budget = opt.gpu_memory_utilization * double(total_b) - double(total_b - free_b);
    blocks = budget > 0 ? int64_t(budget / double(block_bytes)) - 1 : 0;
    // No more than every sequence at full length needs.
    blocks = std::min(blocks, max_seqs * table_stride);
  }
  if (blocks < 1)
    return resource_exhausted(
        "cuda: no memory left for the KV cache: weights {:.2f} GB + activations {:.2f} GB of {:.2f} GB "
        "(--gpu-memory-utilization {:.2f}); raise the utilization or lower --max-num-batched-tokens",
        double(w.arena.bytes()) / 1e9, double(acts.bytes()) / 1e9, double(total_b) / 1e9,
        opt.gpu_memory_utilization);
  PG_ASSIGN_OR_RETURN(void* v, acts.alloc(block_bytes * size_t(blocks + 1)));
  if (opt.kv_bf16) kv16 = static_cast<uint16_t*>(v);
  else kv = static_cast<float*>(v);
  // Zeroed once (0 is f32's and bf16's zero): a block never written reads as zeros, never as NaN bit
  // patterns. On `stream` (non-blocking): a memset on the legacy stream is not ordered before the
  // first step's writes.
  PG_CUDA_TRY(cudaMemsetAsync(v, 0, block_bytes * size_t(blocks + 1), stream));
  n_blocks = blocks;
  return ok_status();
}

// ------------------------------------------------------------------------------------------------
// Inputs

CudaRunner::Impl::Step CudaRunner::Impl::stage_inputs_to(const StepLayout& L, Step s, uint8_t* host) {
  const InputLayout in(L.T, s.n_seqs, table_stride);
  std::memcpy(host + in.tokens, L.tokens.data(), size_t(L.T) * 4);
  auto* rows = reinterpret_cast<int32_t*>(host + in.out_rows);
  for (size_t i = 0; i < L.out_rows.size(); ++i) rows[i] = int32_t(L.out_rows[i]);
  std::memcpy(host + in.token_seq, L.token_seq.data(), size_t(L.T) * 4);
  std::memcpy(host + in.positions, L.positions.data(), size_t(L.T) * 8);
  std::memcpy(host + in.ctx_len, L.ctx_len.data(), size_t(L.T) * 8);
  std::memcpy(host + in.tables, L.tables.data(), L.tables.size() * 4);
  s.tokens = reinterpret_cast<const int32_t*>(d_inputs + in.tokens);
  s.out_rows = reinterpret_cast<const int32_t*>(d_inputs + in.out_rows);
  s.token_seq = reinterpret_cast<const int32_t*>(d_inputs + in.token_seq);
  s.positions = reinterpret_cast<const int64_t*>(d_inputs + in.positions);
  s.ctx_len = reinterpret_cast<const int64_t*>(d_inputs + in.ctx_len);
  s.tables = reinterpret_cast<const int32_t*>(d_inputs + in.tables);
  return s;
}

Result<CudaRunner::Impl::Step> CudaRunner::Impl::upload(const StepLayout& L) {
  Step s;
  s.T = L.T;
  s.n_seqs = int64_t(L.tables.size()) / table_stride;
  s.n_rows = int64_t(L.out_rows.size());
  s.max_ctx = *std::max_element(L.ctx_len.begin(), L.ctx_len.end());
  s.rows_are_tokens = s.n_rows == s.T;
  for (int64_t i = 0; s.rows_are_tokens && i < s.n_rows; ++i) s.rows_are_tokens = L.out_rows[size_t(i)] == i;
  if (L.T >= kPrefillGemmMinRows) {
    for (int64_t t = 0; t < L.T; ++t) {
      const size_t i = size_t(t);
      if (t > 0 && L.token_seq[i] == L.token_seq[i - 1] && L.positions[i] == L.positions[i - 1] + 1)
        ++s.prefill_runs.back().t1;
      else
        s.prefill_runs.push_back({t, t + 1, L.positions[i], L.token_seq[i]});
    }
    for (const cu::MlaPrefillRun& r : s.prefill_runs)
      if (r.t1 - r.t0 < kPrefillGemmMinRows) {
        s.prefill_runs.clear();
        break;
      }
  }
  if (L.T > Tm) return invalid_argument("cuda: {} tokens in one step, the runner holds {}", L.T, Tm);
  if (s.n_seqs > max_seqs) return invalid_argument("cuda: {} sequences in one step, the runner holds {}", s.n_seqs, max_seqs);
  const int slot = stage_slot;
  stage_slot = (stage_slot + 1) % kStageSlots;
  PG_CUDA_TRY(cudaEventSynchronize(stage_done[slot]));  // the copy that last read this slot has run
  s = stage_inputs_to(L, s, stage[slot]);
  const InputLayout in(L.T, s.n_seqs, table_stride);
  PG_CUDA_TRY(cudaMemcpyAsync(d_inputs, stage[slot], in.bytes, cudaMemcpyHostToDevice, stream));
  PG_CUDA_TRY(cudaEventRecord(stage_done[slot], stream));
  return s;
}

// ------------------------------------------------------------------------------------------------
// The launch sequence

Status CudaRunner::Impl::lin(const float* x_, const Matrix& W, float* y, int64_t m, bool acc, int64_t xs, int64_t ys,
                             bool f32_input) {
  ops::LinearArgs la;
  la.x = x_, la.w = &W, la.y = y, la.m = m, la.accumulate = acc, la.x_stride = xs, la.y_stride = ys;
  la.f16_activations = !opt.exact && !f32_input;  // NVFP4 GEMV: x rounded to f16 (tensor cores) unless exact
  if (gemm && m >= CudaRunner::kTensorCoreMinRows && !f32_input) return cu::gemm_linear(*gemm, la, stream);
  return cu::linear(la, stream);
}

Status CudaRunner::Impl::norm(const float* x_, const float* wt, float* y, int64_t m, int64_t n, int64_t xs, int64_t ys) {
  ops::RmsNormArgs r;
  r.x = x_, r.weight = wt, r.y = y, r.m = m, r.n = n, r.eps = float(cfg.rms_norm_eps), r.x_stride = xs, r.y_stride = ys;
  return cu::rmsnorm(r, stream);
}

Status CudaRunner::Impl::norm_lin(const float* x_, const float* wt, const Matrix& W, float* y, int64_t m, int64_t xs) {
  ops::LinearNormArgs a;
  a.lin.x = x_, a.lin.w = &W, a.lin.y = y, a.lin.m = m, a.lin.x_stride = xs;
  a.lin.f16_activations = W.format == ops::WeightFormat::kNvfp4 && !opt.exact;  // as lin(): NVFP4's tensor cores
  a.in_norm = wt, a.eps = float(cfg.rms_norm_eps);
  return cu::linear_norm(a, nullptr, stream);
}

Status CudaRunner::Impl::lin_acc_norm(const float* x_, const Matrix& W, float* y, const float* wt, float* y_normed,
                                      int64_t m) {
  ops::LinearNormArgs a;
  a.lin.x = x_, a.lin.w = &W, a.lin.y = y, a.lin.m = m, a.lin.accumulate = true;
  a.lin.f16_activations = W.format == ops::WeightFormat::kNvfp4 && !opt.exact;  // as lin(): NVFP4's tensor cores
  a.out_norm = wt, a.y_normed = y_normed, a.eps = float(cfg.rms_norm_eps);
  return cu::linear_norm(a, norm_counter, stream);
}

Status CudaRunner::Impl::layer(const DevLayer& L, int64_t cache_layer_idx, const Step& s) {
  const ModelConfig& c = cfg;
  const int64_t T = s.T, H = c.hidden_size, nh = c.num_attention_heads, R = c.kv_lora_rank, P = c.qk_rope_head_dim;
  const int64_t nope = c.qk_nope_head_dim, V = c.v_head_dim, qk = nope + P;
  const DevAttention& A = L.attn;
  const int64_t pool_at = cache_layer_idx * cache_layer_elems();  // this layer's pool in kv or kv16

  // fused_norms: input_norm inside the [q_a | kv_a] GEMV (a is not written).
  const bool fuse_in = A.q_kv_a.data && fuse_norm(A.q_kv_a, T) && cu::linear_norm_in_pays(T, H);
  if (!fuse_in) {
    PG_TRY(norm(x, L.input_norm, a, T, H));  // a [T, H]
    PG_TRY(mark("input_norm"));
  }
  float* qb = q;              // the queries [T, nh, qk], row stride q_row
  int64_t q_row = nh * qk;
  const float* kv_in = kvb;   // [T, D] = [c_kv | k_pe] before norm and rope, row stride kv_row
  int64_t kv_row = D;
  if (A.q_kv_a.data) {        // one GEMV for [q_a | kv_a] (or [q | kv_a]): [T, first + D]
    const int64_t first = A.q_kv_a.rows - D;
    if (fuse_in) {
      PG_TRY(norm_lin(x, L.input_norm, A.q_kv_a, qkv, T));
      PG_TRY(mark("input_norm+q_kv_a_proj"));
    } else {
      PG_TRY(lin(a, A.q_kv_a, qkv, T));
      PG_TRY(mark("q_kv_a_proj"));
    }
    kv_in = qkv + first, kv_row = first + D;
    // q_a_norm inside q_b's GEMV (qkv's q_a part stays raw).
    if (A.has_q_lora && fuse_norm(A.q_b, T) && cu::linear_norm_in_pays(T, first)) {
      PG_TRY(norm_lin(qkv, A.q_a_norm, A.q_b, q, T, first + D));  // [T, nh * qk]
      PG_TRY(mark("q_a_norm+q_b_proj"));
    } else if (A.has_q_lora) {
      PG_TRY(norm(qkv, A.q_a_norm, qkv, T, first, first + D, first + D));
      PG_TRY(mark("q_a_norm"));
      PG_TRY(lin(qkv, A.q_b, q, T, false, first + D));  // [T, nh * qk]
      PG_TRY(mark("q_b_proj"));
    } else {
      qb = qkv, q_row = first + D;
    }
  } else {
    if (A.has_q_lora) {
      const int64_t QR = *c.q_lora_rank;
      PG_TRY(lin(a, A.q_a, qa, T));  // [T, QR]
      PG_TRY(mark("q_a_proj"));
      PG_TRY(norm(qa, A.q_a_norm, qa, T, QR));
      PG_TRY(mark("q_a_norm"));
      PG_TRY(lin(qa, A.q_b, q, T));  // [T, nh * qk]
      PG_TRY(mark("q_b_proj"));
    } else {
      PG_TRY(lin(a, A.q, q, T));
      PG_TRY(mark("q_proj"));
    }
    PG_TRY(lin(a, A.kv_a, kvb, T));
    PG_TRY(mark("kv_a_proj"));
  }

  ops::MlaKvWriteArgs kw;  // cache row = [rmsnorm(c_kv) | rope(k_pe)]
  kw.kv = kv_in, kw.kv_stride = kv_row, kw.norm_weight = A.kv_a_norm, kw.eps = float(c.rms_norm_eps);
  kw.positions = s.positions, kw.table = &rope, kw.block_tables = s.tables, kw.token_seq = s.token_seq;
  kw.m = T, kw.kv_lora_rank = R, kw.rope_dim = P, kw.block_size = block_size;
  kw.max_blocks_per_seq = table_stride, kw.n_blocks = n_blocks + 1;
  if (kv16) kw.cache_bf16 = kv16 + pool_at;
  else kw.cache = kv + pool_at;

  ops::RopeArgs ra;  // q_pe of every head, in place
  ra.x = qb, ra.positions = s.positions, ra.table = &rope, ra.m = T, ra.n_heads = nh, ra.head_stride = qk;
  ra.row_stride = q_row, ra.offset = nope, ra.rope_dim = P;

  ops::HeadLinearArgs uk;  // q_lat[t,h] = W_UK[h]ᵀ · q_nope[t,h]   [T, nh, R]
  uk.x = qb, uk.x_row_stride = q_row, uk.x_head_stride = qk, uk.w = A.w_uk_t, uk.w_format = A.head_format;
  uk.w_scale = A.w_uk_scale, uk.scale_group = A.uk_group, uk.y_scale = A.head_y_scale;
  uk.y = q_lat, uk.y_row_stride = nh * R, uk.y_head_stride = R, uk.m = T, uk.n_heads = nh, uk.n = R, uk.k = nope;
  if (!prefill_path(T)) {  // GEMV-sized steps: the three in one launch (the same bits)
    PG_TRY(cu::mla_prep(ops::MlaPrepArgs{kw, ra, uk}, cos_sin, stream));  // cos_sin: step_cos_sin()
    PG_TRY(mark("mla_prep"));
  } else {
    PG_TRY(cu::mla_kv_write(kw, inv_freq, stream));
    PG_TRY(mark("kv_write"));
    PG_TRY(cu::rope(ra, inv_freq, stream));
    PG_TRY(mark("q_rope"));
    PG_TRY(heads(uk));
    PG_TRY(mark("w_uk"));
  }
  ops::MlaAttentionArgs m;
  // q_pe read in place: column nope of every head of q [T, nh, qk].
  m.q_lat = q_lat, m.q_pe = qb + nope, m.q_pe_row_stride = q_row, m.q_pe_head_stride = qk;
  m.kv = kw.cache, m.kv_bf16 = kw.cache_bf16, m.block_tables = s.tables, m.token_seq = s.token_seq;
  m.ctx_len = s.ctx_len, m.o_lat = o_lat, m.m = T, m.n_heads = nh, m.kv_lora_rank = R, m.rope_dim = P;
  m.block_size = block_size, m.max_blocks_per_seq = table_stride, m.n_blocks = n_blocks + 1;
  m.softmax_scale = softmax_scale;
  ops::HeadLinearArgs uv;  // o[t,h] = W_UV[h] · o_lat[t,h]   [T, nh * V]
  uv.x = o_lat, uv.x_row_stride = nh * R, uv.x_head_stride = R, uv.w = A.w_uv, uv.w_format = A.head_format;
  uv.w_scale = A.w_uv_scale, uv.scale_group = A.uv_group, uv.y_scale = A.head_y_scale;
  uv.y = o, uv.y_row_stride = nh * V, uv.y_head_stride = V, uv.m = T, uv.n_heads = nh, uv.n = V, uv.k = R;
  // Deferred (PEREGRINE_ATTENTION_DEFER): the attention leaves its split partials, W_UV combines them.
  cu::MlaPartials parts;
  if (opt.tensor_core_attention && prefill_path(T) && !s.prefill_runs.empty() && cu::mla_prefill_supported(R, P))
    PG_TRY(cu::mla_prefill(*gemm, m, s.prefill_runs, prefill_ws, prefill_ws_bytes, stream));
  else
    PG_TRY(cu::mla_attention(m, s.max_ctx, mla_ws, mla_ws_floats, stream,
                             opt.exact ? cu::MlaCores::kCuda : opt.decode_attention,
                             !opt.exact && cu::attention_defer() && T <= cu::attention_defer_max_tokens() &&
                                     cu::head_linear_combine_ok(uv)
                                 ? &parts
                                 : nullptr));
  PG_TRY(mark("mla_attention"));
  PG_TRY(parts.deferred ? cu::head_linear_combine(uv, parts, stream) : heads(uv));
  PG_TRY(mark("w_uv"));
  if (fuse_norm(A.o, T) && cu::linear_norm_out_pays(T, H)) {  // residual += o_proj(o); a = post_norm(residual), by o_proj's last block
    PG_TRY(lin_acc_norm(o, A.o, x, L.post_norm, a, T));
    PG_TRY(mark("o_proj+post_norm"));
  } else {
    PG_TRY(lin(o, A.o, x, T, /*acc=*/true));  // residual += o_proj(o)
    PG_TRY(mark("o_proj"));
    PG_TRY(norm(x, L.post_norm, a, T, H));
    PG_TRY(mark("post_norm"));
  }
  ops::MoeExpertsArgs me;
  me.x = a, me.y = x, me.m = T, me.hidden = H, me.accumulate = true;  // residual += mlp(a)
  me.gate_up = &L.mlp.gate_up, me.down = &L.mlp.down, me.inter = L.mlp.inter;
  me.n_experts = L.mlp.n_experts, me.n_shared = L.mlp.n_shared;
  me.f16_activations = !opt.exact;  // NVFP4 experts: x and h rounded to f16 (tensor cores) unless exact
  ops::MoeRoutingArgs r;
  bool self_routed = false;  // the router leaves the routing to the expert kernels
  if (L.is_moe) {
    r.logits = router_logits, r.bias = L.router_bias, r.expert_idx = expert_idx, r.expert_weight = expert_w;
    r.m = T, r.n_experts = c.n_routed_experts, r.top_k = c.num_experts_per_tok, r.n_group = c.n_group;
    r.topk_group = c.topk_group;
    r.scoring = c.scoring_func == "sigmoid" ? ops::MoeScoring::kSigmoid : ops::MoeScoring::kSoftmax;
    r.method = c.topk_method == "noaux_tc"               ? ops::MoeTopk::kNoAuxTc
               : c.topk_method == "group_limited_greedy" ? ops::MoeTopk::kGroupLimitedGreedy
                                                         : ops::MoeTopk::kGreedy;
    r.norm_topk_prob = c.norm_topk_prob;
    r.routed_scaling_factor = float(c.routed_scaling_factor);
    // Router logits [T, E] f32 (f32 activations at any T: a routing decision must not hinge on
    // bf16 rounding of its input), then the routing, in one launch (decode-sized T), or the logits
    // alone where the expert kernels route the token themselves.
    me.expert_idx = expert_idx, me.expert_weight = expert_w, me.top_k = c.num_experts_per_tok;
    // gate_up under PDL after the router; the routing record's copy would sit between them.
    me.after_router = cu::moe_gate_up_pdl_enabled() && !routing_rec;
    // One token on the NVFP4 expert kernels where down prefetches, or on the FP8 tensor-core ones: they
    // route it from the logits.
    self_routed = !prefill_path(T) && cu::moe_experts_self_routing(me, r);
    ops::MoeRouterArgs ro;
    ro.x = a, ro.router = &L.router, ro.logits = router_logits, ro.routing = r;
    PG_TRY(cu::moe_router(ro, router_counter, stream, -1,
                          self_routed ? cu::MoeRouterMode::kLogitsOnly : cu::MoeRouterMode::kRoute));
    PG_TRY(mark("router"));
    if (routing_rec) {
      const int64_t K = c.num_experts_per_tok;
      PG_CUDA_TRY(cudaMemcpyAsync(routing_rec + cache_layer_idx * Tm * K, expert_idx, size_t(T * K) * 4,
                                  cudaMemcpyDeviceToDevice, stream));
      routing_T[size_t(cache_layer_idx)] = T;
    }
  }
  if (prefill_path(T)) {
    PG_TRY(cu::moe_experts_gemm(*gemm, me, cu::MoeGemmWorkspace{prefill_ws, prefill_ws_bytes}, stream));
  } else if (self_routed) {
    PG_TRY(cu::moe_experts_routing(me, r, moe_ws, moe_ws_bytes, stream));
  } else {
    PG_TRY(cu::moe_experts(me, moe_ws, moe_ws_bytes, stream));
  }
  return mark(L.is_moe ? "moe_experts" : "dense_mlp");
}

Status CudaRunner::Impl::trunk(const Step& s) {
  ops::EmbeddingArgs e;
  e.table = &w.embed, e.tokens = s.tokens, e.y = x, e.m = s.T;
  PG_TRY(cu::embedding(e, stream));  // x [T, H]
  PG_TRY(step_cos_sin(s));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) PG_TRY(layer(w.layers[size_t(l)], l, s));
  return norm(x, w.norm, hidden_all, s.T, cfg.hidden_size);  // final RMSNorm of every token
}

Status CudaRunner::Impl::forward_device(const Step& s) {
  PG_TRY(trunk(s));
  const float* rows = hidden_all;
  if (!s.rows_are_tokens && s.n_rows > 0) {  // gather the output rows: an embedding lookup over hidden_all
    const Matrix table{ops::WeightFormat::kF32, s.T, cfg.hidden_size, hidden_all};
    ops::EmbeddingArgs g;
    g.table = &table, g.tokens = s.out_rows, g.y = hidden, g.m = s.n_rows;
    PG_TRY(cu::embedding(g, stream));
    rows = hidden;
  }
  if (s.n_rows > 0) PG_TRY(lin(rows, w.lm_head, logits, std::min(s.n_rows, logit_rows)));
  return ok_status();
}

Status CudaRunner::Impl::mtp_device(int64_t mtp_idx, const Step& s, float* logits_out) {
  const int64_t H = cfg.hidden_size, T = s.T;
  const DevMtp& mt = w.mtp[size_t(mtp_idx)];
  // cat [T, 2H] = [enorm(embed(token)) | hnorm(prev_hidden)]
  ops::EmbeddingArgs e;
  e.table = &mt.embed, e.tokens = s.tokens, e.y = cat, e.m = T, e.y_stride = 2 * H;
  PG_TRY(cu::embedding(e, stream));
  PG_TRY(norm(cat, mt.enorm, cat, T, H, 2 * H, 2 * H));
  PG_TRY(norm(hidden, mt.hnorm, cat + H, T, H, H, 2 * H));
  PG_TRY(lin(cat, mt.eh_proj, x, T));  // x [T, H]
  PG_TRY(step_cos_sin(s));
  PG_TRY(layer(mt.block, cfg.num_hidden_layers + mtp_idx, s));
  // hidden = the block output of the output rows; logits = shared_head(norm(hidden)).
  if (s.n_rows == 0) return ok_status();
  const Matrix table{ops::WeightFormat::kF32, T, H, x};
  ops::EmbeddingArgs g;
  g.table = &table, g.tokens = s.out_rows, g.y = hidden, g.m = s.n_rows;
  PG_TRY(cu::embedding(g, stream));
  PG_TRY(norm(hidden, mt.head_norm, normed, s.n_rows, H));
  return lin(normed, mt.head, logits_out ? logits_out : logits, s.n_rows);
}

// ------------------------------------------------------------------------------------------------
// Draft chains

Status CudaRunner::Impl::upload_chain(std::span<const DraftRow> rows, int64_t bucket, int64_t k) {
  const ChainLayout cl(max_seqs, table_stride);
  auto* token_seq = reinterpret_cast<int32_t*>(chain_stage + cl.token_seq);
  auto* positions = reinterpret_cast<int64_t*>(chain_stage + cl.positions);
  auto* ctx_len = reinterpret_cast<int64_t*>(chain_stage + cl.ctx_len);
  auto* tables = reinterpret_cast<int32_t*>(chain_stage + cl.tables);
  const int64_t n = int64_t(rows.size());
  for (int64_t i = 0; i < n; ++i) {
    const DraftRow& r = rows[size_t(i)];
    if (r.n_drafts <= 1) continue;
    const int64_t last = r.last_pos + r.n_drafts - 2;  // the deepest position written (depth n_drafts - 1)
    if (r.last_pos < 0 || last >= max_model_len || int64_t(r.block_table.size()) > table_stride ||
        int64_t(r.block_table.size()) * block_size <= last)
      return invalid_argument("draft_chain: row {} drafts to position {} with {} blocks of {} (context {})", i, last,
                              r.block_table.size(), block_size, max_model_len);
    for (int32_t b : r.block_table)
      if (b < 0 || b >= n_blocks) return invalid_argument("draft_chain: block {} of row {} does not exist", b, i);
  }
  for (int64_t d = 1; d < k; ++d)
    for (int64_t i = 0; i < bucket; ++i) {
      const size_t at = size_t((d - 1) * max_seqs + i);
      const bool real = i < n && d < rows[size_t(i)].n_drafts;
      // Rows that draft no deeper (and padding) write and read position d of the scratch block.
      token_seq[at] = int32_t(real ? i : bucket);
      positions[at] = real ? rows[size_t(i)].last_pos + d - 1 : d;  // model_runner.h, "Draft chains"
      ctx_len[at] = positions[at] + 1;
    }
  std::memset(tables, 0, size_t((bucket + 1) * table_stride) * 4);
  for (int64_t i = 0; i < n; ++i)
    if (rows[size_t(i)].n_drafts > 1)
      std::memcpy(tables + i * table_stride, rows[size_t(i)].block_table.data(), rows[size_t(i)].block_table.size() * 4);
  tables[bucket * table_stride] = int32_t(n_blocks);
  PG_CUDA_TRY(cudaMemcpyAsync(d_chain, chain_stage, cl.tables + size_t((bucket + 1) * table_stride) * 4,
                              cudaMemcpyHostToDevice, stream));
  return ok_status();
}

CudaRunner::Impl::Step CudaRunner::Impl::chain_step(int64_t bucket, int64_t d) const {
  const ChainLayout cl(max_seqs, table_stride);
  const size_t at = size_t((d - 1) * max_seqs);
  Step s;
  s.T = bucket, s.n_seqs = bucket + 1, s.n_rows = bucket, s.max_ctx = max_model_len, s.rows_are_tokens = true;
  s.tokens = chain_tok + (d - 1) * max_seqs;  // the previous depth's picks
  s.out_rows = reinterpret_cast<const int32_t*>(d_chain + cl.out_rows);
  s.token_seq = reinterpret_cast<const int32_t*>(d_chain + cl.token_seq) + at;
  s.positions = reinterpret_cast<const int64_t*>(d_chain + cl.positions) + at;
  s.ctx_len = reinterpret_cast<const int64_t*>(d_chain + cl.ctx_len) + at;
  s.tables = reinterpret_cast<const int32_t*>(d_chain + cl.tables);
  return s;
}

Status CudaRunner::Impl::chain_device(int64_t mtp_idx, int64_t bucket, int64_t k, DeviceDraftPicker& picker) {
  const int64_t vocab = cfg.vocab_size;
  PG_TRY(picker.pick(0, logits, bucket, vocab, chain_tok, stream));  // from the catch-up rows
  for (int64_t d = 1; d < k; ++d) {
    // MTP input: hidden (the previous depth's block output, in place) and the previous picks.
    float* lg = logits + d * bucket * vocab;
    PG_TRY(mtp_device(mtp_idx, chain_step(bucket, d), lg));
    PG_TRY(picker.pick(d, lg, bucket, vocab, chain_tok + d * max_seqs, stream));
  }
  return ok_status();
}

// ------------------------------------------------------------------------------------------------
// Step graphs

int64_t CudaRunner::Impl::graph_bucket(int64_t n_seqs, int64_t q) const {
  GraphBucketLimits lim;
  lim.max_seqs = max_seqs, lim.max_q = kMaxGraphTokens, lim.block_size = block_size;
  lim.max_tokens = Tm, lim.max_rows = logit_rows, lim.tensor_core_min_rows = gemm ? CudaRunner::kTensorCoreMinRows : 0;
  return pg::graph_bucket(n_seqs, q, lim);
}

Status CudaRunner::Impl::replay(int64_t kind, const StepLayout& L, int64_t bucket, int64_t q,
                                const std::function<Status(int64_t)>& before) {
  // Every buffer the graph reads sits at a fixed address: the inputs at the offsets of the
  // (bucket x q, bucket) InputLayout, uploaded here before each launch.
  // Padded sequences write and read the scratch block (the last one, past the n_blocks ids).
  // The main step's graphs take every row out at q > 1 (verify); the MTP's, each sequence's last.
  const StepLayout P = pad_graph_step(L, bucket, q, int32_t(n_blocks), table_stride, kind == kMainStep);
  PG_ASSIGN_OR_RETURN(Step s, upload(P));
  s.max_ctx = max_model_len;  // the attention grid covers any context
  if (before) PG_TRY(before(P.T));
  if (opt.debug_graphs_eager) {
    capturing = true;  // the same op choices as inside a capture
    const Status st = enqueue(kind, s);
    capturing = false;
    return st;
  }
  const std::array<int64_t, 3> key{kind, bucket, q};
  auto it = graphs.find(key);
  if (it == graphs.end()) {
    PG_ASSIGN_OR_RETURN(cudaGraphExec_t exec, capture([&] { return enqueue(kind, s); }));
    it = graphs.emplace(key, exec).first;
    (kind != kMainStep ? counts.draft : q == 1 ? counts.decode : counts.verify) += 1;
  }
  PG_CUDA_TRY(cudaGraphLaunch(it->second, stream));
  (kind != kMainStep ? counts.draft_replays : q == 1 ? counts.decode_replays : counts.verify_replays) += 1;
  return ok_status();
}

Result<cudaGraphExec_t> CudaRunner::Impl::capture(const std::function<Status()>& enqueue) {
  cudaGraph_t g = nullptr;
  PG_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  capture_marks.clear();
  capturing = true;
  const Status st = enqueue();
  capturing = false;
  const cudaError_t end = cudaStreamEndCapture(stream, &g);
  if (!st.ok()) {
    if (g) cudaGraphDestroy(g);
    return st;
  }
  PG_CUDA_TRY(end);
  if (!knockout.empty()) {
    const Status ko = knock_out(g);
    capture_marks.clear();
    if (!ko.ok()) {
      cudaGraphDestroy(g);
      return ko;
    }
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  PG_CUDA_TRY(inst);
  return exec;
}

// Nodes come back from cudaGraphGetNodes in the order they were captured (checked: the summary names
// the first kernel of each knocked-out op).
Status CudaRunner::Impl::knock_out(cudaGraph_t g) {
  std::vector<std::string> ops, kernels;  // the items naming ops, and those naming kernels ("k:NAME")
  for (size_t a = 0; a <= knockout.size();) {
    const size_t b = std::min(knockout.find_first_of(",/", a), knockout.size());
    const std::string it = knockout.substr(a, b - a);
    if (it.rfind("k:", 0) == 0) kernels.push_back(it.substr(2));
    else if (!it.empty()) ops.push_back(it);
    a = b + 1;
  }
  size_t n = 0;
  PG_CUDA_TRY(cudaGraphGetNodes(g, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  PG_CUDA_TRY(cudaGraphGetNodes(g, nodes.data(), &n));
  std::map<std::string, std::pair<int, std::string>> hit;  // op -> (kernels emptied, first kernel's name)
  size_t from = 0;
  for (size_t i = 0; i <= capture_marks.size(); ++i) {
    const size_t to = i < capture_marks.size() ? std::min(capture_marks[i].first, n) : n;
    const std::string op = i < capture_marks.size() ? capture_marks[i].second : "tail";
    const bool op_hit =
        std::any_of(ops.begin(), ops.end(), [&](const std::string& o) { return op.find(o) != op.npos; });
    for (size_t k = from; k < to; ++k) {
      const char* kname = cu::kernel_node_name(nodes[k]);
      const auto kit = std::find_if(kernels.begin(), kernels.end(),
                                    [&](const std::string& s) { return kname && std::strstr(kname, s.c_str()); });
      if (!op_hit && kit == kernels.end()) continue;
      bool replaced = false;
      PG_CUDA_TRY(cu::knock_out_kernel_node(nodes[k], &replaced));
      auto& h = hit[op_hit ? op : op + "/k:" + *kit];
      if (replaced && h.first++ == 0 && kname) h.second = kname;
    }
    from = std::max(from, to);
  }
  std::fprintf(stderr, "PEREGRINE_KNOCKOUT=%s (the output is garbage): a graph of %zu nodes, emptied:",
               knockout.c_str(), n);
  for (const auto& [op, h] : hit) std::fprintf(stderr, " %s x%d (%.60s)", op.c_str(), h.first, h.second.c_str());
  std::fprintf(stderr, "\n");
  return ok_status();
}

// ------------------------------------------------------------------------------------------------
// CudaRunner

CudaRunner::CudaRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  cfg_ = impl_->cfg;
  n_blocks_ = impl_->n_blocks;
  block_size_ = impl_->block_size;
}
CudaRunner::~CudaRunner() = default;

CudaRunnerOptions CudaRunner::effective_options(CudaRunnerOptions opt) {
  auto flag = [](const char* name, bool& v) {
    if (const char* e = std::getenv(name); e && (std::string_view(e) == "0" || std::string_view(e) == "1"))
      v = std::string_view(e) == "1";
  };
  flag("PEREGRINE_SPEC_GRAPHS", opt.spec_graphs);
  flag("PEREGRINE_PREFILL_ATTENTION", opt.tensor_core_attention);
  if (const char* e = std::getenv("PEREGRINE_DECODE_ATTENTION")) {
    const std::string_view v(e);
    if (v == "cuda") opt.decode_attention = cu::MlaCores::kCuda;
    if (v == "auto") opt.decode_attention = cu::MlaCores::kAuto;
    if (v == "tensor") opt.decode_attention = cu::MlaCores::kTensor;
    if (v == "twopass") opt.decode_attention = cu::MlaCores::kCudaTwoPass;
  }
  flag("PEREGRINE_FUSED_NORMS", opt.fused_norms);
  if (const char* e = std::getenv("PEREGRINE_DRAFT_HEAD")) {
    const std::string_view v(e);
    if (v == "model") opt.draft_head = DraftHead::kModel;
    if (v == "fp8") opt.draft_head = DraftHead::kFp8;
    if (v == "nvfp4") opt.draft_head = DraftHead::kNvfp4;
  }
  if (const char* e = std::getenv("PEREGRINE_KV_CACHE")) {
    const std::string_view v(e);
    if (v == "f32") opt.kv_bf16 = false;
    if (v == "bf16") opt.kv_bf16 = true;
  }
  if (opt.exact) opt.draft_head = DraftHead::kModel, opt.kv_bf16 = false;
  return opt;
}

namespace {

Status check_device() {
  if (!cu::cuda_available()) return failed_precondition("cuda: {}", cu::cuda_unavailable_reason());
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<CudaRunner>> CudaRunner::create(std::unique_ptr<DeepseekModel> host, CudaRunnerOptions opt) {
  PG_TRY(check_device());
  if (!host) return invalid_argument("cuda: no model to upload");
  auto impl = std::make_unique<Impl>();
  impl->cfg = host->config();
  impl->opt = effective_options(opt);
  impl->rope = make_rope_table(impl->cfg);
  impl->softmax_scale = mla_softmax_scale(impl->cfg);
  PG_ASSIGN_OR_RETURN(impl->w, upload_weights(impl->cfg, host->weights(), opt.exact, opt.progress));
  host.reset();  // the mapping is no longer needed
  PG_TRY(quantize_draft_heads(impl->w, impl->opt.draft_head));
  PG_TRY(impl->init_buffers());
  return std::unique_ptr<CudaRunner>(new CudaRunner(std::move(impl)));
}

Result<std::unique_ptr<CudaRunner>> CudaRunner::synthetic(const ModelConfig& cfg, SyntheticDtype dtype, uint64_t seed,
                                                          CudaRunnerOptions opt) {
  PG_TRY(check_device());
  auto impl = std::make_unique<Impl>();
  impl->cfg = cfg;
  impl->opt = effective_options(opt);
  impl->rope = make_rope_table(cfg);
  impl->softmax_scale = mla_softmax_scale(cfg);
  const ops::WeightFormat f = dtype == SyntheticDtype::kFp8     ? ops::WeightFormat::kFp8Block
                             : dtype == SyntheticDtype::kNvfp4 ? ops::WeightFormat::kNvfp4
                                                               : ops::WeightFormat::kBF16;
  PG_ASSIGN_OR_RETURN(impl->w, synthetic_weights(cfg, f, seed, opt.progress));
  PG_TRY(quantize_draft_heads(impl->w, impl->opt.draft_head));
  PG_TRY(impl->init_buffers());
  return std::unique_ptr<CudaRunner>(new CudaRunner(std::move(impl)));
}

int64_t CudaRunner::n_mtp_layers() const { return int64_t(impl_->w.mtp.size()); }

std::string CudaRunner::describe() const {
  const auto& p = cu::current_device_props();
  const Impl& m = *impl_;
  std::string graphs = "off";
  if (m.opt.use_graphs)
    graphs = fmt::format("on: {} decode, {} verify, {} draft, {} draft-chain captured{}", m.counts.decode,
                         m.counts.verify, m.counts.draft, m.counts.chain,
                         m.opt.spec_graphs ? "" : ", speculative steps eager");
  return fmt::format("cuda ({}, {} {} KV blocks of {}, graphs {}{}{}{}{})", p.name, n_blocks_,
                     m.opt.kv_bf16 ? "bf16" : "f32", block_size_, graphs,
                     m.opt.exact ? ", exact" : "", m.opt.fused_norms ? ", fused norms" : "",
                     m.opt.draft_head == DraftHead::kFp8     ? ", FP8 draft head"
                     : m.opt.draft_head == DraftHead::kNvfp4 ? ", NVFP4 draft head"
                                                             : "",
                     m.opt.exact || m.opt.decode_attention == cu::MlaCores::kAuto ? ""
                     : m.opt.decode_attention == cu::MlaCores::kTensor      ? ", tensor-core decode attention"
                     : m.opt.decode_attention == cu::MlaCores::kCudaTwoPass ? ", two-pass decode attention"
                                                                             : ", CUDA-core split-KV decode attention");
}

CudaGraphCounts CudaRunner::graph_counts() const { return impl_->counts; }

void CudaRunner::set_record_routing(bool on) {
  Impl& m = *impl_;
  if (!on) {
    if (m.routing_rec) cudaStreamSynchronize(m.stream), cudaFree(m.routing_rec);
    m.routing_rec = nullptr;
    m.routing_T.clear();
    return;
  }
  if (m.routing_rec) return;
  const int64_t K = std::max<int64_t>(cfg_.num_experts_per_tok, 1);
  if (cudaMalloc(reinterpret_cast<void**>(&m.routing_rec), size_t(m.n_cache_layers * m.Tm * K) * 4) != cudaSuccess) {
    m.routing_rec = nullptr;  // recording stays off: last_routing() says so
    return;
  }
  m.routing_T.assign(size_t(m.n_cache_layers), -1);
}

Result<std::vector<std::vector<int32_t>>> CudaRunner::last_routing() {
  Impl& m = *impl_;
  if (!m.routing_rec) return failed_precondition("cuda: routing is not being recorded (set_record_routing)");
  PG_TRY(synchronize());
  const int64_t K = cfg_.num_experts_per_tok;
  std::vector<std::vector<int32_t>> out(size_t(m.n_cache_layers));
  for (int64_t l = 0; l < m.n_cache_layers; ++l) {
    const int64_t T = m.routing_T[size_t(l)];
    if (T <= 0) continue;
    out[size_t(l)].resize(size_t(T * K));
    PG_CUDA_TRY(cudaMemcpy(out[size_t(l)].data(), m.routing_rec + l * m.Tm * K, size_t(T * K) * 4,
                           cudaMemcpyDeviceToHost));
  }
  return out;
}

double CudaRunner::routed_expert_bytes() const {
  double sum = 0;
  int64_t n = 0;
  for (const DevLayer& L : impl_->w.layers)
    if (L.is_moe && L.mlp.n_experts > 0) {
      sum += double(matrix_bytes(L.mlp.gate_up) + matrix_bytes(L.mlp.down)) / double(L.mlp.n_experts + L.mlp.n_shared);
      ++n;
    }
  return n ? sum / double(n) : 0.0;
}

cudaStream_t CudaRunner::stream() const { return impl_->stream; }
const float* CudaRunner::device_logits() const { return impl_->logits; }
Status CudaRunner::synchronize() {
  PG_CUDA_TRY(cudaStreamSynchronize(impl_->stream));
  return ok_status();
}
size_t CudaRunner::weight_bytes() const { return impl_->w.arena.bytes(); }
size_t CudaRunner::kv_cache_bytes() const {
  return size_t(impl_->n_cache_layers * impl_->cache_layer_elems()) * impl_->kv_elem_bytes();
}

Status CudaRunner::step_async(std::span<const SeqStep> seqs) {
  Impl& m = *impl_;
  StepLayout L;
  PG_TRY(layout_step(cfg_, seqs, m.n_blocks, m.block_size, L, m.table_stride));
  if (L.max_blocks > m.table_stride)
    return invalid_argument("cuda: a sequence has {} KV blocks, more than the {} of max_model_len", L.max_blocks,
                            m.table_stride);
  // A graph replays decode steps (one token per sequence, its logits) and verify steps (q = 1 +
  // drafts tokens per sequence, every row's logits), every sequence alike.
  const int64_t n_seqs = int64_t(seqs.size()), q = seqs.empty() ? 0 : int64_t(seqs[0].tokens.size());
  bool uniform = m.opt.use_graphs && !m.routing_rec && q >= 1 && (q == 1 || m.spec_graphs());
  for (const SeqStep& s : seqs)
    uniform = uniform && int64_t(s.tokens.size()) == q && !s.no_logits && s.all_logits == (q > 1);
  if (const int64_t bucket = uniform ? m.graph_bucket(n_seqs, q) : 0; bucket > 0) {
    const Status st = m.replay(Impl::kMainStep, L, bucket, q, nullptr);
    if (st.ok() || q == 1) {
      m.last_rows = int64_t(L.out_rows.size());
      return st;
    }
    // Speculation is an optimisation: a verify graph that fails to build leaves the eager path.
    std::fprintf(stderr, "cuda: verify-step graph failed (%s); speculative steps run eagerly from now on\n",
                 st.to_string().c_str());
    m.opt.spec_graphs = false;
  }
  PG_ASSIGN_OR_RETURN(Impl::Step s, m.upload(L));
  PG_TRY(m.forward_device(s));
  m.last_rows = s.n_rows;
  return ok_status();
}

Status CudaRunner::forward(std::span<const SeqStep> seqs, StepOutput& out) {
  Impl& m = *impl_;
  const int64_t H = cfg_.hidden_size, vocab = cfg_.vocab_size;
  StepLayout L;
  PG_TRY(layout_step(cfg_, seqs, m.n_blocks, m.block_size, L, m.table_stride));
  out.n_rows = int64_t(L.out_rows.size());
  out.logits.resize(static_cast<size_t>(out.n_rows * vocab));
  out.hidden.resize(static_cast<size_t>(out.n_rows * H));
  if (out.n_rows <= m.logit_rows) {
    PG_TRY(step_async(seqs));
    // Output rows in token order are the first rows of hidden_all (every decode step); otherwise
    // forward_device gathered them into `hidden`.
    bool in_order = out.n_rows <= L.T;
    for (size_t i = 0; in_order && i < L.out_rows.size(); ++i) in_order = L.out_rows[i] == int64_t(i);
    const float* hrows = in_order ? m.hidden_all : m.hidden;
    if (logits_to_host_)
      PG_CUDA_TRY(cudaMemcpyAsync(out.logits.data(), m.logits, out.logits.size() * 4, cudaMemcpyDeviceToHost, m.stream));
    else
      out.logits.clear();
    PG_CUDA_TRY(cudaMemcpyAsync(out.hidden.data(), hrows, out.hidden.size() * 4, cudaMemcpyDeviceToHost, m.stream));
  } else {
    // More output rows than the logits buffer: run the trunk once, then lm_head in chunks.
    PG_ASSIGN_OR_RETURN(Impl::Step s, m.upload(L));
    PG_TRY(m.trunk(s));
    for (int64_t r0 = 0; r0 < out.n_rows; r0 += m.logit_rows) {
      const int64_t n = std::min(m.logit_rows, out.n_rows - r0);
      for (int64_t i = 0; i < n; ++i)  // gather on the copy: rows of hidden_all
        PG_CUDA_TRY(cudaMemcpyAsync(m.hidden + i * H, m.hidden_all + L.out_rows[size_t(r0 + i)] * H, size_t(H) * 4,
                                    cudaMemcpyDeviceToDevice, m.stream));
      PG_TRY(m.lin(m.hidden, m.w.lm_head, m.logits, n));
      PG_CUDA_TRY(cudaMemcpyAsync(&out.logits[size_t(r0 * vocab)], m.logits, size_t(n * vocab) * 4,
                                  cudaMemcpyDeviceToHost, m.stream));
      PG_CUDA_TRY(cudaMemcpyAsync(&out.hidden[size_t(r0 * H)], m.hidden, size_t(n * H) * 4, cudaMemcpyDeviceToHost,
                                  m.stream));
    }
  }
  if (copy_hidden_all_) {
    out.hidden_all.resize(static_cast<size_t>(L.T * H));
    PG_CUDA_TRY(cudaMemcpyAsync(out.hidden_all.data(), m.hidden_all, out.hidden_all.size() * 4, cudaMemcpyDeviceToHost,
                                m.stream));
  } else {
    out.hidden_all.clear();
  }
  return synchronize();
}

Status CudaRunner::Impl::mtp_pass(int64_t mtp_idx, std::span<const SeqStep> seqs, std::span<const float> prev_hidden,
                                 StepLayout& L) {
  const int64_t H = cfg.hidden_size;
  if (mtp_idx < 0 || mtp_idx >= int64_t(w.mtp.size()))
    return failed_precondition("forward_mtp: the model has {} MTP layer(s), asked for #{}", w.mtp.size(), mtp_idx);
  PG_TRY(layout_step(cfg, seqs, n_blocks, block_size, L, table_stride));
  if (int64_t(prev_hidden.size()) != L.T * H)
    return invalid_argument("forward_mtp: {} hidden values for {} tokens of {}", prev_hidden.size(), L.T, H);
  if (int64_t(L.out_rows.size()) > logit_rows)
    return invalid_argument("forward_mtp: {} output rows, the runner holds {}", L.out_rows.size(), logit_rows);
  // The previous hidden states go to `hidden` [T, H] (padded rows: zeros), where mtp_device reads them.
  auto stage_hidden = [&](int64_t padded_T) -> Status {
    PG_CUDA_TRY(cudaMemcpyAsync(hidden, prev_hidden.data(), prev_hidden.size() * 4, cudaMemcpyHostToDevice, stream));
    if (padded_T > L.T) PG_CUDA_TRY(cudaMemsetAsync(hidden + L.T * H, 0, size_t((padded_T - L.T) * H) * 4, stream));
    return ok_status();
  };
  // Passes whose sequences all carry q tokens and want their last row's logits replay a graph per
  // (bucket, q): the one-token drafting steps, and the catch-up pass after a verify step, which
  // carries 1 + the drafts accepted (eager launches of a whole MTP layer before).
  const int64_t n_seqs = int64_t(seqs.size()), q = seqs.empty() ? 0 : int64_t(seqs[0].tokens.size());
  bool uniform = spec_graphs() && !routing_rec && q >= 1;
  for (const SeqStep& s : seqs) uniform = uniform && int64_t(s.tokens.size()) == q && !s.no_logits && !s.all_logits;
  if (const int64_t bucket = uniform ? graph_bucket(n_seqs, q) : 0; bucket > 0) {
    const Status st = replay(kMtpStep + mtp_idx, L, bucket, q, stage_hidden);
    if (st.ok()) return st;
    std::fprintf(stderr, "cuda: draft-step graph failed (%s); speculative steps run eagerly from now on\n",
                 st.to_string().c_str());
    opt.spec_graphs = false;
  }
  PG_ASSIGN_OR_RETURN(Step s, upload(L));
  PG_TRY(stage_hidden(L.T));
  return mtp_device(mtp_idx, s);
}

Status CudaRunner::forward_mtp(int64_t mtp_idx, std::span<const SeqStep> seqs, std::span<const float> prev_hidden,
                               StepOutput& out) {
  Impl& m = *impl_;
  const int64_t H = cfg_.hidden_size, vocab = cfg_.vocab_size;
  StepLayout L;
  PG_TRY(m.mtp_pass(mtp_idx, seqs, prev_hidden, L));
  out.n_rows = int64_t(L.out_rows.size());
  out.hidden_all.clear();
  out.hidden.resize(static_cast<size_t>(out.n_rows * H));
  out.logits.resize(static_cast<size_t>(out.n_rows * vocab));
  if (out.n_rows == 0) return synchronize();
  PG_CUDA_TRY(cudaMemcpyAsync(out.hidden.data(), m.hidden, out.hidden.size() * 4, cudaMemcpyDeviceToHost, m.stream));
  PG_CUDA_TRY(cudaMemcpyAsync(out.logits.data(), m.logits, out.logits.size() * 4, cudaMemcpyDeviceToHost, m.stream));
  return synchronize();
}

Status CudaRunner::draft_chain(int64_t mtp_idx, std::span<const SeqStep> seqs, std::span<const float> prev_hidden,
                               std::span<const DraftRow> rows, DraftPicker& picker, DraftOutput& out) {
  Impl& m = *impl_;
  const int64_t H = cfg_.hidden_size, vocab = cfg_.vocab_size, n = int64_t(rows.size());
  DeviceDraftPicker* dp = picker.device();
  int64_t k = 0;
  size_t want_floats = 0;
  for (const DraftRow& r : rows) {
    k = std::max(k, r.n_drafts);
    if (r.want_logits) want_floats += size_t(std::max<int64_t>(r.n_drafts, 0) * vocab);
  }
  // Depths 1..k-1 of a bucket: a graph when speculative graphs are on (k >= 2), else eager
  // launches of the same sequence over the rows themselves.
  const int64_t graph_b = k >= 2 && m.spec_graphs() && !m.routing_rec ? m.graph_bucket(n, 1) : 0;
  const int64_t bucket = graph_b > 0 ? graph_b : n;
  // Outside what the device chain holds, the host loop drafts.
  if (!dp || !m.d_chain || m.routing_rec || k < 1 || k > kMaxDraftDepth || n > m.max_seqs || k * bucket > m.logit_rows ||
      k > m.block_size)
    return ModelRunner::draft_chain(mtp_idx, seqs, prev_hidden, rows, picker, out);
  if (want_floats > m.chain_logits_floats) {  // grows rarely; before anything is enqueued
    if (m.chain_logits_host) PG_CUDA_TRY(cudaFreeHost(m.chain_logits_host));
    m.chain_logits_host = nullptr, m.chain_logits_floats = 0;
    PG_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&m.chain_logits_host), want_floats * 2 * 4));
    m.chain_logits_floats = want_floats * 2;
  }
  out.tokens.assign(rows.size(), {});
  out.logits.assign(rows.size(), {});
  ++m.counts.device_chains;
  StepLayout L;
  PG_TRY(m.mtp_pass(mtp_idx, seqs, prev_hidden, L));  // depth 0's logits and hidden: rows [0, n)
  if (int64_t(L.out_rows.size()) != n)
    return invalid_argument("draft_chain: {} rows for {} output rows of the catch-up pass", n, L.out_rows.size());
  PG_TRY(m.upload_chain(rows, bucket, k));
  if (bucket > n) PG_CUDA_TRY(cudaMemsetAsync(m.hidden + n * H, 0, size_t((bucket - n) * H) * 4, m.stream));
  PG_TRY(dp->begin(bucket, k, m.stream));
  auto enqueue = [&] { return m.chain_device(mtp_idx, bucket, k, *dp); };
  bool done = false;
  if (graph_b > 0 && !m.opt.debug_graphs_eager) {
    const std::array<int64_t, 3> key{Impl::kChainStep + mtp_idx, bucket, k};
    auto it = m.chain_graphs.find(key);
    if (it != m.chain_graphs.end() && it->second.second != dp->generation()) {  // the picker's buffers moved
      cudaGraphExecDestroy(it->second.first);
      m.chain_graphs.erase(it);
      it = m.chain_graphs.end();
    }
    Status st = ok_status();
    if (it == m.chain_graphs.end()) {
      Result<cudaGraphExec_t> exec = m.capture(enqueue);
      if (exec.ok()) {
        it = m.chain_graphs.emplace(key, std::make_pair(*exec, dp->generation())).first;
        ++m.counts.chain;
      } else {
        st = exec.status();
      }
    }
    if (st.ok()) {
      PG_CUDA_TRY(cudaGraphLaunch(it->second.first, m.stream));
      ++m.counts.chain_replays;
      done = true;
    } else {  // speculation is an optimisation: the same launches eagerly, from now on
      std::fprintf(stderr, "cuda: draft-chain graph failed (%s); speculative steps run eagerly from now on\n",
                   st.to_string().c_str());
      m.opt.spec_graphs = false;
    }
  }
  if (!done) {
    m.capturing = true;  // the op choices of a capture: nothing that waits for the host
    const Status st = enqueue();
    m.capturing = false;
    PG_TRY(st);
  }
  // One copy of every depth's picks, the sampled rows' logits, one synchronization.
  PG_CUDA_TRY(cudaMemcpyAsync(m.chain_tok_host, m.chain_tok, size_t(k * m.max_seqs) * 4, cudaMemcpyDeviceToHost,
                              m.stream));
  ++m.counts.device_chain_token_copies;
  size_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    const DraftRow& r = rows[size_t(i)];
    if (!r.want_logits) continue;
    for (int64_t d = 0; d < r.n_drafts; ++d, at += size_t(vocab))
      PG_CUDA_TRY(cudaMemcpyAsync(m.chain_logits_host + at, m.logits + (d * bucket + i) * vocab, size_t(vocab) * 4,
                                  cudaMemcpyDeviceToHost, m.stream));
  }
  ++m.counts.device_chain_syncs;
  PG_TRY(synchronize());
  at = 0;
  for (int64_t i = 0; i < n; ++i) {
    const DraftRow& r = rows[size_t(i)];
    for (int64_t d = 0; d < r.n_drafts; ++d) out.tokens[size_t(i)].push_back(m.chain_tok_host[d * m.max_seqs + i]);
    if (!r.want_logits) continue;
    out.logits[size_t(i)].assign(m.chain_logits_host + at, m.chain_logits_host + at + size_t(r.n_drafts * vocab));
    at += size_t(r.n_drafts * vocab);
  }
  return ok_status();
}

// Inputs of `batch` sequences of `ctx` positions, each bringing its last q as new tokens (q = 1:
// a decode step; q > 1: a verify step's positions ctx - q .. ctx - 1, causal), in distinct
// blocks, and x = their embeddings: what time_layer and profile_layer run a layer on.
Result<CudaRunner::Impl::Step> CudaRunner::Impl::layer_inputs(int64_t batch, int64_t ctx, int64_t q) {
  const int64_t nb = (ctx + block_size - 1) / block_size;
  if (q < 1 || q > ctx) return invalid_argument("{} new tokens of a sequence of {} positions", q, ctx);
  if (batch * nb > n_blocks || batch > max_seqs || ctx > max_model_len || batch * q > Tm)
    return invalid_argument("{} sequences of {} positions ({} new each) do not fit the cache", batch, ctx, q);
  StepLayout L;
  L.T = batch * q;
  L.max_blocks = table_stride;
  L.tables.assign(size_t(batch * table_stride), 0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < q; ++i) {
      const int64_t t = b * q + i, pos = ctx - q + i;
      L.tokens.push_back(int32_t((t * 7919) % cfg.vocab_size));
      L.token_seq.push_back(int32_t(b));
      L.positions.push_back(pos);
      L.ctx_len.push_back(pos + 1);
      L.out_rows.push_back(t);
    }
    for (int64_t j = 0; j < nb; ++j) L.tables[size_t(b * table_stride + j)] = int32_t(b * nb + j);
  }
  PG_ASSIGN_OR_RETURN(Step s, upload(L));
  ops::EmbeddingArgs e;
  e.table = &w.embed, e.tokens = s.tokens, e.y = x, e.m = L.T;
  PG_TRY(cu::embedding(e, stream));
  PG_CUDA_TRY(cudaStreamSynchronize(stream));
  return s;
}

Result<std::vector<std::pair<std::string, double>>> CudaRunner::profile_layer(int64_t layer_idx, int64_t batch,
                                                                               int64_t ctx, int reps, int64_t q) {
  Impl& m = *impl_;
  if (layer_idx < 0 || layer_idx >= cfg_.num_hidden_layers)
    return invalid_argument("profile_layer: layer {} of {}", layer_idx, cfg_.num_hidden_layers);
  PG_ASSIGN_OR_RETURN(Impl::Step s, m.layer_inputs(batch, ctx, q));
  std::map<std::string, std::vector<double>> us;
  std::vector<std::string> order;
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
    std::vector<std::pair<std::string, cudaEvent_t>> ev;
    m.prof = &ev;
    Status st = m.mark("start");
    if (st.ok()) st = m.layer(m.w.layers[size_t(layer_idx)], layer_idx, s);
    m.prof = nullptr;
    if (st.ok()) st = synchronize();
    for (size_t i = 1; st.ok() && i < ev.size(); ++i) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, ev[i - 1].second, ev[i].second) != cudaSuccess) continue;
      if (r < 0) continue;
      if (!us.count(ev[i].first)) order.push_back(ev[i].first);
      us[ev[i].first].push_back(double(ms) * 1000.0);
    }
    for (auto& [n, e] : ev) cudaEventDestroy(e);
    PG_TRY(st);
  }
  std::vector<std::pair<std::string, double>> out;
  for (const std::string& n : order) {
    auto v = us[n];
    std::sort(v.begin(), v.end());
    out.emplace_back(n, v[v.size() / 2]);
  }
  return out;
}

Result<double> CudaRunner::time_layer(int64_t layer_idx, int64_t batch, int64_t ctx, int iters, int reps,
                                      int64_t q) {
  Impl& m = *impl_;
  if (layer_idx < 0 || layer_idx >= cfg_.num_hidden_layers)
    return invalid_argument("time_layer: layer {} of {}", layer_idx, cfg_.num_hidden_layers);
  PG_ASSIGN_OR_RETURN(Impl::Step s, m.layer_inputs(batch, ctx, q));
  s.max_ctx = ctx;
  PG_ASSIGN_OR_RETURN(cudaGraphExec_t exec, m.capture([&]() -> Status {
    for (int i = 0; i < iters; ++i) PG_TRY(m.layer(m.w.layers[size_t(layer_idx)], layer_idx, s));
    return ok_status();
  }));
  cudaEvent_t e0, e1;
  PG_CUDA_TRY(cudaEventCreate(&e0));
  PG_CUDA_TRY(cudaEventCreate(&e1));
  std::vector<double> us;
  Status run = ok_status();
  for (int r = -1; r < reps && run.ok(); ++r) {  // r = -1: warm-up
    cudaEventRecord(e0, m.stream);
    cudaGraphLaunch(exec, m.stream);
    cudaEventRecord(e1, m.stream);
    if (cudaError_t err = cudaEventSynchronize(e1); err != cudaSuccess) {
      run = cu::cuda_error(err, "cudaEventSynchronize", __FILE__, __LINE__);
      break;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (r >= 0) us.push_back(double(ms) * 1000.0 / iters);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec);
  PG_TRY(run);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

StepBytes CudaRunner::step_bytes(int64_t batch, int64_t ctx) const {
  const Impl& m = *impl_;
  const ModelConfig& c = cfg_;
  StepBytes b;
  const double E = double(c.n_routed_experts), K = double(c.num_experts_per_tok);
  // Distinct routed experts a batch touches, expected under uniform routing: E (1 - (1 - K/E)^batch).
  const double distinct = E > 0 ? E * (1.0 - std::pow(1.0 - K / E, double(batch))) : 0.0;
  for (const DevLayer& L : m.w.layers) {
    b.attention += L.attn.bytes;
    if (L.is_moe) {
      b.router += double(matrix_bytes(L.router));
      const double per_expert = double(matrix_bytes(L.mlp.gate_up) + matrix_bytes(L.mlp.down)) /
                                double(L.mlp.n_experts + L.mlp.n_shared);
      b.experts += per_expert * (distinct + double(L.mlp.n_shared));
    } else {
      b.dense_mlp += double(matrix_bytes(L.mlp.gate_up) + matrix_bytes(L.mlp.down));
    }
    b.kv_cache += double(batch) * double(ctx) * double(m.D) * double(m.kv_elem_bytes());
  }
  b.lm_head = double(matrix_bytes(m.w.lm_head));
  b.other = double(batch) * double(c.hidden_size) * double(matrix_elem_bytes(m.w.embed));
  return b;
}

}  // namespace pg
