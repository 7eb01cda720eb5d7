// Safetensors header validation, the mmap-backed SafetensorsFile and the multi-shard Checkpoint.
// Layout (safetensors README): u64 little-endian N | N bytes of JSON header | data section.
#include "formats/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "core/check.h"
#include "formats/file_io.h"

namespace pg {

using nlohmann::json;

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // cannot overflow: checked when the file was opened
  return n;
}

std::string supported_safetensors_dtypes() {
  static constexpr DType kAll[] = {DType::kF64,    DType::kF32,    DType::kF16, DType::kBF16,
                                   DType::kF8E4M3, DType::kF8E5M2, DType::kE2M1, DType::kI64,
                                   DType::kI32,    DType::kI16,    DType::kI8,  DType::kU8,
                                   DType::kBool};
  std::string out;
  for (DType t : kAll) {
    if (!out.empty()) out += ", ";
    out += dtype_safetensors_name(t);
  }
  return out;
}

Result<uint64_t> tensor_n_bytes(DType dtype, std::span<const int64_t> shape, std::string_view what) {
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return data_loss("{}: negative dimension {} in shape", what, d);
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel))
      return data_loss("{}: shape has more elements than fit in 64 bits", what);
  }
  uint64_t bits = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_bits(dtype)), &bits))
    return data_loss("{}: byte size of the shape overflows 64 bits", what);
  if (bits % 8 != 0)
    return data_loss("{}: {} elements of {} ({} bits each) do not fill whole bytes", what, numel,
                     dtype_safetensors_name(dtype), dtype_bits(dtype));
  return bits / 8;
}

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// A JSON value as a non-negative integer that fits `max`, or nullopt.
std::optional<uint64_t> as_uint(const json& v, uint64_t max) {
  if (!v.is_number_integer()) return std::nullopt;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    return u <= max ? std::optional<uint64_t>(u) : std::nullopt;
  }
  int64_t i = v.get<int64_t>();
  if (i < 0 || static_cast<uint64_t>(i) > max) return std::nullopt;
  return static_cast<uint64_t>(i);
}

std::string_view json_type(const json& v) {
  if (v.is_number_float()) return "a non-integer number";
  if (v.is_number_integer()) return "an integer";
  return v.type_name();  // "object", "array", "string", "boolean", "null"
}

