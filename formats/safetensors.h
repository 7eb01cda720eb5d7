// Memory-mapped safetensors reader (https://github.com/huggingface/safetensors, format spec in its
// README) and Checkpoint, the set of shards of one Hugging Face model directory.
// Every malformed input is a Status naming the file and, where there is one, the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace pg {

// Largest header we accept. Real checkpoints have headers of a few hundred KB (a DeepSeek-V3
// shard lists ~1000 tensors at ~150 bytes each); the reference implementation caps it at 100 MB.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// One tensor inside a mapped file. `data` points into the read-only mapping and is aligned only
// as well as the file lays it out (our writer and the reference writer align each tensor to its
// element size; other writers may not): use memcpy or check alignment before typed loads.
struct TensorView {
  std::string_view name;        // owned by the SafetensorsFile; stable across moves
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;   // elements; [] is a scalar
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;           // == numel * dtype_bits / 8 exactly (packed types fill whole bytes)
  const std::string* file = nullptr;  // path of the file holding it

  int64_t numel() const;  // fits int64: the byte size was checked against the file at open
  std::span<const uint8_t> bytes() const { return {data, n_bytes}; }
};

// A parsed header entry: offsets are bytes relative to the first byte after the header.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // inclusive
  uint64_t end = 0;    // exclusive
};

struct SafetensorsHeader {
  std::map<std::string, std::string> metadata;  // "__metadata__", may be empty
  std::vector<SafetensorsEntry> entries;         // sorted by begin (file order)
  uint64_t data_offset = 0;                      // 8 + header length: where tensor data starts
};

// Parses and validates the header of a whole safetensors file held in `file_bytes` (the 8-byte
// length, the JSON, and the data section, whose size bounds the offsets). `file_name` is used in
// messages only. Checks: sizes, JSON shape and types, known dtypes, shape x dtype == byte range
// (overflow-safe), offsets inside the data section, no overlaps. Like the reference
// implementation we also require the tensors to cover the data section exactly (no holes, no
// trailing bytes): a file the reference reader rejects is one we reject.
Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> file_bytes,
                                                   std::string_view file_name);

// Byte size of a tensor of `shape` x `dtype`; error (naming `what`) on negative dims, overflow or a
// packed dtype whose element count does not fill whole bytes.
Result<uint64_t> tensor_n_bytes(DType dtype, std::span<const int64_t> shape, std::string_view what);

// "BF16, F16, F32, ..." — for messages.
std::string supported_safetensors_dtypes();

// One open .safetensors file, mapped read-only (MAP_PRIVATE). Move-only; unmaps on destruction.
// TensorView pointers and names stay valid across moves of the SafetensorsFile.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const;
  const TensorView* find(std::string_view name) const;  // nullptr when absent
  const std::vector<TensorView>& tensors() const;       // in file (data offset) order
  const std::map<std::string, std::string>& metadata() const;
  size_t file_bytes() const;

 private:
  struct State;
  explicit SafetensorsFile(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

// All tensors of a model directory:
//  - model.safetensors.index.json ({"weight_map": {tensor: shard}}) when present: every shard it
//    names must exist, every tensor it lists must be in its shard;
//  - else model.safetensors;
//  - else every *.safetensors in the directory.
// A tensor stored in two files is an error in every case; tensors a shard holds beyond those the
// index lists are served too (the files are the truth). `path` may also be one .safetensors file.
class Checkpoint {
 public:
  static Result<Checkpoint> open(const std::filesystem::path& path);

  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  ~Checkpoint();

  const TensorView* find(std::string_view name) const;  // nullptr when absent
  // Error "tensor 'x' not found in <dir>" when absent.
  Result<const TensorView*> get(std::string_view name) const;
  std::vector<const TensorView*> all() const;  // sorted by name
  size_t n_tensors() const;
  const std::vector<SafetensorsFile>& files() const;
  const std::filesystem::path& dir() const;

 private:
  struct State;
  explicit Checkpoint(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace pg
