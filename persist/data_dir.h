// DataDir: ringkv's data directory (--data-dir), the files persist/format.h describes, and the
// three things done with them: restore at start, a log per worker while serving, and a
// snapshot when the server stops cleanly.
//
// Start (Open, Restore, OpenLogs):
//   - the directory is created if needed and locked (flock on LOCK): a second server on the same
//     directory is refused;
//   - Restore loads the MANIFEST's snapshot and replays the logs of its generation on, each
//     target shard on a thread of its own. With the shard count of the files, shard t reads
//     files t only; with another --threads, every shard reads every file and keeps the keys the
//     router now gives it. Keys whose deadline has passed are dropped; each shard's versions go
//     on above the highest it loaded;
//   - a log whose last block is torn (a write the crash cut short) is cut there, with a warning;
//     damage anywhere else (a snapshot not whole, a log block that fails its check with good
//     bytes after it) refuses the start with an error naming the file and the offset, unless
//     `load_intact`, which loads each file's good prefix and warns;
//   - OpenLogs starts a new generation: one new log per worker.
// Stop (CloseAndSnapshot): the logs are closed (written and synced), every shard is written to a
// snapshot file (temp file, fsync, rename, directory fsync), the MANIFEST is replaced to name
// them, and the files the new snapshot covers are removed. A crash at any point of that leaves
// either the old MANIFEST with every file it needs, or the new one with every file it needs.
//
// Threads: Open, Restore, OpenLogs and CloseAndSnapshot on the control thread, the first three
// before the workers run and the last after they have stopped; log(i) for worker i; FillStats
// anywhere.
#ifndef RINGKV_PERSIST_DATA_DIR_H_
#define RINGKV_PERSIST_DATA_DIR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "persist/format.h"
#include "persist/log_writer.h"
#include "shard/router.h"
#include "shard/shard.h"

namespace ringkv::persist {

struct PersistenceStats {
  std::string data_dir;
  std::string fsync;
  uint64_t log_bytes = 0;
  uint64_t log_syncs = 0;
  int64_t snapshot_ms = 0;  // When the last snapshot was taken (0: none).
  uint64_t snapshot_bytes = 0;
  uint64_t snapshot_keys = 0;
  uint64_t restored_keys = 0;
  double restore_seconds = 0;
  std::string error;  // Why writes are refused; empty while the logs are healthy.
};

class DataDir {
 public:
  static absl::StatusOr<std::unique_ptr<DataDir>> Open(const std::string& path, SyncMode mode,
                                                       bool load_intact);
  ~DataDir();
  DataDir(const DataDir&) = delete;
  DataDir& operator=(const DataDir&) = delete;

  // Loads the data into `shards` (shard i is worker i's; `router` routes keys among them).
  absl::Status Restore(const std::vector<Shard*>& shards, const Router& router, int64_t now_ms);
  // One new log per worker; `on_progress(i)` is called from log i's syncer (LogWriter).
  absl::Status OpenLogs(uint32_t workers, const std::function<void(uint16_t)>& on_progress);
  LogWriter& log(uint32_t worker) { return *logs_[worker]; }

  absl::Status CloseAndSnapshot(const std::vector<const Shard*>& shards, int64_t now_ms);
  // Closes the logs (written and synced) without a snapshot; the first error.
  absl::Status CloseLogs();

  const std::string& path() const { return path_; }
  PersistenceStats Stats() const;

 private:
  DataDir(std::string path, SyncMode mode, bool load_intact, int lock_fd);
  // Removes files no restore will read: temporaries, and logs and snapshots older than the
  // MANIFEST's snapshot.
  absl::Status RemoveStale(uint64_t keep_from, uint64_t snapshot_generation);

  const std::string path_;
  const SyncMode mode_;
  const bool load_intact_;
  const int lock_fd_;

  Manifest manifest_;
  uint64_t generation_ = 0;  // Of the logs this run writes.
  std::vector<std::unique_ptr<LogWriter>> logs_;
  uint64_t restored_keys_ = 0;
  double restore_seconds_ = 0;
  std::atomic<bool> logs_open_{false};
  std::atomic<bool> any_log_failed_{false};  // Shared by the logs (LogWriter::Create).
};

}  // namespace ringkv::persist

#endif  // RINGKV_PERSIST_DATA_DIR_H_
