// `peregrine quantize`'s core (cli/quantize.h): every written NVFP4 tensor equals quantize_nvfp4 of
// the source tensor bit for bit, a DeepSeek FP8 source is dequantized exactly before quantizing,
// copied tensors are byte-identical, the output loads as a model, and the planner's rules.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "cli/eval_report.h"
#include "cli/gptq.h"
#include "cli/quantize.h"
#include "formats/file_io.h"
#include "formats/nvfp4.h"
#include "model/deepseek_model.h"
#include "ops/matrix.h"
#include "tokenizer/tokenizer.h"
#include "tests/unit/formats/test_util.h"

namespace pg::cli {
namespace {

using ::testing::HasSubstr;

const std::filesystem::path kTiny = std::filesystem::path(PG_SOURCE_DIR) / "models/peregrine-tiny";
const std::filesystem::path kFp8 = std::filesystem::path(PG_SOURCE_DIR) / "tests/golden/v3_tiny_fp8";
// A text for calibration tests; GPTQ's quality test calibrates on the first half of kQualityText
// and measures on the second.
const std::filesystem::path kHeldOutText = std::filesystem::path(PG_SOURCE_DIR) / "tests/cli/data/eval_text.txt";
const std::filesystem::path kQualityText = std::filesystem::path(PG_SOURCE_DIR) / "bench/quality/eval-text.md";

std::vector<uint8_t> bytes_of(const TensorView& t) { return {t.data, t.data + t.n_bytes}; }

float scalar_f32(const TensorView& t) {
  float v;
  std::memcpy(&v, t.data, sizeof v);
  return v;
}

// The source weight in f32, computed here independently of the quantizer: bf16 widened; DeepSeek
// FP8 as e4m3 value times its block's scale_inv, one f32 product (DeepSeek's weight_dequant).
std::vector<float> reference_f32(const TensorView& w, const TensorView* scale_inv, int64_t br, int64_t bc) {
  const int64_t rows = w.shape[0], cols = w.shape[1];
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      if (w.dtype == DType::kBF16) {
        uint16_t h;
        std::memcpy(&h, w.data + 2 * i, 2);
        out[size_t(i)] = bf16_to_f32(h);
      } else {
        EXPECT_EQ(w.dtype, DType::kF8E4M3);
        float s;
        std::memcpy(&s, scale_inv->data + 4 * ((r / br) * scale_inv->shape[1] + c / bc), 4);
        out[size_t(i)] = f8e4m3_to_f32(w.data[i]) * s;
      }
    }
  }
  return out;
}

struct Checked {
  int64_t quantized = 0, copied = 0, routed = 0;
};

