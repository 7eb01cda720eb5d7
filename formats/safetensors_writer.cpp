// Safetensors writer: ordered JSON header (__metadata__ first, then tensors in data order),
// space padding to 8 bytes, data back to back with no holes (what our reader requires).
#include "formats/safetensors_writer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "formats/file_io.h"
#include "formats/safetensors.h"

namespace pg {

Result<SafetensorsLayout> safetensors_layout(std::span<const TensorToWrite> tensors,
                                             const std::map<std::string, std::string>& metadata) {
  SafetensorsLayout out;
  std::set<std::string_view> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& t = tensors[i];
    if (t.name.empty()) return invalid_argument("safetensors writer: tensor #{} has an empty name", i);
    if (t.name == "__metadata__") return invalid_argument("safetensors writer: '__metadata__' is not a tensor name");
    if (!names.insert(t.name).second) return invalid_argument("safetensors writer: tensor '{}' given twice", t.name);
    PG_ASSIGN_OR_RETURN(uint64_t need, tensor_n_bytes(t.dtype, t.shape, fmt::format("tensor '{}'", t.name)));
    if (need != t.data.size())
      return invalid_argument("safetensors writer: tensor '{}' {} [{}] needs {} bytes, got {}", t.name,
                              dtype_safetensors_name(t.dtype), fmt::join(t.shape, ", "), need, t.data.size());
    out.order.push_back(i);
  }
  std::sort(out.order.begin(), out.order.end(), [&](size_t a, size_t b) {
    int ba = dtype_bits(tensors[a].dtype), bb = dtype_bits(tensors[b].dtype);
    return ba != bb ? ba > bb : tensors[a].name < tensors[b].name;
  });

  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    j["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (size_t i : out.order) {
    const TensorToWrite& t = tensors[i];
    j[t.name] = {{"dtype", std::string(dtype_safetensors_name(t.dtype))},
                 {"shape", t.shape},
                 {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text;
  try {
    text = j.dump();
  } catch (const nlohmann::json::exception& e) {  // names or metadata that are not valid UTF-8
    return invalid_argument("safetensors writer: cannot encode header: {}", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  out.header.resize(8);
  uint64_t n = text.size();
  for (int b = 0; b < 8; ++b) out.header[b] = static_cast<char>((n >> (8 * b)) & 0xff);
  out.header += text;
  return out;
}

Result<std::vector<uint8_t>> serialize_safetensors(std::span<const TensorToWrite> tensors,
                                                   const std::map<std::string, std::string>& metadata) {
  PG_ASSIGN_OR_RETURN(SafetensorsLayout layout, safetensors_layout(tensors, metadata));
  std::vector<uint8_t> out(layout.header.begin(), layout.header.end());
  for (size_t i : layout.order) out.insert(out.end(), tensors[i].data.begin(), tensors[i].data.end());
  return out;
}

Status write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                         const std::map<std::string, std::string>& metadata) {
  PG_ASSIGN_OR_RETURN(SafetensorsLayout layout, safetensors_layout(tensors, metadata));
  std::vector<std::span<const uint8_t>> parts;
  parts.reserve(1 + layout.order.size());
  parts.emplace_back(reinterpret_cast<const uint8_t*>(layout.header.data()), layout.header.size());
  for (size_t i : layout.order) parts.push_back(tensors[i].data);
  return write_file_atomic(path, parts).with_context("writing safetensors");
}

}  // namespace pg
