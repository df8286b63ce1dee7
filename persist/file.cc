#include "persist/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ringkv::persist {
namespace {

absl::Status Failed(const char* step, const std::string& path, int error) {
  return absl::InternalError(absl::StrCat(step, " ", path, ": ", std::strerror(error)));
}

// Writes all of `data` to `fd`, through short writes and EINTR; 0 or the errno.
int WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& dir, const std::string& name,
                                 std::string_view data) {
  const std::string path = absl::StrCat(dir, "/", name);
  const std::string tmp = absl::StrCat(path, ".tmp");
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Failed("cannot create", tmp, errno);
  int error = WriteAll(fd, data);
  absl::Status status;
  if (error != 0) {
    status = Failed("cannot write", tmp, error);
  } else if (fsync(fd) != 0) {
    status = Failed("cannot fsync", tmp, errno);
  }
  if (close(fd) != 0 && status.ok()) status = Failed("cannot close", tmp, errno);
  if (status.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    status = Failed("cannot rename into place", tmp, errno);
  }
  if (!status.ok()) {
    unlink(tmp.c_str());
    return status;
  }
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return Failed("cannot open the directory", dir, errno);
  error = fsync(dir_fd) == 0 ? 0 : errno;
  close(dir_fd);
  if (error != 0) return Failed("cannot fsync the directory", dir, error);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no file ", path));
    return Failed("cannot open", path, errno);
  }
  std::string data;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      return Failed("cannot read", path, error);
    }
    if (n == 0) break;
    data.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return data;
}

}  // namespace ringkv::persist