// Every source tensor against the output: quantized ones equal quantize_nvfp4 of reference_f32,
// copied ones are byte-identical, dropped scale_inv are absent, and nothing else is there.
Checked check_output(const std::filesystem::path& src_dir, const std::filesystem::path& out_dir,
                     const QuantizeResult& res, bool mse) {
  Checked n;
  auto src = Checkpoint::open(src_dir);
  auto out = Checkpoint::open(out_dir);
  auto cfg = load_model_config(src_dir);
  EXPECT_TRUE(src.ok() && out.ok() && cfg.ok());
  if (!src.ok() || !out.ok() || !cfg.ok()) return n;
  std::map<std::string, const PlannedTensor*> plan;
  for (const PlannedTensor& p : res.plan.tensors) plan[p.name] = &p;
  size_t n_out = 0;
  for (const TensorView* t : src->all()) {
    const std::string name(t->name);
    SCOPED_TRACE(name);
    const PlannedTensor& p = *plan.at(name);
    if (p.action == TensorAction::kCopy) {
      const TensorView* o = out->find(name);
      if (!o) {
        ADD_FAILURE() << "copied tensor missing";
        continue;
      }
      EXPECT_EQ(o->dtype, t->dtype);
      EXPECT_EQ(o->shape, t->shape);
      EXPECT_EQ(bytes_of(*o), bytes_of(*t));
      ++n.copied;
      ++n_out;
      continue;
    }
    if (p.action == TensorAction::kDrop) {
      EXPECT_EQ(out->find(name), nullptr);
      continue;
    }
    const std::string m = name.substr(0, name.size() - 7);  // 7: ".weight"
    const int64_t rows = t->shape[0], cols = t->shape[1];
    const TensorView* sinv = p.scale_inv.empty() ? nullptr : src->find(p.scale_inv);
    const auto& q = cfg->quantization_config;
    const std::vector<float> w = reference_f32(*t, sinv, q.weight_block_size[0], q.weight_block_size[1]);
    Nvfp4Tensor want;
    EXPECT_TRUE(quantize_nvfp4(w.data(), rows, cols, kNvfp4AutoScale2, mse, want).ok());
    const TensorView* ow = out->find(m + ".weight");
    const TensorView* os = out->find(m + ".weight_scale");
    const TensorView* os2 = out->find(m + ".weight_scale_2");
    const TensorView* oin = out->find(m + ".input_scale");
    if (!ow || !os || !os2 || !oin) {
      ADD_FAILURE() << "NVFP4 tensors missing";
      continue;
    }
    EXPECT_EQ(ow->dtype, DType::kU8);
    EXPECT_EQ(ow->shape, (std::vector<int64_t>{rows, cols / 2}));
    EXPECT_EQ(os->dtype, DType::kF8E4M3);
    EXPECT_EQ(os->shape, (std::vector<int64_t>{rows, cols / 16}));
    EXPECT_EQ(os2->shape, std::vector<int64_t>{});
    EXPECT_EQ(oin->shape, std::vector<int64_t>{});
    EXPECT_EQ(bytes_of(*ow), want.packed);
    EXPECT_EQ(bytes_of(*os), want.scale_fp8);
    EXPECT_EQ(f32_to_bits(scalar_f32(*os2)), f32_to_bits(want.scale_2));
    EXPECT_EQ(scalar_f32(*oin), 1.0f);
    EXPECT_EQ(out->find(m + ".weight_scale_inv"), nullptr);
    ++n.quantized;
    n.routed += name.find(".mlp.experts.") != std::string::npos;
    n_out += 4;
  }
  EXPECT_EQ(out->n_tensors(), n_out) << "the output holds tensors that are not accounted for";
  return n;
}

TEST(QuantizeCheckpoint, BF16TensorsAreQuantizeNvfp4BitForBit) {
  test::TempDir dir;
  QuantizeOptions o;
  o.src = kTiny;
  o.dst = dir / "out";
  o.threads = 3;  // the reference below runs on the global pool: results must not depend on threads
  o.max_shard_bytes = 8'000'000;
  auto res = quantize_checkpoint(o);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  EXPECT_GE(res->shards.size(), 3u);
  const Checked n = check_output(kTiny, o.dst, *res, false);
  // 4 layers: layer 0 has 5 attention + 3 MLP Linears; layers 1-3 have 5 + 16 experts x 3 + 3 shared.
  EXPECT_EQ(n.quantized, 8 + 3 * (5 + 16 * 3 + 3));
  EXPECT_EQ(n.routed, 3 * 16 * 3);
  EXPECT_EQ(res->plan.n_quantized, n.quantized);
  EXPECT_FALSE(res->config_keeps_fp8);
  auto model = DeepseekModel::load(o.dst);  // binds every tensor: names, shapes, dtypes, nothing left over
  EXPECT_TRUE(model.ok()) << model.status().to_string();
}

