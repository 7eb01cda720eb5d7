// The DeepSeek-V3 family forward pass over the CPU reference ops. Shapes are noted on every
// buffer: T = new tokens in the step (all sequences), H = hidden_size, nh = heads,
// R = kv_lora_rank, P = qk_rope_head_dim, nope = qk_nope_head_dim, V = v_head_dim.
#include "model/deepseek_model.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/dtype.h"
#include "model/activation_quant.h"
#include "model/rope_yarn.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/moe_experts.h"

namespace pg {

using ops::Matrix;

DeepseekModel::DeepseekModel(ModelConfig cfg, Checkpoint ckpt) : cfg_(std::move(cfg)), ckpt_(std::move(ckpt)) {}

Result<std::unique_ptr<DeepseekModel>> DeepseekModel::load(const std::filesystem::path& model_dir) {
  PG_ASSIGN_OR_RETURN(ModelConfig cfg, load_model_config(model_dir));
  PG_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(model_dir));
  std::unique_ptr<DeepseekModel> m(new DeepseekModel(std::move(cfg), std::move(ckpt)));
  PG_ASSIGN_OR_RETURN(m->w_, load_model_weights(m->cfg_, m->ckpt_));
  m->rope_ = make_rope_table(m->cfg_);
  m->softmax_scale_ = mla_softmax_scale(m->cfg_);
  return m;
}

