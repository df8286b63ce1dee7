#include "persist/log_writer.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "persist/block.h"
#include "persist/file.h"

namespace ringkv::persist {
namespace {

// everysec's syncer syncs this often when there is anything to sync.
constexpr auto kEverySecInterval = std::chrono::seconds(1);

}  // namespace

std::optional<SyncMode> ParseSyncMode(std::string_view text) {
  if (text == "always") return SyncMode::kAlways;
  if (text == "everysec") return SyncMode::kEverySec;
  if (text == "no") return SyncMode::kNo;
  return std::nullopt;
}

const char* SyncModeName(SyncMode mode) {
  switch (mode) {
    case SyncMode::kAlways:
      return "always";
    case SyncMode::kEverySec:
      return "everysec";
    case SyncMode::kNo:
      return "no";
  }
  return "?";
}

LogWriter::LogWriter(Segment segment, SyncMode mode, std::function<void()> on_progress,
                     std::atomic<bool>* group_failed, Env& env)
    : mode_(mode),
      on_progress_(std::move(on_progress)),
      env_(env),
      group_failed_(group_failed),
      current_(std::move(segment)) {
  file_bytes_.store(current_.bytes);
  synced_bytes_.store(current_.synced);
}

absl::StatusOr<LogWriter::Segment> LogWriter::OpenSegment(const std::string& dir,
                                                          const FileHeader& header, Env& env) {
  Segment segment;
  segment.path = absl::StrCat(dir, "/", LogName(header.generation, header.shard));
  if (int error = env.OpenLog(segment.path, &segment.fd); error != 0) {
    return IoError("cannot create the log", segment.path, error);
  }
  std::string first;
  AppendBlock(&first, 0, EncodeHeader(header));
  int error = env.Append(segment.fd, first);
  if (error == 0) error = env.SyncData(segment.fd);
  if (error != 0) {
    env.CloseLog(segment.fd);
    unlink(segment.path.c_str());
    return IoError("cannot write the log's header", segment.path, error);
  }
  segment.seed = SeedOf(header);
  segment.bytes = first.size();
  segment.synced = first.size();
  return segment;
}

absl::StatusOr<std::unique_ptr<LogWriter>> LogWriter::Create(
    const std::string& dir, const FileHeader& header, SyncMode mode,
    std::function<void()> on_progress, std::atomic<bool>* group_failed, Env* env) {
  if (env == nullptr) env = DefaultEnv();
  absl::StatusOr<Segment> segment = OpenSegment(dir, header, *env);
  if (!segment.ok()) return segment.status();
  if (absl::Status s = SyncDirectory(dir); !s.ok()) {
    env->CloseLog(segment->fd);
    return s;
  }
  std::unique_ptr<LogWriter> log(
      new LogWriter(std::move(*segment), mode, std::move(on_progress), group_failed, *env));
  log->syncer_ = std::thread([log = log.get()] { log->Run(); });
  return log;
}

void LogWriter::PrepareCut(Segment next) {
  std::lock_guard<std::mutex> io(io_mu_);
  next_ = std::make_unique<Segment>(std::move(next));
}

void LogWriter::Cut() {
  {
    std::lock_guard<std::mutex> io(io_mu_);
    cut_segment_ = std::move(next_);
  }
  cut_at_ = pending_blocks_.size();
  block_closed_ = true;
}

std::string LogWriter::path() const {
  std::lock_guard<std::mutex> io(io_mu_);
  return current_.path;
}

LogWriter::~LogWriter() {
  if (!closed_) (void)Close();
}

void LogWriter::Reserve(size_t record_bytes) {
  if (pending_.empty() && mode_ != SyncMode::kAlways) {
    pending_since_ = std::chrono::steady_clock::now();
  }
  if (!pending_blocks_.empty() && !block_closed_) {
    const size_t used = pending_.size() - pending_blocks_.back() - kBlockHeaderBytes;
    if (used == 0 || used + record_bytes <= kBlockTarget) return;
  }
  block_closed_ = false;
  pending_blocks_.push_back(pending_.size());
  pending_.append(kBlockHeaderBytes, '\0');
}

void LogWriter::Set(std::string_view key, std::string_view value, uint64_t version,
                    int64_t deadline_ms) {
  Reserve(MaxSetBytes(key.size(), value.size()));
  AppendSet(&pending_, key, value, version, deadline_ms);
  ++appended_;
}

void LogWriter::SetDeadline(std::string_view key, int64_t deadline_ms) {
  Reserve(MaxSetBytes(key.size(), 0));
  AppendDeadline(&pending_, key, deadline_ms);
  ++appended_;
}

void LogWriter::Delete(std::string_view key) {
  Reserve(MaxSetBytes(key.size(), 0));
  AppendDelete(&pending_, key);
  ++appended_;
}

void LogWriter::Commit() {
  const bool cut = cut_segment_ != nullptr;
  if ((pending_.empty() && !cut) || in_flight_.load(std::memory_order_acquire)) return;
  if (self_failed()) {  // Nothing more goes to the file; the worker refuses the writes.
    pending_.clear();
    pending_blocks_.clear();
    if (cut) {
      env_.CloseLog(cut_segment_->fd);
      cut_segment_.reset();
    }
    return;
  }
  const size_t cut_at = cut ? cut_at_ : pending_blocks_.size();
  if (mode_ != SyncMode::kAlways) {
    // Nobody waits for a sync: the worker writes the blocks itself (into the page cache), which
    // costs less than waking the syncer for them, and coalesces the turns of a busy stretch
    // into one write (a write() per turn of a few requests cost 2 us per PUT here). A cut is
    // written at once, so that the old segment is done with.
    const bool idle = appended_ == appended_at_commit_;
    appended_at_commit_ = appended_;
    if (!idle && !cut && pending_.size() < kCoalesceBytes &&
        std::chrono::steady_clock::now() - pending_since_ < kCoalesceTime) {
      return;
    }
    if (WriteBlocks(pending_, pending_blocks_, cut_at, std::move(cut_segment_))) {
      durable_.store(appended_, std::memory_order_release);
    }
    pending_.clear();
    pending_blocks_.clear();
    return;
  }
  handoff_.swap(pending_);
  handoff_blocks_.swap(pending_blocks_);
  handoff_seq_ = appended_;
  handoff_cut_ = cut_at;
  handoff_segment_ = std::move(cut_segment_);
  in_flight_.store(true, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = true;
  }
  cv_.notify_one();
}

void LogWriter::Fail(std::string_view step, const std::string& path, int error) {
  std::string message = absl::StrCat(std::string(step), " ", path, ": ", std::strerror(error));
  Log(LogLevel::kError, "%s; writes are refused from now on (reads go on)", message);
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(message);
  }
  failed_.store(true, std::memory_order_release);
  if (group_failed_ != nullptr) group_failed_->store(true, std::memory_order_release);
}

