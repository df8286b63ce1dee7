#include "persist/data_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "persist/block.h"
#include "persist/file.h"
#include "persist/snapshot_file.h"
#include "server/log.h"

namespace ringkv::persist {
namespace {

int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// For crash tests: kills the process (SIGKILL) at the step of the
// snapshot commit that RINGKV_TEST_CRASH_IN_SNAPSHOT names: "writing" (shard 0's temporary file
// written, not committed), "renamed" (every snapshot file in place, no MANIFEST yet),
// "manifest" (the MANIFEST in place, nothing removed yet), "cleanup" (one stale file removed).
void CrashPoint(std::string_view step) {
  static const char* const crash_at = std::getenv("RINGKV_TEST_CRASH_IN_SNAPSHOT");
  if (crash_at != nullptr && step == crash_at) kill(getpid(), SIGKILL);
}

// One file restore reads, mapped, with its header checked.
struct Source {
  std::string path;
  FileHeader header;
  std::unique_ptr<MappedFile> file;
  size_t body = 0;  // Where the blocks after the header start.
};

// How reading one file ended.
struct Outcome {
  BlockReader::End end = BlockReader::End::kClean;
  size_t offset = 0;     // Of the first byte not loaded.
  bool malformed = false;  // A block that checked out held a bad record, or a snapshot's end.
};

absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) {
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return IoError("cannot list", path, errno);
  std::vector<std::string> names;
  while (const dirent* entry = readdir(dir)) names.emplace_back(entry->d_name);
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<Source> OpenSource(const std::string& dir, const std::string& name,
                                  const ParsedName& parsed) {
  Source source;
  source.path = absl::StrCat(dir, "/", name);
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(source.path);
  if (!file.ok()) return file.status();
  source.file = std::move(*file);
  BlockReader reader(source.file->data(), 0);
  std::string_view payload;
  if (!reader.Next(&payload)) {
    // A log is created, given its header and synced before it takes a record: one whose header
    // is torn was cut short by a crash as it was created, and never held anything.
    if (parsed.kind == FileKind::kLog && reader.end() != BlockReader::End::kDamaged) {
      Log(LogLevel::kWarning, "%s: a log that a crash cut short as it was created; it holds "
          "nothing", source.path);
      source.file.reset();
      return source;
    }
    return absl::DataLossError(absl::StrCat(source.path, " is damaged at offset 0 (its header)"));
  }
  if (absl::Status s = DecodeHeader(payload, &source.header); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(source.path, ": ", s.message()));
  }
  if (source.header.kind != parsed.kind || source.header.generation != parsed.generation ||
      source.header.shard != parsed.shard) {
    return absl::DataLossError(
        absl::StrCat(source.path, ": its header names another file (generation ",
                     source.header.generation, ", shard ", source.header.shard, ")"));
  }
  source.body = reader.offset();
  return source;
}

// Applies the records of `source` that `keep` accepts to `shard`.
template <typename Keep>
Outcome Load(const Source& source, Shard& shard, Keep keep, int64_t now_ms) {
  const std::string_view data = source.file->data().substr(source.body);
  BlockReader reader(data, SeedOf(source.header));
  const bool snapshot = source.header.kind == FileKind::kSnapshot;
  Outcome outcome;
  SnapshotFooter footer;
  bool footer_seen = false;
  uint64_t records = 0;
  uint64_t blocks = 0;
  std::string_view payload;
  size_t block_start = 0;
  while (reader.Next(&payload)) {
    if (footer_seen) {  // Nothing may follow a snapshot's footer.
      outcome.malformed = true;
      break;
    }
    if (snapshot && DecodeFooter(payload, &footer)) {
      footer_seen = true;
      block_start = reader.offset();
      continue;
    }
    ++blocks;
    RecordReader records_in(payload);
    Record r;
    while (records_in.Next(&r)) {
      ++records;
      const uint64_t hash = Router::Hash(r.key);
      if (!keep(hash)) continue;
      const HashedKey key{r.key, hash};
      switch (r.kind) {
        case RecordKind::kSet:
          shard.LoadSet(key, r.value, r.version, r.deadline_ms, now_ms);
          break;
        case RecordKind::kDeadline:
          shard.LoadDeadline(key, r.deadline_ms, now_ms);
          break;
        case RecordKind::kDelete:
          shard.LoadDelete(key);
          break;
      }
    }
    if (records_in.malformed()) {
      outcome.malformed = true;
      break;
    }
    block_start = reader.offset();
  }
  outcome.end = reader.end();
  outcome.offset = source.body + (outcome.malformed ? block_start : reader.offset());
  if (snapshot && !outcome.malformed && outcome.end == BlockReader::End::kClean &&
      (!footer_seen || footer.records != records || footer.data_blocks != blocks)) {
    outcome.malformed = true;  // Not whole: a snapshot is committed whole or not at all.
  }
  return outcome;
}

}  // namespace

