// LogWriter: one worker's append-only log (--data-dir), the Journal its shard records changes
// in. The worker encodes a turn's records into a buffer of blocks; at the end of the turn
// (Commit) they go to the file with one write(). Sync modes:
//   always    group commit: Commit hands the buffer to the log's syncer thread, which writes it
//             and fdatasyncs once, then says so (durable()) and wakes the worker
//             (`on_progress`); a write is acknowledged once the fdatasync that covers it has
//             returned. While the syncer is busy the worker goes on running turns and its
//             records pile up for the next hand-off, so one sync covers every turn that ran
//             during the last;
//   everysec  the worker writes the blocks itself (cheaper than waking a thread for it) at the
//             end of a turn once they are kCoalesceBytes, or the oldest record is
//             kCoalesceTime old, or a turn added no records (the worker has caught up: as Redis
//             writes once per event-loop pass); a write is acknowledged once written, so a
//             crash of the process (whose page cache survives it) loses nothing acknowledged.
//             The syncer fdatasyncs once a second if anything was written: a crash of the
//             machine loses about the last second;
//   no        as everysec, but nothing is synced until Close; the kernel writes the pages back
//             when it likes.
// Failures: a write or fdatasync that fails marks the log failed for good (never retried: see
// persist/file.h), and the worker refuses writes from then on (shard/journal.h).
//
// Segments: a log is a run of files, one per generation. A live snapshot opens the next
// generation's file for every worker (OpenSegment, PrepareCut) before it asks the workers for
// their cuts; at its cut the worker calls Cut(), and from then on its records go to the new
// file while the ones recorded before still go to the old one, in order: whichever thread
// writes the blocks (the syncer with always, the worker otherwise) writes the blocks from
// before the cut to the old file, switches, and writes the rest to the new one. The old file is
// synced once more and closed by the syncer before the new one's next sync (with no, closed at
// once: nothing syncs it).
//
// Files: every open, write, fdatasync and close of a log's files goes through its Env
// (persist/env.h), where tests inject a full disk or a power loss.
//
// Threads: the Journal methods on the worker's thread; Close on a control thread once the worker
// has stopped; bytes(), error() anywhere.
#ifndef RINGKV_PERSIST_LOG_WRITER_H_
#define RINGKV_PERSIST_LOG_WRITER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "persist/env.h"
#include "persist/format.h"
#include "shard/journal.h"

namespace ringkv::persist {

enum class SyncMode { kAlways, kEverySec, kNo };
std::optional<SyncMode> ParseSyncMode(std::string_view text);
const char* SyncModeName(SyncMode mode);

class LogWriter final : public Journal {
 public:
  // A block is closed once it holds this much; a record bigger than that gets a block of its own.
  static constexpr size_t kBlockTarget = size_t{4} << 20;
  // Past this much waiting for the syncer the worker admits no new requests.
  static constexpr size_t kMaxPending = size_t{64} << 20;
  // everysec and no: a turn writes once this much is waiting, or the oldest record is this old.
  static constexpr size_t kCoalesceBytes = size_t{64} << 10;
  static constexpr std::chrono::microseconds kCoalesceTime{1000};

  // Creates DIR/LogName(header) (which must not exist yet), writes its header, and syncs it and
  // the directory. `group_failed` (may be null; outlives the log) is shared by the logs of one
  // server: a failure of any of them fails them all, so that every worker refuses writes.
  // `env` (null: DefaultEnv()) does the files' I/O and outlives the log.
  static absl::StatusOr<std::unique_ptr<LogWriter>> Create(const std::string& dir,
                                                           const FileHeader& header, SyncMode mode,
                                                           std::function<void()> on_progress,
                                                           std::atomic<bool>* group_failed,
                                                           Env* env = nullptr);

  // One file of a log: created, its header written and synced (the directory is not).
  struct Segment {
    std::string path;
    int fd = -1;
    uint32_t seed = 0;
    uint64_t bytes = 0;   // Written.
    uint64_t synced = 0;  // Covered by an fdatasync.
  };
  static absl::StatusOr<Segment> OpenSegment(const std::string& dir, const FileHeader& header,
                                             Env& env);
  // Any thread: `next` is the file the records after the next Cut() go to. One at a time: the
  // log takes it at Cut(), before which it may not be called again.
  void PrepareCut(Segment next);
  ~LogWriter() override;
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  // Journal.
  void Set(std::string_view key, std::string_view value, uint64_t version,
           int64_t deadline_ms) override;
  void SetDeadline(std::string_view key, int64_t deadline_ms) override;
  void Delete(std::string_view key) override;
  uint64_t appended() const override { return appended_; }
  uint64_t durable() const override { return durable_.load(std::memory_order_acquire); }
  bool holds_acks() const override { return true; }
  void Commit() override;
  bool failed() const override {
    return failed_.load(std::memory_order_acquire) ||
           (group_failed_ != nullptr && group_failed_->load(std::memory_order_acquire));
  }
  bool backlogged() const override { return pending_.size() > kMaxPending; }
  // Records from now on go to the segment PrepareCut gave (which must have been called).
  void Cut() override;

