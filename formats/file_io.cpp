// POSIX implementations of the file helpers in file_io.h.
#include "formats/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pg {

namespace {

Status errno_status(int err, std::string_view what, const std::string& path) {
  if (err == ENOENT) return not_found("'{}': {}: no such file or directory", path, what);
  return io_error("'{}': {}: {}", path, what, std::strerror(err));
}

// RAII file descriptor.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<std::string> read_file_to_string(const std::filesystem::path& path) {
  const std::string p = path.string();
  Fd f;
  f.fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return errno_status(errno, "cannot open", p);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return errno_status(errno, "cannot stat", p);
  if (!S_ISREG(st.st_mode)) return invalid_argument("'{}': not a regular file", p);
  std::string out;
  out.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t r = ::read(f.fd, out.data() + done, out.size() - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, "read failed", p);
    }
    if (r == 0) break;  // the file shrank while we read it
    done += static_cast<size_t>(r);
  }
  out.resize(done);
  return out;
}

Status write_file_atomic(const std::filesystem::path& path, std::span<const std::span<const uint8_t>> parts) {
  const std::string p = path.string();
  const std::string tmp = p + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(errno, "cannot create temporary file", tmp);
  auto fail = [&](int err, std::string_view what) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return errno_status(err, what, tmp);
  };
  for (std::span<const uint8_t> part : parts) {
    size_t done = 0;
    while (done < part.size()) {
      ssize_t w = ::write(fd, part.data() + done, part.size() - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        return fail(errno, "write failed");
      }
      done += static_cast<size_t>(w);
    }
  }
  if (::fsync(fd) != 0) return fail(errno, "fsync failed");
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return errno_status(err, "close failed", tmp);
  }
  if (::rename(tmp.c_str(), p.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return errno_status(err, "rename into place failed", p);
  }
  // Make the rename durable: fsync the directory (best effort; some filesystems refuse).
  std::filesystem::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return ok_status();
}

}  // namespace pg
