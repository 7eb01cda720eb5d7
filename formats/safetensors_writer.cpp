// Safetensors writer: ordered JSON header (__metadata__ first, then tensors in data order),
// space padding to 8 bytes, data back to back with no holes (what our reader requires).
#include "formats/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "formats/file_io.h"
#include "formats/safetensors.h"

namespace pg {

Result<SafetensorsLayout> safetensors_layout(std::span<const TensorSpec> tensors,
                                             const std::map<std::string, std::string>& metadata) {
  SafetensorsLayout out;
  out.offsets.resize(tensors.size());
  out.n_bytes.resize(tensors.size());
  std::set<std::string_view> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    if (t.name.empty()) return invalid_argument("safetensors writer: tensor #{} has an empty name", i);
    if (t.name == "__metadata__") return invalid_argument("safetensors writer: '__metadata__' is not a tensor name");
    if (!names.insert(t.name).second) return invalid_argument("safetensors writer: tensor '{}' given twice", t.name);
    PG_ASSIGN_OR_RETURN(out.n_bytes[i], tensor_n_bytes(t.dtype, t.shape, fmt::format("tensor '{}'", t.name)));
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
    const TensorSpec& t = tensors[i];
    out.offsets[i] = offset;
    j[t.name] = {{"dtype", std::string(dtype_safetensors_name(t.dtype))},
                 {"shape", t.shape},
                 {"data_offsets", {offset, offset + out.n_bytes[i]}}};
    offset += out.n_bytes[i];
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

Result<SafetensorsLayout> safetensors_layout(std::span<const TensorToWrite> tensors,
                                             const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  PG_ASSIGN_OR_RETURN(SafetensorsLayout out, safetensors_layout(specs, metadata));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& t = tensors[i];
    if (out.n_bytes[i] != t.data.size())
      return invalid_argument("safetensors writer: tensor '{}' {} [{}] needs {} bytes, got {}", t.name,
                              dtype_safetensors_name(t.dtype), fmt::join(t.shape, ", "), out.n_bytes[i],
                              t.data.size());
  }
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

namespace {

Status errno_error(int err, std::string_view what, const std::filesystem::path& p) {
  return io_error("'{}': {}: {}", p.string(), what, std::strerror(err));
}

// pwrite of all of `data` at `offset`, retrying short writes and EINTR.
Status pwrite_all(int fd, std::span<const uint8_t> data, uint64_t offset, const std::filesystem::path& p) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = ::pwrite(fd, data.data() + done, data.size() - done, off_t(offset + done));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno_error(errno, "write failed", p);
    }
    done += size_t(w);
  }
  return ok_status();
}

}  // namespace

Result<SafetensorsFileWriter> SafetensorsFileWriter::create(const std::filesystem::path& path,
                                                            std::span<const TensorSpec> tensors,
                                                            const std::map<std::string, std::string>& metadata) {
  PG_ASSIGN_OR_RETURN(SafetensorsLayout layout, safetensors_layout(tensors, metadata));
  SafetensorsFileWriter w;
  w.path_ = path;
  w.tmp_ = path.string() + ".tmp." + std::to_string(::getpid());
  w.data_start_ = layout.header.size();
  uint64_t total = w.data_start_;
  for (size_t i = 0; i < tensors.size(); ++i) {
    w.slots_[tensors[i].name] = Slot{layout.offsets[i], layout.n_bytes[i], false};
    total += layout.n_bytes[i];
  }
  w.fd_ = ::open(w.tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd_ < 0) return errno_error(errno, "cannot create temporary file", w.tmp_);
  // The full size up front: a tensor written out of order leaves no hole the reader could see.
  if (::ftruncate(w.fd_, off_t(total)) != 0) return errno_error(errno, "cannot size the file", w.tmp_);
  PG_TRY(pwrite_all(w.fd_, std::span(reinterpret_cast<const uint8_t*>(layout.header.data()), layout.header.size()),
                    0, w.tmp_));
  return w;
}

SafetensorsFileWriter::SafetensorsFileWriter(SafetensorsFileWriter&& o) noexcept { *this = std::move(o); }

SafetensorsFileWriter& SafetensorsFileWriter::operator=(SafetensorsFileWriter&& o) noexcept {
  if (this != &o) {
    abandon();
    path_ = std::move(o.path_);
    tmp_ = std::move(o.tmp_);
    fd_ = std::exchange(o.fd_, -1);
    data_start_ = o.data_start_;
    slots_ = std::move(o.slots_);
  }
  return *this;
}

SafetensorsFileWriter::~SafetensorsFileWriter() { abandon(); }

void SafetensorsFileWriter::abandon() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
  fd_ = -1;
}

Status SafetensorsFileWriter::write(std::string_view name, std::span<const uint8_t> data) {
  if (fd_ < 0) return failed_precondition("safetensors writer: '{}' is finished or failed", path_.string());
  auto it = slots_.find(name);
  if (it == slots_.end())
    return invalid_argument("safetensors writer: tensor '{}' is not in the layout of '{}'", name, path_.string());
  Slot& s = it->second;
  if (s.written) return invalid_argument("safetensors writer: tensor '{}' written twice", name);
  if (data.size() != s.n_bytes)
    return invalid_argument("safetensors writer: tensor '{}' needs {} bytes, got {}", name, s.n_bytes, data.size());
  PG_TRY(pwrite_all(fd_, data, data_start_ + s.offset, tmp_));
  s.written = true;
  return ok_status();
}

Status SafetensorsFileWriter::finish() {
  if (fd_ < 0) return failed_precondition("safetensors writer: '{}' is finished or failed", path_.string());
  for (const auto& [name, s] : slots_)
    if (!s.written) return failed_precondition("safetensors writer: tensor '{}' of '{}' was never written", name,
                                               path_.string());
  if (::fsync(fd_) != 0) return errno_error(errno, "fsync failed", tmp_);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    return errno_error(err, "close failed", tmp_);
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    return errno_error(err, "rename into place failed", path_);
  }
  return ok_status();
}

}  // namespace pg
