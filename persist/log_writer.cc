#include "persist/log_writer.h"

#include <linux/magic.h>
#include <sys/vfs.h>

#include <algorithm>
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
// A stalled log's retries: the first this long after the failure, then twice as long each time
// up to the last.
constexpr std::chrono::milliseconds kFirstRetry{50};
constexpr std::chrono::milliseconds kLastRetry{2000};

enum class ZeroRoom { kYes, kNotNow, kNever };

// Whether the file system of `fd` has room for `bytes` of zeros beyond kZeroReserve; never on a
// tmpfs (no disk behind it: a sync costs nothing there, and zeros would cost memory).
ZeroRoom RoomForZeros(int fd, uint64_t bytes) {
  struct statfs fs;
  if (fstatfs(fd, &fs) != 0) return ZeroRoom::kYes;  // Zero's own failure says what is wrong.
  if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) return ZeroRoom::kNever;
  return static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_bsize) >=
                 LogWriter::kZeroReserve + bytes
             ? ZeroRoom::kYes
             : ZeroRoom::kNotNow;
}

// A failed write of zeros that says nothing about the disk's health: it is full.
bool OutOfSpace(int error) { return error == ENOSPC || error == EDQUOT; }

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
                     LogGroup* group, Env& env)
    : mode_(mode),
      on_progress_(std::move(on_progress)),
      env_(env),
      group_(group),
      current_(std::move(segment)),
      zero_ahead_(mode == SyncMode::kAlways) {
  generation_ = current_.generation;
  file_bytes_.store(current_.bytes);
  synced_bytes_.store(current_.synced);
}