DataDir::DataDir(std::string path, SyncMode mode, bool load_intact, int lock_fd)
    : path_(std::move(path)), mode_(mode), load_intact_(load_intact), lock_fd_(lock_fd) {}

DataDir::~DataDir() {
  StopSnapshotter();
  (void)CloseLogs();
  close(lock_fd_);
}

absl::StatusOr<std::unique_ptr<DataDir>> DataDir::Open(const std::string& path, SyncMode mode,
                                                       bool load_intact) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return IoError("cannot create the data directory", path, errno);
  }
  const std::string lock_path = path + "/LOCK";
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) return IoError("cannot open", lock_path, errno);
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    close(lock_fd);
    if (error == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("the data directory ", path, " is in use by another ringkv-server"));
    }
    return IoError("cannot lock", lock_path, error);
  }
  std::unique_ptr<DataDir> dir(new DataDir(path, mode, load_intact, lock_fd));
  absl::StatusOr<std::string> manifest = ReadFile(path + "/MANIFEST");
  if (manifest.ok()) {
    if (absl::Status s = DecodeManifest(*manifest, &dir->manifest_); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(path, "/MANIFEST: ", s.message()));
    }
  } else if (manifest.status().code() != absl::StatusCode::kNotFound) {
    return manifest.status();
  }
  return dir;
}