namespace {

void rmsnorm_rows(const float* x, const std::vector<float>& w, float* y, int64_t m, int64_t n, float eps,
                  int64_t x_stride = 0, int64_t y_stride = 0) {
  ops::RmsNormArgs a;
  a.x = x; a.weight = w.data(); a.y = y; a.m = m; a.n = n; a.eps = eps;
  a.x_stride = x_stride; a.y_stride = y_stride;
  ops::cpu::rmsnorm(a);
}

void linear(const float* x, const Matrix& w, float* y, int64_t m, ThreadPool& pool, bool accumulate = false,
            int64_t x_stride = 0, int64_t y_stride = 0) {
  ops::LinearArgs a;
  a.x = x; a.w = &w; a.y = y; a.m = m; a.accumulate = accumulate; a.x_stride = x_stride; a.y_stride = y_stride;
  ops::cpu::linear(a, pool);
}

float silu(float v) { return v / (1.0f + std::exp(-v)); }

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// f16 rounding as the CUDA NVFP4 tensor-core kernels convert activations (cvt.rn.satfinite):
// nearest even, |v| > 65504 saturated to +-65504, NaN kept.
float round_f16(float v) { return f16_to_f32(f32_to_f16(std::clamp(v, -65504.0f, 65504.0f))); }

// y (+)= x · Wᵀ with x rounded to f16 (the tensor-core GEMVs' numbers; the weights exact).
void linear_f16x(const float* x, const Matrix& w, float* y, int64_t m, ThreadPool& pool, bool accumulate = false) {
  std::vector<float> xr(x, x + m * w.cols);
  for (float& v : xr) v = round_f16(v);
  linear(xr.data(), w, y, m, pool, accumulate);
}

// y (+)= x · Wᵀ with each row of x rounded to e4m3 under its own scale (a W4A8 kernel's inputs).
void linear_e4m3x(const float* x, const Matrix& w, float* y, int64_t m, ThreadPool& pool, bool accumulate = false) {
  std::vector<float> xr(size_t(m * w.cols));
  round_rows_e4m3(x, m, w.cols, 0, xr.data());
  linear(xr.data(), w, y, m, pool, accumulate);
}

// `w` dequantized and rounded to bf16 (what a tensor-core path multiplies), as an f32 matrix
// over `storage`.
Matrix bf16_image(const Matrix& w, std::vector<float>& storage) {
  storage.resize(size_t(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) ops::matrix_row_to_f32(w, r, &storage[size_t(r * w.cols)]);
  for (float& v : storage) v = round_bf16(v);
  return Matrix{ops::WeightFormat::kF32, w.rows, w.cols, storage.data()};
}

// y (+)= x · Wᵀ with x and W rounded to bf16 and f32 sums: a tensor-core GEMM's numbers.
void linear_bf16(const float* x, const Matrix& w, float* y, int64_t m, ThreadPool& pool, bool accumulate = false) {
  std::vector<float> xr(x, x + m * w.cols), wr;
  for (float& v : xr) v = round_bf16(v);
  linear(xr.data(), bf16_image(w, wr), y, m, pool, accumulate);
}

// Whether every run of the step (tokens of one sequence at consecutive positions) has at least
// min_tokens tokens: the steps whose attention CudaRunner puts on tensor cores (mla_prefill).
bool runs_at_least(const int32_t* token_seq, const int64_t* positions, int64_t T, int64_t min_tokens) {
  int64_t run = 0;
  for (int64_t t = 0; t < T; ++t) {
    const bool cont = t > 0 && token_seq[t] == token_seq[t - 1] && positions[t] == positions[t - 1] + 1;
    if (!cont && t > 0 && run < min_tokens) return false;
    run = cont ? run + 1 : 1;
  }
  return T > 0 && run >= min_tokens;
}

// ops::cpu::mla_attention with the numbers of the tensor-core prefill (ops::cuda::mla_prefill):
// the scaled queries, the cache rows and the softmax weights rounded to bf16, sums in f32.
void mla_attention_bf16(const ops::MlaAttentionArgs& m, ThreadPool& pool) {
  const int64_t R = m.kv_lora_rank, P = m.rope_dim, D = R + P, nh = m.n_heads;
  pool.parallel_for(m.m * nh, [&](int64_t b, int64_t e) {
    std::vector<float> q(static_cast<size_t>(D)), w, row(static_cast<size_t>(D));
    for (int64_t th = b; th < e; ++th) {
      const int64_t t = th / nh, h = th % nh, n = m.ctx_len[t];
      for (int64_t c = 0; c < R; ++c)
        q[size_t(c)] = round_bf16(m.softmax_scale * m.q_lat[t * q_lat_row_stride(m) + h * q_lat_head_stride(m) + c]);
      for (int64_t c = 0; c < P; ++c)
        q[size_t(R + c)] = round_bf16(m.softmax_scale * m.q_pe[t * q_pe_row_stride(m) + h * q_pe_head_stride(m) + c]);
      const int32_t* table = m.block_tables + int64_t(m.token_seq[t]) * m.max_blocks_per_seq;
      // Row j of the sequence rounded to bf16 (a bf16 pool's values as they are, widened).
      auto cache_row = [&](int64_t j) {
        const int64_t at = (int64_t(table[j / m.block_size]) * m.block_size + j % m.block_size) * D;
        if (m.kv_bf16)
          for (int64_t c = 0; c < D; ++c) row[size_t(c)] = bf16_to_f32(m.kv_bf16[at + c]);
        else
          for (int64_t c = 0; c < D; ++c) row[size_t(c)] = round_bf16(m.kv[at + c]);
        return row.data();
      };
      w.assign(size_t(n), 0.0f);
      float mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        const float* kv = cache_row(j);
        float sc = 0.0f;
        for (int64_t c = 0; c < D; ++c) sc += q[size_t(c)] * kv[c];
        w[size_t(j)] = sc;
        mx = std::max(mx, sc);
      }
      double sum = 0.0;
      for (float& v : w) sum += std::exp(double(v - mx));
      for (float& v : w) v = round_bf16(float(std::exp(double(v - mx)) / sum));
      float* o = m.o_lat + th * R;
      std::fill(o, o + R, 0.0f);
      for (int64_t j = 0; j < n; ++j) ops::cpu::axpy(w[size_t(j)], cache_row(j), o, R);
    }
  });
}

}  // namespace

void DeepseekModel::proj(const float* x, const Matrix& w, float* y, int64_t m, bool accumulate) const {
  if (observer_) observer_->observe(w, x, m, 0);
  if (e4m3_x_ && w.format == ops::WeightFormat::kNvfp4) return linear_e4m3x(x, w, y, m, thread_pool(), accumulate);
  if (emul_.projection_min_rows > 0 && m >= emul_.projection_min_rows)
    return linear_bf16(x, w, y, m, thread_pool(), accumulate);
  if (emul_.projection_min_rows > 0 && ops::f16_mma_gemv(w, w.cols))  // NVFP4 and FP8 GEMVs on f16 tensor cores
    return linear_f16x(x, w, y, m, thread_pool(), accumulate);
  linear(x, w, y, m, thread_pool(), accumulate);
}

