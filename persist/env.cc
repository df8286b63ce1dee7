#include "persist/env.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string_view>

namespace ringkv::persist {
namespace {

int WriteAllAt(int fd, uint64_t offset, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return 0;
}

}  // namespace

int Env::OpenLog(const std::string& path, int* fd) {
  *fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  return *fd < 0 ? errno : 0;
}

int Env::Write(int fd, uint64_t offset, std::string_view data) {
  return WriteAllAt(fd, offset, data);
}

int Env::Zero(int fd, uint64_t offset, uint64_t bytes) {
  static constexpr size_t kZeroBytes = size_t{64} << 10;
  static const char kZeros[kZeroBytes] = {};
  for (uint64_t done = 0; done < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes - done, kZeroBytes));
    if (int error = WriteAllAt(fd, offset + done, std::string_view(kZeros, n)); error != 0) {
      return error;
    }
    done += n;
  }
  // Written back now, so that the next fdatasync of the log's records does not wait for them.
  // A file system without it (EINVAL, ESPIPE) leaves that to the fdatasync.
  if (sync_file_range(
          fd, static_cast<off_t>(offset), static_cast<off_t>(bytes),
          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) != 0 &&
      errno != EINVAL && errno != ESPIPE) {
    return errno;
  }
  return 0;
}

int Env::SyncData(int fd) { return fdatasync(fd) == 0 ? 0 : errno; }

int Env::Truncate(int fd, uint64_t size) {
  return ftruncate(fd, static_cast<off_t>(size)) == 0 ? 0 : errno;
}

void Env::CloseLog(int fd) { close(fd); }

void Env::AtSnapshotStep(std::string_view) {}

Env* DefaultEnv() {
  static Env* env = new Env();
  return env;
}

}  // namespace ringkv::persist