absl::Status DataDir::Restore(const std::vector<Shard*>& shards, const Router& router,
                              int64_t now_ms) {
  const auto started = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(path_);
  if (!names.ok()) return names.status();
  const uint64_t snapshot_generation = manifest_.generation;
  // The snapshot's files, then each generation's logs, oldest first.
  std::vector<Source> snapshot;
  std::map<uint64_t, std::vector<Source>> logs;
  uint64_t newest = snapshot_generation;
  for (const std::string& name : *names) {
    const std::optional<ParsedName> parsed = ParseName(name);
    if (!parsed) continue;
    newest = std::max(newest, parsed->generation);
    const bool wanted = parsed->kind == FileKind::kSnapshot
                            ? parsed->generation == snapshot_generation && snapshot_generation > 0
                            : parsed->generation >= snapshot_generation;
    if (!wanted) continue;
    absl::StatusOr<Source> source = OpenSource(path_, name, *parsed);
    if (!source.ok()) return source.status();
    if (source->file == nullptr) continue;
    (parsed->kind == FileKind::kSnapshot ? snapshot : logs[parsed->generation])
        .push_back(std::move(*source));
  }
  if (snapshot_generation > 0 && snapshot.size() != manifest_.shards) {
    return absl::DataLossError(absl::StrCat(
        path_, "/MANIFEST names a snapshot of ", manifest_.shards, " files (generation ",
        snapshot_generation, "); ", snapshot.size(), " are there"));
  }
  // This run's logs: a generation no log has yet, and none below the snapshot's.
  generation_ = std::max<uint64_t>(newest + (logs.empty() ? 0 : 1), 1);

  // Every file is read by the threads that need it; outcomes[f] is file f's, set by whichever
  // read it (they agree).
  std::vector<const Source*> order;
  for (const Source& s : snapshot) order.push_back(&s);
  for (const auto& [generation, sources] : logs) {
    for (const Source& s : sources) order.push_back(&s);
  }
  const uint32_t n = static_cast<uint32_t>(shards.size());
  std::vector<Outcome> outcomes(order.size());
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      for (size_t f = 0; f < order.size(); ++f) {
        const Source& source = *order[f];
        if (source.header.shards == n) {
          if (source.header.shard != t) continue;
          outcomes[f] = Load(source, *shards[t], [](uint64_t) { return true; }, now_ms);
        } else {
          Outcome o = Load(source, *shards[t],
                           [&](uint64_t hash) { return router.ShardOf(hash) == t; }, now_ms);
          if (t == 0) outcomes[f] = o;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  for (size_t f = 0; f < order.size(); ++f) {
    const Source& source = *order[f];
    const Outcome& o = outcomes[f];
    const bool log = source.header.kind == FileKind::kLog;
    if (!o.malformed && o.end == BlockReader::End::kClean) continue;
    if (log && !o.malformed && o.end == BlockReader::End::kTorn) {
      Log(LogLevel::kWarning,
          "%s: its last block (from offset %d of %d bytes) is torn, a write that a crash cut "
          "short; it was never acknowledged, and the log is read up to it",
          source.path, o.offset, source.file->data().size());
      continue;
    }
    const std::string what =
        absl::StrCat(source.path, " is damaged at offset ", o.offset, " (of ",
                     source.file->data().size(), " bytes)");
    if (!load_intact_) {
      return absl::DataLossError(absl::StrCat(
          what, "; refusing to start. --load-intact starts from what is intact (this file up "
                "to that offset, and every other file)"));
    }
    Log(LogLevel::kWarning, "%s; --load-intact: loaded what comes before it", what);
  }
  for (Shard* shard : shards) restored_keys_ += shard->size();
  restore_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
                         .count();
  return RemoveStale(snapshot_generation, snapshot_generation);
}

absl::Status DataDir::RemoveStale(uint64_t keep_from, uint64_t snapshot_generation) {
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(path_);
  if (!names.ok()) return names.status();
  bool removed = false;
  for (const std::string& name : *names) {
    const std::optional<ParsedName> parsed = ParseName(name);
    const bool stale =
        name.ends_with(".tmp") ||
        (parsed && (parsed->kind == FileKind::kLog ? parsed->generation < keep_from
                                                   : parsed->generation != snapshot_generation));
    if (!stale) continue;
    const std::string file = absl::StrCat(path_, "/", name);
    if (unlink(file.c_str()) != 0) return IoError("cannot remove", file, errno);
    removed = true;
    CrashPoint("cleanup");
  }
  return removed ? SyncDirectory(path_) : absl::OkStatus();
}

absl::Status DataDir::OpenLogs(uint32_t workers,
                               const std::function<void(uint16_t)>& on_progress) {
  if (generation_ == 0) generation_ = std::max<uint64_t>(manifest_.generation, 1);
  on_progress_ = on_progress;
  const int64_t now_ms = WallClockMs();
  for (uint32_t i = 0; i < workers; ++i) {
    FileHeader header{.kind = FileKind::kLog,
                      .generation = generation_,
                      .shard = i,
                      .shards = workers,
                      .created_ms = now_ms};
    absl::StatusOr<std::unique_ptr<LogWriter>> log = LogWriter::Create(
        path_, header, mode_, [on_progress, i] { on_progress(static_cast<uint16_t>(i)); },
        &any_log_failed_);
    if (!log.ok()) return log.status();
    logs_.push_back(std::move(*log));
  }
  logs_open_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status DataDir::CloseLogs() {
  absl::Status status;
  for (auto& log : logs_) {
    if (absl::Status s = log->Close(); !s.ok() && status.ok()) status = s;
  }
  return status;
}

void DataDir::StartSnapshotter(std::function<void(uint32_t, SnapshotJob*)> start,
                               absl::Duration every) {
  start_snapshot_ = std::move(start);
  std::lock_guard<std::mutex> lock(snapshot_mu_);
  snapshotter_running_ = true;
  snapshotter_ = std::thread([this, every] { RunSnapshotter(every); });
}

void DataDir::RequestSnapshot(SnapshotDone done) {
  {
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    if (snapshotter_running_ && !snapshotter_stop_) {
      snapshot_requests_.push_back(std::move(done));
      snapshot_cv_.notify_one();
      return;
    }
  }
  done(absl::UnavailableError("the server is stopping; it takes a snapshot at exit unless "
                              "--no-snapshot-on-exit"));
}

void DataDir::StopSnapshotter() {
  {
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    snapshotter_stop_ = true;
  }
  snapshot_cv_.notify_one();
  if (snapshotter_.joinable()) snapshotter_.join();
}

void DataDir::RunSnapshotter(absl::Duration every) {
  const bool periodic = every > absl::ZeroDuration();
  const auto interval = absl::ToChronoNanoseconds(every);
  auto next = std::chrono::steady_clock::now() + interval;
  std::unique_lock<std::mutex> lock(snapshot_mu_);
  for (;;) {
    auto wanted = [this] { return snapshotter_stop_ || !snapshot_requests_.empty(); };
    if (periodic) {
      snapshot_cv_.wait_until(lock, next, wanted);
    } else {
      snapshot_cv_.wait(lock, wanted);
    }
    if (snapshotter_stop_) break;
    if (snapshot_requests_.empty() && std::chrono::steady_clock::now() < next) continue;
    std::vector<SnapshotDone> requests;
    requests.swap(snapshot_requests_);
    lock.unlock();
    const absl::StatusOr<SnapshotInfo> result = TakeLiveSnapshot();
    if (result.ok()) {
      Log(LogLevel::kInfo, "snapshot %d of %d keys (%d bytes) written to %s in %.3f s",
          result->generation, result->keys, result->bytes, path_, result->seconds);
    } else {
      Log(LogLevel::kError, "%s", result.status().message());
    }
    for (SnapshotDone& done : requests) done(result);
    lock.lock();
    next = std::chrono::steady_clock::now() + interval;
  }
  std::vector<SnapshotDone> requests;
  requests.swap(snapshot_requests_);
  lock.unlock();
  for (SnapshotDone& done : requests) {
    done(absl::UnavailableError("the server is stopping; it takes a snapshot at exit unless "
                                "--no-snapshot-on-exit"));
  }
}

absl::StatusOr<std::vector<std::unique_ptr<SnapshotFile>>> DataDir::CreateSnapshotFiles(
    const SnapshotInfo& info, uint32_t shards, bool wake_workers) {
  std::vector<std::unique_ptr<SnapshotFile>> files;
  for (uint32_t i = 0; i < shards; ++i) {
    const FileHeader header{.kind = FileKind::kSnapshot,
                            .generation = info.generation,
                            .shard = i,
                            .shards = shards,
                            .created_ms = info.unix_ms};
    std::function<void()> wake;
    if (wake_workers) wake = [this, i] { on_progress_(static_cast<uint16_t>(i)); };
    absl::StatusOr<std::unique_ptr<SnapshotFile>> file = SnapshotFile::Create(
        path_, header, std::move(wake),
        i == 0 ? std::function<void()>([] { CrashPoint("writing"); }) : nullptr);
    if (!file.ok()) return file.status();
    files.push_back(std::move(*file));
  }
  return files;
}

absl::StatusOr<SnapshotInfo> DataDir::TakeLiveSnapshot() {
  const auto started = std::chrono::steady_clock::now();
  SnapshotInfo info{.generation = generation_ + 1, .unix_ms = WallClockMs()};
  const uint32_t n = static_cast<uint32_t>(logs_.size());
  auto failed = [](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("the snapshot failed (", s.message(),
                                               "); the logs keep the data"));
  };
  // Its files first: then the log segments, which the workers must take once given.
  auto created = CreateSnapshotFiles(info, n, /*wake_workers=*/true);
  if (!created.ok()) return failed(created.status());
  std::vector<std::unique_ptr<SnapshotFile>>& files = *created;
  std::vector<LogWriter::Segment> segments;
  absl::Status status;
  for (uint32_t i = 0; i < n && status.ok(); ++i) {
    const FileHeader header{.kind = FileKind::kLog,
                            .generation = info.generation,
                            .shard = i,
                            .shards = n,
                            .created_ms = info.unix_ms};
    absl::StatusOr<LogWriter::Segment> segment = LogWriter::OpenSegment(path_, header);
    if (segment.ok()) {
      segments.push_back(std::move(*segment));
    } else {
      status = segment.status();
    }
  }
  if (status.ok()) status = SyncDirectory(path_);
  if (!status.ok()) {
    for (const LogWriter::Segment& segment : segments) {
      close(segment.fd);
      unlink(segment.path.c_str());
    }
    return failed(status);
  }
  for (uint32_t i = 0; i < n; ++i) logs_[i]->PrepareCut(std::move(segments[i]));
  generation_ = info.generation;
  for (uint32_t i = 0; i < n; ++i) {
    start_snapshot_(i, files[i].get());
    on_progress_(static_cast<uint16_t>(i));
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (absl::Status s = files[i]->Wait(); !s.ok() && status.ok()) status = s;
    info.keys += files[i]->keys();
    info.bytes += files[i]->bytes();
  }
  if (!status.ok()) return failed(status);
  if (status = CommitSnapshot(info, n); !status.ok()) return failed(status);
  info.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return info;
}

absl::Status DataDir::CommitSnapshot(const SnapshotInfo& info, uint32_t shards) {
  CrashPoint("renamed");
  const Manifest manifest{.generation = info.generation,
                          .shards = shards,
                          .keys = info.keys,
                          .bytes = info.bytes,
                          .created_ms = info.unix_ms};
  if (absl::Status s = WriteFileAtomically(path_, "MANIFEST", EncodeManifest(manifest));
      !s.ok()) {
    return s;
  }
  {
    std::lock_guard<std::mutex> lock(manifest_mu_);
    manifest_ = manifest;
  }
  CrashPoint("manifest");
  return RemoveStale(info.generation, info.generation);
}

absl::Status DataDir::CloseAndSnapshot(const std::vector<const Shard*>& shards,
                                       int64_t now_ms) {
  StopSnapshotter();
  const absl::Status log_status = CloseLogs();
  const uint32_t n = static_cast<uint32_t>(shards.size());
  SnapshotInfo info{.generation = generation_ + 1, .unix_ms = now_ms};
  auto created = CreateSnapshotFiles(info, n, /*wake_workers=*/false);
  absl::Status status = created.status();
  if (status.ok()) {
    std::vector<std::unique_ptr<SnapshotFile>>& files = *created;
    // A thread per shard walks it (the workers have stopped), a writer thread per file writes.
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        SnapshotFile& file = *files[i];
        shards[i]->ForEach([&](std::string_view key, std::string_view value, uint64_t version,
                               int64_t deadline_ms) {
          if (deadline_ms > 0 && deadline_ms <= now_ms) return;  // Expired: not worth keeping.
          if (file.backlogged()) file.WaitForRoom();
          file.Add(key, value, version, deadline_ms);
        });
        file.Finish();
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (auto& file : files) {
      if (absl::Status s = file->Wait(); !s.ok() && status.ok()) status = s;
      info.keys += file->keys();
      info.bytes += file->bytes();
    }
  }
  if (status.ok()) status = CommitSnapshot(info, n);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("the snapshot at exit failed (",
                                                    status.message(), "); the logs keep the data"));
  }
  generation_ = info.generation;
  if (!log_status.ok()) {
    Log(LogLevel::kWarning, "a log had failed (%s); the snapshot at exit holds the data",
        log_status.message());
  }
  return absl::OkStatus();
}

PersistenceStats DataDir::Stats() const {
  PersistenceStats stats;
  stats.data_dir = path_;
  stats.fsync = SyncModeName(mode_);
  if (logs_open_.load(std::memory_order_acquire)) {
    for (const auto& log : logs_) {
      stats.log_bytes += log->bytes();
      stats.log_syncs += log->syncs();
      if (stats.error.empty()) stats.error = log->error();
    }
  }
  {
    std::lock_guard<std::mutex> lock(manifest_mu_);
    stats.snapshot_ms = manifest_.created_ms;
    stats.snapshot_bytes = manifest_.bytes;
    stats.snapshot_keys = manifest_.keys;
  }
  stats.restored_keys = restored_keys_;
  stats.restore_seconds = restore_seconds_;
  return stats;
}

}  // namespace ringkv::persist
