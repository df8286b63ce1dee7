// SnapshotFile: one shard's snapshot file as it is written: the sink a worker's walk (or, at
// exit, a thread's ForEach) hands keys to, and a writer thread that puts them on disk.
//
// Add() encodes each key into a block of about kBlockBytes; a full block is sealed and queued
// for the writer thread, which appends it to the file (persist/file.h's AtomicFileWriter: a
// temporary file until Commit). The queue holds at most kMaxQueuedBytes: past that the sink is
// backlogged() and the walk waits, so the memory a snapshot takes is its buffers, whatever the
// size of the data. Finish() queues the last block and the footer; the writer then commits the
// file (fsync, rename, directory fsync) and Wait() returns how that went.
//
// Threads: Add, backlogged, Finish on the walking thread (the worker's); WaitForRoom on a thread
// that may block (never a worker); Wait on any other; `wake` is called from the writer thread
// whenever it has made room.
#ifndef RINGKV_PERSIST_SNAPSHOT_FILE_H_
#define RINGKV_PERSIST_SNAPSHOT_FILE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "persist/file.h"
#include "persist/format.h"
#include "shard/worker.h"

namespace ringkv::persist {

class SnapshotFile final : public SnapshotJob {
 public:
  static constexpr size_t kBlockBytes = size_t{1} << 20;
  static constexpr size_t kMaxQueuedBytes = size_t{4} << 20;
  // The writer thread's nice value (setpriority on the thread alone).
  static constexpr int kWriterNice = 19;

  // Creates the temporary file of SnapshotName(header) in `dir` and writes its header.
  // `crash_when_written` (tests): the writer calls it once the file is written, before Commit.
  static absl::StatusOr<std::unique_ptr<SnapshotFile>> Create(
      const std::string& dir, const FileHeader& header, std::function<void()> wake,
      std::function<void()> crash_when_written = nullptr);
  ~SnapshotFile() override;
  SnapshotFile(const SnapshotFile&) = delete;
  SnapshotFile& operator=(const SnapshotFile&) = delete;

  // SnapshotJob.
  void Add(std::string_view key, std::string_view value, uint64_t version,
           int64_t deadline_ms) override;
  bool backlogged() const override {
    return queued_bytes_.load(std::memory_order_acquire) >= kMaxQueuedBytes;
  }
  void Finish(uint64_t revision) override;
  // A replica's position at the cut, for the footer (before Finish).
  void set_position(const ReplPosition& position) {
    footer_.history = position.history;
    footer_.lsn = position.lsn;
  }

  // Blocks while backlogged().
  void WaitForRoom();
  // Blocks until the file is committed (or failed); once Finish() was called.
  absl::Status Wait();

  uint64_t keys() const { return footer_.records; }  // After Wait.
  uint64_t bytes() const { return file_->bytes(); }  // After Wait.

 private:
  SnapshotFile(std::unique_ptr<AtomicFileWriter> file, uint32_t seed, std::function<void()> wake,
               std::function<void()> crash_when_written);
  // Seals block_ (unless empty) and queues it.
  void Seal();
  void Queue(std::string block);
  void Run();

  // Constant after construction.
  const uint32_t seed_;
  const std::function<void()> wake_;
  const std::function<void()> crash_when_written_;
  const std::unique_ptr<AtomicFileWriter> file_;  // Writer thread's (main thread after Wait).

  // Walking thread only.
  std::string block_;
  SnapshotFooter footer_;

  std::mutex mu_;
  std::condition_variable cv_;     // The writer waits for blocks, WaitForRoom for room.
  std::deque<std::string> queue_;  // Guarded by mu_.
  bool finished_ = false;          // Guarded by mu_: no more blocks come.
  bool commit_ = false;            // Guarded by mu_: Finish() was called.
  bool done_ = false;              // Guarded by mu_.
  absl::Status status_;            // Guarded by mu_.
  std::atomic<size_t> queued_bytes_{0};
  std::thread writer_;
};

}  // namespace ringkv::persist

#endif  // RINGKV_PERSIST_SNAPSHOT_FILE_H_