Result<SafetensorsEntry> parse_entry(const std::string& name, const json& v, std::string_view file) {
  auto err = [&](std::string msg) { return data_loss("'{}': tensor '{}': {}", file, name, msg); };
  if (!v.is_object()) return err(fmt::format("header entry must be an object, got {}", json_type(v)));
  SafetensorsEntry e;
  e.name = name;

  auto dt = v.find("dtype");
  if (dt == v.end()) return err("missing \"dtype\"");
  if (!dt->is_string()) return err(fmt::format("\"dtype\" must be a string, got {}", json_type(*dt)));
  const std::string& dts = dt->get_ref<const std::string&>();
  std::optional<DType> dtype = dtype_from_safetensors(dts);
  if (!dtype)
    return unsupported("'{}': tensor '{}': unsupported dtype \"{}\" (supported: {})", file, name, dts,
                       supported_safetensors_dtypes());
  e.dtype = *dtype;

  auto sh = v.find("shape");
  if (sh == v.end()) return err("missing \"shape\"");
  if (!sh->is_array()) return err(fmt::format("\"shape\" must be an array, got {}", json_type(*sh)));
  for (const json& d : *sh) {
    std::optional<uint64_t> u = as_uint(d, static_cast<uint64_t>(INT64_MAX));
    if (!u)
      return err(fmt::format("\"shape\" dimensions must be non-negative integers, got {}", d.dump()));
    e.shape.push_back(static_cast<int64_t>(*u));
  }

  auto off = v.find("data_offsets");
  if (off == v.end()) return err("missing \"data_offsets\"");
  if (!off->is_array() || off->size() != 2)
    return err(fmt::format("\"data_offsets\" must be an array [begin, end], got {}", off->dump()));
  std::optional<uint64_t> b = as_uint((*off)[0], UINT64_MAX), en = as_uint((*off)[1], UINT64_MAX);
  if (!b || !en)
    return err(fmt::format("\"data_offsets\" must be non-negative integers, got {}", off->dump()));
  e.begin = *b;
  e.end = *en;
  return e;
}

}  // namespace

Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> bytes, std::string_view file) {
  if (bytes.size() < 8)
    return data_loss("'{}': file is {} bytes, too short for a safetensors file (8-byte header length first)",
                     file, bytes.size());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];  // little-endian
  if (n > kSafetensorsMaxHeaderBytes)
    return data_loss("'{}': header length {} exceeds the {}-byte limit (not a safetensors file?)", file, n,
                     kSafetensorsMaxHeaderBytes);
  if (n > bytes.size() - 8)
    return data_loss("'{}': header length {} runs past the end of the file ({} bytes; truncated?)", file, n,
                     bytes.size());
  const uint64_t data_bytes = bytes.size() - 8 - n;
  const char* text = reinterpret_cast<const char*>(bytes.data() + 8);
  if (n == 0 || text[0] != '{')
    return data_loss("'{}': header must be a JSON object starting with '{{'", file);

  // Duplicate top-level keys would silently shadow each other in the parsed object: catch them
  // during parsing (depth 1 = keys of the top-level object).
  std::string duplicate;
  std::set<std::string> seen;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && duplicate.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second) duplicate = k;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, text + n, cb);
  } catch (const json::exception& e) {
    return data_loss("'{}': header is not valid JSON: {}", file, e.what());
  }
  if (!j.is_object()) return data_loss("'{}': header must be a JSON object, got {}", file, json_type(j));
  if (!duplicate.empty()) return data_loss("'{}': tensor '{}': listed twice in the header", file, duplicate);

  SafetensorsHeader h;
  h.data_offset = 8 + n;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object())
        return data_loss("'{}': \"__metadata__\" must be an object of strings, got {}", file, json_type(*it));
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          return data_loss("'{}': \"__metadata__\" value of \"{}\" must be a string, got {}", file, m.key(),
                           json_type(*m));
        h.metadata.emplace(m.key(), m->get<std::string>());
      }
      continue;
    }
    PG_ASSIGN_OR_RETURN(SafetensorsEntry e, parse_entry(it.key(), *it, file));
    const std::string what = fmt::format("'{}': tensor '{}'", file, e.name);
    if (e.begin > e.end)
      return data_loss("{}: data_offsets [{}, {}] has begin > end", what, e.begin, e.end);
    if (e.end > data_bytes)
      return data_loss("{}: data_offsets [{}, {}] end past the data section ({} bytes; truncated file?)", what,
                       e.begin, e.end, data_bytes);
    PG_ASSIGN_OR_RETURN(uint64_t need, tensor_n_bytes(e.dtype, e.shape, what));
    if (e.end - e.begin != need)
      return data_loss("{}: {} {} needs {} bytes but data_offsets [{}, {}] hold {}", what,
                       dtype_safetensors_name(e.dtype), shape_str(e.shape), need, e.begin, e.end,
                       e.end - e.begin);
    h.entries.push_back(std::move(e));
  }

  // File order; then every byte of the data section belongs to exactly one tensor. Empty
  // tensors occupy no bytes and may sit anywhere inside the data section.
  std::sort(h.entries.begin(), h.entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  uint64_t covered = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : h.entries) {
    if (e.begin == e.end) continue;
    if (e.begin < covered)
      return data_loss("'{}': tensor '{}': data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", file, e.name,
                       e.begin, e.end, prev->name, prev->begin, prev->end);
    if (e.begin > covered)
      return data_loss("'{}': tensor '{}': hole of {} bytes before it (data_offsets [{}, {}], previous tensor "
                       "ends at {}); the format requires tensors to cover the data section",
                       file, e.name, e.begin - covered, e.begin, e.end, covered);
    covered = e.end;
    prev = &e;
  }
  if (covered != data_bytes)
    return data_loss("'{}': {} trailing bytes after the last tensor{} (data section is {} bytes); the format "
                     "requires tensors to cover the data section",
                     file, data_bytes - covered, prev ? fmt::format(" '{}'", prev->name) : std::string(),
                     data_bytes);
  return h;
}