void DeepseekModel::mlp_forward(const MlpWeights& w, const float* x, int64_t T, int64_t inter, float* y,
                                bool accumulate, bool bf16, int64_t f16_inter) const {
  ThreadPool& pool = thread_pool();
  std::vector<float> g(size_t(T * inter)), u(size_t(T * inter));  // [T, inter]
  if (observer_) {
    observer_->observe(w.gate, x, T, 0);
    observer_->observe(w.up, x, T, 0);
  }
  if (e4m3_x_ && w.gate.format == ops::WeightFormat::kNvfp4) {  // the W4A8 probe: x and h to e4m3
    std::vector<float> xr(size_t(T * w.gate.cols));
    round_rows_e4m3(x, T, w.gate.cols, 0, xr.data());
    linear(xr.data(), w.gate, g.data(), T, pool);
    linear(xr.data(), w.up, u.data(), T, pool);
    for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
    if (observer_) observer_->observe(w.down, g.data(), T, 0);
    return linear_e4m3x(g.data(), w.down, y, T, pool, accumulate);
  }
  if (bf16) {  // the tensor-core experts: x, the weights and h rounded to bf16
    linear_bf16(x, w.gate, g.data(), T, pool);
    linear_bf16(x, w.up, u.data(), T, pool);
    for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
    if (observer_) observer_->observe(w.down, g.data(), T, 0);
    linear_bf16(g.data(), w.down, y, T, pool, accumulate);
    return;
  }
  // CUDA's expert kernels take the f16 tensor cores in steps below the bf16 GEMM's size for NVFP4 and
  // FP8 stacks of the tensor-core GEMV's shapes (ops::f16_mma_gemv; ops::fp8_experts_mma).
  if (f16_inter > 0 && ops::f16_mma_gemv(w.gate, w.gate.cols)) {  // the tensor-core experts: x to f16
    linear_f16x(x, w.gate, g.data(), T, pool);
    linear_f16x(x, w.up, u.data(), T, pool);
  } else {
    linear(x, w.gate, g.data(), T, pool);
    linear(x, w.up, u.data(), T, pool);
  }
  for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
  if (observer_) observer_->observe(w.down, g.data(), T, 0);
  if (f16_inter > 0 && ops::f16_mma_gemv(w.down, f16_inter))
    return linear_f16x(g.data(), w.down, y, T, pool, accumulate);
  linear(g.data(), w.down, y, T, pool, accumulate);  // [T, H]
}

void DeepseekModel::moe_forward(const MoeWeights& w, const float* x, int64_t T, float* y) const {
  const int64_t H = cfg_.hidden_size, E = cfg_.n_routed_experts, K = cfg_.num_experts_per_tok;
  // Router logits in f32: [T, E].
  std::vector<float> logits(size_t(T * E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e) logits[t * E + e] = ops::cpu::dot(x + t * H, &w.router_f32[e * H], H);
  std::vector<int32_t> idx(size_t(T * K));
  std::vector<float> wt(size_t(T * K));
  ops::MoeRoutingArgs r;
  r.logits = logits.data();
  r.bias = w.e_score_correction_bias.empty() ? nullptr : w.e_score_correction_bias.data();
  r.expert_idx = idx.data();
  r.expert_weight = wt.data();
  r.m = T; r.n_experts = E; r.top_k = K; r.n_group = cfg_.n_group; r.topk_group = cfg_.topk_group;
  r.scoring = cfg_.scoring_func == "sigmoid" ? ops::MoeScoring::kSigmoid : ops::MoeScoring::kSoftmax;
  r.method = cfg_.topk_method == "noaux_tc"               ? ops::MoeTopk::kNoAuxTc
             : cfg_.topk_method == "group_limited_greedy" ? ops::MoeTopk::kGroupLimitedGreedy
                                                          : ops::MoeTopk::kGreedy;
  r.norm_topk_prob = cfg_.norm_topk_prob;
  r.routed_scaling_factor = float(cfg_.routed_scaling_factor);
  PG_CHECK(ops::validate(r).ok(), "{}", ops::validate(r).message());
  ops::cpu::moe_routing(r);

  // Shared experts first, then each routed expert over the tokens that chose it, in expert
  // order (a fixed summation order per token).
  if (w.has_shared) {
    mlp_forward(w.shared, x, T, cfg_.moe_intermediate_size * cfg_.n_shared_experts, y, /*accumulate=*/false,
                experts_bf16(T), experts_f16(T) ? cfg_.moe_intermediate_size : 0);
  } else {
    std::fill(y, y + T * H, 0.0f);
  }
  std::vector<float> routed(size_t(T * H), 0.0f);  // [T, H]
  std::vector<float> xe, ye;
  std::vector<int64_t> rows;
  std::vector<float> row_w;
  for (int64_t e = 0; e < E; ++e) {
    rows.clear();
    row_w.clear();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k)
        if (idx[t * K + k] == e) { rows.push_back(t); row_w.push_back(wt[t * K + k]); }
    if (rows.empty()) continue;
    const int64_t n = int64_t(rows.size());
    xe.resize(size_t(n * H));
    ye.resize(size_t(n * H));
    for (int64_t i = 0; i < n; ++i) std::copy(x + rows[i] * H, x + (rows[i] + 1) * H, &xe[i * H]);
    mlp_forward(w.experts[e], xe.data(), n, cfg_.moe_intermediate_size, ye.data(), false, experts_bf16(T),
                experts_f16(T) ? cfg_.moe_intermediate_size : 0);
    for (int64_t i = 0; i < n; ++i) ops::cpu::axpy(row_w[i], &ye[i * H], &routed[rows[i] * H], H);
  }
  for (int64_t i = 0; i < T * H; ++i) y[i] += routed[i];
}

