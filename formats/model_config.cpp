// config.json -> ModelConfig for the DeepSeek-V3 family, with the defaults of transformers'
// DeepseekV3Config / DeepseekV2Config, and hf_quant_config.json (ModelOpt NVFP4) -> HfQuantConfig.
#include "formats/model_config.h"

#include <nlohmann/json.hpp>

#include "formats/file_io.h"

namespace pg {

using nlohmann::json;

namespace {

std::string_view json_type(const json& v) {
  if (v.is_number_float()) return "a non-integer number";
  if (v.is_number_integer()) return "an integer";
  return v.type_name();
}

// Typed access to the keys of one JSON object; `where` prefixes messages ("config.json" or
// "config.json: rope_scaling"). Absent keys and null leave the output untouched unless required.
class Keys {
 public:
  Keys(const json& obj, std::string where) : j_(obj), where_(std::move(where)) {}

  const json* find(std::string_view key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(std::string_view key) const { return find(key) != nullptr; }

  Status missing(std::string_view key) const { return data_loss("{}: required key '{}' is missing", where_, key); }
  Status wrong_type(std::string_view key, std::string_view want, const json& v) const {
    return data_loss("{}: key '{}' must be {}, got {} ({})", where_, key, want, json_type(v), v.dump());
  }

  Status get(std::string_view key, int64_t* out, bool required = false) const {
    const json* v = find(key);
    if (!v) return required ? missing(key) : ok_status();
    if (!v->is_number_integer()) return wrong_type(key, "an integer", *v);
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return wrong_type(key, "an integer that fits 64 bits", *v);
    *out = v->get<int64_t>();
    return ok_status();
  }
  // Absent: untouched; null: nullopt.
  Status get(std::string_view key, std::optional<int64_t>* out) const {
    auto it = j_.find(key);
    if (it == j_.end()) return ok_status();
    if (it->is_null()) {
      *out = std::nullopt;
      return ok_status();
    }
    int64_t x = 0;
    PG_TRY(get(key, &x));
    *out = x;
    return ok_status();
  }
  Status get(std::string_view key, double* out) const {
    const json* v = find(key);
    if (!v) return ok_status();
    if (!v->is_number()) return wrong_type(key, "a number", *v);
    *out = v->get<double>();
    return ok_status();
  }
  Status get(std::string_view key, bool* out) const {
    const json* v = find(key);
    if (!v) return ok_status();
    if (!v->is_boolean()) return wrong_type(key, "true or false", *v);
    *out = v->get<bool>();
    return ok_status();
  }
  Status get(std::string_view key, std::string* out, bool required = false) const {
    const json* v = find(key);
    if (!v) return required ? missing(key) : ok_status();
    if (!v->is_string()) return wrong_type(key, "a string", *v);
    *out = v->get<std::string>();
    return ok_status();
  }
  Status get(std::string_view key, std::vector<std::string>* out) const {
    const json* v = find(key);
    if (!v) return ok_status();
    if (!v->is_array()) return wrong_type(key, "an array of strings", *v);
    out->clear();
    for (const json& e : *v) {
      if (!e.is_string()) return wrong_type(key, "an array of strings", *v);
      out->push_back(e.get<std::string>());
    }
    return ok_status();
  }
  // An int, or a non-empty list of ints (eos_token_id).
  Status get_int_or_list(std::string_view key, std::vector<int64_t>* out) const {
    const json* v = find(key);
    if (!v) return ok_status();
    out->clear();
    if (v->is_number_integer()) {
      out->push_back(v->get<int64_t>());
      return ok_status();
    }
    if (!v->is_array() || v->empty()) return wrong_type(key, "an integer or a non-empty list of integers", *v);
    for (const json& e : *v) {
      if (!e.is_number_integer()) return wrong_type(key, "an integer or a non-empty list of integers", *v);
      out->push_back(e.get<int64_t>());
    }
    return ok_status();
  }

  const std::string& where() const { return where_; }

 private:
  const json& j_;
  std::string where_;
};

Result<json> parse_json_object(std::string_view text, std::string_view source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return data_loss("{}: not valid JSON: {}", source, e.what());
  }
  if (!j.is_object()) return data_loss("{}: must be a JSON object, got {}", source, json_type(j));
  return j;
}

// Family defaults: transformers' DeepseekV3Config / DeepseekV2Config __init__ defaults.
void set_family_defaults(ModelConfig& c) {
  if (c.family == ModelFamily::kDeepseekV3) {
    c.moe_intermediate_size = 2048;
    c.n_shared_experts = 1;
    c.n_routed_experts = 256;
    c.routed_scaling_factor = 2.5;
    c.q_lora_rank = 1536;
    c.n_group = 8;
    c.topk_group = 4;
    c.num_experts_per_tok = 8;
    c.first_k_dense_replace = 3;
    c.norm_topk_prob = true;
    c.max_position_embeddings = 4096;
    c.bos_token_id = 0;
    c.eos_token_ids = {1};
    c.scoring_func = "sigmoid";
    c.topk_method = "noaux_tc";
  } else {
    c.moe_intermediate_size = 1407;
    c.n_shared_experts = 2;
    c.n_routed_experts = 64;
    c.routed_scaling_factor = 1.0;
    c.q_lora_rank = 1536;
    c.n_group = 1;  // transformers: None (no grouping) == one group holding every expert
    c.topk_group = 1;
    c.num_experts_per_tok = 0;  // transformers: None; required below when the model has experts
    c.first_k_dense_replace = 0;
    c.norm_topk_prob = false;
    c.max_position_embeddings = 2048;
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
    c.scoring_func = "softmax";
    c.topk_method = "greedy";
  }
  c.moe_layer_freq = 1;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.hidden_act = "silu";
}

Status parse_rope(const json& r, std::string where, ModelConfig& c) {
  if (!r.is_object()) return data_loss("{}: must be an object or null, got {}", where, json_type(r));
  Keys k(r, where);
  std::string type;
  PG_TRY(k.get("type", &type));
  if (type.empty()) PG_TRY(k.get("rope_type", &type));
  PG_TRY(k.get("rope_theta", &c.rope_theta));  // rope_parameters carries the theta
  if (type.empty() || type == "default") {
    c.rope_scaling = RopeScaling{};
    return ok_status();
  }
  if (type != "yarn")
    return unsupported("{}: rope scaling type \"{}\" is not supported (supported: \"yarn\", or none)", where, type);
  RopeScaling& s = c.rope_scaling;
  s.type = type;
  if (!k.has("factor")) return k.missing("factor");
  PG_TRY(k.get("factor", &s.factor));
  PG_TRY(k.get("original_max_position_embeddings", &s.original_max_position_embeddings, /*required=*/true));
  PG_TRY(k.get("beta_fast", &s.beta_fast));
  PG_TRY(k.get("beta_slow", &s.beta_slow));
  PG_TRY(k.get("mscale", &s.mscale));
  PG_TRY(k.get("mscale_all_dim", &s.mscale_all_dim));
  if (!(s.factor >= 1.0)) return data_loss("{}: factor must be >= 1, got {}", where, s.factor);
  if (s.original_max_position_embeddings <= 0)
    return data_loss("{}: original_max_position_embeddings must be > 0, got {}", where,
                     s.original_max_position_embeddings);
  if (!(s.beta_fast > 0.0) || !(s.beta_slow > 0.0))
    return data_loss("{}: beta_fast and beta_slow must be > 0, got {} and {}", where, s.beta_fast, s.beta_slow);
  return ok_status();
}

Status parse_hf_quant_body(const json& q, const std::string& where, HfQuantConfig& out) {
  Keys k(q, where);
  PG_TRY(k.get("quant_algo", &out.quant_algo, /*required=*/true));
  if (out.quant_algo != "NVFP4")
    return unsupported("{}: quant_algo \"{}\" is not supported (supported: \"NVFP4\")", where, out.quant_algo);
  PG_TRY(k.get("kv_cache_quant_algo", &out.kv_cache_quant_algo));
  PG_TRY(k.get("group_size", &out.group_size));
  if (out.group_size <= 0) return data_loss("{}: group_size must be > 0, got {}", where, out.group_size);
  PG_TRY(k.get("exclude_modules", &out.exclude_modules));
  return ok_status();
}

Status parse_quantization_config(const json& q, const std::string& where, ModelConfig& c) {
  if (!q.is_object()) return data_loss("{}: must be an object, got {}", where, json_type(q));
  Keys k(q, where);
  QuantizationConfig& qc = c.quantization_config;
  PG_TRY(k.get("quant_method", &qc.quant_method, /*required=*/true));
  if (qc.quant_method == "fp8") {
    PG_TRY(k.get("fmt", &qc.fmt));
    if (qc.fmt != "e4m3")
      return unsupported("{}: fmt \"{}\" is not supported (supported: \"e4m3\")", where, qc.fmt);
    PG_TRY(k.get("activation_scheme", &qc.activation_scheme));
    if (const json* b = k.find("weight_block_size")) {
      if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() || !(*b)[1].is_number_integer() ||
          (*b)[0].get<int64_t>() <= 0 || (*b)[1].get<int64_t>() <= 0)
        return k.wrong_type("weight_block_size", "two positive integers [rows, cols]", *b);
      qc.weight_block_size[0] = (*b)[0].get<int64_t>();
      qc.weight_block_size[1] = (*b)[1].get<int64_t>();
    }
    return ok_status();
  }
  if (qc.quant_method == "modelopt") {
    // Newer ModelOpt exports repeat hf_quant_config.json's "quantization" keys here.
    if (k.has("quant_algo")) {
      HfQuantConfig h;
      PG_TRY(parse_hf_quant_body(q, where, h));
      c.hf_quant_config = std::move(h);
    }
    return ok_status();
  }
  return unsupported("{}: quant_method \"{}\" is not supported (supported: \"fp8\" (DeepSeek FP8), \"modelopt\" "
                     "(NVFP4 with hf_quant_config.json))",
                     where, qc.quant_method);
}

Status validate(const ModelConfig& c, std::string_view src) {
  auto positive = [&](std::string_view key, int64_t v) -> Status {
    if (v <= 0) return data_loss("{}: '{}' must be > 0, got {}", src, key, v);
    return ok_status();
  };
  PG_TRY(positive("vocab_size", c.vocab_size));
  PG_TRY(positive("hidden_size", c.hidden_size));
  PG_TRY(positive("intermediate_size", c.intermediate_size));
  PG_TRY(positive("num_hidden_layers", c.num_hidden_layers));
  PG_TRY(positive("num_attention_heads", c.num_attention_heads));
  PG_TRY(positive("num_key_value_heads", c.num_key_value_heads));
  PG_TRY(positive("max_position_embeddings", c.max_position_embeddings));
  PG_TRY(positive("kv_lora_rank", c.kv_lora_rank));
  PG_TRY(positive("qk_nope_head_dim", c.qk_nope_head_dim));
  PG_TRY(positive("qk_rope_head_dim", c.qk_rope_head_dim));
  PG_TRY(positive("v_head_dim", c.v_head_dim));
  if (c.q_lora_rank) PG_TRY(positive("q_lora_rank", *c.q_lora_rank));
  if (c.qk_rope_head_dim % 2 != 0)
    return data_loss("{}: 'qk_rope_head_dim' must be even (RoPE rotates pairs), got {}", src, c.qk_rope_head_dim);
  if (c.num_nextn_predict_layers < 0)
    return data_loss("{}: 'num_nextn_predict_layers' must be >= 0, got {}", src, c.num_nextn_predict_layers);
  if (!(c.rms_norm_eps > 0.0)) return data_loss("{}: 'rms_norm_eps' must be > 0, got {}", src, c.rms_norm_eps);
  if (!(c.rope_theta > 0.0)) return data_loss("{}: 'rope_theta' must be > 0, got {}", src, c.rope_theta);
  if (c.hidden_act != "silu")
    return unsupported("{}: hidden_act \"{}\" is not supported (supported: \"silu\")", src, c.hidden_act);
  for (int64_t id : c.eos_token_ids)
    if (id < 0 || id >= c.vocab_size)
      return data_loss("{}: eos_token_id {} is outside the vocabulary [0, {})", src, id, c.vocab_size);
  if (c.bos_token_id && (*c.bos_token_id < 0 || *c.bos_token_id >= c.vocab_size))
    return data_loss("{}: bos_token_id {} is outside the vocabulary [0, {})", src, *c.bos_token_id, c.vocab_size);

  if (c.scoring_func != "softmax" && c.scoring_func != "sigmoid")
    return unsupported("{}: scoring_func \"{}\" is not supported (supported: \"softmax\", \"sigmoid\")", src,
                       c.scoring_func);
  if (c.topk_method != "greedy" && c.topk_method != "group_limited_greedy" && c.topk_method != "noaux_tc")
    return unsupported(
        "{}: topk_method \"{}\" is not supported (supported: \"greedy\", \"group_limited_greedy\", \"noaux_tc\")",
        src, c.topk_method);

  if (c.n_routed_experts < 0) return data_loss("{}: 'n_routed_experts' must be >= 0, got {}", src, c.n_routed_experts);
  if (c.n_routed_experts == 0) return ok_status();  // dense model: the MoE keys do not matter
  PG_TRY(positive("moe_intermediate_size", c.moe_intermediate_size));
  PG_TRY(positive("num_experts_per_tok", c.num_experts_per_tok));
  PG_TRY(positive("n_group", c.n_group));
  PG_TRY(positive("topk_group", c.topk_group));
  PG_TRY(positive("moe_layer_freq", c.moe_layer_freq));
  if (c.n_shared_experts < 0) return data_loss("{}: 'n_shared_experts' must be >= 0, got {}", src, c.n_shared_experts);
  if (c.num_experts_per_tok > c.n_routed_experts)
    return data_loss("{}: num_experts_per_tok ({}) must be <= n_routed_experts ({})", src, c.num_experts_per_tok,
                     c.n_routed_experts);
  if (c.topk_group > c.n_group)
    return data_loss("{}: topk_group ({}) must be <= n_group ({})", src, c.topk_group, c.n_group);
  if (c.n_routed_experts % c.n_group != 0)
    return data_loss("{}: n_routed_experts ({}) must be a multiple of n_group ({})", src, c.n_routed_experts,
                     c.n_group);
  const int64_t per_group = c.n_routed_experts / c.n_group;
  if (c.num_experts_per_tok > c.topk_group * per_group)
    return data_loss("{}: num_experts_per_tok ({}) exceeds the experts in the topk_group ({}) chosen groups of {}",
                     src, c.num_experts_per_tok, c.topk_group, per_group);
  // noaux_tc scores a group by the sum of its two best experts.
  if (c.topk_method == "noaux_tc" && c.n_group > 1 && per_group < 2)
    return data_loss("{}: noaux_tc needs >= 2 experts per group, got n_routed_experts {} / n_group {}", src,
                     c.n_routed_experts, c.n_group);
  if (c.first_k_dense_replace < 0 || c.first_k_dense_replace > c.num_hidden_layers)
    return data_loss("{}: first_k_dense_replace ({}) must be in [0, num_hidden_layers = {}]", src,
                     c.first_k_dense_replace, c.num_hidden_layers);
  if (!(c.routed_scaling_factor > 0.0))
    return data_loss("{}: 'routed_scaling_factor' must be > 0, got {}", src, c.routed_scaling_factor);
  return ok_status();
}

// '*' matches any run of characters (possibly empty); everything else matches itself.
bool glob_match(std::string_view pat, std::string_view s) {
  size_t p = 0, i = 0, star = std::string_view::npos, mark = 0;
  while (i < s.size()) {
    if (p < pat.size() && pat[p] == '*') {
      star = p++;
      mark = i;
    } else if (p < pat.size() && pat[p] == s[i]) {
      ++p;
      ++i;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      i = ++mark;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

}  // namespace

bool HfQuantConfig::is_excluded(std::string_view module) const {
  for (const std::string& pat : exclude_modules)
    if (glob_match(pat, module)) return true;
  return false;
}

std::string supported_model_types() { return "\"deepseek_v3\", \"kimi_k2\", \"deepseek_v2\""; }

Result<ModelConfig> parse_model_config(std::string_view json_text, std::string_view source) {
  PG_ASSIGN_OR_RETURN(json j, parse_json_object(json_text, source));
  const std::string src(source);
  Keys k(j, src);
  ModelConfig c;
  PG_TRY(k.get("model_type", &c.model_type, /*required=*/true));
  if (c.model_type == "deepseek_v3" || c.model_type == "kimi_k2") {
    c.family = ModelFamily::kDeepseekV3;
  } else if (c.model_type == "deepseek_v2") {
    c.family = ModelFamily::kDeepseekV2;
  } else {
    return unsupported("{}: model_type \"{}\" is not supported (supported: {})", src, c.model_type,
                       supported_model_types());
  }
  set_family_defaults(c);
  PG_TRY(k.get("architectures", &c.architectures));

  using IntKey = std::pair<const char*, int64_t*>;
  for (auto [key, out] : std::initializer_list<IntKey>{{"vocab_size", &c.vocab_size},
                          {"hidden_size", &c.hidden_size},
                          {"intermediate_size", &c.intermediate_size},
                          {"num_hidden_layers", &c.num_hidden_layers},
                          {"num_attention_heads", &c.num_attention_heads},
                          {"kv_lora_rank", &c.kv_lora_rank},
                          {"qk_nope_head_dim", &c.qk_nope_head_dim},
                          {"qk_rope_head_dim", &c.qk_rope_head_dim},
                          {"v_head_dim", &c.v_head_dim}})
    PG_TRY(k.get(key, out, /*required=*/true));
  c.num_key_value_heads = c.num_attention_heads;  // transformers: None -> num_attention_heads
  for (auto [key, out] : std::initializer_list<IntKey>{{"num_key_value_heads", &c.num_key_value_heads},
                          {"moe_intermediate_size", &c.moe_intermediate_size},
                          {"num_nextn_predict_layers", &c.num_nextn_predict_layers},
                          {"max_position_embeddings", &c.max_position_embeddings},
                          {"n_shared_experts", &c.n_shared_experts},
                          {"num_experts_per_tok", &c.num_experts_per_tok},
                          {"n_group", &c.n_group},
                          {"topk_group", &c.topk_group},
                          {"first_k_dense_replace", &c.first_k_dense_replace},
                          {"moe_layer_freq", &c.moe_layer_freq}})
    PG_TRY(k.get(key, out));
  // n_routed_experts: null means a dense model (DeepSeek's remote code); absent takes the default.
  if (auto it = j.find("n_routed_experts"); it != j.end() && it->is_null()) {
    c.n_routed_experts = 0;
  } else {
    PG_TRY(k.get("n_routed_experts", &c.n_routed_experts));
  }
  if (c.family == ModelFamily::kDeepseekV2 && c.n_routed_experts > 0 && !k.has("num_experts_per_tok"))
    return data_loss("{}: required key 'num_experts_per_tok' is missing (the model has n_routed_experts = {})", src,
                     c.n_routed_experts);
  PG_TRY(k.get("q_lora_rank", &c.q_lora_rank));
  PG_TRY(k.get("rms_norm_eps", &c.rms_norm_eps));
  PG_TRY(k.get("rope_theta", &c.rope_theta));
  PG_TRY(k.get("routed_scaling_factor", &c.routed_scaling_factor));
  PG_TRY(k.get("attention_bias", &c.attention_bias));
  PG_TRY(k.get("rope_interleave", &c.rope_interleave));
  PG_TRY(k.get("tie_word_embeddings", &c.tie_word_embeddings));
  PG_TRY(k.get("norm_topk_prob", &c.norm_topk_prob));
  PG_TRY(k.get("hidden_act", &c.hidden_act));
  PG_TRY(k.get("scoring_func", &c.scoring_func));
  PG_TRY(k.get("topk_method", &c.topk_method));
  PG_TRY(k.get("torch_dtype", &c.torch_dtype));
  if (c.torch_dtype.empty()) PG_TRY(k.get("dtype", &c.torch_dtype));
  PG_TRY(k.get("bos_token_id", &c.bos_token_id));
  PG_TRY(k.get("pad_token_id", &c.pad_token_id));
  if (auto it = j.find("eos_token_id"); it != j.end() && it->is_null()) c.eos_token_ids.clear();
  PG_TRY(k.get_int_or_list("eos_token_id", &c.eos_token_ids));
  c.eos_token_id = c.eos_token_ids.empty() ? std::nullopt : std::optional<int64_t>(c.eos_token_ids.front());

  if (const json* r = k.find("rope_scaling")) {
    PG_TRY(parse_rope(*r, src + ": rope_scaling", c));
  } else if (const json* rp = k.find("rope_parameters")) {
    PG_TRY(parse_rope(*rp, src + ": rope_parameters", c));
  }
  if (const json* q = k.find("quantization_config")) PG_TRY(parse_quantization_config(*q, src + ": quantization_config", c));

  PG_TRY(validate(c, src));
  return c;
}

Result<HfQuantConfig> parse_hf_quant_config(std::string_view json_text, std::string_view source) {
  PG_ASSIGN_OR_RETURN(json j, parse_json_object(json_text, source));
  const std::string src(source);
  HfQuantConfig out;
  if (const json* p = Keys(j, src).find("producer")) {
    if (!p->is_object()) return data_loss("{}: 'producer' must be an object, got {}", src, json_type(*p));
    Keys pk(*p, src + ": producer");
    PG_TRY(pk.get("name", &out.producer_name));
    PG_TRY(pk.get("version", &out.producer_version));
  }
  auto q = j.find("quantization");
  if (q == j.end()) return data_loss("{}: required key 'quantization' is missing", src);
  if (!q->is_object()) return data_loss("{}: 'quantization' must be an object, got {}", src, json_type(*q));
  PG_TRY(parse_hf_quant_body(*q, src + ": quantization", out));
  return out;
}

Result<ModelConfig> load_model_config(const std::filesystem::path& model_dir) {
  const std::filesystem::path cfg_path = model_dir / "config.json";
  PG_ASSIGN_OR_RETURN(std::string text, read_file_to_string(cfg_path));
  PG_ASSIGN_OR_RETURN(ModelConfig c, parse_model_config(text, cfg_path.string()));
  const std::filesystem::path hq_path = model_dir / "hf_quant_config.json";
  std::error_code ec;
  if (std::filesystem::exists(hq_path, ec)) {
    PG_ASSIGN_OR_RETURN(std::string hq_text, read_file_to_string(hq_path));
    PG_ASSIGN_OR_RETURN(c.hf_quant_config, parse_hf_quant_config(hq_text, hq_path.string()));
  }
  return c;
}

}  // namespace pg