TEST(QuantizeCheckpoint, MseSearchIsApplied) {
  test::TempDir dir;
  QuantizeOptions o;
  o.src = kTiny;
  o.dst = dir / "out";
  o.mse = true;
  o.exclude = {"*self_attn*"};
  auto res = quantize_checkpoint(o);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  const Checked n = check_output(kTiny, o.dst, *res, true);
  EXPECT_EQ(n.quantized, 3 + 3 * (16 * 3 + 3));
  // The search changes scales somewhere (else this test could not tell --mse from its absence).
  auto searched = Checkpoint::open(o.dst);
  ASSERT_TRUE(searched.ok());
  test::TempDir dir2;
  QuantizeOptions o2 = o;
  o2.mse = false;
  o2.dst = dir2 / "out";
  ASSERT_TRUE(quantize_checkpoint(o2).ok());
  auto plain = Checkpoint::open(o2.dst);
  ASSERT_TRUE(plain.ok());
  int64_t differ = 0;
  for (const TensorView* t : searched->all())
    differ += t->name.ends_with(".weight_scale") && bytes_of(*t) != bytes_of(*plain->find(t->name));
  EXPECT_GT(differ, 0);
}

TEST(QuantizeCheckpoint, Fp8SourceIsDequantizedExactlyFirst) {
  test::TempDir dir;
  QuantizeOptions o;
  o.src = kFp8;
  o.dst = dir / "out";
  auto res = quantize_checkpoint(o);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  const Checked n = check_output(kFp8, o.dst, *res, false);
  EXPECT_EQ(n.quantized, 8 + 2 * (5 + 8 * 3 + 3));
  // The MTP layer stays FP8 with its scales, so config.json keeps the FP8 quantization_config.
  EXPECT_EQ(res->plan.n_fp8_kept, 5 + 8 * 3 + 3);
  EXPECT_TRUE(res->config_keeps_fp8);
  auto cfg = load_model_config(o.dst);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->quantization_config.quant_method, "fp8");
  ASSERT_TRUE(cfg->hf_quant_config.has_value());
  auto model = DeepseekModel::load(o.dst);
  EXPECT_TRUE(model.ok()) << model.status().to_string();

  // source_weight_to_f32 itself, on a tensor whose rows (40) end in a partial 32-row scale block.
  auto src = Checkpoint::open(kFp8);
  ASSERT_TRUE(src.ok());
  const TensorView* w = src->find("model.layers.1.self_attn.kv_a_proj_with_mqa.weight");
  const TensorView* s = src->find("model.layers.1.self_attn.kv_a_proj_with_mqa.weight_scale_inv");
  ASSERT_TRUE(w && s);
  ASSERT_EQ(w->shape, (std::vector<int64_t>{40, 64}));
  ThreadPool pool(2);
  std::vector<float> got;
  ASSERT_TRUE(source_weight_to_f32(*w, s, cfg->quantization_config, got, pool).ok());
  const std::vector<float> want = reference_f32(*w, s, 32, 32);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(f32_to_bits(got[i]), f32_to_bits(want[i])) << i;
  EXPECT_FALSE(source_weight_to_f32(*w, nullptr, cfg->quantization_config, got, pool).ok());
}

// ---- the planner, on tensor lists -------------------------------------------------------------

class QuantizePlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = load_model_config(kTiny);  // 4 layers (MTP: model.layers.4), hidden 256
    ASSERT_TRUE(c.ok());
    cfg = *c;
  }
  Result<QuantizePlan> plan(std::vector<SourceTensor> ts, std::vector<std::string> exclude = {}) {
    tensors = std::move(ts);
    return plan_nvfp4(cfg, tensors, exclude);
  }
  TensorAction action_of(const QuantizePlan& p, std::string_view name) {
    for (const PlannedTensor& t : p.tensors)
      if (t.name == name) return t.action;
    ADD_FAILURE() << name << " not planned";
    return TensorAction::kDrop;
  }
  ModelConfig cfg;
  std::vector<SourceTensor> tensors;
};

const SourceTensor kExpert{"model.layers.1.mlp.experts.0.up_proj.weight", DType::kBF16, {96, 256}};