void DeepseekModel::layer_forward(const LayerWeights& L, int64_t cache_layer, float* x, int64_t T,
                                  const int64_t* positions, const int32_t* token_seq, const int64_t* ctx_len,
                                  const int32_t* block_tables, int64_t max_blocks, KvCache& cache) const {
  const ModelConfig& c = cfg_;
  ThreadPool& pool = thread_pool();
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, R = c.kv_lora_rank, P = c.qk_rope_head_dim;
  const int64_t nope = c.qk_nope_head_dim, V = c.v_head_dim, qk = c.qk_head_dim(), D = R + P;
  const float eps = float(c.rms_norm_eps);
  const AttentionWeights& A = L.attn;

  const bool heads_bf16 = experts_bf16(T);
  std::vector<float> a(size_t(T * H));  // [T, H] normed input
  rmsnorm_rows(x, L.input_layernorm, a.data(), T, H, eps);

  std::vector<float> q(size_t(T * nh * qk));  // [T, nh, nope + P]
  if (A.has_q_lora) {
    const int64_t QR = *c.q_lora_rank;
    std::vector<float> qa(size_t(T * QR));  // [T, q_lora_rank]
    proj(a.data(), A.q_a_proj, qa.data(), T);
    rmsnorm_rows(qa.data(), A.q_a_layernorm, qa.data(), T, QR, eps);
    proj(qa.data(), A.q_b_proj, q.data(), T);
  } else {
    proj(a.data(), A.q_proj, q.data(), T);
  }
  std::vector<float> kv(size_t(T * D));  // [T, R + P]: [c_kv | k_pe]
  proj(a.data(), A.kv_a_proj_with_mqa, kv.data(), T);
  rmsnorm_rows(kv.data(), A.kv_a_layernorm, kv.data(), T, R, eps, D, D);
  if (observer_) observer_->observe(A.kv_b_proj, kv.data(), T, D);  // the c_kv rows W_UK / W_UV take

  ops::RopeArgs ra;  // q_pe of every head
  ra.x = q.data(); ra.positions = positions; ra.table = &rope_; ra.m = T; ra.n_heads = nh;
  ra.head_stride = qk; ra.row_stride = nh * qk; ra.offset = nope; ra.rope_dim = P;
  ops::cpu::rope(ra);
  ra.x = kv.data(); ra.n_heads = 1; ra.head_stride = D; ra.row_stride = D; ra.offset = R;  // k_pe
  ops::cpu::rope(ra);

  // Write [c_kv | k_pe] of the new tokens into the paged cache (a bf16 cache: rounded to nearest even).
  float* pool_kv = cache.layer(cache_layer);
  uint16_t* pool_kv16 = cache.layer16(cache_layer);
  const int64_t bs = cache.block_size();
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = positions[t];
    const int32_t blk = block_tables[int64_t(token_seq[t]) * max_blocks + p / bs];
    const int64_t row = (int64_t(blk) * bs + p % bs) * D;
    if (pool_kv16)
      for (int64_t j = 0; j < D; ++j) pool_kv16[row + j] = f32_to_bf16(kv[t * D + j]);
    else
      std::copy(&kv[t * D], &kv[(t + 1) * D], pool_kv + row);
  }

  // Absorb W_UK into the queries: q_lat[t,h] = q_nope[t,h] · W_UK[h]  -> [T, nh, R]; q_pe [T, nh, P].
  std::vector<float> q_lat(size_t(T * nh * R), 0.0f), q_pe(size_t(T * nh * P));
  pool.parallel_for(T * nh, [&](int64_t b, int64_t e) {
    for (int64_t th = b; th < e; ++th) {
      const int64_t t = th / nh, h = th % nh;
      const float* qn = &q[(t * nh + h) * qk];
      float* ql = &q_lat[th * R];
      if (heads_bf16) {  // the tensor-core per-head product: q_nope and W_UK rounded to bf16
        for (int64_t d = 0; d < nope; ++d)
          for (int64_t r = 0; r < R; ++r) ql[r] += round_bf16(qn[d]) * round_bf16(A.w_uk[(h * nope + d) * R + r]);
      } else {
        for (int64_t d = 0; d < nope; ++d) ops::cpu::axpy(qn[d], &A.w_uk[(h * nope + d) * R], ql, R);
      }
      std::copy(qn + nope, qn + qk, &q_pe[th * P]);
    }
  });

  std::vector<float> o_lat(size_t(T * nh * R));  // [T, nh, R]
  ops::MlaAttentionArgs m;
  m.q_lat = q_lat.data(); m.q_pe = q_pe.data(); m.kv = pool_kv; m.kv_bf16 = pool_kv16; m.block_tables = block_tables;
  m.token_seq = token_seq; m.ctx_len = ctx_len; m.o_lat = o_lat.data();
  m.m = T; m.n_heads = nh; m.kv_lora_rank = R; m.rope_dim = P;
  m.block_size = bs; m.max_blocks_per_seq = max_blocks; m.n_blocks = cache.n_blocks();
  m.softmax_scale = softmax_scale_;
  if (emul_.attention_min_rows > 0 && R % 8 == 0 && D % 8 == 0 &&
      runs_at_least(token_seq, positions, T, emul_.attention_min_rows))
    mla_attention_bf16(m, pool);  // the tensor-core prefill attention's roundings
  else
    ops::cpu::mla_attention(m, pool);

  // Up-project with W_UV: o[t,h,v] = W_UV[h,v] · o_lat[t,h]  -> [T, nh * V]; then o_proj, residual.
  std::vector<float> o(size_t(T * nh * V));
  pool.parallel_for(T * nh, [&](int64_t b, int64_t e) {
    for (int64_t th = b; th < e; ++th) {
      const int64_t h = th % nh;
      for (int64_t v = 0; v < V; ++v) {
        if (heads_bf16) {
          float acc = 0.0f;
          for (int64_t r = 0; r < R; ++r) acc += round_bf16(A.w_uv[(h * V + v) * R + r]) * round_bf16(o_lat[th * R + r]);
          o[th * V + v] = acc;
        } else {
          o[th * V + v] = ops::cpu::dot(&A.w_uv[(h * V + v) * R], &o_lat[th * R], R);
        }
      }
    }
  });
  proj(o.data(), A.o_proj, x, T, /*accumulate=*/true);

  // FFN block.
  rmsnorm_rows(x, L.post_attention_layernorm, a.data(), T, H, eps);
  std::vector<float> y(size_t(T * H));
  if (L.is_moe)
    moe_forward(L.moe, a.data(), T, y.data());
  else
    mlp_forward(L.mlp, a.data(), T, c.intermediate_size, y.data(), false, experts_bf16(T),
                experts_f16(T) ? c.intermediate_size : 0);
  for (int64_t i = 0; i < T * H; ++i) x[i] += y[i];
}

