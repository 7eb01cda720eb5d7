// NVFP4 checkpoint quantizer (quantize.h): plan per tensor, then stream the source shards tensor by
// tensor into pre-laid-out output shards (SafetensorsFileWriter), then the JSON files.
#include "cli/quantize.h"

#include <fnmatch.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "formats/file_io.h"
#include "formats/nvfp4.h"
#include "formats/nvfp4_gptq.h"
#include "formats/safetensors_writer.h"
#include "ops/matrix.h"

#ifndef PEREGRINE_VERSION
#error "PEREGRINE_VERSION must be defined (cli/CMakeLists.txt)"
#endif

namespace pg::cli {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kWeight = ".weight";

// "model.layers.61.mlp..." -> 61; -1 when the name is not under model.layers.
int64_t layer_of(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (!name.starts_with(kPrefix)) return -1;
  size_t i = kPrefix.size();
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  int64_t idx = 0;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) idx = idx * 10 + (name[i] - '0');
  return i < name.size() && name[i] == '.' ? idx : -1;
}

// The module a tensor belongs to: its name without the last component ("lm_head.weight" -> "lm_head").
std::string_view module_of(std::string_view name) {
  const size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(0, dot);
}

bool fnmatches(const std::string& pattern, std::string_view module) {
  return ::fnmatch(pattern.c_str(), std::string(module).c_str(), 0) == 0;
}

// exclude_modules readers (HfQuantConfig::is_excluded, vLLM, TensorRT-LLM) know '*' only.
bool star_only(std::string_view pattern) { return pattern.find_first_of("?[\\") == std::string_view::npos; }

