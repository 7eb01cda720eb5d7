// `peregrine info MODEL_DIR [--json]`: what a checkpoint is (config.json, hf_quant_config.json) and
// what it holds (tensors, files, parameters and bytes by dtype, MTP layers present).
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "formats/model_config.h"
#include "formats/safetensors.h"

namespace pg::cli {
namespace {

struct InfoOptions {
  std::string model_dir;
  bool json = false;
};

// Quantization scale tensors are bookkeeping, not parameters: DeepSeek FP8 `weight_scale_inv`,
// ModelOpt NVFP4 `weight_scale`, `weight_scale_2`, `input_scale`.
bool is_scale_tensor(std::string_view name) {
  for (std::string_view suffix : {".weight_scale_inv", ".weight_scale", ".weight_scale_2", ".input_scale"})
    if (name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix) return true;
  return false;
}

// "model.layers.61.mlp..." -> 61; -1 when the name is not under model.layers.
int64_t layer_of(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  int64_t idx = 0;
  size_t i = kPrefix.size();
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) idx = idx * 10 + (name[i] - '0');
  return (i < name.size() && name[i] == '.') ? idx : -1;
}

struct DtypeStats {
  int64_t n_tensors = 0;
  int64_t n_params = 0;  // logical values: a packed NVFP4 byte holds two
  uint64_t n_bytes = 0;
};

struct Summary {
  std::map<std::string, DtypeStats> by_dtype;  // dtype_name -> stats
  int64_t main_params = 0;
  int64_t mtp_params = 0;
  int64_t scale_params = 0;
  uint64_t total_bytes = 0;
  std::map<int64_t, int64_t> mtp_tensors;  // MTP layer index -> tensors present
  std::vector<std::string> warnings;       // config and checkpoint disagree
};

// The shapes config.json fixes for the embedding and the head: [vocab_size, hidden_size].
void check_shapes(const ModelConfig& cfg, const Checkpoint& ckpt, Summary& s) {
  const std::vector<int64_t> want = {cfg.vocab_size, cfg.hidden_size};
  for (std::string_view name : {"model.embed_tokens.weight", "lm_head.weight"}) {
    const TensorView* t = ckpt.find(name);
    if (t == nullptr) {
      if (name == "model.embed_tokens.weight" || !cfg.tie_word_embeddings)
        s.warnings.push_back(fmt::format("tensor '{}' is missing", name));
    } else if (t->shape != want) {
      s.warnings.push_back(fmt::format("tensor '{}' has shape [{}], config.json implies [{}]", name,
                                       fmt::join(t->shape, ", "), fmt::join(want, ", ")));
    }
  }
  if (cfg.num_nextn_predict_layers > 0 && s.mtp_tensors.empty())
    s.warnings.push_back(fmt::format("config.json declares {} MTP layer(s) but no model.layers.{}.* tensors exist",
                                     cfg.num_nextn_predict_layers, cfg.num_hidden_layers));
}

Summary summarize(const ModelConfig& cfg, const Checkpoint& ckpt) {
  Summary s;
  const bool nvfp4 = cfg.hf_quant_config && cfg.hf_quant_config->quant_algo == "NVFP4";
  for (const TensorView* t : ckpt.all()) {
    int64_t n = t->numel();
    // ModelOpt NVFP4 stores E2M1 weights packed two per byte as U8 `.weight` tensors.
    const bool packed_fp4 = nvfp4 && t->dtype == DType::kU8 && t->name.ends_with(".weight");
    if (packed_fp4) n *= 2;
    DtypeStats& d = s.by_dtype[packed_fp4 ? "e2m1 (packed u8)" : std::string(dtype_name(t->dtype))];
    d.n_tensors += 1;
    d.n_params += n;
    d.n_bytes += t->n_bytes;
    s.total_bytes += t->n_bytes;
    const int64_t layer = layer_of(t->name);
    if (layer >= cfg.num_hidden_layers) s.mtp_tensors[layer] += 1;
    if (is_scale_tensor(t->name)) {
      s.scale_params += n;
    } else if (layer >= cfg.num_hidden_layers) {
      s.mtp_params += n;
    } else {
      s.main_params += n;
    }
  }
  check_shapes(cfg, ckpt, s);
  return s;
}

std::string human_count(double n) {
  if (n >= 1e12) return fmt::format("{:.2f}T", n / 1e12);
  if (n >= 1e9) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.2f}K", n / 1e3);
  return fmt::format("{}", n);
}

std::string human_bytes(double b) {
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.2f} KiB", b / 1024.0);
  return fmt::format("{} B", b);
}