Status DeepseekModel::check_cache(const KvCache& cache) const {
  if (cache.row_dim() != kv_row_dim() || cache.n_layers() < n_cache_layers())
    return invalid_argument("forward: KV cache shape does not match the model");
  return ok_status();
}

Status DeepseekModel::forward(std::span<const SeqStep> seqs, KvCache& cache, StepOutput& out) const {
  const ModelConfig& c = cfg_;
  const int64_t H = c.hidden_size;
  StepLayout L;
  PG_TRY(check_cache(cache));
  PG_TRY(layout_step(cfg_, seqs, cache.n_blocks(), cache.block_size(), L));
  std::vector<float> x(size_t(L.T * H));  // [T, H] residual stream
  for (int64_t t = 0; t < L.T; ++t) ops::matrix_row_to_f32(w_.embed_tokens, L.tokens[t], &x[t * H]);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    layer_forward(w_.layers[l], l, x.data(), L.T, L.positions.data(), L.token_seq.data(), L.ctx_len.data(),
                  L.tables.data(), L.max_blocks, cache);
  // Final RMSNorm of every token (the MTP module's input); output rows take theirs, then lm_head.
  out.hidden_all.resize(size_t(L.T * H));
  rmsnorm_rows(x.data(), w_.norm, out.hidden_all.data(), L.T, H, float(c.rms_norm_eps));
  out.n_rows = int64_t(L.out_rows.size());
  out.hidden.resize(size_t(out.n_rows * H));
  for (int64_t i = 0; i < out.n_rows; ++i)
    std::copy(&out.hidden_all[L.out_rows[i] * H], &out.hidden_all[(L.out_rows[i] + 1) * H], &out.hidden[i * H]);
  out.logits.resize(size_t(out.n_rows * c.vocab_size));
  proj(out.hidden.data(), w_.lm_head, out.logits.data(), out.n_rows);
  return ok_status();
}