// ---- SafetensorsFile -----------------------------------------------------------------------

struct SafetensorsFile::State {
  std::string path;
  void* map = nullptr;
  size_t size = 0;
  SafetensorsHeader header;         // entries never resized after open: views point into them
  std::vector<TensorView> tensors;  // parallel to header.entries
  std::unordered_map<std::string_view, size_t> by_name;

  ~State() {
    if (map != nullptr) ::munmap(map, size);
  }
};

SafetensorsFile::SafetensorsFile(std::unique_ptr<State> s) : s_(std::move(s)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

const std::string& SafetensorsFile::path() const { return s_->path; }
const std::vector<TensorView>& SafetensorsFile::tensors() const { return s_->tensors; }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return s_->header.metadata; }
size_t SafetensorsFile::file_bytes() const { return s_->size; }

const TensorView* SafetensorsFile::find(std::string_view name) const {
  auto it = s_->by_name.find(name);
  return it == s_->by_name.end() ? nullptr : &s_->tensors[it->second];
}

Result<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  auto s = std::make_unique<State>();
  s->path = path.string();
  int fd = ::open(s->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return not_found("'{}': no such file", s->path);
    return io_error("'{}': cannot open: {}", s->path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return io_error("'{}': cannot stat: {}", s->path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("'{}': not a regular file", s->path);
  }
  s->size = static_cast<size_t>(st.st_size);
  if (s->size > 0) {
    void* m = ::mmap(nullptr, s->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);  // the mapping keeps the file alive
    if (m == MAP_FAILED) return io_error("'{}': mmap of {} bytes failed: {}", s->path, s->size, std::strerror(err));
    s->map = m;
  } else {
    ::close(fd);
  }
  const auto* base = static_cast<const uint8_t*>(s->map);
  PG_ASSIGN_OR_RETURN(s->header, parse_safetensors_header({base, s->size}, s->path));

  s->tensors.reserve(s->header.entries.size());
  for (const SafetensorsEntry& e : s->header.entries) {
    TensorView v;
    v.name = e.name;
    v.dtype = e.dtype;
    v.shape = e.shape;
    v.data = base + s->header.data_offset + e.begin;
    v.n_bytes = static_cast<size_t>(e.end - e.begin);
    v.file = &s->path;
    s->by_name.emplace(v.name, s->tensors.size());
    s->tensors.push_back(std::move(v));
  }
  return SafetensorsFile(std::move(s));
}

// ---- Checkpoint ----------------------------------------------------------------------------

struct Checkpoint::State {
  std::filesystem::path dir;
  std::vector<SafetensorsFile> files;
  std::unordered_map<std::string_view, const TensorView*> by_name;
};

Checkpoint::Checkpoint(std::unique_ptr<State> s) : s_(std::move(s)) {}
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

const TensorView* Checkpoint::find(std::string_view name) const {
  auto it = s_->by_name.find(name);
  return it == s_->by_name.end() ? nullptr : it->second;
}

Result<const TensorView*> Checkpoint::get(std::string_view name) const {
  if (const TensorView* t = find(name)) return t;
  return not_found("tensor '{}' not found in {}", name, s_->dir.string());
}

std::vector<const TensorView*> Checkpoint::all() const {
  std::vector<const TensorView*> out;
  out.reserve(s_->by_name.size());
  for (const auto& [name, t] : s_->by_name) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const TensorView* a, const TensorView* b) { return a->name < b->name; });
  return out;
}

size_t Checkpoint::n_tensors() const { return s_->by_name.size(); }
const std::vector<SafetensorsFile>& Checkpoint::files() const { return s_->files; }
const std::filesystem::path& Checkpoint::dir() const { return s_->dir; }

