// parse_model_config on the public config.json of DeepSeek-V3, DeepSeek-V2-Lite, Moonlight and
// Kimi-K2 (fixtures in configs/), family defaults, and bad configs; hf_quant_config.json.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "formats/file_io.h"
#include "formats/model_config.h"
#include "tests/unit/formats/test_util.h"

namespace pg {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

const std::filesystem::path kConfigs = std::filesystem::path(PG_SOURCE_DIR) / "tests/unit/formats/configs";

ModelConfig load_fixture(const std::string& name) {
  auto text = read_file_to_string(kConfigs / name);
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  auto c = parse_model_config(*text, name);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : ModelConfig{};
}

// The smallest config we accept: just the shape-defining keys.
json minimal(const std::string& model_type = "deepseek_v3") {
  return {{"model_type", model_type}, {"vocab_size", 1000},   {"hidden_size", 64},     {"intermediate_size", 128},
          {"num_hidden_layers", 4},   {"num_attention_heads", 4}, {"kv_lora_rank", 32}, {"qk_nope_head_dim", 16},
          {"qk_rope_head_dim", 8},    {"v_head_dim", 16}};
}

Status parse_error(const json& j) {
  auto c = parse_model_config(j.dump(), "cfg.json");
  EXPECT_FALSE(c.ok()) << j.dump();
  if (c.ok()) return ok_status();
  EXPECT_THAT(c.status().message(), HasSubstr("cfg.json"));
  return c.status();
}

TEST(ModelConfig, DeepseekV3) {
  ModelConfig c = load_fixture("deepseek_v3.json");
  EXPECT_EQ(c.model_type, "deepseek_v3");
  EXPECT_EQ(c.family, ModelFamily::kDeepseekV3);
  EXPECT_EQ(c.architectures, std::vector<std::string>{"DeepseekV3ForCausalLM"});
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.intermediate_size, 18432);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.num_hidden_layers, 61);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.num_attention_heads, 128);
  EXPECT_EQ(c.max_position_embeddings, 163840);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_head_dim(), 192);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_EQ(c.first_k_dense_replace, 3);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.scoring_func, "sigmoid");
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 40.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale_all_dim, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.quantization_config.quant_method, "fp8");
  EXPECT_EQ(c.quantization_config.fmt, "e4m3");
  EXPECT_EQ(c.quantization_config.activation_scheme, "dynamic");
  EXPECT_EQ(c.quantization_config.weight_block_size[0], 128);
  EXPECT_EQ(c.quantization_config.weight_block_size[1], 128);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_TRUE(c.is_moe_layer(3));
  EXPECT_TRUE(c.is_moe_layer(60));
}

TEST(ModelConfig, DeepseekV2Lite) {
  ModelConfig c = load_fixture("deepseek_v2_lite.json");
  EXPECT_EQ(c.family, ModelFamily::kDeepseekV2);
  EXPECT_EQ(c.q_lora_rank, std::nullopt);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_hidden_layers, 27);
  EXPECT_EQ(c.num_nextn_predict_layers, 0);
  EXPECT_EQ(c.n_routed_experts, 64);
  EXPECT_EQ(c.n_shared_experts, 2);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.scoring_func, "softmax");
  EXPECT_EQ(c.topk_method, "greedy");
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale, 0.707);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale_all_dim, 0.707);
  EXPECT_EQ(c.quantization_config.quant_method, "");
  EXPECT_EQ(c.bos_token_id, 100000);
  EXPECT_EQ(c.eos_token_id, 100001);
}

TEST(ModelConfig, Moonlight) {
  ModelConfig c = load_fixture("moonlight.json");
  EXPECT_EQ(c.family, ModelFamily::kDeepseekV3);
  EXPECT_EQ(c.q_lora_rank, std::nullopt);
  EXPECT_EQ(c.vocab_size, 163840);
  EXPECT_EQ(c.n_routed_experts, 64);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_EQ(c.rope_scaling.type, "");  // "rope_scaling": null
  EXPECT_DOUBLE_EQ(c.rope_theta, 50000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.446);
  EXPECT_EQ(c.max_position_embeddings, 8192);
}

TEST(ModelConfig, KimiK2) {
  ModelConfig c = load_fixture("kimi_k2.json");
  EXPECT_EQ(c.model_type, "kimi_k2");
  EXPECT_EQ(c.family, ModelFamily::kDeepseekV3);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.num_attention_heads, 64);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 1.0);
  EXPECT_EQ(c.quantization_config.quant_method, "fp8");
  EXPECT_EQ(c.eos_token_id, 163585);
}