Status DeepseekModel::forward_mtp(int64_t mtp_idx, std::span<const SeqStep> seqs, std::span<const float> prev_hidden,
                                  KvCache& cache, StepOutput& out) const {
  const ModelConfig& c = cfg_;
  const int64_t H = c.hidden_size;
  if (mtp_idx < 0 || mtp_idx >= int64_t(w_.mtp.size()))
    return failed_precondition("forward_mtp: the model has {} MTP layer(s), asked for #{}", w_.mtp.size(), mtp_idx);
  StepLayout L;
  PG_TRY(check_cache(cache));
  PG_TRY(layout_step(cfg_, seqs, cache.n_blocks(), cache.block_size(), L));
  if (int64_t(prev_hidden.size()) != L.T * H)
    return invalid_argument("forward_mtp: {} hidden values for {} tokens of {}", prev_hidden.size(), L.T, H);
  const MtpWeights& m = w_.mtp[size_t(mtp_idx)];
  const float eps = float(c.rms_norm_eps);
  // x = eh_proj([enorm(embed(token)) ; hnorm(prev_hidden)])   [T, H]
  std::vector<float> cat(size_t(L.T * 2 * H)), x(size_t(L.T * H));
  for (int64_t t = 0; t < L.T; ++t) {
    ops::matrix_row_to_f32(m.embed_tokens, L.tokens[t], &cat[t * 2 * H]);
    rmsnorm_rows(&cat[t * 2 * H], m.enorm, &cat[t * 2 * H], 1, H, eps);
    rmsnorm_rows(&prev_hidden[size_t(t * H)], m.hnorm, &cat[t * 2 * H + H], 1, H, eps);
  }
  proj(cat.data(), m.eh_proj, x.data(), L.T);
  layer_forward(m.block, c.num_hidden_layers + mtp_idx, x.data(), L.T, L.positions.data(), L.token_seq.data(),
                L.ctx_len.data(), L.tables.data(), L.max_blocks, cache);
  // hidden = the block's output (what the next draft depth takes); logits via shared_head.
  out.hidden_all.clear();
  out.n_rows = int64_t(L.out_rows.size());
  out.hidden.resize(size_t(out.n_rows * H));
  std::vector<float> normed(size_t(out.n_rows * H));
  for (int64_t i = 0; i < out.n_rows; ++i) {
    std::copy(&x[L.out_rows[i] * H], &x[(L.out_rows[i] + 1) * H], &out.hidden[i * H]);
    rmsnorm_rows(&out.hidden[i * H], m.shared_head_norm, &normed[i * H], 1, H, eps);
  }
  out.logits.resize(size_t(out.n_rows * c.vocab_size));
  proj(normed.data(), m.shared_head_head, out.logits.data(), out.n_rows);
  return ok_status();
}

}  // namespace pg