std::string LogWriter::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

bool LogWriter::WriteLocked(std::string_view bytes) {
  if (bytes.empty()) return true;
  const uint64_t before = file_bytes_.load(std::memory_order_relaxed);
  const int error = env_.Append(current_.fd, bytes);
  if (error == 0) file_bytes_.store(before + bytes.size(), std::memory_order_relaxed);
  if (error != 0) {
    Fail("cannot write the log", current_.path, error);
    return false;
  }
  return true;
}

bool LogWriter::WriteBlocks(std::string& data, const std::vector<size_t>& blocks, size_t cut,
                            std::unique_ptr<Segment> next) {
  std::lock_guard<std::mutex> io(io_mu_);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const size_t end = i + 1 < blocks.size() ? blocks[i + 1] : data.size();
    const uint32_t seed = i >= cut && next != nullptr ? next->seed : current_.seed;
    SealBlock(data.data() + blocks[i], end - blocks[i] - kBlockHeaderBytes, seed);
  }
  const size_t split = cut < blocks.size() ? blocks[cut] : data.size();
  const std::string_view bytes = data;
  if (!WriteLocked(bytes.substr(0, split))) {
    if (next != nullptr) env_.CloseLog(next->fd);
    return false;
  }
  if (next == nullptr) return true;
  current_.bytes = file_bytes_.load(std::memory_order_relaxed);
  current_.synced = synced_bytes_.load(std::memory_order_relaxed);
  if (mode_ == SyncMode::kNo) {
    env_.CloseLog(current_.fd);  // Nothing syncs it (the syncer syncs only at Close).
  } else {
    retired_.push_back(std::move(current_));
  }
  current_ = std::move(*next);
  ++segment_number_;
  file_bytes_.store(current_.bytes, std::memory_order_relaxed);
  synced_bytes_.store(current_.synced, std::memory_order_relaxed);
  return WriteLocked(bytes.substr(split));
}