std::string shape_str(std::span<const int64_t> s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// Output bytes of a quantized [rows, cols] weight: packed codes, block scales, scale_2, input_scale.
uint64_t nvfp4_bytes(int64_t rows, int64_t cols) {
  return uint64_t(rows * cols / 2 + rows * cols / kNvfp4BlockSize + 2 * int64_t(sizeof(float)));
}

// Drops this process's pages of a processed tensor. The shards are mapped MAP_PRIVATE read-only, so
// a later access (if any) reads the file again; memory holds the tensor in progress, not every shard
// read so far.
void release_pages(std::span<const uint8_t> bytes) {
  const auto page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = (uintptr_t(bytes.data()) + page - 1) & ~(page - 1);
  const uintptr_t e = (uintptr_t(bytes.data()) + bytes.size()) & ~(page - 1);
  if (e > b) (void)::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

std::span<const uint8_t> as_bytes(const float& f) { return {reinterpret_cast<const uint8_t*>(&f), sizeof f}; }

Status write_json(const fs::path& path, const nlohmann::ordered_json& j, int indent) {
  const std::string text = j.dump(indent) + "\n";
  const std::span<const uint8_t> part(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  return write_file_atomic(path, std::span(&part, 1));
}

// One source tensor in processing order and where its output goes.
struct Item {
  const TensorView* t = nullptr;
  const PlannedTensor* plan = nullptr;
  uint64_t out_bytes = 0;
  int64_t shard = -1;  // -1: no output (kDrop)
};

}  // namespace

Result<QuantizePlan> plan_nvfp4(const ModelConfig& cfg, std::span<const SourceTensor> tensors,
                                std::span<const std::string> exclude) {
  if (cfg.hf_quant_config || cfg.quantization_config.quant_method == "modelopt")
    return unsupported("the source is already a ModelOpt checkpoint ({}); quantize the BF16 or DeepSeek FP8 checkpoint "
                       "it was made from",
                       cfg.hf_quant_config ? "quant_algo \"" + cfg.hf_quant_config->quant_algo + "\""
                                           : std::string("quant_method \"modelopt\""));
  std::map<std::string_view, const SourceTensor*> by_name;
  for (const SourceTensor& t : tensors) {
    by_name[t.name] = &t;
    const bool packed = t.dtype == DType::kU8 && t.name.ends_with(kWeight);
    if (packed || t.name.ends_with(".weight_scale_2") || t.name.ends_with(".input_scale"))
      return unsupported("the source is already NVFP4: tensor '{}' ({} {}) is part of the ModelOpt layout; quantize "
                         "the BF16 or DeepSeek FP8 checkpoint it was made from",
                         t.name, dtype_safetensors_name(t.dtype), shape_str(t.shape));
  }
  for (const std::string& p : exclude)
    if (p.empty()) return invalid_argument("--exclude: an empty pattern; give a module glob such as '*self_attn*'");

  QuantizePlan plan;
  const int64_t n_layers = cfg.num_hidden_layers;
  // Defaults, as nvidia/DeepSeek-R1-FP4: the output head and the MTP layer(s) stay as they are.
  plan.exclude_modules.push_back("lm_head");
  for (int64_t k = 0; k < cfg.num_nextn_predict_layers; ++k)
    plan.exclude_modules.push_back(fmt::format("model.layers.{}.*", n_layers + k));
  // Patterns that match no module at all are warnings (a typo excludes nothing) and are not written.
  std::set<std::string_view> modules;
  for (const SourceTensor& t : tensors) modules.insert(module_of(t.name));
  for (const std::string& p : exclude) {
    if (std::any_of(modules.begin(), modules.end(), [&](std::string_view m) { return fnmatches(p, m); })) {
      if (star_only(p)) plan.exclude_modules.push_back(p);
      continue;
    }
    plan.warnings.push_back(fmt::format("--exclude '{}' matches no module of the checkpoint; patterns match whole "
                                        "module names such as 'model.layers.0.self_attn.o_proj'{}",
                                        p, p.find('*') == std::string::npos ? fmt::format(" (try '*{}*')", p) : ""));
  }

  const QuantizationConfig& qc = cfg.quantization_config;
  std::set<std::string> quantized_modules;
  bool shared_kept = false;  // a shared expert excluded while the routed experts are quantized
  plan.tensors.reserve(tensors.size());
  for (const SourceTensor& t : tensors) {
    PlannedTensor& pt = plan.tensors.emplace_back(PlannedTensor{t.name, TensorAction::kCopy, {}});
    const int64_t layer = layer_of(t.name);
    // A Linear of a decoder layer: 2-D "<m>.weight" other than the router (mlp.gate, kept in
    // bf16 and read in f32 for routing). Norms are 1-D; MTP layers (>= num_hidden_layers) excluded.
    const bool linear = layer >= 0 && layer < n_layers && t.name.ends_with(kWeight) && t.shape.size() == 2 &&
                        !t.name.ends_with(".mlp.gate.weight");
    if (!linear) continue;
    const std::string module(t.name.substr(0, t.name.size() - kWeight.size()));
    if (auto p = std::find_if(exclude.begin(), exclude.end(), [&](const std::string& pat) { return fnmatches(pat, module); });
        p != exclude.end()) {
      if (module.find(".mlp.experts.") != std::string::npos)
        return invalid_argument("--exclude '{}' matches the routed expert '{}': routed experts are always quantized "
                                "(they hold most of the weights); narrow the pattern, e.g. '*self_attn*' or "
                                "'*shared_experts*'",
                                *p, module);
      shared_kept = shared_kept || module.find(".mlp.shared_experts.") != std::string::npos;
      // Patterns the readers cannot evaluate are listed as the modules they matched.
      if (!std::any_of(exclude.begin(), exclude.end(), [&](const std::string& pat) {
            return star_only(pat) && fnmatches(pat, module);
          }))
        plan.exclude_modules.push_back(module);
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];
    if (cols % kNvfp4BlockSize) {
      plan.warnings.push_back(fmt::format("'{}' {}: in-dim {} is not a multiple of {} (the NVFP4 block); kept as {}",
                                          t.name, shape_str(t.shape), cols, kNvfp4BlockSize,
                                          dtype_safetensors_name(t.dtype)));
      plan.exclude_modules.push_back(module);
      continue;
    }
    switch (t.dtype) {
      case DType::kBF16:
      case DType::kF32:
        break;
      case DType::kF8E4M3: {
        if (qc.quant_method != "fp8")
          return unsupported("tensor '{}' is F8_E4M3 but config.json has no DeepSeek FP8 quantization_config "
                             "(quant_method \"fp8\" with weight_block_size); without its block scales the weight "
                             "cannot be read",
                             t.name);
        pt.scale_inv = module + ".weight_scale_inv";
        const auto s = by_name.find(pt.scale_inv);
        const std::vector<int64_t> want = {(rows + qc.weight_block_size[0] - 1) / qc.weight_block_size[0],
                                           (cols + qc.weight_block_size[1] - 1) / qc.weight_block_size[1]};
        if (s == by_name.end())
          return not_found("tensor '{}' is F8_E4M3 but its block scales '{}' (F32 {}) are missing", t.name,
                           pt.scale_inv, shape_str(want));
        if (s->second->dtype != DType::kF32 || s->second->shape != want)
          return data_loss("tensor '{}' is {} {}, expected F32 {} (weight_block_size {}x{})", pt.scale_inv,
                           dtype_safetensors_name(s->second->dtype), shape_str(s->second->shape), shape_str(want),
                           qc.weight_block_size[0], qc.weight_block_size[1]);
        break;
      }
      default:
        return unsupported("tensor '{}' is {}: quantize reads Linear weights in BF16, F32 or DeepSeek FP8 (F8_E4M3 "
                           "with weight_scale_inv); convert the checkpoint to one of those first",
                           t.name, dtype_safetensors_name(t.dtype));
    }
    pt.action = TensorAction::kQuantize;
    quantized_modules.insert(module);
    ++plan.n_quantized;
  }
  for (PlannedTensor& pt : plan.tensors) {
    constexpr std::string_view kScaleInv = ".weight_scale_inv";
    if (pt.name.ends_with(kScaleInv) &&
        quantized_modules.count(pt.name.substr(0, pt.name.size() - kScaleInv.size())))
      pt.action = TensorAction::kDrop;
  }
  for (size_t i = 0; i < tensors.size(); ++i)
    if (plan.tensors[i].action == TensorAction::kCopy && tensors[i].dtype == DType::kF8E4M3) ++plan.n_fp8_kept;
  if (shared_kept)
    plan.warnings.push_back(
        "shared experts kept unquantized beside NVFP4 routed experts: the CPU backend runs this checkpoint; the "
        "CUDA backend stacks a layer's experts in one format and refuses it for now (quantize the shared experts "
        "too to run it on the GPU)");
  if (plan.n_quantized == 0)
    return failed_precondition("nothing to quantize: no Linear weight of model.layers.0..{} is left after the "
                               "exclusions and the in-dim rule{}",
                               n_layers - 1, plan.warnings.empty() ? "" : fmt::format(" ({})", plan.warnings.front()));
  // Readers see exactly this split: no quantized module may match what we write as excluded.
  std::vector<std::string> uniq;
  for (std::string& m : plan.exclude_modules)
    if (std::find(uniq.begin(), uniq.end(), m) == uniq.end()) uniq.push_back(std::move(m));
  plan.exclude_modules = std::move(uniq);
  HfQuantConfig written;
  written.exclude_modules = plan.exclude_modules;
  for (const std::string& m : quantized_modules)
    PG_CHECK(!written.is_excluded(m), "quantized module '{}' matches the exclude_modules written", m);
  return plan;
}

Status source_weight_to_f32(const TensorView& w, const TensorView* scale_inv, const QuantizationConfig& q,
                            std::vector<float>& out, ThreadPool& pool) {
  if (w.shape.size() != 2) return invalid_argument("tensor '{}' {} is not a matrix", w.name, shape_str(w.shape));
  ops::Matrix m;
  m.rows = w.shape[0];
  m.cols = w.shape[1];
  m.data = w.data;
  switch (w.dtype) {
    case DType::kBF16: m.format = ops::WeightFormat::kBF16; break;
    case DType::kF32: m.format = ops::WeightFormat::kF32; break;
    case DType::kF8E4M3: {
      m.format = ops::WeightFormat::kFp8Block;
      m.block_rows = q.weight_block_size[0];
      m.block_cols = q.weight_block_size[1];
      const std::vector<int64_t> want = {(m.rows + m.block_rows - 1) / m.block_rows, m.scale_cols()};
      if (!scale_inv || scale_inv->dtype != DType::kF32 || scale_inv->shape != want)
        return invalid_argument("tensor '{}' is F8_E4M3 and needs F32 block scales {}", w.name, shape_str(want));
      m.scale_inv = reinterpret_cast<const float*>(scale_inv->data);
      break;
    }
    default:
      return unsupported("tensor '{}' has dtype {}; expected BF16, F32 or F8_E4M3", w.name,
                         dtype_safetensors_name(w.dtype));
  }
  PG_TRY(ops::validate_matrix(m).with_context(std::string(w.name)));
  out.resize(size_t(m.rows * m.cols));
  pool.parallel_for(m.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) ops::matrix_row_to_f32(m, r, out.data() + r * m.cols);
  });
  return ok_status();
}

