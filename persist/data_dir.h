// DataDir: ringkv's data directory (--data-dir), the files persist/format.h describes, and the
// three things done with them: restore at start, a log per worker while serving, and a
// snapshot when the server stops cleanly.
//
// Start (Open, Restore, OpenLogs):
//   - the directory is created if needed and locked (flock on LOCK): a second server on the same
//     directory is refused;
//   - Restore reads what the MANIFEST lists: its snapshot, then its logs, oldest generation
//     first, each target shard on a thread of its own. With the shard count of the files, shard
//     t reads files t only; with another --threads, every shard reads every file and keeps the
//     keys the router now gives it. Records are states applied in order; a key's deadline is
//     judged on its final state (a Persist or Expire after a deadline that has since passed
//     keeps the key). Each shard's versions go on above the highest version any shard gave
//     (the snapshots' footers keep that of deleted keys), so a version never comes back;
//   - a log whose last block is incomplete (a write the crash cut short) is read up to it, with
//     a warning. Everything else that is not as the MANIFEST says refuses the start, naming the
//     file (and the offset): a missing MANIFEST while data files are there, a damaged one, a
//     missing or headerless snapshot file or listed log, a log shorter than the MANIFEST says,
//     a block that fails its check (the last one too, when it is whole), a log with records the
//     MANIFEST does not list. Each refusal names `--load-intact`, which loads what is intact
//     (with no usable MANIFEST: the newest snapshot that is whole, and the logs after it),
//     writes it as a new snapshot, and moves every file it replaces to set-aside-<ms>/: nothing
//     is deleted. Files are removed at start only when a valid MANIFEST supersedes them (older
//     generations, temporaries) or when they are logs a crash left before they were listed,
//     which hold no record;
//   - OpenLogs starts a new generation: one new log per worker, listed in the MANIFEST (with the
//     intact length of each log Restore read) before any takes a record.
// Live snapshots (StartSnapshotter, RequestSnapshot), while the workers serve: the snapshotter
// thread opens the next generation's snapshot files (persist/snapshot_file.h) and log segments,
// lists the segments in the MANIFEST, gives each log its next segment (LogWriter::PrepareCut)
// and each worker its file (`start`, which calls Worker::StartSnapshot). Each worker makes its
// cut between two turns: its log switches segments there, and its shard is walked a slice per
// turn into the file (shard/shard.h: serialize-before-mutate, so the file holds the shard as it
// was at the cut). Once every file is committed the MANIFEST names the new generation and the
// older files go. Restore then reads the snapshot and the logs from its generation on: the
// records after each cut. A snapshot that fails leaves the old MANIFEST, whose logs (the old
// generation's and the new one's) still hold everything.
// Stop (CloseAndSnapshot): the logs are closed (written and synced), every shard is written to a
// snapshot file the same way (a thread per shard walks it), the MANIFEST is replaced to name
// them, and the files the new snapshot covers are removed. A crash at any point of that leaves
// either the old MANIFEST with every file it needs, or the new one with every file it needs.
//
// Threads: Open, Restore, OpenLogs, StartSnapshotter, StopSnapshotter and CloseAndSnapshot on
// the control thread, the first four before the workers run and CloseAndSnapshot after they
// have stopped (StopSnapshotter while they still run); log(i) for worker i; RequestSnapshot and
// Stats anywhere.
#ifndef RINGKV_PERSIST_DATA_DIR_H_
#define RINGKV_PERSIST_DATA_DIR_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "persist/format.h"
#include "persist/log_writer.h"
#include "shard/router.h"
#include "shard/shard.h"
#include "shard/worker.h"

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
  // Why writes are refused (a log failed, or is stalled for want of space); empty while the
  // logs are healthy.
  std::string error;
};

// A committed snapshot.
struct SnapshotInfo {
  uint64_t generation = 0;
  uint64_t keys = 0;
  uint64_t bytes = 0;
  int64_t unix_ms = 0;  // When it was begun.
  double seconds = 0;   // How long it took, to the MANIFEST's commit.
};

