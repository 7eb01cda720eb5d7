// Bad checkpoints and bad inputs to the forward pass: each gives one clear error naming what
// is wrong and what is expected; nothing crashes. Variants of the v3_tiny golden model are
// written to a temporary folder with one thing broken.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <numeric>

#include "formats/safetensors_writer.h"
#include "model/deepseek_model.h"

namespace pg {
namespace {

namespace fs = std::filesystem;

fs::path golden(const char* name) { return fs::path(PG_SOURCE_DIR) / "tests" / "golden" / name; }

struct Variant {
  fs::path dir;
  explicit Variant(const std::string& tag) {
    dir = fs::temp_directory_path() / ("pg_model_load_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Variant() { fs::remove_all(dir); }
};

// Copies a golden model, letting `edit_tensors` change the tensor list and `edit_config` the config.
void make_variant(const fs::path& src, const fs::path& dst,
                  const std::function<void(std::vector<TensorToWrite>&, std::vector<std::vector<uint8_t>>&)>& edit_tensors,
                  const std::function<void(nlohmann::json&)>& edit_config) {
  auto ck = Checkpoint::open(src);
  ASSERT_TRUE(ck.ok());
  std::vector<TensorToWrite> ts;
  std::vector<std::vector<uint8_t>> store;
  store.reserve(4096);
  for (const TensorView* t : ck->all()) ts.push_back({std::string(t->name), t->dtype, t->shape, {t->data, t->n_bytes}});
  if (edit_tensors) edit_tensors(ts, store);
  ASSERT_TRUE(write_safetensors(dst / "model.safetensors", ts).ok());
  std::ifstream in(src / "config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  if (edit_config) edit_config(cfg);
  std::ofstream(dst / "config.json") << cfg.dump(2);
}

std::string load_error(const fs::path& dir) {
  auto m = DeepseekModel::load(dir);
  EXPECT_FALSE(m.ok());
  return m.ok() ? "" : m.status().message();
}

TEST(ModelLoad, MissingTensorNamesIt) {
  Variant v("missing");
  make_variant(golden("v3_tiny"), v.dir, [](auto& ts, auto&) {
    std::erase_if(ts, [](const TensorToWrite& t) { return t.name == "model.layers.1.self_attn.kv_b_proj.weight"; });
  }, nullptr);
  const std::string e = load_error(v.dir);
  EXPECT_NE(e.find("model.layers.1.self_attn.kv_b_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
}

TEST(ModelLoad, ExtraTensorIsAnError) {
  Variant v("extra");
  static const std::vector<uint8_t> bytes(8, 0);
  make_variant(golden("v3_tiny"), v.dir, [](auto& ts, auto&) {
    ts.push_back({"model.layers.0.mystery.weight", DType::kBF16, {4}, bytes});
  }, nullptr);
  const std::string e = load_error(v.dir);
  EXPECT_NE(e.find("model.layers.0.mystery.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("not part of"), std::string::npos) << e;
}

TEST(ModelLoad, WrongShapeSaysWhatWasExpected) {
  Variant v("shape");
  make_variant(golden("v3_tiny"), v.dir, [](auto& ts, auto&) {
    for (auto& t : ts)
      if (t.name == "model.layers.0.self_attn.q_a_proj.weight") {
        std::swap(t.shape[0], t.shape[1]);  // same bytes, transposed shape
      }
  }, nullptr);
  const std::string e = load_error(v.dir);
  EXPECT_NE(e.find("q_a_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("expected [48, 64]"), std::string::npos) << e;
}

TEST(ModelLoad, WrongDtypeIsUnsupported) {
  Variant v("dtype");
  make_variant(golden("v3_tiny"), v.dir, [](auto& ts, auto&) {
    for (auto& t : ts)
      if (t.name == "model.layers.0.mlp.up_proj.weight") t.dtype = DType::kF16;  // same size, not allowed
  }, nullptr);
  const std::string e = load_error(v.dir);
  EXPECT_NE(e.find("up_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("BF16, F32 or F8_E4M3"), std::string::npos) << e;
}

TEST(ModelLoad, UnsupportedModelTypeAndQuantization) {
  {
    Variant v("type");
    make_variant(golden("v3_tiny"), v.dir, nullptr, [](nlohmann::json& c) { c["model_type"] = "llama"; });
    const std::string e = load_error(v.dir);
    EXPECT_NE(e.find("llama"), std::string::npos) << e;
    EXPECT_NE(e.find("deepseek_v3"), std::string::npos) << e;  // lists what is supported
  }
  {
    Variant v("quant");
    make_variant(golden("v3_tiny"), v.dir, nullptr,
                 [](nlohmann::json& c) { c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}}; });
    const std::string e = load_error(v.dir);
    EXPECT_NE(e.find("gptq"), std::string::npos) << e;
    EXPECT_NE(e.find("fp8"), std::string::npos) << e;
  }
}

TEST(ModelLoad, Fp8WeightWithoutScalesNamesTheScaleTensor) {
  Variant v("fp8scale");
  make_variant(golden("v3_tiny_fp8"), v.dir, [](auto& ts, auto&) {
    std::erase_if(ts, [](const TensorToWrite& t) { return t.name == "model.layers.2.mlp.experts.3.down_proj.weight_scale_inv"; });
  }, nullptr);
  const std::string e = load_error(v.dir);
  EXPECT_NE(e.find("model.layers.2.mlp.experts.3.down_proj.weight_scale_inv"), std::string::npos) << e;
}

TEST(ModelForward, BadInputsAreErrors) {
  auto m = DeepseekModel::load(golden("v3_tiny"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto& model = *m;
  const int64_t ctx = model->config().max_position_embeddings;
  KvCache cache = model->make_cache(ctx / 16 + 1, 16);
  std::vector<int32_t> table(size_t(cache.n_blocks()));
  std::iota(table.begin(), table.end(), 0);
  StepOutput out;
  // Prompt longer than the context.
  std::vector<int32_t> long_prompt(size_t(ctx + 1), 5);
  SeqStep s{long_prompt, 0, table, false};
  Status st = model->forward(std::span(&s, 1), cache, out);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("context of " + std::to_string(ctx)), std::string::npos) << st.message();
  // Token outside the vocabulary.
  std::vector<int32_t> bad = {1, int32_t(model->vocab_size())};
  s = {bad, 0, table, false};
  st = model->forward(std::span(&s, 1), cache, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.message();
  // Too few KV blocks for the positions.
  std::vector<int32_t> ok_prompt(40, 5);
  s = {ok_prompt, 0, std::span(table).first(2), false};
  st = model->forward(std::span(&s, 1), cache, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pg
