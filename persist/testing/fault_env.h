// FaultEnv: a persist::Env (persist/env.h) for crash and disk-fault tests. On top of the
// system's behaviour it can
//   - fail log writes as a full disk does: a write that would take a log file past
//     `fail_log_after_bytes` writes the part that fits, then fails with ENOSPC; a truncation
//     gives the space back, and set_fail_log_after_bytes frees more (or fills the disk);
//   - kill the process (SIGKILL) when a snapshot commit reaches `crash_at_step`;
//   - simulate a power loss (PowerLoss): every log file written through it is cut back to what
//     its last successful fdatasync covered, the page cache's unsynced bytes gone, and the
//     process is killed. From the cut on, no write and no fdatasync returns, so no sync can be
//     published and no answer released after it; a sync that returned before the cut keeps
//     everything it covered, which is all an acknowledgement can have depended on.
//
// Test-only (the persist_testing library and the ringkv-server-faults binary); production
// builds never link it.
//
// Threads: any; one mutex serializes the logs' writes and syncs' bookkeeping (the syncs
// themselves run outside it).
//
//   persist::FaultEnv env({.fail_log_after_bytes = 20000});
//   auto dir = persist::DataDir::Open(path, {.fsync = SyncMode::kAlways, .env = &env});
#ifndef RINGKV_PERSIST_TESTING_FAULT_ENV_H_
#define RINGKV_PERSIST_TESTING_FAULT_ENV_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "persist/env.h"

namespace ringkv::persist {

class FaultEnv final : public Env {
 public:
  struct Faults {
    uint64_t fail_log_after_bytes = 0;  // 0: never.
    std::string crash_at_step = "";     // Empty: never.
  };
  explicit FaultEnv(Faults faults)
      : faults_(std::move(faults)), fail_log_after_bytes_(faults_.fail_log_after_bytes) {}

  int OpenLog(const std::string& path, int* fd) override;
  int Write(int fd, uint64_t offset, std::string_view data) override;
  int Zero(int fd, uint64_t offset, uint64_t bytes) override;
  int SyncData(int fd) override;
  int Truncate(int fd, uint64_t size) override;
  void CloseLog(int fd) override;
  void AtSnapshotStep(std::string_view step) override;

  // From now on, a log file takes `bytes` (0: any size). Any thread.
  void set_fail_log_after_bytes(uint64_t bytes);

  // Cuts every log file back to its last sync and SIGKILLs the process. Any thread.
  [[noreturn]] void PowerLoss();

 private:
  struct File {
    std::string path;
    uint64_t written = 0;  // The end of the records written.
    uint64_t synced = 0;
    uint64_t zeroed = 0;  // The end of the zeros written (0: none).
    uint64_t zeroed_synced = 0;
    // What a power loss leaves: the records synced, then zeros to the last synced size.
    uint64_t kept() const { return std::max(synced, zeroed_synced); }
  };

  const Faults faults_;
  std::mutex mu_;                       // Never released once PowerLoss holds it.
  uint64_t fail_log_after_bytes_;       // Guarded by mu_.
  std::map<int, File> open_;            // By descriptor.
  std::map<std::string, File> closed_;  // Closed files, by path.
};

}  // namespace ringkv::persist

#endif  // RINGKV_PERSIST_TESTING_FAULT_ENV_H_
