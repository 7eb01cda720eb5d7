// Writes safetensors files (layout as in the safetensors README): used by tests to build files and
// by `peregrine quantize` (SafetensorsFileWriter: tensors arrive one at a time, in any order).
// Header padded with spaces to a multiple of 8 bytes; files written atomically.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace pg {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;  // exactly tensor_n_bytes(dtype, shape) bytes; not owned
};

// A tensor whose bytes come later (SafetensorsFileWriter).
struct TensorSpec {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
};

// The 8-byte length plus the padded JSON header for `tensors`, and the order in which their
// data must follow it. Tensors are laid out by element size descending, then name (as the
// reference writer does), so with the 8-aligned data start each tensor is aligned to its
// element size. Errors: duplicate or empty names, "__metadata__" as a name, data size mismatch.
struct SafetensorsLayout {
  std::string header;             // u64 LE length + JSON + spaces
  std::vector<size_t> order;      // indices into `tensors`, in data order
  std::vector<uint64_t> offsets;  // offsets[i]: bytes from the end of the header to tensors[i]
  std::vector<uint64_t> n_bytes;  // n_bytes[i]: size of tensors[i]
};
Result<SafetensorsLayout> safetensors_layout(std::span<const TensorToWrite> tensors,
                                             const std::map<std::string, std::string>& metadata = {});
Result<SafetensorsLayout> safetensors_layout(std::span<const TensorSpec> tensors,
                                             const std::map<std::string, std::string>& metadata = {});

// The whole file in memory (tests, fuzz seeds).
Result<std::vector<uint8_t>> serialize_safetensors(std::span<const TensorToWrite> tensors,
                                                   const std::map<std::string, std::string>& metadata = {});

// Streams header then data to `path` via a temporary file + rename.
Status write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                         const std::map<std::string, std::string>& metadata = {});

// One safetensors file whose tensor list is known before its data, so that a producer holds one
// tensor at a time: create() lays out the header and writes it to a temporary file next to
// `path` (`path` + ".tmp." + pid); write() puts one tensor's bytes at its offset, in any order;
// finish() checks that every tensor was written, fsyncs and renames the file to `path`. A writer
// destroyed before finish() succeeded removes its temporary file: `path` is the complete file or
// untouched, never a partial one.
class SafetensorsFileWriter {
 public:
  static Result<SafetensorsFileWriter> create(const std::filesystem::path& path, std::span<const TensorSpec> tensors,
                                              const std::map<std::string, std::string>& metadata = {});
  SafetensorsFileWriter(SafetensorsFileWriter&& o) noexcept;
  SafetensorsFileWriter& operator=(SafetensorsFileWriter&& o) noexcept;
  SafetensorsFileWriter(const SafetensorsFileWriter&) = delete;
  SafetensorsFileWriter& operator=(const SafetensorsFileWriter&) = delete;
  ~SafetensorsFileWriter();

  // Errors: unknown name, written twice, data.size() not the tensor's byte size, I/O.
  Status write(std::string_view name, std::span<const uint8_t> data);
  // Errors: a tensor not written (named), I/O.
  Status finish();
  const std::filesystem::path& path() const { return path_; }

 private:
  SafetensorsFileWriter() = default;
  void abandon();  // closes and removes the temporary file

  std::filesystem::path path_, tmp_;
  int fd_ = -1;
  uint64_t data_start_ = 0;  // header bytes before the data section
  struct Slot {
    uint64_t offset = 0, n_bytes = 0;
    bool written = false;
  };
  std::map<std::string, Slot, std::less<>> slots_;
};

}  // namespace pg
