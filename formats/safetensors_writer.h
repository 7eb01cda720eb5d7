// Writes safetensors files (layout as in the safetensors README): used by tests to build files and
// by `peregrine quantize`. Header padded with spaces to a multiple of 8 bytes; files written atomically.
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

// The 8-byte length plus the padded JSON header for `tensors`, and the order in which their
// data must follow it. Tensors are laid out by element size descending, then name (as the
// reference writer does), so with the 8-aligned data start each tensor is aligned to its
// element size. Errors: duplicate or empty names, "__metadata__" as a name, data size mismatch.
struct SafetensorsLayout {
  std::string header;         // u64 LE length + JSON + spaces
  std::vector<size_t> order;  // indices into `tensors`, in data order
};
Result<SafetensorsLayout> safetensors_layout(std::span<const TensorToWrite> tensors,
                                             const std::map<std::string, std::string>& metadata = {});

// The whole file in memory (tests, fuzz seeds).
Result<std::vector<uint8_t>> serialize_safetensors(std::span<const TensorToWrite> tensors,
                                                   const std::map<std::string, std::string>& metadata = {});

// Streams header then data to `path` via a temporary file + rename.
Status write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace pg