TEST_F(QuantizePlanTest, WhatIsQuantized) {
  auto p = plan({kExpert,
                 {"model.layers.1.self_attn.q_a_proj.weight", DType::kBF16, {128, 256}},
                 {"model.layers.1.mlp.shared_experts.up_proj.weight", DType::kF32, {96, 256}},
                 {"model.layers.1.mlp.gate.weight", DType::kBF16, {16, 256}},
                 {"model.layers.1.input_layernorm.weight", DType::kBF16, {256}},
                 {"model.embed_tokens.weight", DType::kBF16, {8192, 256}},
                 {"lm_head.weight", DType::kBF16, {8192, 256}},
                 {"model.layers.4.mlp.experts.0.up_proj.weight", DType::kBF16, {96, 256}},
                 {"model.layers.4.eh_proj.weight", DType::kBF16, {256, 512}}});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(action_of(*p, kExpert.name), TensorAction::kQuantize);
  EXPECT_EQ(action_of(*p, "model.layers.1.self_attn.q_a_proj.weight"), TensorAction::kQuantize);
  EXPECT_EQ(action_of(*p, "model.layers.1.mlp.shared_experts.up_proj.weight"), TensorAction::kQuantize);
  for (const char* kept : {"model.layers.1.mlp.gate.weight", "model.layers.1.input_layernorm.weight",
                           "model.embed_tokens.weight", "lm_head.weight", "model.layers.4.mlp.experts.0.up_proj.weight",
                           "model.layers.4.eh_proj.weight"})
    EXPECT_EQ(action_of(*p, kept), TensorAction::kCopy) << kept;
  EXPECT_EQ(p->n_quantized, 3);
  EXPECT_EQ(p->exclude_modules, (std::vector<std::string>{"lm_head", "model.layers.4.*"}));
  EXPECT_TRUE(p->warnings.empty());
}

TEST_F(QuantizePlanTest, InDimNotAMultipleOf16StaysWithAWarning) {
  auto p = plan({kExpert, {"model.layers.1.mlp.experts.0.down_proj.weight", DType::kBF16, {256, 24}}});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(action_of(*p, "model.layers.1.mlp.experts.0.down_proj.weight"), TensorAction::kCopy);
  ASSERT_EQ(p->warnings.size(), 1u);
  EXPECT_THAT(p->warnings[0], HasSubstr("in-dim 24 is not a multiple of 16"));
  EXPECT_EQ(p->exclude_modules.back(), "model.layers.1.mlp.experts.0.down_proj");
}