Result<QuantizeResult> quantize_checkpoint(const QuantizeOptions& o, const QuantizeCallbacks& callbacks) {
  if (o.format != "nvfp4")
    return invalid_argument("--format '{}' is not supported; the supported format is nvfp4 (NVIDIA ModelOpt NVFP4, "
                            "as nvidia/DeepSeek-R1-FP4)",
                            o.format);
  if (o.threads < 0) return invalid_argument("--threads must be >= 0 (0: all cores), got {}", o.threads);
  if (o.max_shard_bytes == 0) return invalid_argument("--max-shard-size must be > 0");
  std::error_code ec;
  if (!fs::exists(o.src, ec))
    return invalid_argument("SRC '{}' does not exist; give a Hugging Face model folder (config.json + *.safetensors)",
                            o.src.string());
  if (!fs::is_directory(o.src, ec))
    return invalid_argument("SRC '{}' is not a folder; give a Hugging Face model folder (config.json + *.safetensors)",
                            o.src.string());
  if (!fs::exists(o.src / "config.json", ec))
    return not_found("'{}' has no config.json; SRC must be a Hugging Face model folder with config.json next to its "
                     "*.safetensors",
                     o.src.string());
  if (fs::exists(o.dst, ec)) {
    if (!fs::is_directory(o.dst, ec))
      return invalid_argument("DST '{}' exists and is not a folder; give a new folder", o.dst.string());
    if (fs::equivalent(o.src, o.dst, ec))
      return invalid_argument("DST '{}' is SRC; give a new folder for the quantized model", o.dst.string());
    fs::directory_iterator it(o.dst, ec);
    if (!ec && it != fs::directory_iterator() && !o.force)
      return invalid_argument("DST '{}' is not empty (it holds '{}'); give a new or empty folder, or pass --force to "
                              "write into it (its *.safetensors are replaced)",
                              o.dst.string(), it->path().filename().string());
  }
  PG_ASSIGN_OR_RETURN(ModelConfig cfg, load_model_config(o.src));
  PG_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(o.src));

  std::vector<SourceTensor> listed;
  for (const TensorView* t : ckpt.all()) listed.push_back({std::string(t->name), t->dtype, t->shape});
  QuantizeResult res;
  PG_ASSIGN_OR_RETURN(res.plan, plan_nvfp4(cfg, listed, o.exclude));
  if (callbacks.planned) callbacks.planned(res.plan);
  std::map<std::string_view, const PlannedTensor*> plan_of;
  for (const PlannedTensor& p : res.plan.tensors) plan_of[p.name] = &p;

  // Items in file order (sequential reads of each mapping), and their output sizes.
  std::vector<Item> items;
  uint64_t total_out = 0, total_in = 0;
  for (const SafetensorsFile& f : ckpt.files()) {
    for (const TensorView& t : f.tensors()) {
      const PlannedTensor* p = plan_of.at(t.name);
      Item it{&t, p, 0, -1};
      if (p->action == TensorAction::kCopy) it.out_bytes = t.n_bytes;
      if (p->action == TensorAction::kQuantize) it.out_bytes = nvfp4_bytes(t.shape[0], t.shape[1]);
      total_out += it.out_bytes;
      total_in += t.n_bytes;
      items.push_back(it);
    }
  }
  // n shards of about total / n bytes: an item goes to the shard its midpoint falls in, so the
  // boundaries fall between tensors and each shard is within a tensor of total / n. n starts at
  // ceil(total / max) and grows (by 1/64, at least 1: few passes even for a tiny maximum) until no
  // shard of two or more tensors exceeds the maximum.
  int64_t n_shards = 0;
  for (uint64_t n_target = std::max<uint64_t>(1, (total_out + o.max_shard_bytes - 1) / o.max_shard_bytes);;
       n_target += std::max<uint64_t>(1, n_target / 64)) {
    std::vector<int64_t> shard_of_target(n_target, -1);
    std::vector<uint64_t> shard_bytes, shard_items;
    n_shards = 0;
    uint64_t cum = 0;
    for (Item& it : items) {
      if (it.plan->action == TensorAction::kDrop) continue;
      const auto target = std::min<uint64_t>(n_target - 1, (2 * cum + it.out_bytes) * n_target / (2 * total_out));
      if (shard_of_target[target] < 0) {  // targets no midpoint falls in are skipped
        shard_of_target[target] = n_shards++;
        shard_bytes.push_back(0);
        shard_items.push_back(0);
      }
      it.shard = shard_of_target[target];
      shard_bytes[size_t(it.shard)] += it.out_bytes;
      shard_items[size_t(it.shard)] += 1;
      cum += it.out_bytes;
    }
    bool fits = true;
    for (int64_t s = 0; s < n_shards; ++s) fits &= shard_bytes[size_t(s)] <= o.max_shard_bytes || shard_items[size_t(s)] == 1;
    if (fits) break;
  }
  std::vector<std::string> shard_names;
  for (int64_t s = 0; s < n_shards; ++s)
    shard_names.push_back(n_shards == 1 ? std::string("model.safetensors")
                                        : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n_shards));
  std::vector<std::vector<TensorSpec>> specs(static_cast<size_t>(n_shards));
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  std::map<std::string, std::string> sorted_map;  // the index lists tensors by name
  for (const Item& it : items) {
    if (it.shard < 0) continue;
    std::vector<TensorSpec>& sp = specs[size_t(it.shard)];
    const std::string name(it.t->name);
    if (it.plan->action == TensorAction::kCopy) {
      sp.push_back({name, it.t->dtype, it.t->shape});
      sorted_map[name] = shard_names[size_t(it.shard)];
      continue;
    }
    const std::string m = name.substr(0, name.size() - kWeight.size());
    const int64_t rows = it.t->shape[0], cols = it.t->shape[1];
    for (TensorSpec s : {TensorSpec{m + ".weight", DType::kU8, {rows, cols / 2}},
                         TensorSpec{m + ".weight_scale", DType::kF8E4M3, {rows, cols / kNvfp4BlockSize}},
                         TensorSpec{m + ".weight_scale_2", DType::kF32, {}},
                         TensorSpec{m + ".input_scale", DType::kF32, {}}}) {
      sorted_map[s.name] = shard_names[size_t(it.shard)];
      sp.push_back(std::move(s));
    }
  }
  for (const auto& [name, file] : sorted_map) weight_map[name] = file;

  // DST: created now that the input is known to be good.
  fs::create_directories(o.dst, ec);
  if (ec) return io_error("cannot create DST '{}': {}", o.dst.string(), ec.message());
  if (o.force) {
    for (const fs::directory_entry& e : fs::directory_iterator(o.dst, ec)) {
      const std::string fname = e.path().filename().string();
      if (e.is_regular_file() && (fname.ends_with(".safetensors") || fname == "model.safetensors.index.json"))
        fs::remove(e.path(), ec);
    }
  }

  ThreadPool pool(o.threads);
  const bool gptq = !o.gptq_text.empty();
  std::unique_ptr<GptqCalibration> calib;
  if (gptq) {
    GptqCalibrationOptions co;
    co.text = o.gptq_text;
    co.max_hessian_bytes = o.gptq_max_hessian_bytes;
    PG_ASSIGN_OR_RETURN(calib, GptqCalibration::open(o.src, co, &pool));
    res.gptq_tokens = calib->tokens();
  }
  // Every shard is laid out up front and written in any order: the copies and rounded tensors in
  // file order, GPTQ's tensors pass by pass.
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};  // what transformers expects
  std::vector<std::optional<SafetensorsFileWriter>> writers(static_cast<size_t>(n_shards));
  for (int64_t s = 0; s < n_shards; ++s) {
    const fs::path path = o.dst / shard_names[size_t(s)];
    PG_ASSIGN_OR_RETURN(SafetensorsFileWriter w, SafetensorsFileWriter::create(path, specs[size_t(s)], metadata));
    writers[size_t(s)].emplace(std::move(w));
    res.shards.push_back(path);
  }
  // A shard is finished (renamed into place) once its last tensor is written, so a run that fails
  // leaves the shards before the failure complete and no partial one.
  std::vector<int64_t> left(static_cast<size_t>(n_shards), 0);
  for (const Item& it : items)
    if (it.shard >= 0) ++left[size_t(it.shard)];
  int64_t done = 0;
  uint64_t bytes_done = 0;
  auto item_done = [&](const Item& it) -> Status {
    if (it.shard >= 0 && --left[size_t(it.shard)] == 0) PG_TRY(writers[size_t(it.shard)]->finish());
    release_pages(it.t->bytes());
    bytes_done += it.t->n_bytes;
    if (callbacks.progress) callbacks.progress(++done, int64_t(items.size()), bytes_done, total_in);
    return ok_status();
  };
  std::vector<float> w32;  // [rows, cols] f32 copy of the weight being quantized
  Nvfp4Tensor q;
  GptqFactor factor;                     // the last Hessian's factor ...
  const GptqHessian* factor_of = nullptr;  // ... and that Hessian (reset with every calibration pass)
  // One quantized Linear: its source in f32, then GPTQ under `h` or rounding to nearest.
  auto quantize_item = [&](const Item& it, const GptqHessian* h) -> Status {
    const TensorView& t = *it.t;
    const TensorView* scale_inv = it.plan->scale_inv.empty() ? nullptr : ckpt.find(it.plan->scale_inv);
    PG_TRY(source_weight_to_f32(t, scale_inv, cfg.quantization_config, w32, pool));
    // Its only errors here are a bad checkpoint (a NaN or inf weight), not a bad command line.
    Status st;
    if (h) {
      if (factor_of != h) {  // gate_proj and up_proj share one Hessian, and come one after the other
        auto f = gptq_factor(*h, o.gptq_damp, &pool);
        if (!f.ok()) return data_loss("tensor '{}' in {}: {}", t.name, *t.file, f.status().message());
        factor = std::move(f).value();
        factor_of = h;
      }
      auto stats = quantize_nvfp4_gptq(w32.data(), t.shape[0], t.shape[1], factor, {o.gptq_damp, o.mse}, q, &pool);
      st = stats.status();
      if (stats.ok()) res.gptq_max_damp = std::max(res.gptq_max_damp, stats->damp_used);
    } else {
      st = quantize_nvfp4(w32.data(), t.shape[0], t.shape[1], kNvfp4AutoScale2, o.mse, q, &pool);
    }
    if (!st.ok()) return data_loss("tensor '{}' in {}: {}", t.name, *t.file, st.message());
    const std::string m(t.name.substr(0, t.name.size() - kWeight.size()));
    // Weight-only quantization: activations stay bf16, so there is no activation scale to
    // calibrate; ModelOpt's input_scale (amax / (448 * 6) of the inputs) is written as 1.0, which
    // weight-only readers (ours: bound, unused) ignore.
    const float input_scale = 1.0f;
    SafetensorsFileWriter& writer = *writers[size_t(it.shard)];
    PG_TRY(writer.write(m + ".weight", q.packed));
    PG_TRY(writer.write(m + ".weight_scale", q.scale_fp8));
    PG_TRY(writer.write(m + ".weight_scale_2", as_bytes(q.scale_2)));
    PG_TRY(writer.write(m + ".input_scale", as_bytes(input_scale)));
    if (scale_inv) release_pages(scale_inv->bytes());
    return ok_status();
  };
  std::vector<const Item*> deferred;  // GPTQ's, in file order
  for (const Item& it : items) {
    if (it.plan->action == TensorAction::kCopy) {
      PG_TRY(writers[size_t(it.shard)]->write(it.t->name, it.t->bytes()));
    } else if (it.plan->action == TensorAction::kQuantize) {
      if (gptq) {
        deferred.push_back(&it);
        continue;
      }
      PG_TRY(quantize_item(it, nullptr));
    }
    PG_TRY(item_done(it));
  }
  if (gptq) {
    std::vector<std::string> modules;
    std::map<std::string, const Item*, std::less<>> item_of;
    for (const Item* it : deferred) {
      modules.emplace_back(it->t->name.substr(0, it->t->name.size() - kWeight.size()));
      item_of[modules.back()] = it;
    }
    const std::vector<std::vector<std::string>> passes = calib->plan_passes(modules);
    res.gptq_passes = int64_t(passes.size());
    for (size_t p = 0; p < passes.size(); ++p) {
      if (callbacks.log)
        callbacks.log(fmt::format("gptq: calibration pass {}/{}: {} Linears, {} tokens in {} windows", p + 1,
                                  passes.size(), passes[p].size(), calib->tokens(), calib->windows()));
      // The model's forward passes over the text are the long part on a large model: a line at every
      // tenth of them.
      auto window_done = [&](int64_t i, int64_t n) {
        if (callbacks.log && n >= 10 && (i * 10 / n) != ((i - 1) * 10 / n))
          callbacks.log(fmt::format("gptq: calibration pass {}/{}: window {}/{}", p + 1, passes.size(), i, n));
      };
      factor_of = nullptr;  // the pass replaces the Hessians
      PG_TRY(calib->collect(passes[p], window_done).with_context("gptq calibration"));
      for (const std::string& m : passes[p]) {
        const Item& it = *item_of.at(m);
        PG_TRY(quantize_item(it, calib->hessian(m)));
        PG_TRY(item_done(it));
      }
    }
  }
  res.bytes_in = total_in;
  res.bytes_out = total_out;

  if (n_shards > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total_out}}}, {"weight_map", weight_map}};
    PG_TRY(write_json(o.dst / "model.safetensors.index.json", index, 2));
  }
  const nlohmann::ordered_json quant = {{"quant_algo", "NVFP4"},
                                        {"kv_cache_quant_algo", nullptr},
                                        {"group_size", kNvfp4BlockSize},
                                        {"exclude_modules", res.plan.exclude_modules}};
  const nlohmann::ordered_json producer = {{"name", "peregrine"}, {"version", PEREGRINE_VERSION}};
  PG_TRY(write_json(o.dst / "hf_quant_config.json", {{"producer", producer}, {"quantization", quant}}, 4));

  // Every other top-level file (tokenizer, generation_config.json, chat template, licence, ...).
  std::vector<fs::path> others;
  for (const fs::directory_entry& e : fs::directory_iterator(o.src, ec)) {
    const std::string fname = e.path().filename().string();
    if (!e.is_regular_file() || fname.ends_with(".safetensors") || fname == "model.safetensors.index.json" ||
        fname == "config.json" || fname == "hf_quant_config.json" || fname == "quality_report.json" ||
        fname.find(".tmp.") != std::string::npos)
      continue;
    others.push_back(e.path());
  }
  if (ec) return io_error("cannot list SRC '{}': {}", o.src.string(), ec.message());
  std::sort(others.begin(), others.end());
  for (const fs::path& p : others) {
    PG_ASSIGN_OR_RETURN(std::string bytes, read_file_to_string(p));
    const std::span<const uint8_t> part(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    PG_TRY(write_file_atomic(o.dst / p.filename(), std::span(&part, 1)));
    res.copied_files.push_back(p.filename().string());
  }

  // config.json last: until it exists the folder does not load as a model.
  PG_ASSIGN_OR_RETURN(std::string cfg_text, read_file_to_string(o.src / "config.json"));
  nlohmann::ordered_json cj;
  try {
    cj = nlohmann::ordered_json::parse(cfg_text);
  } catch (const nlohmann::json::exception& e) {
    return data_loss("'{}': {}", (o.src / "config.json").string(), e.what());
  }
  // DeepSeek FP8 weights that stay (excluded modules, the MTP layer) are read through the FP8
  // quantization_config, so it stays; hf_quant_config.json then describes the NVFP4 modules alone.
  res.config_keeps_fp8 = res.plan.n_fp8_kept > 0;
  if (!res.config_keeps_fp8) {
    nlohmann::ordered_json qc = {{"quant_method", "modelopt"}};
    for (const auto& [k, v] : quant.items()) qc[k] = v;
    qc["producer"] = producer;
    cj["quantization_config"] = qc;
  }
  PG_TRY(write_json(o.dst / "config.json", cj, 2));
  return res;
}

}  // namespace pg::cli
