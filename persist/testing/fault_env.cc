#include "persist/testing/fault_env.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "persist/file.h"

namespace ringkv::persist {

int FaultEnv::OpenLog(const std::string& path, int* fd) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int error = Env::OpenLog(path, fd); error != 0) return error;
  open_[*fd] = File{.path = path};
  closed_.erase(path);
  return 0;
}

int FaultEnv::Write(int fd, uint64_t offset, std::string_view data) {
  // The write itself under the lock: a power loss never races a write that extends the file.
  std::lock_guard<std::mutex> lock(mu_);
  File& file = open_[fd];
  int error = 0;
  const uint64_t limit = fail_log_after_bytes_;
  if (limit != 0 && offset + data.size() > limit) {
    data = data.substr(0, limit > offset ? limit - offset : 0);
    error = ENOSPC;
  }
  if (int written = Env::Write(fd, offset, data); written != 0) return written;
  file.written = std::max(file.written, offset + data.size());
  return error;
}

int FaultEnv::Zero(int fd, uint64_t offset, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t limit = fail_log_after_bytes_;
  if (limit != 0 && offset + bytes > limit) return ENOSPC;  // Nothing written.
  if (int error = Env::Zero(fd, offset, bytes); error != 0) return error;
  File& file = open_[fd];
  file.zeroed = std::max(file.zeroed, offset + bytes);
  return 0;
}

int FaultEnv::SyncData(int fd) {
  uint64_t covered;
  uint64_t zeroed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    covered = open_[fd].written;
    zeroed = open_[fd].zeroed;
  }
  if (int error = Env::SyncData(fd); error != 0) return error;
  // Blocks for good once PowerLoss holds the lock: this sync is never published.
  std::lock_guard<std::mutex> lock(mu_);
  File& file = open_[fd];
  file.synced = std::max(file.synced, covered);
  file.zeroed_synced = std::max(file.zeroed_synced, zeroed);
  return 0;
}

int FaultEnv::Truncate(int fd, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int error = Env::Truncate(fd, size); error != 0) return error;
  File& file = open_[fd];
  file.written = std::min(file.written, size);
  file.synced = std::min(file.synced, size);
  file.zeroed = std::min(file.zeroed, size);
  file.zeroed_synced = std::min(file.zeroed_synced, size);
  return 0;
}

void FaultEnv::set_fail_log_after_bytes(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_log_after_bytes_ = bytes;
}

void FaultEnv::CloseLog(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(fd);
  if (it != open_.end()) {
    closed_[it->second.path] = it->second;
    open_.erase(it);
  }
  Env::CloseLog(fd);
}

void FaultEnv::AtSnapshotStep(std::string_view step) {
  if (!faults_.crash_at_step.empty() && step == faults_.crash_at_step) kill(getpid(), SIGKILL);
}

void FaultEnv::PowerLoss() {
  mu_.lock();  // Never released: the process ends here.
  // Cut to the synced records, then (if the zeros synced reach further) out again with zeros:
  // what was written after the last sync reads as zeros.
  for (const auto& [fd, file] : open_) {
    if (ftruncate(fd, static_cast<off_t>(file.synced)) != 0) _exit(1);
    if (ftruncate(fd, static_cast<off_t>(file.kept())) != 0) _exit(1);
  }
  for (const auto& [path, file] : closed_) {
    // A file removed since (a snapshot's cleanup) has nothing left to lose.
    if (truncate(path.c_str(), static_cast<off_t>(file.synced)) != 0 && errno != ENOENT) _exit(1);
    if (truncate(path.c_str(), static_cast<off_t>(file.kept())) != 0 && errno != ENOENT) _exit(1);
  }
  kill(getpid(), SIGKILL);
  _exit(137);  // Not reached.
}

}  // namespace ringkv::persist