TEST_F(QuantizePlanTest, ExcludePatterns) {
  const std::vector<SourceTensor> ts = {kExpert,
                                        {"model.layers.1.self_attn.o_proj.weight", DType::kBF16, {256, 128}},
                                        {"model.layers.2.mlp.shared_experts.up_proj.weight", DType::kBF16, {96, 256}}};
  auto p = plan(ts, {"*self_attn*", "model.layers.[0-9].mlp.shared_experts.*", "nothing"});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(action_of(*p, "model.layers.1.self_attn.o_proj.weight"), TensorAction::kCopy);
  EXPECT_EQ(action_of(*p, "model.layers.2.mlp.shared_experts.up_proj.weight"), TensorAction::kCopy);
  EXPECT_EQ(action_of(*p, kExpert.name), TensorAction::kQuantize);
  // '*'-only patterns as given; a bracket pattern as the modules it matched; no-match: a warning.
  EXPECT_EQ(p->exclude_modules, (std::vector<std::string>{"lm_head", "model.layers.4.*", "*self_attn*",
                                                          "model.layers.2.mlp.shared_experts.up_proj"}));
  // Warnings: the pattern that matched nothing, and the shared experts kept beside NVFP4 routed ones.
  ASSERT_EQ(p->warnings.size(), 2u);
  EXPECT_THAT(p->warnings[0], HasSubstr("'nothing' matches no module"));
  EXPECT_THAT(p->warnings[1], HasSubstr("shared experts kept unquantized"));

  auto routed = plan(ts, {"*mlp*"});
  EXPECT_EQ(routed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(routed.status().message(), HasSubstr("routed expert"));
  auto nothing = plan({{"model.layers.1.self_attn.o_proj.weight", DType::kBF16, {256, 128}}}, {"*self_attn*"});
  EXPECT_EQ(nothing.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(nothing.status().message(), HasSubstr("nothing to quantize"));
}

TEST_F(QuantizePlanTest, BadSources) {
  auto f16 = plan({{"model.layers.1.mlp.experts.0.up_proj.weight", DType::kF16, {96, 256}}});
  EXPECT_EQ(f16.status().code(), StatusCode::kUnsupported);
  EXPECT_THAT(f16.status().message(), HasSubstr("is F16: quantize reads Linear weights in BF16, F32 or DeepSeek FP8"));
  auto packed = plan({kExpert, {"model.layers.1.mlp.experts.1.up_proj.weight", DType::kU8, {96, 128}}});
  EXPECT_THAT(packed.status().message(), HasSubstr("already NVFP4"));
  auto fp8_no_config = plan({{kExpert.name, DType::kF8E4M3, {96, 256}}});
  EXPECT_THAT(fp8_no_config.status().message(), HasSubstr("no DeepSeek FP8 quantization_config"));
  cfg.quantization_config.quant_method = "fp8";
  auto fp8_no_scales = plan({{kExpert.name, DType::kF8E4M3, {96, 256}}});
  EXPECT_THAT(fp8_no_scales.status().message(), HasSubstr("weight_scale_inv' (F32 [1, 2]) are missing"));
  auto fp8 = plan({{kExpert.name, DType::kF8E4M3, {96, 256}},
                   {"model.layers.1.mlp.experts.0.up_proj.weight_scale_inv", DType::kF32, {1, 2}}});
  ASSERT_TRUE(fp8.ok()) << fp8.status().to_string();
  EXPECT_EQ(action_of(*fp8, "model.layers.1.mlp.experts.0.up_proj.weight_scale_inv"), TensorAction::kDrop);
  cfg.hf_quant_config = HfQuantConfig{};
  cfg.hf_quant_config->quant_algo = "NVFP4";
  EXPECT_THAT(plan({kExpert}).status().message(), HasSubstr("already a ModelOpt checkpoint"));
}


// ---- GPTQ (cli/gptq.h, formats/nvfp4_gptq.h) -------------------------------------------------

TEST(GptqCalibration, SharedInputsShareOneHessianAndPassesKeepThemTogether) {
  ThreadPool pool(2);
  auto c = GptqCalibration::open(kTiny, {.text = kHeldOutText}, &pool);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  GptqCalibration& g = **c;
  EXPECT_EQ(g.input_key("model.layers.1.mlp.experts.3.up_proj"), "model.layers.1.mlp.experts.3.gate_proj");
  EXPECT_EQ(g.input_key("model.layers.2.self_attn.kv_a_proj_with_mqa"), "model.layers.2.self_attn.q_a_proj");
  EXPECT_EQ(g.input_key("model.layers.2.self_attn.o_proj"), "model.layers.2.self_attn.o_proj");
  EXPECT_EQ(g.hessian_bytes("model.layers.1.mlp.experts.3.down_proj"), 96u * 96u * 8u);
  const std::vector<std::string> mods = {"model.layers.1.mlp.experts.0.gate_proj", "model.layers.1.mlp.experts.0.up_proj",
                                         "model.layers.1.mlp.experts.0.down_proj", "model.layers.1.self_attn.o_proj",
                                         "model.layers.1.mlp.experts.0.up_proj"};
  EXPECT_EQ(g.plan_passes(mods).size(), 1u);  // the default 8 GiB holds them all
}

TEST(GptqCalibration, SmallMemorySplitsPassesAlongInputKeys) {
  ThreadPool pool(2);
  // 256² x 8 = 512 KiB per hidden-size Hessian: two a pass.
  auto c = GptqCalibration::open(kTiny, {.text = kHeldOutText, .max_hessian_bytes = 1u << 20}, &pool);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const std::vector<std::string> mods = {"model.layers.1.mlp.experts.0.gate_proj", "model.layers.1.mlp.experts.1.gate_proj",
                                         "model.layers.1.mlp.experts.0.up_proj", "model.layers.1.mlp.experts.2.gate_proj",
                                         "model.layers.1.mlp.experts.2.up_proj"};
  const auto passes = (*c)->plan_passes(mods);
  ASSERT_EQ(passes.size(), 2u);
  EXPECT_EQ(passes[0], (std::vector<std::string>{mods[0], mods[1], mods[2]}));
  EXPECT_EQ(passes[1], (std::vector<std::string>{mods[3], mods[4]}));
}

TEST(GptqCalibration, FirstLayerHessianIsTheNormalizedEmbeddingsOuterProducts) {
  ThreadPool pool(2);
  auto c = GptqCalibration::open(kTiny, {.text = kHeldOutText, .context = 64}, &pool);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  GptqCalibration& g = **c;
  const std::string q_a = "model.layers.0.self_attn.q_a_proj";
  const std::vector<std::string> mods = {q_a, "model.layers.0.self_attn.kv_a_proj_with_mqa",
                                         "model.layers.1.mlp.experts.5.down_proj"};
  ASSERT_TRUE(g.collect(mods).ok());
  const GptqHessian* h = g.hessian(q_a);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(g.hessian("model.layers.0.self_attn.kv_a_proj_with_mqa"), h);
  EXPECT_EQ(g.hessian("model.layers.0.self_attn.o_proj"), nullptr);  // not collected
  EXPECT_EQ(h->samples, g.tokens());  // every token of every window, once (kv_a's calls not added again)
  const GptqHessian* down = g.hessian("model.layers.1.mlp.experts.5.down_proj");
  ASSERT_NE(down, nullptr);
  EXPECT_GT(down->samples, 0);
  EXPECT_LT(down->samples, g.tokens());  // the tokens routed to expert 5 only

  // The same sums from the checkpoint: rmsnorm(embed(token)) of every window token.
  auto model = DeepseekModel::load(kTiny);
  auto tok = Tokenizer::load(kTiny);
  auto text = read_file_to_string(kHeldOutText);
  ASSERT_TRUE(model.ok() && tok.ok() && text.ok());
  auto windows = text_windows(*tok, *text, 64, 8192);
  ASSERT_TRUE(windows.ok());
  const ModelConfig& cfg = (*model)->config();
  const int64_t H = cfg.hidden_size;
  const std::vector<float>& ln = (*model)->weights().layers[0].input_layernorm;
  std::vector<double> want(size_t(H * H), 0.0);
  std::vector<float> x(static_cast<size_t>(H));
  int64_t n = 0;
  for (const auto& w : *windows)
    for (int32_t id : w) {
      ops::matrix_row_to_f32((*model)->weights().embed_tokens, id, x.data());
      double ss = 0;
      for (float v : x) ss += double(v) * v;
      const double inv = 1.0 / std::sqrt(ss / double(H) + cfg.rms_norm_eps);
      std::vector<double> a(static_cast<size_t>(H));
      for (int64_t i = 0; i < H; ++i) a[size_t(i)] = double(x[size_t(i)]) * inv * ln[size_t(i)];
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j <= i; ++j) want[size_t(i * H + j)] += a[size_t(i)] * a[size_t(j)];
      ++n;
    }
  EXPECT_EQ(n, h->samples);
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < H; ++i) scale = std::max(scale, want[size_t(i * H + i)]);
  for (int64_t i = 0; i < H; ++i)
    for (int64_t j = 0; j <= i; ++j) worst = std::max(worst, std::fabs(h->h[size_t(i * H + j)] - want[size_t(i * H + j)]));
  EXPECT_LT(worst, 1e-5 * scale);
}

