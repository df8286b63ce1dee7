#include "persist/log_writer.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "persist/block.h"
#include "persist/file.h"
#include "server/log.h"

namespace ringkv::persist {
namespace {

// everysec's syncer syncs this often when there is anything to sync.
constexpr auto kEverySecInterval = std::chrono::seconds(1);

// The open logs, for SimulatePowerLoss.
std::mutex registry_mu;
std::vector<LogWriter*>& Registry() {
  static auto* logs = new std::vector<LogWriter*>();
  return *logs;
}

uint64_t FailAfterBytes() {
  const char* text = std::getenv("RINGKV_TEST_LOG_FAIL_AFTER_BYTES");
  uint64_t n = 0;
  if (text == nullptr || !absl::SimpleAtoi(text, &n)) return 0;
  return n;
}

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

LogWriter::LogWriter(std::string path, int fd, uint32_t seed, SyncMode mode,
                     std::function<void()> on_progress, std::atomic<bool>* group_failed)
    : path_(std::move(path)),
      fd_(fd),
      seed_(seed),
      mode_(mode),
      on_progress_(std::move(on_progress)),
      fail_after_bytes_(FailAfterBytes()),
      group_failed_(group_failed) {}

absl::StatusOr<std::unique_ptr<LogWriter>> LogWriter::Create(const std::string& dir,
                                                             const FileHeader& header,
                                                             SyncMode mode,
                                                             std::function<void()> on_progress,
                                                             std::atomic<bool>* group_failed) {
  std::string path = absl::StrCat(dir, "/", LogName(header.generation, header.shard));
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("cannot create the log", path, errno);
  std::string first;
  AppendBlock(&first, 0, EncodeHeader(header));
  int error = WriteAll(fd, first);
  if (error == 0 && fdatasync(fd) != 0) error = errno;
  if (error != 0) {
    close(fd);
    unlink(path.c_str());
    return IoError("cannot write the log's header", path, error);
  }
  if (absl::Status s = SyncDirectory(dir); !s.ok()) {
    close(fd);
    return s;
  }
  std::unique_ptr<LogWriter> log(
      new LogWriter(std::move(path), fd, SeedOf(header), mode, std::move(on_progress),
                    group_failed));
  log->file_bytes_.store(first.size());
  log->synced_bytes_.store(first.size());
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    Registry().push_back(log.get());
  }
  log->syncer_ = std::thread([log = log.get()] { log->Run(); });
  return log;
}

LogWriter::~LogWriter() {
  if (!closed_) (void)Close();
}

void LogWriter::Reserve(size_t record_bytes) {
  if (pending_.empty() && mode_ != SyncMode::kAlways) {
    pending_since_ = std::chrono::steady_clock::now();
  }
  if (!pending_blocks_.empty()) {
    const size_t used = pending_.size() - pending_blocks_.back() - kBlockHeaderBytes;
    if (used == 0 || used + record_bytes <= kBlockTarget) return;
  }
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
  if (pending_.empty() || in_flight_.load(std::memory_order_acquire)) return;
  if (self_failed()) {  // Nothing more goes to the file; the worker refuses the writes.
    pending_.clear();
    pending_blocks_.clear();
    return;
  }
  if (mode_ != SyncMode::kAlways) {
    // Nobody waits for a sync: the worker writes the blocks itself (into the page cache), which
    // costs less than waking the syncer for them, and coalesces the turns of a busy stretch
    // into one write (a write() per turn of a few requests cost 2 us per PUT here).
    const bool idle = appended_ == appended_at_commit_;
    appended_at_commit_ = appended_;
    if (!idle && pending_.size() < kCoalesceBytes &&
        std::chrono::steady_clock::now() - pending_since_ < kCoalesceTime) {
      return;
    }
    if (WriteBlocks(pending_, pending_blocks_)) {
      durable_.store(appended_, std::memory_order_release);
    }
    pending_.clear();
    pending_blocks_.clear();
    return;
  }
  handoff_.swap(pending_);
  handoff_blocks_.swap(pending_blocks_);
  handoff_seq_ = appended_;
  in_flight_.store(true, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = true;
  }
  cv_.notify_one();
}

void LogWriter::Fail(std::string_view step, int error) {
  std::string message = absl::StrCat(std::string(step), " ", path_, ": ", std::strerror(error));
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

bool LogWriter::WriteBlocks(std::string& data, const std::vector<size_t>& blocks) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    const size_t end = i + 1 < blocks.size() ? blocks[i + 1] : data.size();
    SealBlock(data.data() + blocks[i], end - blocks[i] - kBlockHeaderBytes, seed_);
  }
  std::string_view bytes = data;
  int error = 0;
  std::lock_guard<std::mutex> io(io_mu_);
  const uint64_t before = file_bytes_.load(std::memory_order_relaxed);
  if (fail_after_bytes_ != 0 && before + bytes.size() > fail_after_bytes_) {
    bytes = bytes.substr(0, fail_after_bytes_ > before ? fail_after_bytes_ - before : 0);
    error = ENOSPC;
  }
  const int write_error = WriteAll(fd_, bytes);
  if (write_error == 0) file_bytes_.store(before + bytes.size(), std::memory_order_relaxed);
  if (write_error != 0) error = write_error;
  if (error != 0) {
    Fail("cannot write the log", error);
    return false;
  }
  return true;
}

bool LogWriter::Sync() {
  uint64_t covered;
  {
    // Not held over the fdatasync, which may take milliseconds: with everysec the worker
    // writes meanwhile. What it writes then is not counted as synced.
    std::lock_guard<std::mutex> io(io_mu_);
    covered = file_bytes_.load(std::memory_order_relaxed);
  }
  if (fdatasync(fd_) != 0) {
    Fail("cannot fdatasync the log", errno);
    return false;
  }
  {
    // Under the mutex again, so that once SimulatePowerLoss holds it no sync can be published
    // (and no answer released) after it cut the file.
    std::lock_guard<std::mutex> io(io_mu_);
    synced_bytes_.store(covered, std::memory_order_relaxed);
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
      if (!self_failed() && WriteBlocks(handoff_, handoff_blocks_) && Sync()) {
        durable_.store(handoff_seq_, std::memory_order_release);
      }
      handoff_.clear();
      handoff_blocks_.clear();
      in_flight_.store(false, std::memory_order_release);
      // The worker holds answers for durable_, may have records piled up meanwhile, or writes
      // to refuse now that the log failed.
      on_progress_();
    }
    const bool unsynced = file_bytes_.load(std::memory_order_relaxed) >
                          synced_bytes_.load(std::memory_order_relaxed);
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
  if (!self_failed() && !pending_.empty() && WriteBlocks(pending_, pending_blocks_)) {
    pending_.clear();
    pending_blocks_.clear();
  }
  if (!self_failed() && Sync()) durable_.store(appended_, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    std::erase(Registry(), this);
  }
  close(fd_);
  if (self_failed()) return absl::UnavailableError(error());
  return absl::OkStatus();
}

void SimulatePowerLoss() {
  registry_mu.lock();  // Never released: the process ends here.
  for (LogWriter* log : Registry()) {
    log->io_mu_.lock();  // Between a write and a sync, or before either.
    if (ftruncate(log->fd_, static_cast<off_t>(log->synced_bytes_.load())) != 0) _exit(1);
  }
  kill(getpid(), SIGKILL);
  _exit(137);  // Not reached.
}

}  // namespace ringkv::persist
