// GPTQ calibration (gptq.h): the source model's forward passes over the text with a LinearObserver
// that sums each selected Linear's inputs into its Hessian.
#include "cli/gptq.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "cli/eval_report.h"
#include "formats/file_io.h"
#include "model/deepseek_model.h"
#include "tokenizer/tokenizer.h"

namespace pg::cli {
namespace {

constexpr int64_t kBlockSize = 16;

bool ends_with(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }

// Sums the inputs of the weights it was given (by their data pointer) into their Hessians.
class HessianObserver final : public LinearObserver {
 public:
  HessianObserver(std::unordered_map<const void*, GptqHessian*> by_weight, ThreadPool* pool)
      : by_weight_(std::move(by_weight)), pool_(pool) {}
  void observe(const ops::Matrix& w, const float* x, int64_t m, int64_t x_stride) override {
    const auto it = by_weight_.find(w.data);
    if (it != by_weight_.end()) nvfp4_hessian_add(*it->second, x, m, x_stride, pool_);
  }

 private:
  std::unordered_map<const void*, GptqHessian*> by_weight_;
  ThreadPool* pool_;
};

}  // namespace

GptqCalibration::~GptqCalibration() = default;

Result<std::unique_ptr<GptqCalibration>> GptqCalibration::open(const std::filesystem::path& src,
                                                                const GptqCalibrationOptions& o, ThreadPool* pool) {
  auto text = read_file_to_string(o.text);
  if (!text.ok()) return text.status().with_context("--calib");
  if (text->empty()) return invalid_argument("--calib {}: the file is empty", o.text.string());
  PG_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load(src));
  std::unique_ptr<GptqCalibration> c(new GptqCalibration());
  auto model = DeepseekModel::load(src);
  if (!model.ok()) return model.status().with_context(src.string());
  c->model_ = std::move(model).value();
  c->pool_ = pool;
  c->max_bytes_ = o.max_hessian_bytes;
  if (pool) c->model_->set_thread_pool(pool);
  const int64_t context = std::min(o.context, c->model_->config().max_position_embeddings);
  auto windows = text_windows(tok, *text, context, o.max_tokens);
  if (!windows.ok()) return windows.status().with_context("--calib " + o.text.string());
  c->windows_ = std::move(windows).value();
  for (const auto& w : c->windows_) c->tokens_ += int64_t(w.size());
  return c;
}

std::string GptqCalibration::input_key(std::string_view module) const {
  const std::string m(module);
  if (ends_with(m, ".up_proj")) return m.substr(0, m.size() - 8) + ".gate_proj";
  if (ends_with(m, ".kv_a_proj_with_mqa")) {
    const std::string attn = m.substr(0, m.size() - 19);
    return model_->checkpoint().find(attn + ".q_a_proj.weight") ? attn + ".q_a_proj" : attn + ".q_proj";
  }
  return m;
}

uint64_t GptqCalibration::hessian_bytes(std::string_view module) const {
  const TensorView* t = model_->checkpoint().find(input_key(module) + ".weight");
  if (!t || t->shape.size() != 2) return 0;
  return uint64_t(t->shape[1]) * uint64_t(t->shape[1]) * sizeof(double);
}

std::vector<std::vector<std::string>> GptqCalibration::plan_passes(std::span<const std::string> modules) const {
  std::vector<std::vector<std::string>> passes;
  std::map<std::string, size_t, std::less<>> pass_of_key;
  uint64_t bytes = 0;
  for (const std::string& m : modules) {
    const std::string key = input_key(m);
    if (const auto it = pass_of_key.find(key); it != pass_of_key.end()) {
      passes[it->second].push_back(m);
      continue;
    }
    const uint64_t b = hessian_bytes(m);
    if (passes.empty() || (bytes > 0 && bytes + b > max_bytes_)) {
      passes.emplace_back();
      bytes = 0;
    }
    bytes += b;
    pass_of_key[key] = passes.size() - 1;
    passes.back().push_back(m);
  }
  return passes;
}

Status GptqCalibration::collect(std::span<const std::string> modules,
                                const std::function<void(int64_t, int64_t)>& window_done) {
  hessians_.clear();
  std::unordered_map<const void*, GptqHessian*> by_weight;
  for (const std::string& m : modules) {
    const std::string key = input_key(m);
    const TensorView* t = model_->checkpoint().find(key + ".weight");
    if (!t || t->shape.size() != 2 || key.rfind("model.layers.", 0) != 0)
      return invalid_argument("gptq: '{}' is not a Linear of the model's layers", m);
    if (hessians_.count(key)) continue;
    GptqHessian& h = hessians_[key];
    h.reset(t->shape[1]);
    by_weight[t->data] = &h;
  }
  HessianObserver observer(std::move(by_weight), pool_);
  int64_t longest = 0;
  for (const auto& w : windows_) longest = std::max(longest, int64_t(w.size()));
  const int64_t n_blocks = (longest + kBlockSize - 1) / kBlockSize;
  KvCache cache = model_->make_cache(n_blocks, kBlockSize);
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  model_->set_linear_observer(&observer);
  Status st;
  for (size_t i = 0; i < windows_.size() && st.ok(); ++i) {
    const SeqStep step{windows_[i], 0, table, /*all_logits=*/false, /*no_logits=*/true};
    StepOutput out;
    st = model_->forward(std::span(&step, 1), cache, out);
    if (st.ok() && window_done) window_done(int64_t(i) + 1, int64_t(windows_.size()));
  }
  model_->set_linear_observer(nullptr);
  return st;
}

const GptqHessian* GptqCalibration::hessian(std::string_view module) const {
  const auto it = hessians_.find(input_key(module));
  return it == hessians_.end() ? nullptr : &it->second;
}

}  // namespace pg::cli