int64_t n_moe_layers(const ModelConfig& c) {
  int64_t n = 0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) n += c.is_moe_layer(i) ? 1 : 0;
  return n;
}

// KV cache per token per layer: [kv_lora_rank | qk_rope_head_dim] values (the MLA latent).
int64_t kv_values_per_token_layer(const ModelConfig& c) { return c.kv_lora_rank + c.qk_rope_head_dim; }

nlohmann::ordered_json to_json(const std::string& dir, const ModelConfig& c, const Checkpoint& ck, const Summary& s) {
  using J = nlohmann::ordered_json;
  J j;
  j["model_dir"] = dir;
  j["architectures"] = c.architectures;
  j["model_type"] = c.model_type;
  j["family"] = c.family == ModelFamily::kDeepseekV3 ? "deepseek_v3" : "deepseek_v2";
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["dense_layers"] = c.num_hidden_layers - n_moe_layers(c);
  j["moe_layers"] = n_moe_layers(c);
  J mtp;
  mtp["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  J present = J::object();
  for (const auto& [layer, n] : s.mtp_tensors) present[std::to_string(layer)] = n;
  mtp["layers_present"] = present;  // layer index -> tensors found
  j["mtp"] = mtp;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["q_lora_rank"] = c.q_lora_rank ? J(*c.q_lora_rank) : J(nullptr);
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["kv_cache_values_per_token_per_layer"] = kv_values_per_token_layer(c);
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["n_group"] = c.n_group;
  j["topk_group"] = c.topk_group;
  j["scoring_func"] = c.scoring_func;
  j["topk_method"] = c.topk_method;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.type.empty()) {
    j["rope_scaling"] = nullptr;
  } else {
    const RopeScaling& r = c.rope_scaling;
    j["rope_scaling"] = {{"type", r.type},
                         {"factor", r.factor},
                         {"original_max_position_embeddings", r.original_max_position_embeddings},
                         {"beta_fast", r.beta_fast},
                         {"beta_slow", r.beta_slow},
                         {"mscale", r.mscale},
                         {"mscale_all_dim", r.mscale_all_dim}};
  }
  J q;
  q["quant_method"] = c.quantization_config.quant_method;
  if (c.quantization_config.quant_method == "fp8") {
    q["fmt"] = c.quantization_config.fmt;
    q["activation_scheme"] = c.quantization_config.activation_scheme;
    q["weight_block_size"] = {c.quantization_config.weight_block_size[0], c.quantization_config.weight_block_size[1]};
  }
  if (c.hf_quant_config) {
    q["quant_algo"] = c.hf_quant_config->quant_algo;
    q["group_size"] = c.hf_quant_config->group_size;
    q["exclude_modules"] = c.hf_quant_config->exclude_modules;
  }
  j["quantization"] = q;
  j["torch_dtype"] = c.torch_dtype;
  J p;
  p["main"] = s.main_params;
  p["mtp"] = s.mtp_params;
  p["scales"] = s.scale_params;
  j["parameters"] = p;
  J by = J::object();
  for (const auto& [name, d] : s.by_dtype)
    by[name] = {{"tensors", d.n_tensors}, {"parameters", d.n_params}, {"bytes", d.n_bytes}};
  j["by_dtype"] = by;
  j["n_tensors"] = ck.n_tensors();
  J files = J::array();
  for (const SafetensorsFile& f : ck.files()) files.push_back(f.path());
  j["files"] = files;
  j["tensor_bytes"] = s.total_bytes;
  j["warnings"] = s.warnings;
  return j;
}

