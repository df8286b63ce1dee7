#include "persist/snapshot_file.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <utility>

#include "persist/block.h"

namespace ringkv::persist {

SnapshotFile::SnapshotFile(std::unique_ptr<AtomicFileWriter> file, uint32_t seed,
                           std::function<void()> wake, std::function<void()> crash_when_written)
    : seed_(seed),
      wake_(std::move(wake)),
      crash_when_written_(std::move(crash_when_written)),
      file_(std::move(file)) {
  block_.assign(kBlockHeaderBytes, '\0');
}

absl::StatusOr<std::unique_ptr<SnapshotFile>> SnapshotFile::Create(
    const std::string& dir, const FileHeader& header, std::function<void()> wake,
    std::function<void()> crash_when_written) {
  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> file =
      AtomicFileWriter::Create(dir, SnapshotName(header.generation, header.shard));
  if (!file.ok()) return file.status();
  std::string first;
  AppendBlock(&first, 0, EncodeHeader(header));
  if (absl::Status s = (*file)->Append(first); !s.ok()) return s;
  std::unique_ptr<SnapshotFile> snapshot(new SnapshotFile(
      std::move(*file), SeedOf(header), std::move(wake), std::move(crash_when_written)));
  snapshot->writer_ = std::thread([s = snapshot.get()] { s->Run(); });
  return snapshot;
}

SnapshotFile::~SnapshotFile() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;  // Without a Finish: the writer stops, and the file is not committed.
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void SnapshotFile::Add(std::string_view key, std::string_view value, uint64_t version,
                       int64_t deadline_ms) {
  AppendSet(&block_, key, value, version, deadline_ms);
  ++footer_.records;
  if (block_.size() >= kBlockBytes) Seal();
}

void SnapshotFile::Seal() {
  if (block_.size() == kBlockHeaderBytes) return;
  SealBlock(block_.data(), block_.size() - kBlockHeaderBytes, seed_);
  ++footer_.data_blocks;
  std::string block;
  block.reserve(kBlockBytes + kBlockBytes / 8);
  block.append(kBlockHeaderBytes, '\0');
  block.swap(block_);
  Queue(std::move(block));
}

void SnapshotFile::Queue(std::string block) {
  queued_bytes_.fetch_add(block.size(), std::memory_order_acq_rel);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(block));
  }
  cv_.notify_all();
}

void SnapshotFile::Finish(uint64_t revision) {
  Seal();
  footer_.revision = revision;
  std::string footer;
  AppendBlock(&footer, seed_, EncodeFooter(footer_));
  Queue(std::move(footer));
  // Notified under the lock: once the writer sees finished_, the file may be committed and
  // this object destroyed (the owner's Wait returns), so nothing of it may be touched after.
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  commit_ = true;
  cv_.notify_all();
}

void SnapshotFile::WaitForRoom() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !backlogged(); });
}

absl::Status SnapshotFile::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  return status_;
}

void SnapshotFile::Run() {
  // Serving comes first: on a busy machine the writer takes the CPU the workers leave, and the
  // walk waits for it (its queue is bounded).
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kWriterNice);
  absl::Status status;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return !queue_.empty() || finished_; });
    if (queue_.empty()) break;
    std::string block = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    // After a failure the blocks are dropped, so that the walk is never held up for good.
    if (status.ok()) status = file_->Append(block);
    queued_bytes_.fetch_sub(block.size(), std::memory_order_acq_rel);
    cv_.notify_all();  // WaitForRoom.
    if (wake_) wake_();
    lock.lock();
  }
  // Finish() queues the footer before it sets finished_, so the file is whole here; without
  // a Finish (the destructor) it is dropped.
  const bool commit = commit_;
  lock.unlock();
  if (!commit) status = absl::CancelledError("the snapshot was dropped before its end");
  if (status.ok() && crash_when_written_) crash_when_written_();
  if (status.ok()) status = file_->Commit();
  lock.lock();
  status_ = status;
  done_ = true;
  cv_.notify_all();
}

}  // namespace ringkv::persist