namespace {

constexpr std::string_view kIndexName = "model.safetensors.index.json";

// weight_map of an index file: tensor name -> shard file name (relative to the directory).
Result<std::map<std::string, std::string>> read_weight_map(const std::filesystem::path& index_path) {
  const std::string ip = index_path.string();
  PG_ASSIGN_OR_RETURN(std::string text, read_file_to_string(index_path));
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return data_loss("'{}': not valid JSON: {}", ip, e.what());
  }
  if (!j.is_object()) return data_loss("'{}': must be a JSON object", ip);
  auto wm = j.find("weight_map");
  if (wm == j.end()) return data_loss("'{}': missing \"weight_map\"", ip);
  if (!wm->is_object()) return data_loss("'{}': \"weight_map\" must be an object", ip);
  std::map<std::string, std::string> out;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string())
      return data_loss("'{}': weight_map entry of tensor '{}' must be a file name string, got {}", ip, it.key(),
                       json_type(*it));
    const std::string& shard = it->get_ref<const std::string&>();
    std::filesystem::path sp(shard);
    bool escapes = shard.empty() || sp.is_absolute();
    for (const auto& part : sp)
      if (part == "..") escapes = true;
    if (escapes)
      return data_loss("'{}': tensor '{}' maps to '{}', which is not a file inside the model directory", ip,
                       it.key(), shard);
    out.emplace(it.key(), sp.lexically_normal().string());
  }
  return out;
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  auto s = std::make_unique<State>();
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return not_found("model path '{}' does not exist", path.string());

  std::map<std::string, std::string> weight_map;
  fs::path index_path;
  std::vector<fs::path> file_paths;
  std::unordered_map<std::string, size_t> file_idx_by_shard;  // index shard name -> files[]
  if (fs::is_regular_file(st)) {
    s->dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
    file_paths.push_back(path);
  } else if (fs::is_directory(st)) {
    s->dir = path;
    index_path = path / kIndexName;
    if (fs::exists(index_path, ec)) {
      PG_ASSIGN_OR_RETURN(weight_map, read_weight_map(index_path));
      std::map<std::string, std::string> shard_example;  // shard -> first tensor mapped to it
      for (const auto& [tensor, shard] : weight_map) shard_example.emplace(shard, tensor);
      for (const auto& [shard, tensor] : shard_example) {
        fs::path p = path / shard;
        if (!fs::exists(p, ec))
          return not_found("'{}': shard '{}' (holding tensor '{}' and others) does not exist in {}",
                           index_path.string(), shard, tensor, path.string());
        file_idx_by_shard.emplace(shard, file_paths.size());
        file_paths.push_back(p);
      }
    } else if (fs::exists(path / "model.safetensors", ec)) {
      file_paths.push_back(path / "model.safetensors");
    } else {
      for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
        if (it->path().extension() == ".safetensors") file_paths.push_back(it->path());
      if (ec) return io_error("cannot list '{}': {}", path.string(), ec.message());
      std::sort(file_paths.begin(), file_paths.end());
    }
    if (file_paths.empty())
      return not_found("no model.safetensors, {} or *.safetensors file in '{}'", kIndexName, path.string());
  } else {
    return invalid_argument("model path '{}' is neither a directory nor a file", path.string());
  }

  s->files.reserve(file_paths.size());
  for (const fs::path& p : file_paths) {
    PG_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(p));
    s->files.push_back(std::move(f));
  }

  for (const SafetensorsFile& f : s->files) {
    for (const TensorView& t : f.tensors()) {
      auto [it, inserted] = s->by_name.emplace(t.name, &t);
      if (!inserted)
        return data_loss("tensor '{}' is stored twice: in '{}' and in '{}'", t.name, *it->second->file, f.path());
    }
  }
  for (const auto& [tensor, shard] : weight_map) {
    auto idx = file_idx_by_shard.find(shard);
    PG_CHECK(idx != file_idx_by_shard.end(), "shard '{}' of the index was not opened", shard);
    const SafetensorsFile& f = s->files[idx->second];
    if (f.find(tensor) == nullptr)
      return data_loss("'{}' maps tensor '{}' to '{}', but that file has no such tensor", index_path.string(),
                       tensor, f.path());
  }
  return Checkpoint(std::move(s));
}

}  // namespace pg
