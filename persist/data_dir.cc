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
#include "server/log.h"

namespace ringkv::persist {
namespace {

constexpr size_t kSnapshotBlock = size_t{1} << 20;

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
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
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

absl::Status DataDir::CloseAndSnapshot(const std::vector<const Shard*>& shards,
                                       int64_t now_ms) {
  const absl::Status log_status = CloseLogs();
  const uint64_t generation = generation_ + 1;
  const uint32_t n = static_cast<uint32_t>(shards.size());
  std::vector<absl::Status> statuses(n);
  std::vector<uint64_t> keys(n, 0);
  std::vector<uint64_t> bytes(n, 0);
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      const FileHeader header{.kind = FileKind::kSnapshot,
                              .generation = generation,
                              .shard = i,
                              .shards = n,
                              .created_ms = now_ms};
      absl::StatusOr<std::unique_ptr<AtomicFileWriter>> file =
          AtomicFileWriter::Create(path_, SnapshotName(generation, i));
      if (!file.ok()) {
        statuses[i] = file.status();
        return;
      }
      AtomicFileWriter& out = **file;
      const uint32_t seed = SeedOf(header);
      std::string block;
      AppendBlock(&block, 0, EncodeHeader(header));
      absl::Status status = out.Append(block);
      block.assign(kBlockHeaderBytes, '\0');
      SnapshotFooter footer;
      auto flush = [&] {
        if (block.size() == kBlockHeaderBytes || !status.ok()) return;
        SealBlock(block.data(), block.size() - kBlockHeaderBytes, seed);
        status = out.Append(block);
        block.assign(kBlockHeaderBytes, '\0');
        ++footer.data_blocks;
      };
      shards[i]->ForEach([&](std::string_view key, std::string_view value, uint64_t version,
                             int64_t deadline_ms) {
        if (deadline_ms > 0 && deadline_ms <= now_ms) return;  // Expired: not worth keeping.
        AppendSet(&block, key, value, version, deadline_ms);
        ++footer.records;
        if (block.size() >= kSnapshotBlock) flush();
      });
      flush();
      block.clear();
      AppendBlock(&block, seed, EncodeFooter(footer));
      if (status.ok()) status = out.Append(block);
      if (i == 0) CrashPoint("writing");
      if (status.ok()) status = out.Commit();
      statuses[i] = status;
      keys[i] = footer.records;
      bytes[i] = out.bytes();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& s : statuses) {
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("the snapshot at exit failed (", s.message(),
                                                 "); the logs keep the data"));
    }
  }
  CrashPoint("renamed");
  Manifest manifest{.generation = generation, .shards = n, .created_ms = now_ms};
  for (uint32_t i = 0; i < n; ++i) {
    manifest.keys += keys[i];
    manifest.bytes += bytes[i];
  }
  if (absl::Status s = WriteFileAtomically(path_, "MANIFEST", EncodeManifest(manifest));
      !s.ok()) {
    return s;
  }
  manifest_ = manifest;
  CrashPoint("manifest");
  if (absl::Status s = RemoveStale(generation, generation); !s.ok()) return s;
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
  stats.snapshot_ms = manifest_.created_ms;
  stats.snapshot_bytes = manifest_.bytes;
  stats.snapshot_keys = manifest_.keys;
  stats.restored_keys = restored_keys_;
  stats.restore_seconds = restore_seconds_;
  return stats;
}

}  // namespace ringkv::persist