TEST(GptqCalibration, BadInput) {
  ThreadPool pool(1);
  test::TempDir dir;
  const auto empty = dir / "empty.txt";
  ASSERT_TRUE(write_file_atomic(empty, {}).ok());
  auto e = GptqCalibration::open(kTiny, {.text = empty}, &pool);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("empty"));
  auto c = GptqCalibration::open(kTiny, {.text = kHeldOutText}, &pool);
  ASSERT_TRUE(c.ok());
  const std::vector<std::string> bad = {"lm_head"};
  const Status st = (*c)->collect(bad);
  EXPECT_THAT(st.message(), HasSubstr("not a Linear of the model's layers"));
}

// GPTQ through the quantizer: an NVFP4 folder that loads, the same scale_2 as rounding to nearest,
// and on text the calibration never saw (the second half of a document calibrated on its first
// half), a smaller KL to the BF16 model than rounding to nearest (measured: 0.204 vs 0.292).
TEST(QuantizeCheckpoint, GptqLowersTheHeldOutKlOfTheEmbeddedModel) {
  test::TempDir dir;
  auto doc = read_file_to_string(kQualityText);
  ASSERT_TRUE(doc.ok());
  size_t half = doc->size() / 2;
  while (half < doc->size() && (*doc)[half] != '\n') ++half;
  const auto calib_text = dir / "first-half.md", held_out = dir / "second-half.md";
  for (const auto& [path, part] : {std::pair{calib_text, doc->substr(0, half)}, std::pair{held_out, doc->substr(half)}}) {
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(part.data()), part.size());
    ASSERT_TRUE(write_file_atomic(path, std::span(&bytes, 1)).ok());
  }
  QuantizeOptions rtn;
  rtn.src = kTiny;
  rtn.dst = dir / "rtn";
  rtn.threads = 2;
  QuantizeOptions gptq = rtn;
  gptq.dst = dir / "gptq";
  gptq.gptq_text = calib_text;
  gptq.gptq_max_hessian_bytes = 4u << 20;  // several passes
  std::vector<std::string> log;
  QuantizeCallbacks cb;
  cb.log = [&](const std::string& line) { log.push_back(line); };
  ASSERT_TRUE(quantize_checkpoint(rtn).ok());
  auto res = quantize_checkpoint(gptq, cb);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  EXPECT_GT(res->gptq_passes, 1);
  EXPECT_EQ(std::count_if(log.begin(), log.end(), [](const std::string& l) { return l.find(" Linears, ") != std::string::npos; }),
            res->gptq_passes);  // a line per pass (and per tenth of a long pass's windows)
  EXPECT_GT(res->gptq_tokens, 1000);  // the half document: ~1,250 tokens
  auto model = DeepseekModel::load(gptq.dst);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto a = Checkpoint::open(rtn.dst), b = Checkpoint::open(gptq.dst);
  ASSERT_TRUE(a.ok() && b.ok());
  int64_t codes_differ = 0;
  for (const TensorView* t : a->all()) {
    const TensorView* u = b->find(t->name);
    ASSERT_NE(u, nullptr) << t->name;
    if (t->name.ends_with(".weight_scale_2")) {
      EXPECT_EQ(bytes_of(*t), bytes_of(*u)) << t->name;
    }
    if (t->dtype == DType::kU8) codes_differ += bytes_of(*t) != bytes_of(*u);
  }
  EXPECT_EQ(codes_differ, res->plan.n_quantized);  // every Linear saw inputs and moved some error

  auto kl = [&](const std::filesystem::path& m) {
    EvalOptions eo;
    eo.model_dir = m.string();
    eo.reference_dir = kTiny.string();
    eo.text_path = held_out.string();
    eo.device = "cpu";
    eo.generations = 0;
    auto r = run_eval(eo);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? (*r)["kl"]["mean"].get<double>() : 0.0;
  };
  const double kl_rtn = kl(rtn.dst), kl_gptq = kl(gptq.dst);
  std::printf("held-out KL to bf16: round to nearest %.4f, gptq %.4f\n", kl_rtn, kl_gptq);
  EXPECT_LT(kl_gptq, 0.9 * kl_rtn);
}

}  // namespace
}  // namespace pg::cli