  // Writes and syncs whatever is left (in every mode), stops the syncer and closes the file;
  // the log's error if it failed. Once only.
  absl::Status Close();

  // The file records go to now.
  std::string path() const;
  // Of the file records go to now.
  uint64_t bytes() const { return file_bytes_.load(std::memory_order_relaxed); }
  // fdatasyncs done (with always, one per group commit).
  uint64_t syncs() const { return syncs_.load(std::memory_order_relaxed); }
  // Why the log failed; empty while it has not (also when another of its group did).
  std::string error() const;

 private:
  LogWriter(Segment segment, SyncMode mode, std::function<void()> on_progress,
            std::atomic<bool>* group_failed, Env& env);
  // This log's own failure (failed() also counts the group's).
  bool self_failed() const { return failed_.load(std::memory_order_acquire); }
  void Run();
  // Starts a new block unless the open one has room for `record_bytes` more.
  void Reserve(size_t record_bytes);
  // Seals the blocks of `data` (starting at `blocks`) and writes them; with `next`, blocks
  // [0, cut) to the current segment and the rest to `next`, which becomes the current one.
  // False if it failed.
  bool WriteBlocks(std::string& data, const std::vector<size_t>& blocks, size_t cut,
                   std::unique_ptr<Segment> next);
  // Writes `bytes` to the current segment; io_mu_ held. False if it failed.
  bool WriteLocked(std::string_view bytes);
  // Syncs and closes the retired segments, then syncs the current one. Syncer thread (or
  // Close, once the syncer has stopped).
  bool Sync();
  void Fail(std::string_view step, const std::string& path, int error);

  // Constant after construction.
  const SyncMode mode_;
  const std::function<void()> on_progress_;
  Env& env_;
  std::atomic<bool>* const group_failed_;

  // Worker thread only.
  std::string pending_;                 // Blocks, their headers not filled in yet.
  std::vector<size_t> pending_blocks_;  // Where each of pending_'s blocks starts.
  uint64_t appended_ = 0;
  uint64_t appended_at_commit_ = 0;                      // appended_ at the last Commit.
  std::chrono::steady_clock::time_point pending_since_;  // When pending_ got its first record.
  // After Cut(): the segment pending_blocks_[cut_at_..] go to (null: no cut pending).
  std::unique_ptr<Segment> cut_segment_;
  size_t cut_at_ = 0;
  bool block_closed_ = false;  // The next record starts a new block (the last one precedes a cut).

  // The hand-off: the worker fills handoff_* and sets in_flight_ (then ready_ under mu_); the
  // syncer writes them, empties them and clears in_flight_ (release), after which the worker
  // may fill them again.
  std::string handoff_;
  std::vector<size_t> handoff_blocks_;
  uint64_t handoff_seq_ = 0;
  std::unique_ptr<Segment> handoff_segment_;
  size_t handoff_cut_ = 0;
  std::atomic<bool> in_flight_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = false;   // Guarded by mu_.
  bool stop_ = false;    // Guarded by mu_.
  std::string error_;    // Guarded by mu_.
  bool closed_ = false;  // Control thread.

  // Held around each write(), to read file_bytes_ before an fdatasync and to publish
  // synced_bytes_ after it (not over the fdatasync itself).
  // It also guards the segments: current_ (whose fd only the syncer closes, so a sync may run
  // outside the lock), retired_ (switched away from, to be synced and closed) and next_.
  mutable std::mutex io_mu_;
  Segment current_;
  std::vector<Segment> retired_;
  std::unique_ptr<Segment> next_;
  uint64_t segment_number_ = 0;  // Counts switches; a sync publishes only for its segment.
  std::atomic<uint64_t> durable_{0};
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> file_bytes_{0};
  std::atomic<uint64_t> synced_bytes_{0};
  std::atomic<uint64_t> syncs_{0};

  std::thread syncer_;
};

}  // namespace ringkv::persist

#endif  // RINGKV_PERSIST_LOG_WRITER_H_