void print_text(const std::string& dir, const ModelConfig& c, const Checkpoint& ck, const Summary& s) {
  auto line = [](std::string_view key, const std::string& value) { fmt::print("{:<14}{}\n", key, value); };
  line("model", fmt::format("{} ({}, model_type {})", dir,
                            c.architectures.empty() ? std::string("?") : c.architectures.front(), c.model_type));
  const int64_t moe = n_moe_layers(c);
  line("layers", fmt::format("{} ({} dense + {} MoE), hidden {}, dense FFN {}, expert FFN {}", c.num_hidden_layers,
                             c.num_hidden_layers - moe, moe, c.hidden_size, c.intermediate_size,
                             c.moe_intermediate_size));
  std::string mtp = fmt::format("{} in config", c.num_nextn_predict_layers);
  if (s.mtp_tensors.empty()) {
    mtp += c.num_nextn_predict_layers > 0 ? "; NOT in the checkpoint (speculative decoding unavailable)"
                                          : "; none in the checkpoint";
  } else {
    for (const auto& [layer, n] : s.mtp_tensors)
      mtp += fmt::format("; layer {}: {} tensor{}", layer, n, n == 1 ? "" : "s");
  }
  line("MTP", mtp);
  line("attention", fmt::format("MLA, {} heads, q_lora_rank {}, kv_lora_rank {}, qk {} nope + {} rope, v {}",
                                c.num_attention_heads,
                                c.q_lora_rank ? std::to_string(*c.q_lora_rank) : std::string("none (q_proj)"),
                                c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim));
  const int64_t kv = kv_values_per_token_layer(c);
  line("KV cache", fmt::format("{} values/token/layer; {}/token in bf16 over {} layers", kv,
                               human_bytes(double(kv) * 2 * c.num_hidden_layers), c.num_hidden_layers));
  if (c.n_routed_experts > 0) {
    const std::string groups = c.n_group > 1 ? fmt::format("{} groups (top-{})", c.n_group, c.topk_group)
                                             : std::string("no expert groups");
    line("experts", fmt::format("{} routed + {} shared, top-{}, {}, {}, {}, scale {}{}", c.n_routed_experts,
                                c.n_shared_experts, c.num_experts_per_tok, groups, c.scoring_func, c.topk_method,
                                c.routed_scaling_factor, c.norm_topk_prob ? ", normalized" : ""));
  } else {
    line("experts", "none (dense)");
  }
  line("vocab", fmt::format("{}", c.vocab_size));
  std::string rope = fmt::format("{} tokens, rope theta {}", c.max_position_embeddings, c.rope_theta);
  if (!c.rope_scaling.type.empty()) {
    const RopeScaling& r = c.rope_scaling;
    rope += fmt::format(", {} x{} from {} (beta {}/{}, mscale {}/{})", r.type, r.factor,
                        r.original_max_position_embeddings, r.beta_fast, r.beta_slow, r.mscale, r.mscale_all_dim);
  }
  line("context", rope);
  std::string quant = "none";
  const QuantizationConfig& q = c.quantization_config;
  if (q.quant_method == "fp8") {
    quant = fmt::format("DeepSeek FP8 {} blocks {}x{}, {} activations", q.fmt, q.weight_block_size[0],
                        q.weight_block_size[1], q.activation_scheme.empty() ? "?" : q.activation_scheme);
  }
  if (c.hf_quant_config) {
    quant = fmt::format("{} group {} ({} excluded module patterns)", c.hf_quant_config->quant_algo,
                        c.hf_quant_config->group_size, c.hf_quant_config->exclude_modules.size());
  }
  line("quantization", quant);
  line("parameters", fmt::format("{} main + {} MTP (+ {} scale values)", human_count(double(s.main_params)),
                                 human_count(double(s.mtp_params)), human_count(double(s.scale_params))));
  for (const auto& [name, d] : s.by_dtype)
    line("", fmt::format("{:<17} {:>6} tensors {:>10} values {:>12}", name, d.n_tensors, human_count(double(d.n_params)),
                         human_bytes(double(d.n_bytes))));
  line("tensors", fmt::format("{} in {} file{}, {}", ck.n_tensors(), ck.files().size(),
                              ck.files().size() == 1 ? "" : "s", human_bytes(double(s.total_bytes))));
  for (const std::string& w : s.warnings) line("warning", w);
}

int run_info(const InfoOptions& o) {
  auto fail = [](const Status& s) {
    fmt::print(stderr, "peregrine info: {}\n", s.to_string());
    return 1;
  };
  auto cfg = load_model_config(o.model_dir);
  if (!cfg.ok()) return fail(cfg.status());
  auto ckpt = Checkpoint::open(o.model_dir);
  if (!ckpt.ok()) return fail(ckpt.status());
  const Summary s = summarize(*cfg, *ckpt);
  if (o.json) {
    fmt::print("{}\n", to_json(o.model_dir, *cfg, *ckpt, s).dump(2));
  } else {
    print_text(o.model_dir, *cfg, *ckpt, s);
  }
  return 0;
}

}  // namespace

Command add_info(CLI::App& root) {
  auto opts = std::make_shared<InfoOptions>();
  CLI::App* app = root.add_subcommand("info", "Describe a model directory: architecture, layers, experts, "
                                              "quantization, tensors and parameters");
  app->add_option("MODEL_DIR", opts->model_dir, "Hugging Face model directory (config.json + *.safetensors)")
      ->required();
  app->add_flag("--json", opts->json, "Print one JSON object instead of text");
  return {app, [opts] { return run_info(*opts); }};
}

}  // namespace pg::cli
