#include "persist/env.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "persist/file.h"

namespace ringkv::persist {

int Env::OpenLog(const std::string& path, int* fd) {
  *fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  return *fd < 0 ? errno : 0;
}

int Env::Append(int fd, std::string_view data) { return WriteAll(fd, data); }

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
