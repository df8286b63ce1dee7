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
// Failures:
//   - a write that fails for want of space (ENOSPC, EDQUOT) stalls the log: nothing it had
//     written is lost, so the file is cut back to the end of its last whole write and the
//     blocks that did not fit wait, in order, for the syncer, which tries them again after
//     50 ms, then twice as long each time up to 2 s. While the log is stalled the worker
//     refuses writes (stalled()) and holds the answers of the records that wait; once a retry's
//     write and its fdatasync both succeed, they are durable, the answers go and writes are
//     taken again. Both transitions are logged. StopRetrying (at a stop) makes a last try and
//     fails the log if it is still stalled;
//   - any other failed write, a failed fdatasync, or a cut that cannot be made marks the log
//     failed for good (a failed fdatasync is never retried: see persist/file.h), and the
//     worker refuses writes from then on and answers the held records UNAVAILABLE.
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
// Zeros ahead (always): the syncer keeps kZeroAhead bytes of zeros written past the records
// (Env::Zero) and synced, so that a group commit's fdatasync writes records into blocks the
// file already has and need not also commit the file's new size: ext4 commits its journal for
// that, which made an appending fdatasync 220-430 us here against 90-110 us for an overwrite
// (BENCHMARKS.md). A new segment gets its first kZeroLow of zeros when it is made (off the
// worker's and the syncer's path); then the syncer zeros a piece at a time when no batch waits,
// and one piece before the next batch only once fewer than kZeroLow bytes are left. A crash leaves
// the zeros after the last record, which a restore reads as the end of the log (persist/block.h); a
// segment is cut back to its records when it is retired or closed. A full disk while the syncer
// zeros ends the zeros for that log, which then appends as the other modes do; any other failure
// to write them fails the log, as a failed write does. Zeros are written only while the file
// system has kZeroReserve free beyond them, and a tmpfs gets none.
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

// What the logs of one server share (the disk among them): a failure of any fails them all, and
// while any is stalled for want of space every one refuses writes, so that no worker takes
// writes whose records would only stall too.
struct LogGroup {
  std::atomic<bool> failed{false};
  std::atomic<int> stalled{0};  // Logs stalled now.
};

class LogWriter final : public Journal {
 public:
  // A block is closed once it holds this much; a record bigger than that gets a block of its own.
  static constexpr size_t kBlockTarget = size_t{4} << 20;
  // Past this much waiting for the syncer the worker admits no new requests.
  static constexpr size_t kMaxPending = size_t{64} << 20;
  // everysec and no: a turn writes once this much is waiting, or the oldest record is this old.
  static constexpr size_t kCoalesceBytes = size_t{64} << 10;
  static constexpr std::chrono::microseconds kCoalesceTime{1000};
  // always: the zeros kept ahead of the records, written kZeroPiece at a time; below kZeroLow
  // a piece goes before the next batch.
  static constexpr uint64_t kZeroAhead = uint64_t{32} << 20;
  static constexpr uint64_t kZeroPiece = uint64_t{1} << 20;
  static constexpr uint64_t kZeroLow = uint64_t{4} << 20;
  // Zeros never take the last this much of the file system's free space.
  static constexpr uint64_t kZeroReserve = uint64_t{256} << 20;

  // One file of a log: created, its header written and synced (the directory is not).
  struct Segment {
    std::string path;
    uint64_t generation = 0;
    int fd = -1;
    uint32_t seed = 0;
    uint64_t bytes = 0;   // Written.
    uint64_t synced = 0;  // Covered by an fdatasync.
    uint64_t zeroed = 0;  // The end of the zeros written past the records (0: none).
  };