absl::StatusOr<LogWriter::Segment> LogWriter::OpenSegment(const std::string& dir,
                                                          const FileHeader& header, SyncMode mode,
                                                          Env& env) {
  Segment segment;
  segment.path = absl::StrCat(dir, "/", LogName(header.generation, header.shard));
  segment.generation = header.generation;
  if (int error = env.OpenLog(segment.path, &segment.fd); error != 0) {
    return IoError("cannot create the log", segment.path, error);
  }
  std::string first;
  AppendBlock(&first, 0, EncodeHeader(header));
  int error = env.Write(segment.fd, 0, first);
  // With always, the first zeros too (this is not a worker's thread), so that the first
  // batches need not wait for them. Without them the log zeros later, or not at all.
  // Any other failure than a full disk is the disk's (sync_file_range may have taken the
  // writeback error an fdatasync would report), and fails the segment.
  if (error == 0 && mode == SyncMode::kAlways &&
      RoomForZeros(segment.fd, kZeroLow) == ZeroRoom::kYes) {
    error = env.Zero(segment.fd, first.size(), kZeroLow);
    if (error == 0) {
      segment.zeroed = first.size() + kZeroLow;
    } else if (OutOfSpace(error)) {
      error = env.Truncate(segment.fd, first.size());
    }
  }
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

absl::StatusOr<std::unique_ptr<LogWriter>> LogWriter::Create(const std::string& dir,
                                                             const FileHeader& header,
                                                             SyncMode mode,
                                                             std::function<void()> on_progress,
                                                             LogGroup* group, Env* env) {
  if (env == nullptr) env = DefaultEnv();
  absl::StatusOr<Segment> segment = OpenSegment(dir, header, mode, *env);
  if (!segment.ok()) return segment.status();
  if (absl::Status s = SyncDirectory(dir); !s.ok()) {
    env->CloseLog(segment->fd);
    return s;
  }
  return Start(std::move(*segment), mode, std::move(on_progress), group, *env);
}

std::unique_ptr<LogWriter> LogWriter::Start(Segment segment, SyncMode mode,
                                            std::function<void()> on_progress, LogGroup* group,
                                            Env& env) {
  std::unique_ptr<LogWriter> log(
      new LogWriter(std::move(segment), mode, std::move(on_progress), group, env));
  log->syncer_ = std::thread([log = log.get()] { log->Run(); });
  return log;
}

std::unique_ptr<LogWriter> LogWriter::CreateWaiting(const std::string& path, SyncMode mode,
                                                    std::function<void()> on_progress,
                                                    LogGroup* group, Env& env) {
  const std::optional<ParsedName> name = ParseName(path.substr(path.rfind('/') + 1));
  std::unique_ptr<LogWriter> log(
      new LogWriter(Segment{.path = path, .generation = name ? name->generation : 0}, mode,
                    std::move(on_progress), group, env));
  log->error_ = absl::StrCat("cannot create the log ", path, ": ", std::strerror(ENOSPC),
                             "; writes are refused until it can be created");
  log->stalled_since_ = std::chrono::steady_clock::now();
  log->in_flight_.store(true, std::memory_order_relaxed);
  log->stalled_.store(true, std::memory_order_relaxed);
  if (group != nullptr) group->stalled.fetch_add(1, std::memory_order_acq_rel);
  log->syncer_ = std::thread([log = log.get()] { log->Run(); });
  return log;
}

void LogWriter::Attach(Segment segment) {
  std::lock_guard<std::mutex> io(io_mu_);
  current_ = std::move(segment);
  file_bytes_.store(current_.bytes, std::memory_order_relaxed);
  synced_bytes_.store(current_.synced, std::memory_order_relaxed);
}

void LogWriter::PrepareCut(Segment next) {
  std::lock_guard<std::mutex> io(io_mu_);
  next_ = std::make_unique<Segment>(std::move(next));
}

void LogWriter::Cut() {
  {
    std::lock_guard<std::mutex> io(io_mu_);
    pending_.next = std::move(next_);
  }
  if (pending_.next != nullptr) generation_ = pending_.next->generation;
  pending_.cut = pending_.blocks.size();
  block_closed_ = true;
}

std::string LogWriter::path() const {
  std::lock_guard<std::mutex> io(io_mu_);
  return current_.path;
}

LogWriter::~LogWriter() {
  if (!closed_) (void)Close();
}

void LogWriter::Batch::Clear() {
  data.clear();
  blocks.clear();
  cut = 0;
  next.reset();
  seq = 0;
}

void LogWriter::Reserve(size_t record_bytes) {
  if (pending_.data.empty() && mode_ != SyncMode::kAlways) {
    pending_since_ = std::chrono::steady_clock::now();
  }
  if (!pending_.blocks.empty() && !block_closed_) {
    const size_t used = pending_.data.size() - pending_.blocks.back() - kBlockHeaderBytes;
    if (used == 0 || used + record_bytes <= kBlockTarget) return;
  }
  block_closed_ = false;
  pending_.blocks.push_back(pending_.data.size());
  pending_.data.append(kBlockHeaderBytes, '\0');
}

void LogWriter::Set(std::string_view key, std::string_view value, uint64_t version,
                    int64_t deadline_ms) {
  Reserve(MaxSetBytes(key.size(), value.size()));
  AppendSet(&pending_.data, key, value, version, deadline_ms);
  ++appended_;
}

void LogWriter::SetDeadline(std::string_view key, int64_t deadline_ms) {
  Reserve(MaxSetBytes(key.size(), 0));
  AppendDeadline(&pending_.data, key, deadline_ms);
  ++appended_;
}

void LogWriter::Delete(std::string_view key) {
  Reserve(MaxSetBytes(key.size(), 0));
  AppendDelete(&pending_.data, key);
  ++appended_;
}

void LogWriter::Position(std::string_view history, uint64_t lsn, bool reset) {
  Reserve(MaxSetBytes(history.size(), 0));
  AppendPosition(&pending_.data, history, lsn, reset);
}

void LogWriter::Commit() {
  // While a batch is with the syncer (always: being written; any mode: stalled) the records
  // wait here for the next hand-off or write.
  if (pending_.empty() || in_flight_.load(std::memory_order_acquire)) return;
  if (self_failed()) {  // Nothing more goes to the file; the worker refuses the writes.
    if (pending_.next != nullptr) env_.CloseLog(pending_.next->fd);
    pending_.Clear();
    return;
  }
  if (pending_.next == nullptr) pending_.cut = pending_.blocks.size();
  pending_.seq = appended_;
  if (mode_ != SyncMode::kAlways) {
    // Nobody waits for a sync: the worker writes the blocks itself (into the page cache), which
    // costs less than waking the syncer for them, and coalesces the turns of a busy stretch
    // into one write (a write() per turn of a few requests cost 2 us per PUT here). A cut is
    // written at once, so that the old segment is done with.
    const bool idle = appended_ == appended_at_commit_;
    appended_at_commit_ = appended_;
    if (!idle && pending_.next == nullptr && pending_.data.size() < kCoalesceBytes &&
        std::chrono::steady_clock::now() - pending_since_ < kCoalesceTime) {
      return;
    }
    if (int error = WriteBatch(pending_); error != 0) {
      WriteFailed(error, pending_);
    } else {
      durable_.store(pending_.seq, std::memory_order_release);
    }
    pending_.Clear();
    return;
  }
  std::swap(handoff_, pending_);
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
  if (group_ != nullptr) group_->failed.store(true, std::memory_order_release);
}

std::string LogWriter::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

int LogWriter::WriteLocked(std::string_view bytes) {
  if (bytes.empty()) return 0;
  const uint64_t before = file_bytes_.load(std::memory_order_relaxed);
  const int error = env_.Write(current_.fd, before, bytes);
  if (error == 0) {
    file_bytes_.store(before + bytes.size(), std::memory_order_relaxed);
    return 0;
  }
  // A failed write may have written part of `bytes`: cut it off, so that the file ends with
  // a whole block and a retry writes where this write began. Zeros after it go too.
  if (int cut = env_.Truncate(current_.fd, before); cut != 0) return cut;
  current_.zeroed = 0;
  return error;
}

int LogWriter::WriteBatch(Batch& batch) {
  std::lock_guard<std::mutex> io(io_mu_);
  const bool switches = batch.next != nullptr;
  // Sealing is idempotent: a retried batch seals its blocks again to the same bytes.
  for (size_t i = 0; i < batch.blocks.size(); ++i) {
    const size_t end = i + 1 < batch.blocks.size() ? batch.blocks[i + 1] : batch.data.size();
    const uint32_t seed = switches && i >= batch.cut ? batch.next->seed : current_.seed;
    SealBlock(batch.data.data() + batch.blocks[i], end - batch.blocks[i] - kBlockHeaderBytes, seed);
  }
  const size_t split =
      switches && batch.cut < batch.blocks.size() ? batch.blocks[batch.cut] : batch.data.size();
  const std::string_view bytes = batch.data;
  if (int error = WriteLocked(bytes.substr(0, split)); error != 0) return error;
  if (!switches) return 0;
  current_.bytes = file_bytes_.load(std::memory_order_relaxed);
  current_.synced = synced_bytes_.load(std::memory_order_relaxed);
  if (mode_ == SyncMode::kNo) {
    env_.CloseLog(current_.fd);  // Nothing syncs it (the syncer syncs only at Close).
  } else {
    retired_.push_back(std::move(current_));
  }
  current_ = std::move(*batch.next);
  batch.next.reset();
  ++segment_number_;
  file_bytes_.store(current_.bytes, std::memory_order_relaxed);
  synced_bytes_.store(current_.synced, std::memory_order_relaxed);
  if (int error = WriteLocked(bytes.substr(split)); error != 0) {
    // The part before the cut is in the old segment: what is left all goes to the new one.
    batch.data.erase(0, split);
    batch.blocks.erase(batch.blocks.begin(), batch.blocks.begin() + batch.cut);
    for (size_t& start : batch.blocks) start -= split;
    batch.cut = batch.blocks.size();
    return error;
  }
  return 0;
}

void LogWriter::WriteFailed(int error, Batch& batch) {
  const std::string path = this->path();
  if (error != ENOSPC && error != EDQUOT) {
    Fail("cannot write the log", path, error);
    if (batch.next != nullptr) env_.CloseLog(batch.next->fd);
    return;
  }
  std::string message = absl::StrCat("cannot write the log ", path, ": ", std::strerror(error),
                                     "; writes are refused until a retried write succeeds");
  Log(LogLevel::kError, "%s (retried every 2 s at most; reads go on)", message);
  {
    // All of the stall under mu_, which the syncer's waits check.
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(message);
    stalled_since_ = std::chrono::steady_clock::now();
    if (&batch != &handoff_) std::swap(handoff_, batch);
    in_flight_.store(true, std::memory_order_relaxed);
    stalled_.store(true, std::memory_order_release);
    if (group_ != nullptr) group_->stalled.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_one();  // The syncer retries (with everysec and no it may be waiting).
}

bool LogWriter::Retry() {
  const bool giving_up = stop_retrying_.load(std::memory_order_acquire);
  bool has_file;
  {
    std::lock_guard<std::mutex> io(io_mu_);
    has_file = current_.fd >= 0;
  }
  const int error = has_file ? WriteBatch(handoff_) : ENOSPC;  // CreateWaiting's: no file yet.
  if (error == ENOSPC || error == EDQUOT) {
    if (!giving_up) return false;
    Fail(has_file ? "cannot write the log at the stop" : "cannot create the log by the stop",
         path(), error);
  } else if (error != 0) {
    Fail("cannot write the log", path(), error);
  } else if (Sync()) {
    double seconds;
    {
      std::lock_guard<std::mutex> lock(mu_);
      error_.clear();
      seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - stalled_since_).count();
    }
    // The stall ends before the record is called durable: whoever sees it durable sees the log
    // taking writes again.
    EndStall();
    durable_.store(handoff_.seq, std::memory_order_release);
    Log(LogLevel::kWarning, "the log %s is written again, after %.1f s; writes are taken again",
        path(), seconds);
  }
  if (handoff_.next != nullptr) env_.CloseLog(handoff_.next->fd);  // Only if the log failed.
  if (self_stalled()) EndStall();
  FinishHandoff();
  return true;
}

void LogWriter::EndStall() {
  stalled_.store(false, std::memory_order_release);
  if (group_ != nullptr) group_->stalled.fetch_sub(1, std::memory_order_acq_rel);
}

void LogWriter::FinishHandoff() {
  handoff_.Clear();
  in_flight_.store(false, std::memory_order_release);
  // The worker holds answers for durable_, may have records piled up meanwhile, or writes to
  // refuse now that the log failed.
  on_progress_();
}

void LogWriter::StopRetrying() {
  stop_retrying_.store(true, std::memory_order_release);
  { std::lock_guard<std::mutex> lock(mu_); }  // The syncer is waiting, or sees the flag.
  cv_.notify_one();
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
    if (int error = ok ? TrimZeros(old, old.bytes) : 0; error != 0) {
      Fail("cannot cut the zeros off the log", old.path, error);
      ok = false;
    }
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

int LogWriter::TrimZeros(Segment& segment, uint64_t records) {
  if (segment.zeroed <= records) return 0;
  segment.zeroed = 0;
  return env_.Truncate(segment.fd, records);
}

bool LogWriter::Called() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_ || stop_;
}

void LogWriter::ZeroAhead() {
  int fd = -1;
  std::string path;
  int error = 0;
  bool zeroed = false;
  for (;;) {
    uint64_t start;
    bool low;
    {
      // Only this thread writes or switches segments (always), so the records end where they
      // do until the next batch, which this thread writes too.
      std::lock_guard<std::mutex> io(io_mu_);
      if (!zero_ahead_ || current_.fd < 0) break;
      const uint64_t records = file_bytes_.load(std::memory_order_relaxed);
      start = std::max(current_.zeroed, records);
      if (start - records >= kZeroAhead) break;
      low = start - records < kZeroLow;
      fd = current_.fd;
      path = current_.path;
    }
    if (!low && Called()) break;
    if (const ZeroRoom room = RoomForZeros(fd, kZeroPiece); room != ZeroRoom::kYes) {
      if (room == ZeroRoom::kNever) zero_ahead_ = false;
      break;
    }
    error = env_.Zero(fd, start, kZeroPiece);
    if (error != 0) break;
    {
      std::lock_guard<std::mutex> io(io_mu_);
      current_.zeroed = start + kZeroPiece;
    }
    zeroed = true;
    if (low && Called()) break;  // Enough for the batch that waits.
  }
  if (error != 0 && !OutOfSpace(error)) {
    // Not a full disk: the disk's own failure, which sync_file_range may have taken from the
    // next fdatasync (persist/file.h: a failed sync is never trusted again).
    Fail("cannot write zeros ahead of the log", path, error);
    return;
  }
  if (error != 0) {
    // Whatever part of the zeros was written goes again; a failed cut fails the log, as a
    // failed write's does.
    int cut;
    {
      std::lock_guard<std::mutex> io(io_mu_);
      zero_ahead_ = false;
      current_.zeroed = 0;
      cut = env_.Truncate(current_.fd, file_bytes_.load(std::memory_order_relaxed));
    }
    if (cut != 0) {
      Fail("cannot cut the zeros off the log", path, cut);
      return;
    }
    Log(LogLevel::kWarning,
        "cannot write zeros ahead of the log %s: %s; from now on its fdatasyncs also commit "
        "the file's growth, as without them (slower)",
        path, std::strerror(error));
  }
  // The zeros' size committed now, not by the next batch's fdatasync. Only zeros are unsynced
  // here (every batch is synced before its answers go), but a failed fdatasync fails the log
  // whatever it held.
  if (zeroed && !self_failed()) {
    if (int sync = env_.SyncData(fd); sync != 0) Fail("cannot fdatasync the log", path, sync);
  }
}

void LogWriter::Run() {
  if (mode_ == SyncMode::kAlways && !self_stalled()) ZeroAhead();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (self_stalled()) {
      RetryUntilWritten(lock);
      if (stop_ && self_stalled()) return;  // Close makes the last try.
      continue;  // A hand-off made since the stall ended is waiting in ready_.
    }
    // ready_ means one thing only: with always, handoff_ holds a batch to write. A stall (the
    // worker's write, with everysec and no) wakes this thread through stalled_.
    auto woken = [this] { return ready_ || stop_ || self_stalled(); };
    switch (mode_) {
      case SyncMode::kAlways:
      case SyncMode::kNo:
        cv_.wait(lock, woken);
        break;
      case SyncMode::kEverySec:
        cv_.wait_for(lock, kEverySecInterval, woken);
        break;
    }
    if (self_stalled()) continue;
    const bool have = ready_;
    const bool stop = stop_;
    ready_ = false;
    lock.unlock();
    if (have) {
      if (self_failed()) {
        if (handoff_.next != nullptr) env_.CloseLog(handoff_.next->fd);
        FinishHandoff();
      } else if (int error = WriteBatch(handoff_); error != 0) {
        WriteFailed(error, handoff_);  // Stalled (the batch stays for a retry), or failed.
        if (!self_stalled()) FinishHandoff();
      } else {
        if (Sync()) durable_.store(handoff_.seq, std::memory_order_release);
        FinishHandoff();
      }
    }
    bool unsynced;
    {
      std::lock_guard<std::mutex> io(io_mu_);
      unsynced = !retired_.empty() || file_bytes_.load(std::memory_order_relaxed) >
                                          synced_bytes_.load(std::memory_order_relaxed);
    }
    if (mode_ == SyncMode::kEverySec && !self_failed() && !self_stalled() && unsynced) Sync();
    if (mode_ == SyncMode::kAlways && !self_failed() && !self_stalled()) ZeroAhead();
    lock.lock();
    if (stop && !ready_ && !self_stalled()) return;
  }
}