class SnapshotFile;

// Per worker: a replica's position, if it has one (persist/format.h).
using Positions = std::vector<std::optional<ReplPosition>>;

// How a data directory is opened.
struct Options {
  SyncMode fsync = SyncMode::kEverySec;  // --fsync.
  bool load_intact = false;              // --load-intact.
  // The logs' file I/O and the snapshot commit's steps (persist/env.h); null: DefaultEnv().
  // Outlives the DataDir.
  Env* env = nullptr;
};

class DataDir {
 public:
  using SnapshotDone = std::function<void(const absl::StatusOr<SnapshotInfo>&)>;

  static absl::StatusOr<std::unique_ptr<DataDir>> Open(const std::string& path,
                                                       const Options& options);
  ~DataDir();
  DataDir(const DataDir&) = delete;
  DataDir& operator=(const DataDir&) = delete;

  // Loads the data into `shards` (shard i is worker i's; `router` routes keys among them).
  absl::Status Restore(const std::vector<Shard*>& shards, const Router& router, int64_t now_ms);
  // After Restore: each worker's replica position, where its files say the data stands (an
  // empty vector when they were written with another worker count).
  const Positions& restored_positions() const { return positions_; }
  // Any thread: the generation of the snapshot the MANIFEST names (0: none).
  uint64_t committed_generation() const {
    std::lock_guard lock(manifest_mu_);
    return manifest_.generation;
  }
  // One new log per worker, listed in the MANIFEST; `on_progress(i)` is called from log i's
  // syncer (LogWriter). If the disk has no room for them (or the MANIFEST), the logs start
  // stalled (LogWriter::CreateWaiting: reads are served, writes refused) and a thread of the
  // DataDir tries again, 50 ms later then twice as long each time up to every 2 s, until they
  // can be made.
  absl::Status OpenLogs(uint32_t workers, const std::function<void(uint16_t)>& on_progress);
  LogWriter& log(uint32_t worker) { return *logs_[worker]; }

  // Starts the snapshotter thread (after OpenLogs). `start(i, job)` hands `job` to worker i
  // (Worker::StartSnapshot); its loop is then woken with OpenLogs's `on_progress(i)`. With
  // `every` > 0 a snapshot is also taken that long after the last one ended.
  void StartSnapshotter(std::function<void(uint32_t, SnapshotJob*)> start, absl::Duration every);
  // Any thread: asks for a snapshot that begins after this call; `done` is called on the
  // snapshotter's thread once it is committed or has failed. Requests that come while one
  // runs share the next.
  void RequestSnapshot(SnapshotDone done);
  // Lets the snapshot under way finish, fails the requests still waiting (UNAVAILABLE), and
  // stops the thread. While the workers still run. Idempotent.
  void StopSnapshotter();

  // `positions` (a replica's, per worker) go in the snapshot files' footers.
  absl::Status CloseAndSnapshot(const std::vector<const Shard*>& shards, int64_t now_ms,
                                const Positions& positions = {});
  // Closes the logs (written and synced) without a snapshot; the first error.
  absl::Status CloseLogs();
  // A stop: every log stalled for want of space makes a last try, and fails if it is still
  // stalled, so that its worker answers what it holds (LogWriter::StopRetrying). Any thread.
  void StopRetrying();
  // Whether a log failed for good (not merely stalled): writes are refused until a restart.
  bool logs_failed() const { return log_group_.failed.load(std::memory_order_acquire); }

  const std::string& path() const { return path_; }
  PersistenceStats Stats() const;