bool LogWriter::Sync() {
  std::vector<Segment> retired;
  int fd;
  std::string path;
  uint64_t covered;
  uint64_t segment;
  {
    // Not held over the fdatasync, which may take milliseconds: with everysec the worker
    // writes meanwhile. What it writes then is not counted as synced.
    std::lock_guard<std::mutex> io(io_mu_);
    retired.swap(retired_);
    fd = current_.fd;
    path = current_.path;
    covered = file_bytes_.load(std::memory_order_relaxed);
    segment = segment_number_;
  }
  bool ok = true;
  for (Segment& old : retired) {
    if (int error = ok ? env_.SyncData(old.fd) : 0; error != 0) {
      Fail("cannot fdatasync the log", old.path, error);
      ok = false;
    }
    env_.CloseLog(old.fd);
  }
  if (!ok) return false;
  if (int error = env_.SyncData(fd); error != 0) {
    Fail("cannot fdatasync the log", path, error);
    return false;
  }
  {
    std::lock_guard<std::mutex> io(io_mu_);
    if (segment == segment_number_) synced_bytes_.store(covered, std::memory_order_relaxed);
  }
  syncs_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void LogWriter::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    switch (mode_) {
      case SyncMode::kAlways:
        cv_.wait(lock, [this] { return ready_ || stop_; });
        break;
      case SyncMode::kEverySec:
        cv_.wait_for(lock, kEverySecInterval, [this] { return stop_; });
        break;
      case SyncMode::kNo:
        cv_.wait(lock, [this] { return stop_; });
        break;
    }
    const bool have = ready_;
    const bool stop = stop_;
    ready_ = false;
    lock.unlock();
    if (have) {
      if (!self_failed() &&
          WriteBlocks(handoff_, handoff_blocks_, handoff_cut_, std::move(handoff_segment_)) &&
          Sync()) {
        durable_.store(handoff_seq_, std::memory_order_release);
      }
      handoff_segment_.reset();
      handoff_.clear();
      handoff_blocks_.clear();
      in_flight_.store(false, std::memory_order_release);
      // The worker holds answers for durable_, may have records piled up meanwhile, or writes
      // to refuse now that the log failed.
      on_progress_();
    }
    bool unsynced;
    {
      std::lock_guard<std::mutex> io(io_mu_);
      unsynced = !retired_.empty() || file_bytes_.load(std::memory_order_relaxed) >
                                          synced_bytes_.load(std::memory_order_relaxed);
    }
    if (mode_ == SyncMode::kEverySec && !self_failed() && unsynced) Sync();
    lock.lock();
    if (stop && !ready_) return;
  }
}

absl::Status LogWriter::Close() {
  if (closed_) return self_failed() ? absl::UnavailableError(error()) : absl::OkStatus();
  closed_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (syncer_.joinable()) syncer_.join();
  // What the worker recorded and had not handed over (always: the syncer was busy) or written
  // (everysec, no: it was still coalescing).
  if (!self_failed() && (!pending_.empty() || cut_segment_ != nullptr)) {
    const size_t cut_at = cut_segment_ != nullptr ? cut_at_ : pending_blocks_.size();
    WriteBlocks(pending_, pending_blocks_, cut_at, std::move(cut_segment_));
    pending_.clear();
    pending_blocks_.clear();
  }
  if (!self_failed() && Sync()) durable_.store(appended_, std::memory_order_release);
  std::lock_guard<std::mutex> io(io_mu_);
  for (const Segment& old : retired_) env_.CloseLog(old.fd);  // Left by a failure.
  retired_.clear();
  env_.CloseLog(current_.fd);
  if (cut_segment_ != nullptr) env_.CloseLog(cut_segment_->fd);
  if (next_ != nullptr) env_.CloseLog(next_->fd);  // Prepared for a cut the worker never made.
  if (self_failed()) return absl::UnavailableError(error());
  return absl::OkStatus();
}

}  // namespace ringkv::persist