  // Creates DIR/LogName(header) (which must not exist yet), writes its header, and syncs it and
  // the directory. `group` (may be null; outlives the log) is shared by the logs of one
  // server (LogGroup).
  // `env` (null: DefaultEnv()) does the files' I/O and outlives the log.
  static absl::StatusOr<std::unique_ptr<LogWriter>> Create(const std::string& dir,
                                                           const FileHeader& header, SyncMode mode,
                                                           std::function<void()> on_progress,
                                                           LogGroup* group, Env* env = nullptr);
  // A log on `segment` (OpenSegment's, its directory synced), as Create's.
  static std::unique_ptr<LogWriter> Start(Segment segment, SyncMode mode,
                                          std::function<void()> on_progress, LogGroup* group,
                                          Env& env);
  // A log whose file the disk had no room for (at start): stalled until Attach gives it its
  // file (made with OpenSegment, listed in the MANIFEST), then as Create's. `path` is the file
  // it will have, for messages.
  static std::unique_ptr<LogWriter> CreateWaiting(const std::string& path, SyncMode mode,
                                                  std::function<void()> on_progress,
                                                  LogGroup* group, Env& env);

  // Creates DIR/LogName(header), writes its header (and, with always, kZeroLow of zeros after
  // it) and syncs it; the directory is not synced.
  static absl::StatusOr<Segment> OpenSegment(const std::string& dir, const FileHeader& header,
                                             SyncMode mode, Env& env);
  // Any thread: `next` is the file the records after the next Cut() go to. One at a time: the
  // log takes it at Cut(), before which it may not be called again.
  void PrepareCut(Segment next);
  // Any thread, once: the file of a log made by CreateWaiting. Its next retry (within 2 s)
  // syncs it and ends the stall.
  void Attach(Segment segment);
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
           (group_ != nullptr && group_->failed.load(std::memory_order_acquire));
  }
  // This log, or another of its group, is stalled for want of space.
  bool stalled() const override {
    return self_stalled() ||
           (group_ != nullptr && group_->stalled.load(std::memory_order_acquire) > 0);
  }
  bool backlogged() const override { return pending_.data.size() > kMaxPending; }
  // Records from now on go to the segment PrepareCut gave (which must have been called).
  void Cut() override;
  // A replica's position after the records before it (persist/format.h: a position record).
  void Position(std::string_view history, uint64_t lsn, bool reset);
  // Worker: the generation of the file the next record goes to.
  uint64_t generation() const { return generation_; }

  // Writes and syncs whatever is left (in every mode), stops the syncer and closes the file;
  // the log's error if it failed (a log still stalled fails). Once only.
  absl::Status Close();
  // Any thread (a stop, once the calls have had their grace period): a stalled log makes one
  // more try and, if it is still stalled, fails for good, so that the worker answers the
  // records it holds (UNAVAILABLE) and can stop. A log that is not stalled is untouched.
  void StopRetrying();

  // The file records go to now.
  std::string path() const;
  // Of the file records go to now.
  uint64_t bytes() const { return file_bytes_.load(std::memory_order_relaxed); }
  // fdatasyncs done (with always, one per group commit).
  uint64_t syncs() const { return syncs_.load(std::memory_order_relaxed); }
  // Why the log failed or is stalled; empty while it is healthy (also when another of its
  // group failed).
  std::string error() const;

 private:
  // Records on their way to the file: blocks, the segment switch of a cut, and what durable_
  // becomes once they are written (and, with always, synced).
  struct Batch {
    std::string data;            // Blocks, their headers filled in (sealed) when written.
    std::vector<size_t> blocks;  // Where each block of `data` starts.
    // With `next`: blocks [0, cut) go to the current segment, then the log switches to `next`
    // and the rest go there. Without, `cut` is unused.
    size_t cut = 0;
    std::unique_ptr<Segment> next;
    uint64_t seq = 0;
    bool empty() const { return data.empty() && next == nullptr; }
    void Clear();
  };

  LogWriter(Segment segment, SyncMode mode, std::function<void()> on_progress, LogGroup* group,
            Env& env);
  // This log's own failure (failed() also counts the group's).
  bool self_failed() const { return failed_.load(std::memory_order_acquire); }
  bool self_stalled() const { return stalled_.load(std::memory_order_acquire); }
  void Run();
  // Starts a new block unless the open one has room for `record_bytes` more.
  void Reserve(size_t record_bytes);
  // Seals `batch`'s blocks and writes them, switching segments at its cut; 0, or the errno of
  // the write that failed, after which `batch` holds what is left to write (its part before
  // the cut gone if that was written) and the file is as it was before that write.
  int WriteBatch(Batch& batch);
  // Writes `bytes` to the current segment, cutting the file back to where it was if the write
  // fails; io_mu_ held. 0 or the errno.
  int WriteLocked(std::string_view bytes);
  // What a failed WriteBatch leaves: stalls the log, `batch` moved to handoff_ for the syncer
  // to retry, if `error` is a want of space; fails it otherwise. Worker or syncer thread.
  void WriteFailed(int error, Batch& batch);
  // Syncer thread, stalled: writes and syncs handoff_ again; false if it is still stalled.
  bool Retry();
  // Syncer thread: the stall is over (stalled_ and the group's count).
  void EndStall();
  // Syncer thread, `lock` (on mu_) held: retries, with backoff, until the log is written again
  // or fails, or a stop begins.
  void RetryUntilWritten(std::unique_lock<std::mutex>& lock);
  // Syncs and closes the retired segments (cut back to their records first), then syncs the
  // current one. Syncer thread (or Close, once the syncer has stopped).
  bool Sync();
  // always, syncer thread: writes zeros past the records, up to kZeroAhead of them, while no
  // batch waits (or one piece if fewer than kZeroLow are left), then syncs them.
  void ZeroAhead();
  // Whether a batch or a stop waits for the syncer.
  bool Called() const;
  // Cuts `segment`'s file back to its records if zeros follow them; 0 or the errno. io_mu_
  // held, or the segment retired.
  int TrimZeros(Segment& segment, uint64_t records);
  void Fail(std::string_view step, const std::string& path, int error);
  // The handoff's batch is done with (written or given up): empties it and lets the worker
  // hand over the next one, waking its loop.
  void FinishHandoff();

  // Constant after construction.
  const SyncMode mode_;
  const std::function<void()> on_progress_;
  Env& env_;
  LogGroup* const group_;

  // Worker thread only.
  Batch pending_;  // Recorded, not handed over or written yet (seq unused). After Cut(), its
                   // `next` is the segment its blocks from `cut` on go to.
  uint64_t appended_ = 0;
  uint64_t appended_at_commit_ = 0;                      // appended_ at the last Commit.
  std::chrono::steady_clock::time_point pending_since_;  // When pending_ got its first record.
  bool block_closed_ = false;  // The next record starts a new block (the last one precedes a cut).

  // The hand-off: the worker fills handoff_ and sets in_flight_ (then ready_ under mu_); the
  // syncer writes it, empties it and clears in_flight_ (release), after which the worker may
  // fill it again. With everysec and no the worker hands over only a batch whose write
  // stalled, for the syncer to retry.
  Batch handoff_;
  std::atomic<bool> in_flight_{false};
  // A write stalled for want of space; handoff_ waits for a retry. Set by the thread whose
  // write failed, cleared by the syncer.
  std::atomic<bool> stalled_{false};
  std::atomic<bool> stop_retrying_{false};  // StopRetrying was called.

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = false;  // Guarded by mu_: with always, handoff_ holds a batch to write.
  bool stop_ = false;   // Guarded by mu_.
  std::string error_;   // Guarded by mu_.
  std::chrono::steady_clock::time_point stalled_since_;  // Guarded by mu_.
  bool closed_ = false;                                  // Control thread.

  // Held around each write(), to read file_bytes_ before an fdatasync and to publish
  // synced_bytes_ after it (not over the fdatasync itself).
  // It also guards the segments: current_ (whose fd only the syncer closes, so a sync may run
  // outside the lock), retired_ (switched away from, to be synced and closed) and next_.
  mutable std::mutex io_mu_;
  Segment current_;
  uint64_t generation_ = 0;  // Worker: the generation records go to (Cut switches it).
  std::vector<Segment> retired_;
  std::unique_ptr<Segment> next_;
  uint64_t segment_number_ = 0;  // Counts switches; a sync publishes only for its segment.
  std::atomic<uint64_t> durable_{0};
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> file_bytes_{0};
  std::atomic<uint64_t> synced_bytes_{0};
  std::atomic<uint64_t> syncs_{0};
  bool zero_ahead_;  // Syncer thread: ZeroAhead writes zeros (always, until a write of them fails).

  std::thread syncer_;
};

}  // namespace ringkv::persist

#endif  // RINGKV_PERSIST_LOG_WRITER_H_