 private:
  DataDir(std::string path, const Options& options, int lock_fd);
  void RunSnapshotter(absl::Duration every);
  absl::StatusOr<SnapshotInfo> TakeLiveSnapshot();
  // After a --load-intact restore: writes `shards` as the snapshot of generation_, names it in
  // the MANIFEST, and moves every other data file to a set-aside-<ms>/ folder.
  absl::Status Repair(const std::vector<Shard*>& shards, int64_t now_ms);
  // Writes `shards` (which nothing else touches meanwhile) to committed snapshot files of
  // `info.generation`; `info` with their keys and bytes.
  absl::StatusOr<SnapshotInfo> WriteSnapshot(const std::vector<const Shard*>& shards,
                                             SnapshotInfo info, int64_t now_ms,
                                             const Positions& positions = {});
  Manifest CurrentManifest() const;
  // Creates the files of this run's logs (generation_), syncs the directory and lists them in
  // the MANIFEST; on failure removes what it made.
  absl::Status OpenLogFiles(uint32_t workers, std::vector<LogWriter::Segment>* segments);
  // The opener thread: OpenLogFiles until it works, then gives each log its file.
  void OpenLogsWhenThereIsRoom(uint32_t workers);
  void StopOpener();
  // Replaces the MANIFEST (atomically, synced) and manifest_.
  absl::Status WriteManifest(const Manifest& manifest);
  // WriteManifest naming the snapshot `info` (its files committed) and `logs`, with the crash
  // points of the commit.
  absl::Status CommitManifest(const SnapshotInfo& info, uint32_t shards,
                              std::vector<LogEntry> logs);
  // The snapshot files of `info.generation`, one per shard (temporary until each commits); with
  // `wake_workers`, each file's writer wakes its worker's loop when it has made room.
  absl::StatusOr<std::vector<std::unique_ptr<SnapshotFile>>> CreateSnapshotFiles(
      const SnapshotInfo& info, uint32_t shards, bool wake_workers);
  // Writes the MANIFEST naming the snapshot of `generation` (its files committed) and removes
  // the files it covers.
  absl::Status CommitSnapshot(const SnapshotInfo& info, uint32_t shards);
  // Removes files no restore will read: temporaries, and logs and snapshots older than the
  // MANIFEST's snapshot.
  absl::Status RemoveStale(uint64_t keep_from, uint64_t snapshot_generation);

  const std::string path_;
  const SyncMode mode_;
  const bool load_intact_;
  Env& env_;
  const int lock_fd_;

  // Control thread: whether Open found the MANIFEST, and whether it was damaged.
  bool manifest_found_ = false;
  bool manifest_damaged_ = false;
  std::vector<LogEntry> read_logs_;  // Control thread: the logs Restore read, intact lengths.
  mutable std::mutex manifest_mu_;
  Manifest manifest_;        // Guarded by manifest_mu_ (written by one thread at a time).
  uint64_t generation_ = 0;  // Of the logs this run writes (the control or snapshotter thread).
  std::function<void(uint16_t)> on_progress_;

  // The snapshotter.
  std::function<void(uint32_t, SnapshotJob*)> start_snapshot_;
  std::thread snapshotter_;
  std::mutex snapshot_mu_;
  std::condition_variable snapshot_cv_;
  std::vector<SnapshotDone> snapshot_requests_;  // Guarded by snapshot_mu_.
  bool snapshotter_running_ = false;             // Guarded by snapshot_mu_.
  bool snapshotter_stop_ = false;                // Guarded by snapshot_mu_.
  std::vector<std::unique_ptr<LogWriter>> logs_;
  uint64_t restored_keys_ = 0;
  Positions positions_;  // Control thread: Restore's.
  double restore_seconds_ = 0;
  std::atomic<bool> logs_open_{false};
  LogGroup log_group_;  // Shared by the logs (LogWriter::Create).
  // The opener (OpenLogs on a full disk).
  std::thread opener_;
  std::mutex opener_mu_;
  std::condition_variable opener_cv_;
  bool opener_stop_ = false;   // Guarded by opener_mu_.
  bool logs_waiting_ = false;  // Guarded by opener_mu_: the logs have no files yet.
};

}  // namespace ringkv::persist

#endif  // RINGKV_PERSIST_DATA_DIR_H_