TEST(ModelConfig, FamilyDefaults) {
  auto v3 = parse_model_config(minimal().dump());
  ASSERT_TRUE(v3.ok()) << v3.status().to_string();
  EXPECT_EQ(v3->scoring_func, "sigmoid");
  EXPECT_EQ(v3->topk_method, "noaux_tc");
  EXPECT_EQ(v3->n_routed_experts, 256);
  EXPECT_EQ(v3->n_group, 8);
  EXPECT_EQ(v3->topk_group, 4);
  EXPECT_EQ(v3->num_experts_per_tok, 8);
  EXPECT_EQ(v3->first_k_dense_replace, 3);
  EXPECT_TRUE(v3->norm_topk_prob);
  EXPECT_DOUBLE_EQ(v3->routed_scaling_factor, 2.5);
  EXPECT_EQ(v3->q_lora_rank, 1536);  // absent -> default; null -> nullopt
  EXPECT_EQ(v3->num_key_value_heads, 4);
  EXPECT_EQ(v3->rope_scaling.type, "");
  EXPECT_EQ(v3->eos_token_id, 1);

  json v2 = minimal("deepseek_v2");
  v2["num_experts_per_tok"] = 6;
  auto c2 = parse_model_config(v2.dump());
  ASSERT_TRUE(c2.ok()) << c2.status().to_string();
  EXPECT_EQ(c2->scoring_func, "softmax");
  EXPECT_EQ(c2->topk_method, "greedy");
  EXPECT_EQ(c2->n_routed_experts, 64);
  EXPECT_EQ(c2->n_shared_experts, 2);
  EXPECT_EQ(c2->moe_intermediate_size, 1407);
  EXPECT_FALSE(c2->norm_topk_prob);
  EXPECT_EQ(c2->first_k_dense_replace, 0);

  json dense = minimal("deepseek_v2");
  dense["n_routed_experts"] = nullptr;
  auto cd = parse_model_config(dense.dump());
  ASSERT_TRUE(cd.ok()) << cd.status().to_string();
  EXPECT_EQ(cd->n_routed_experts, 0);
  EXPECT_FALSE(cd->is_moe_layer(3));
}

TEST(ModelConfig, EosListAndRopeParameters) {
  json j = minimal();
  j["eos_token_id"] = {7, 9};
  j["q_lora_rank"] = nullptr;
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 50000.0}, {"factor", 4},
                          {"original_max_position_embeddings", 256}};
  j["dtype"] = "bfloat16";
  auto c = parse_model_config(j.dump());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->eos_token_id, 7);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(c->q_lora_rank, std::nullopt);
  EXPECT_EQ(c->rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_DOUBLE_EQ(c->rope_theta, 50000.0);
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  auto d = parse_model_config(j.dump());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->rope_scaling.type, "");
  EXPECT_DOUBLE_EQ(d->rope_theta, 1e6);
}

TEST(ModelConfigBad, NotJson) {
  auto c = parse_model_config("{\"model_type\": ", "cfg.json");
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(c.status().message(), HasSubstr("not valid JSON"));
  EXPECT_THAT(parse_model_config("[1]", "cfg.json").status().message(), HasSubstr("JSON object"));
}

TEST(ModelConfigBad, MissingAndWrongType) {
  for (const char* key : {"model_type", "vocab_size", "hidden_size", "num_hidden_layers", "kv_lora_rank",
                          "qk_rope_head_dim", "v_head_dim"}) {
    json j = minimal();
    j.erase(key);
    Status s = parse_error(j);
    EXPECT_THAT(s.message(), HasSubstr(std::string("'") + key + "'")) << key;
    EXPECT_THAT(s.message(), HasSubstr("missing"));
  }
  json j = minimal();
  j["hidden_size"] = "7168";
  EXPECT_THAT(parse_error(j).message(), HasSubstr("'hidden_size' must be an integer"));
  j = minimal();
  j["hidden_size"] = 64.5;
  EXPECT_THAT(parse_error(j).message(), HasSubstr("'hidden_size' must be an integer"));
  j = minimal();
  j["norm_topk_prob"] = 1;
  EXPECT_THAT(parse_error(j).message(), HasSubstr("'norm_topk_prob'"));
  j = minimal();
  j["eos_token_id"] = "x";
  EXPECT_THAT(parse_error(j).message(), HasSubstr("'eos_token_id'"));
  j = minimal("deepseek_v2");  // V2 with experts must say how many per token
  EXPECT_THAT(parse_error(j).message(), HasSubstr("'num_experts_per_tok'"));
}

TEST(ModelConfigBad, Unsupported) {
  json j = minimal("llama");
  Status s = parse_error(j);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("llama"));
  EXPECT_THAT(s.message(), HasSubstr("deepseek_v3"));
  EXPECT_THAT(s.message(), HasSubstr("kimi_k2"));
  EXPECT_THAT(s.message(), HasSubstr("deepseek_v2"));

  j = minimal();
  j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  s = parse_error(j);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("gptq"));
  EXPECT_THAT(s.message(), HasSubstr("fp8"));

  j = minimal();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e5m2"}};
  EXPECT_THAT(parse_error(j).message(), HasSubstr("e5m2"));
  j = minimal();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128}}};
  EXPECT_THAT(parse_error(j).message(), HasSubstr("weight_block_size"));

  j = minimal();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2}};
  s = parse_error(j);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("linear"));
  j = minimal();
  j["rope_scaling"] = {{"type", "yarn"}, {"original_max_position_embeddings", 4096}};
  EXPECT_THAT(parse_error(j).message(), HasSubstr("'factor'"));
  j = minimal();
  j["hidden_act"] = "gelu";
  EXPECT_THAT(parse_error(j).message(), HasSubstr("gelu"));
  j = minimal();
  j["scoring_func"] = "relu";
  EXPECT_THAT(parse_error(j).message(), HasSubstr("relu"));
}