void LogWriter::RetryUntilWritten(std::unique_lock<std::mutex>& lock) {
  auto backoff = kFirstRetry;
  for (;;) {
    cv_.wait_for(lock, backoff,
                 [this] { return stop_ || stop_retrying_.load(std::memory_order_acquire); });
    if (stop_) return;
    lock.unlock();
    const bool done = Retry();
    lock.lock();
    if (done) return;
    backoff = std::min(backoff * 2, kLastRetry);
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
  // A stalled batch gets its last try.
  if (self_stalled()) {
    stop_retrying_.store(true, std::memory_order_release);
    Retry();
  }
  // What the worker recorded and had not handed over (always: the syncer was busy) or written
  // (everysec, no: it was still coalescing).
  if (!self_failed() && !pending_.empty()) {
    if (pending_.next == nullptr) pending_.cut = pending_.blocks.size();
    if (int error = WriteBatch(pending_); error != 0) {
      Fail("cannot write the log at the stop", path(), error);
    }
  }
  if (pending_.next != nullptr && self_failed()) env_.CloseLog(pending_.next->fd);
  pending_.Clear();
  if (!self_failed() && Sync()) durable_.store(appended_, std::memory_order_release);
  // A clean stop leaves no zeros after the records (a crash leaves them: persist/block.h).
  // The syncer has stopped: this thread alone uses the segments.
  if (!self_failed() && current_.fd >= 0 && current_.zeroed > file_bytes_.load()) {
    int error = TrimZeros(current_, file_bytes_.load());
    if (error == 0) error = env_.SyncData(current_.fd);
    if (error != 0) Fail("cannot cut the zeros off the log", current_.path, error);
  }
  std::lock_guard<std::mutex> io(io_mu_);
  for (const Segment& old : retired_) env_.CloseLog(old.fd);  // Left by a failure.
  retired_.clear();
  if (current_.fd >= 0) env_.CloseLog(current_.fd);
  if (next_ != nullptr) {  // Prepared for a cut the worker never made: no records, no zeros.
    if (!self_failed()) (void)TrimZeros(*next_, next_->bytes);
    env_.CloseLog(next_->fd);
  }
  if (self_failed()) return absl::UnavailableError(error());
  return absl::OkStatus();
}

}  // namespace ringkv::persist
