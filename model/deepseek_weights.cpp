// Binding checkpoint tensors to ModelWeights, with the checks that make a bad checkpoint a
// clear error rather than a crash: every expected tensor present with the right shape and a
// supported dtype, and no tensor left over.
#include "model/deepseek_weights.h"

#include <fmt/ranges.h>

#include <cstring>
#include <set>

#include "core/dtype.h"

namespace pg {
namespace {

std::string shape_str(std::span<const int64_t> s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

class Binder {
 public:
  Binder(const ModelConfig& cfg, const Checkpoint& ckpt) : cfg_(cfg), ckpt_(ckpt) {}

  Result<const TensorView*> tensor(const std::string& name, std::vector<int64_t> shape) {
    const TensorView* t = ckpt_.find(name);
    if (!t) return not_found("tensor '{}' is missing from the checkpoint in {} (expected shape {})", name,
                             ckpt_.dir().string(), shape_str(shape));
    if (t->shape != shape)
      return invalid_argument("tensor '{}' in {} has shape {}, expected {}", name, *t->file, shape_str(t->shape),
                              shape_str(shape));
    used_.insert(name);
    return t;
  }

  Result<ops::Matrix> matrix(const std::string& name, int64_t rows, int64_t cols) {
    if (const TensorView* raw = ckpt_.find(name); raw && raw->dtype == DType::kU8) return nvfp4(name, rows, cols);
    PG_ASSIGN_OR_RETURN(const TensorView* t, tensor(name, {rows, cols}));
    ops::Matrix m;
    m.rows = rows;
    m.cols = cols;
    m.data = t->data;
    switch (t->dtype) {
      case DType::kBF16: m.format = ops::WeightFormat::kBF16; break;
      case DType::kF32: m.format = ops::WeightFormat::kF32; break;
      case DType::kF8E4M3: {
        const auto& q = cfg_.quantization_config;
        if (q.quant_method != "fp8")
          return unsupported("tensor '{}' is F8_E4M3 but config.json has no DeepSeek FP8 quantization_config "
                             "(quant_method \"fp8\" with weight_block_size)", name);
        m.format = ops::WeightFormat::kFp8Block;
        m.block_rows = q.weight_block_size[0];
        m.block_cols = q.weight_block_size[1];
        const std::string sname = name + "_scale_inv";
        PG_ASSIGN_OR_RETURN(const TensorView* s,
                            tensor(sname, {(rows + m.block_rows - 1) / m.block_rows, (cols + m.block_cols - 1) / m.block_cols}));
        if (s->dtype != DType::kF32)
          return unsupported("tensor '{}' has dtype {}, expected F32 block scales", sname, dtype_safetensors_name(s->dtype));
        m.scale_inv = reinterpret_cast<const float*>(s->data);
        break;
      }
      default:
        return unsupported("tensor '{}' has dtype {}; weight matrices may be BF16, F32 or F8_E4M3 (DeepSeek FP8 with "
                           "weight_scale_inv)", name, dtype_safetensors_name(t->dtype));
    }
    return m;
  }

  // ModelOpt NVFP4 (layout and sources in formats/nvfp4.h): <m>.weight U8 [rows, cols/2],
  // <m>.weight_scale F8_E4M3 [rows, cols/16], <m>.weight_scale_2 F32 [], <m>.input_scale F32 []
  // (activation scale: bound as used, ignored by weight-only kernels). Excluded modules stay BF16.
  Result<ops::Matrix> nvfp4(const std::string& name, int64_t rows, int64_t cols) {
    const auto& hq = cfg_.hf_quant_config;
    const std::string module = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;  // 7: ".weight"
    if (!hq || hq->quant_algo != "NVFP4" || hq->group_size != ops::kNvfp4GroupSize)
      return unsupported("tensor '{}' is U8 but there is no hf_quant_config.json with quant_algo \"NVFP4\" and "
                         "group_size {}", name, ops::kNvfp4GroupSize);
    if (hq->is_excluded(module))
      return invalid_argument("tensor '{}' is NVFP4 but hf_quant_config.json excludes module '{}'", name, module);
    if (cols % ops::kNvfp4GroupSize)
      return invalid_argument("tensor '{}': NVFP4 needs in_features ({}) to be a multiple of {}", name, cols,
                              ops::kNvfp4GroupSize);
    PG_ASSIGN_OR_RETURN(const TensorView* t, tensor(name, {rows, cols / 2}));
    PG_ASSIGN_OR_RETURN(const TensorView* s, tensor(module + ".weight_scale", {rows, cols / ops::kNvfp4GroupSize}));
    if (s->dtype != DType::kF8E4M3)
      return unsupported("tensor '{}.weight_scale' has dtype {}, expected F8_E4M3", module, dtype_safetensors_name(s->dtype));
    ops::Matrix m{ops::WeightFormat::kNvfp4, rows, cols, t->data};
    m.scale_fp8 = s->data;
    for (const char* suffix : {".weight_scale_2", ".input_scale"}) {
      const TensorView* v = ckpt_.find(module + suffix);
      if (!v || v->dtype != DType::kF32 || v->numel() != 1)
        return invalid_argument("NVFP4 module '{}' needs a scalar F32 '{}{}'", module, module, suffix);
      used_.insert(module + suffix);
      if (suffix == std::string_view(".weight_scale_2")) std::memcpy(&m.scale_2, v->data, sizeof(float));
    }
    PG_TRY(ops::validate_matrix(m).with_context(name));
    return m;
  }

  // A vector (norm weight, bias) converted to f32.
  Result<std::vector<float>> vec(const std::string& name, int64_t n) {
    PG_ASSIGN_OR_RETURN(const TensorView* t, tensor(name, {n}));
    std::vector<float> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      switch (t->dtype) {
        case DType::kBF16: { uint16_t v; std::memcpy(&v, t->data + 2 * i, 2); out[i] = bf16_to_f32(v); break; }
        case DType::kF32: std::memcpy(&out[i], t->data + 4 * i, 4); break;
        case DType::kF16: { uint16_t v; std::memcpy(&v, t->data + 2 * i, 2); out[i] = f16_to_f32(v); break; }
        default:
          return unsupported("tensor '{}' has dtype {}; vectors may be BF16, F16 or F32", name,
                             dtype_safetensors_name(t->dtype));
      }
    }
    return out;
  }

  Status check_all_used() const {
    std::vector<std::string> extra;
    for (const TensorView* t : ckpt_.all())
      if (!used_.count(std::string(t->name))) extra.emplace_back(t->name);
    if (extra.empty()) return ok_status();
    const size_t show = std::min<size_t>(extra.size(), 8);
    return invalid_argument("{} tensor(s) in {} are not part of a {} model with this config.json: {}{}", extra.size(),
                            ckpt_.dir().string(), cfg_.model_type,
                            fmt::join(extra.begin(), extra.begin() + show, ", "), extra.size() > show ? ", ..." : "");
  }

 private:
  const ModelConfig& cfg_;
  const Checkpoint& ckpt_;
  std::set<std::string> used_;
};

Result<MlpWeights> bind_mlp(Binder& b, const std::string& p, int64_t H, int64_t inter) {
  MlpWeights w;
  PG_ASSIGN_OR_RETURN(w.gate, b.matrix(p + ".gate_proj.weight", inter, H));
  PG_ASSIGN_OR_RETURN(w.up, b.matrix(p + ".up_proj.weight", inter, H));
  PG_ASSIGN_OR_RETURN(w.down, b.matrix(p + ".down_proj.weight", H, inter));
  return w;
}

Result<LayerWeights> bind_layer(Binder& b, const ModelConfig& c, const std::string& p, bool is_moe) {
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, qk = c.qk_head_dim();
  const int64_t R = c.kv_lora_rank, nope = c.qk_nope_head_dim, V = c.v_head_dim;
  LayerWeights L;
  PG_ASSIGN_OR_RETURN(L.input_layernorm, b.vec(p + ".input_layernorm.weight", H));
  PG_ASSIGN_OR_RETURN(L.post_attention_layernorm, b.vec(p + ".post_attention_layernorm.weight", H));
  AttentionWeights& A = L.attn;
  const std::string a = p + ".self_attn";
  A.has_q_lora = c.q_lora_rank.has_value();
  if (A.has_q_lora) {
    PG_ASSIGN_OR_RETURN(A.q_a_proj, b.matrix(a + ".q_a_proj.weight", *c.q_lora_rank, H));
    PG_ASSIGN_OR_RETURN(A.q_a_layernorm, b.vec(a + ".q_a_layernorm.weight", *c.q_lora_rank));
    PG_ASSIGN_OR_RETURN(A.q_b_proj, b.matrix(a + ".q_b_proj.weight", nh * qk, *c.q_lora_rank));
  } else {
    PG_ASSIGN_OR_RETURN(A.q_proj, b.matrix(a + ".q_proj.weight", nh * qk, H));
  }
  PG_ASSIGN_OR_RETURN(A.kv_a_proj_with_mqa, b.matrix(a + ".kv_a_proj_with_mqa.weight", R + c.qk_rope_head_dim, H));
  PG_ASSIGN_OR_RETURN(A.kv_a_layernorm, b.vec(a + ".kv_a_layernorm.weight", R));
  PG_ASSIGN_OR_RETURN(A.kv_b_proj, b.matrix(a + ".kv_b_proj.weight", nh * (nope + V), R));
  PG_ASSIGN_OR_RETURN(A.o_proj, b.matrix(a + ".o_proj.weight", H, nh * V));
  // Absorption: kv_b_proj rows of head h are [W_UK (nope rows) ; W_UV (v rows)], each [., R].
  A.w_uk.resize(size_t(nh * nope * R));
  A.w_uv.resize(size_t(nh * V * R));
  for (int64_t h = 0; h < nh; ++h) {
    for (int64_t d = 0; d < nope; ++d) ops::matrix_row_to_f32(A.kv_b_proj, h * (nope + V) + d, &A.w_uk[(h * nope + d) * R]);
    for (int64_t d = 0; d < V; ++d) ops::matrix_row_to_f32(A.kv_b_proj, h * (nope + V) + nope + d, &A.w_uv[(h * V + d) * R]);
  }
  L.is_moe = is_moe;
  if (!is_moe) {
    PG_ASSIGN_OR_RETURN(L.mlp, bind_mlp(b, p + ".mlp", H, c.intermediate_size));
    return L;
  }
  MoeWeights& M = L.moe;
  const int64_t E = c.n_routed_experts;
  PG_ASSIGN_OR_RETURN(M.router, b.matrix(p + ".mlp.gate.weight", E, H));
  M.router_f32.resize(size_t(E * H));
  for (int64_t e = 0; e < E; ++e) ops::matrix_row_to_f32(M.router, e, &M.router_f32[e * H]);
  if (c.topk_method == "noaux_tc") {
    PG_ASSIGN_OR_RETURN(M.e_score_correction_bias, b.vec(p + ".mlp.gate.e_score_correction_bias", E));
  }
  M.experts.reserve(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    PG_ASSIGN_OR_RETURN(MlpWeights w, bind_mlp(b, fmt::format("{}.mlp.experts.{}", p, e), H, c.moe_intermediate_size));
    M.experts.push_back(w);
  }
  M.has_shared = c.n_shared_experts > 0;
  if (M.has_shared) {
    PG_ASSIGN_OR_RETURN(M.shared, bind_mlp(b, p + ".mlp.shared_experts", H, c.moe_intermediate_size * c.n_shared_experts));
  }
  return L;
}

}  // namespace

Result<ModelWeights> load_model_weights(const ModelConfig& c, const Checkpoint& ckpt) {
  Binder b(c, ckpt);
  ModelWeights w;
  const int64_t H = c.hidden_size, Vocab = c.vocab_size;
  PG_ASSIGN_OR_RETURN(w.embed_tokens, b.matrix("model.embed_tokens.weight", Vocab, H));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    PG_ASSIGN_OR_RETURN(LayerWeights L, bind_layer(b, c, fmt::format("model.layers.{}", i), c.is_moe_layer(i)));
    w.layers.push_back(std::move(L));
  }
  PG_ASSIGN_OR_RETURN(w.norm, b.vec("model.norm.weight", H));
  if (c.tie_word_embeddings && !ckpt.find("lm_head.weight")) {
    w.lm_head = w.embed_tokens;
  } else {
    PG_ASSIGN_OR_RETURN(w.lm_head, b.matrix("lm_head.weight", Vocab, H));
  }
  // MTP layers are optional: a checkpoint without them (or with only some) runs without speculation.
  for (int64_t m = 0; m < c.num_nextn_predict_layers; ++m) {
    const std::string p = fmt::format("model.layers.{}", c.num_hidden_layers + m);
    if (!ckpt.find(p + ".eh_proj.weight")) break;
    MtpWeights t;
    PG_ASSIGN_OR_RETURN(t.enorm, b.vec(p + ".enorm.weight", H));
    PG_ASSIGN_OR_RETURN(t.hnorm, b.vec(p + ".hnorm.weight", H));
    PG_ASSIGN_OR_RETURN(t.eh_proj, b.matrix(p + ".eh_proj.weight", H, 2 * H));
    PG_ASSIGN_OR_RETURN(t.block, bind_layer(b, c, p, c.n_routed_experts > 0));
    PG_ASSIGN_OR_RETURN(t.shared_head_norm, b.vec(p + ".shared_head.norm.weight", H));
    if (ckpt.find(p + ".shared_head.head.weight")) {
      PG_ASSIGN_OR_RETURN(t.shared_head_head, b.matrix(p + ".shared_head.head.weight", Vocab, H));
    } else {
      t.shared_head_head = w.lm_head;
    }
    if (ckpt.find(p + ".embed_tokens.weight")) {
      PG_ASSIGN_OR_RETURN(t.embed_tokens, b.matrix(p + ".embed_tokens.weight", Vocab, H));
    } else {
      t.embed_tokens = w.embed_tokens;
    }
    w.mtp.push_back(std::move(t));
  }
  PG_TRY(b.check_all_used());
  return w;
}

}  // namespace pg