TEST(ModelConfigBad, Sanity) {
  auto with = [](const char* key, json v) {
    json j = minimal();
    j[key] = std::move(v);
    return j;
  };
  EXPECT_THAT(parse_error(with("hidden_size", 0)).message(), HasSubstr("'hidden_size' must be > 0"));
  EXPECT_THAT(parse_error(with("q_lora_rank", -3)).message(), HasSubstr("q_lora_rank"));
  EXPECT_THAT(parse_error(with("qk_rope_head_dim", 7)).message(), HasSubstr("even"));
  EXPECT_THAT(parse_error(with("num_experts_per_tok", 300)).message(),
              HasSubstr("num_experts_per_tok (300) must be <= n_routed_experts (256)"));
  EXPECT_THAT(parse_error(with("topk_group", 9)).message(), HasSubstr("topk_group (9) must be <= n_group (8)"));
  EXPECT_THAT(parse_error(with("n_group", 7)).message(), HasSubstr("multiple of n_group"));
  EXPECT_THAT(parse_error(with("first_k_dense_replace", 5)).message(), HasSubstr("first_k_dense_replace"));
  EXPECT_THAT(parse_error(with("eos_token_id", 5000)).message(), HasSubstr("outside the vocabulary"));
  json j = minimal();
  j["topk_group"] = 1;
  j["num_experts_per_tok"] = 40;  // one group of 32 experts cannot supply 40
  EXPECT_THAT(parse_error(j).message(), HasSubstr("exceeds the experts"));
}

TEST(HfQuantConfig, Nvfp4) {
  auto text = read_file_to_string(kConfigs / "hf_quant_config_nvfp4.json");
  ASSERT_TRUE(text.ok());
  auto q = parse_hf_quant_config(*text);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(q->quant_algo, "NVFP4");
  EXPECT_EQ(q->group_size, 16);
  EXPECT_EQ(q->kv_cache_quant_algo, "");
  EXPECT_EQ(q->producer_name, "modelopt");
  EXPECT_EQ(q->exclude_modules.size(), 3u);
  EXPECT_TRUE(q->is_excluded("lm_head"));
  EXPECT_TRUE(q->is_excluded("model.layers.0.self_attn.q_a_proj"));
  EXPECT_TRUE(q->is_excluded("model.layers.61.mlp.experts.3.up_proj"));
  EXPECT_FALSE(q->is_excluded("model.layers.1.self_attn.q_a_proj"));
  EXPECT_FALSE(q->is_excluded("model.layers.6.mlp.gate"));

  auto bad = parse_hf_quant_config(R"({"quantization": {"quant_algo": "W4A16"}})", "hq.json");
  EXPECT_EQ(bad.status().code(), StatusCode::kUnsupported);
  EXPECT_THAT(bad.status().message(), HasSubstr("W4A16"));
  EXPECT_THAT(bad.status().message(), HasSubstr("NVFP4"));
  EXPECT_THAT(parse_hf_quant_config(R"({"producer": {}})", "hq.json").status().message(), HasSubstr("'quantization'"));
  EXPECT_THAT(parse_hf_quant_config(R"({"quantization": {"quant_algo": "NVFP4", "group_size": 0}})", "hq.json")
                  .status()
                  .message(),
              HasSubstr("group_size"));
}

TEST(LoadModelConfig, ReadsBothFiles) {
  test::TempDir dir;
  auto v3 = read_file_to_string(kConfigs / "deepseek_v3.json");
  auto hq = read_file_to_string(kConfigs / "hf_quant_config_nvfp4.json");
  ASSERT_TRUE(v3.ok() && hq.ok());
  test::write_bytes(dir / "config.json", *v3);
  auto c = load_model_config(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_FALSE(c->hf_quant_config.has_value());
  test::write_bytes(dir / "hf_quant_config.json", *hq);
  c = load_model_config(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_TRUE(c->hf_quant_config.has_value());
  EXPECT_EQ(c->hf_quant_config->quant_algo, "NVFP4");

  auto missing = load_model_config(dir / "nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("config.json"));
  test::write_bytes(dir / "config.json", "{\"model_type\": \"deepseek_v3\"}");
  auto bad = load_model_config(dir.path());
  EXPECT_THAT(bad.status().message(), HasSubstr((dir / "config.json").string()));
  EXPECT_THAT(bad.status().message(), HasSubstr("'vocab_size'"));
}

}  // namespace
}  // namespace pg
