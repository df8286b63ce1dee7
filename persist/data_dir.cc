#include "persist/data_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "persist/block.h"
#include "persist/file.h"
#include "persist/snapshot_file.h"

namespace ringkv::persist {
namespace {

int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One file restore reads, mapped, with its header checked.
struct Source {
  std::string path;
  FileHeader header;
  // Null: shorter than a header, or a torn one (the file never held a record).
  std::unique_ptr<MappedFile> file;
  size_t file_bytes = 0;  // The file's size.
  size_t body = 0;        // Where the blocks after the header start.
  size_t limit = 0;       // Read only this many bytes (the MANIFEST's intact length); 0: all.

  bool headerless() const { return file == nullptr; }
  // Whether the file holds nothing after its header (the zeros a log with --fsync=always writes
  // ahead of its records are nothing).
  bool empty() const {
    if (headerless()) return true;
    const std::string_view after = file->data().substr(body);
    return std::all_of(after.begin(), after.end(), [](char c) { return c == 0; });
  }
  // The bytes a restore may read.
  std::string_view data() const {
    const std::string_view all = file->data();
    return limit > 0 ? all.substr(0, limit) : all;
  }
};

// How reading one file ended.
struct Outcome {
  BlockReader::End end = BlockReader::End::kClean;
  bool zeros_to_end = false;  // kTorn, and only zeros follow the last good block.
  size_t offset = 0;          // Of the first byte not loaded.
  bool malformed = false;     // A block that checked out held a bad record, or a snapshot's end.
  uint64_t revision = 0;      // A snapshot's footer's.
  // A replica's positions (persist/format.h): the file begins with a reset its snapshot never
  // committed, so it was left out; its last position (footer's, for a snapshot), if any, and
  // whether data records follow it (without a position: whether it holds any).
  bool left_out = false;
  bool has_position = false;
  ReplPosition position;
  bool data_after_position = false;
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

// Opens DIR/NAME, a data file's name; a file whose header is cut short comes back headerless.
absl::StatusOr<Source> OpenSource(const std::string& dir, const std::string& name) {
  const ParsedName parsed = *ParseName(name);
  Source source;
  source.path = absl::StrCat(dir, "/", name);
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(source.path);
  if (!file.ok()) return file.status();
  source.file = std::move(*file);
  source.file_bytes = source.file->data().size();
  BlockReader reader(source.file->data(), 0);
  std::string_view payload;
  if (!reader.Next(&payload)) {
    if (reader.end() == BlockReader::End::kDamaged) {
      return absl::DataLossError(absl::StrCat(source.path, " is damaged at offset 0 (its header)"));
    }
    source.file.reset();
    return source;
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

// Reads the records of `source`, calling apply(record) for each data record, in order. A log
// of a generation above `snapshot_generation` (the one restored) that begins with a reset
// position is read but not applied.
template <typename Apply>
Outcome Load(const Source& source, uint64_t snapshot_generation, Apply apply) {
  const std::string_view data = source.data().substr(source.body);
  BlockReader reader(data, SeedOf(source.header), source.body);
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
      if (r.kind == RecordKind::kPosition) {
        if (records == 0 && r.reset && !snapshot &&
            source.header.generation > snapshot_generation) {
          outcome.left_out = true;
        }
        outcome.has_position = true;
        outcome.position = {std::string(r.key), r.version};
        outcome.data_after_position = false;
        ++records;
        continue;
      }
      ++records;
      outcome.data_after_position = true;
      if (!outcome.left_out) apply(r);
    }
    if (records_in.malformed()) {
      outcome.malformed = true;
      break;
    }
    block_start = reader.offset();
  }
  outcome.end = reader.end();
  outcome.zeros_to_end = reader.zeros_to_end();
  outcome.offset = source.body + (outcome.malformed ? block_start : reader.offset());
  if (snapshot && !outcome.malformed && outcome.end == BlockReader::End::kClean &&
      (!footer_seen || footer.records != records || footer.data_blocks != blocks)) {
    outcome.malformed = true;  // Not whole: a snapshot is committed whole or not at all.
  }
  outcome.revision = footer.revision;
  if (snapshot) {
    outcome.has_position = !footer.history.empty();
    outcome.position = {footer.history, footer.lsn};
    outcome.data_after_position = !outcome.has_position && records > 0;
  }
  return outcome;
}

// Applies the records of `source` whose key `keep` accepts (by its hash) to `shard`.
template <typename Keep>
Outcome LoadInto(const Source& source, uint64_t snapshot_generation, Shard& shard, Keep keep) {
  return Load(source, snapshot_generation, [&](const Record& r) {
    const uint64_t hash = Router::Hash(r.key);
    if (!keep(hash)) return;
    const HashedKey key{r.key, hash};
    switch (r.kind) {
      case RecordKind::kSet:
        shard.LoadSet(key, r.value, r.version, r.deadline_ms);
        break;
      case RecordKind::kDeadline:
        shard.LoadDeadline(key, r.deadline_ms);
        break;
      case RecordKind::kDelete:
        shard.LoadDelete(key);
        break;
      case RecordKind::kPosition:  // Load keeps these.
        break;
    }
  });
}

bool Whole(const Outcome& o) { return !o.malformed && o.end == BlockReader::End::kClean; }

std::string Generations(const std::set<uint64_t>& generations) {
  if (generations.empty()) return "none";
  if (generations.size() == 1) return absl::StrCat(*generations.begin());
  return absl::StrCat(*generations.begin(), " to ", *generations.rbegin());
}

// The way out each refusal names after `--load-intact`.
constexpr std::string_view kWayOutWithoutManifest =
    "starts from the newest snapshot that is whole and the logs after it, writes what it "
    "loaded as a new snapshot, and moves the files it replaces to a set-aside folder in the "
    "data directory (nothing is deleted)";
constexpr std::string_view kWayOutWithoutFile =
    "starts from every other file, writes what it loaded as a new snapshot, and moves the "
    "files it replaces to a set-aside folder in the data directory (nothing is deleted)";
constexpr std::string_view kWayOutShort =
    "starts from the blocks that are there and every other file, writes what it loaded as a "
    "new snapshot, and moves the files it replaces to a set-aside folder in the data "
    "directory (nothing is deleted)";
constexpr std::string_view kWayOutDamage =
    "starts from what is intact (this file up to that offset, and every other file), writes "
    "it as a new snapshot, and moves the files it replaces to a set-aside folder in the data "
    "directory (nothing is deleted)";
constexpr std::string_view kWayOutUnlisted = "loads it with the others";

// What a restore reads, decided from the data directory's files and its MANIFEST (Make): the
// snapshot it starts from, each generation's logs (with the length to read of each), and the
// logs a crash left before they were listed, which hold nothing. Whatever is not as the
// MANIFEST says is refused (Refuse); with --load-intact it is warned about instead, left out
// where it cannot be read, and repair() says that the restore must write what it loaded anew.
class RestorePlan {
 public:
  RestorePlan(std::string dir, bool load_intact)
      : dir_(std::move(dir)), load_intact_(load_intact) {}

  // `names`: the directory's, sorted; `manifest`: null if there is none; `damaged`: there is
  // one, but it does not decode.
  absl::Status Make(const std::vector<std::string>& names, const Manifest* manifest, bool damaged) {
    Survey(names);
    if (absl::Status s = ChooseStart(manifest, damaged); !s.ok()) return s;
    if (absl::Status s = OpenSnapshot(names); !s.ok()) return s;
    if (inventory_) {
      if (absl::Status s = OpenListedLogs(manifest->logs); !s.ok()) return s;
    }
    return OpenOtherLogs();
  }

  // Without --load-intact, a DataLoss error saying `what` and that `--load-intact` `way_out`;
  // with it, a warning, and the restore repairs (OK).
  absl::Status Refuse(const std::string& what, std::string_view way_out) {
    if (!load_intact_) {
      return absl::DataLossError(
          absl::StrCat(what, "; refusing to start. --load-intact ", std::string(way_out)));
    }
    Log(LogLevel::kWarning, "%s; --load-intact %s", what, std::string(way_out));
    repair_ = true;
    return absl::OkStatus();
  }

  bool repair() const { return repair_; }
  uint64_t snapshot_generation() const { return snapshot_generation_; }
  // The highest generation of any data file or the MANIFEST.
  uint64_t newest() const { return newest_; }
  bool has_logs() const { return !log_names_.empty(); }
  // The files to read, in order: the snapshot's, then each generation's logs, oldest first.
  std::vector<const Source*> Order() const {
    std::vector<const Source*> order;
    for (const Source& s : snapshot_) order.push_back(&s);
    for (const auto& [generation, sources] : logs_) {
      for (const Source& s : sources) order.push_back(&s);
    }
    return order;
  }
  const std::vector<std::string>& leftovers() const { return leftovers_; }

 private:
  // What the directory holds.
  void Survey(const std::vector<std::string>& names) {
    for (const std::string& name : names) {
      const std::optional<ParsedName> parsed = ParseName(name);
      if (!parsed) continue;
      newest_ = std::max(newest_, parsed->generation);
      if (parsed->kind == FileKind::kSnapshot) {
        snapshot_names_[parsed->generation].push_back(name);
      } else {
        log_names_[{parsed->generation, parsed->shard}] = name;
      }
    }
  }

  // The snapshot to start from, and whether a MANIFEST lists the logs.
  absl::Status ChooseStart(const Manifest* manifest, bool damaged) {
    if (manifest != nullptr) {
      newest_ = std::max(newest_, manifest->generation);
      snapshot_generation_ = manifest->generation;
      snapshot_shards_ = manifest->shards;
      inventory_ = manifest->has_inventory;
      return absl::OkStatus();
    }
    if (!damaged && Format1LogsOnly()) return absl::OkStatus();
    std::set<uint64_t> snapshot_generations, log_generations;
    size_t snapshot_files = 0;
    for (const auto& [generation, names] : snapshot_names_) {
      snapshot_generations.insert(generation);
      snapshot_files += names.size();
    }
    for (const auto& [key, name] : log_names_) log_generations.insert(key.first);
    const std::string what =
        damaged ? absl::StrCat(dir_, "/MANIFEST is damaged")
                : absl::StrCat(dir_, " holds ", snapshot_files, " snapshot files (generation ",
                               Generations(snapshot_generations), ") and ", log_names_.size(),
                               " logs (generation ", Generations(log_generations),
                               ") but no MANIFEST, which says which of them a restore needs");
    if (absl::Status s = Refuse(what, kWayOutWithoutManifest); !s.ok()) return s;
    snapshot_generation_ = NewestWholeSnapshot();
    snapshot_shards_ = snapshot_generation_ > 0
                           ? static_cast<uint32_t>(snapshot_names_[snapshot_generation_].size())
                           : 0;
    Log(LogLevel::kWarning, "--load-intact: starting from %s and the logs after it",
        snapshot_generation_ > 0 ? absl::StrCat("the snapshot of generation ", snapshot_generation_)
                                 : std::string("no snapshot"));
    return absl::OkStatus();
  }

  // No MANIFEST, and nothing but logs of format 1, which wrote no MANIFEST until the first
  // snapshot: they alone are the data (a new directory is such a one too). A format 2 server
  // lists its logs in a MANIFEST before they take a record.
  bool Format1LogsOnly() const {
    return snapshot_names_.empty() &&
           std::all_of(log_names_.begin(), log_names_.end(), [&](const auto& entry) {
             absl::StatusOr<Source> source = OpenSource(dir_, entry.second);
             // A log made for the first run, killed before the first MANIFEST: nothing in it.
             return source.ok() &&
                    (source->headerless() || source->header.format == 1 || source->empty());
           });
  }

  // --load-intact without a MANIFEST: the newest generation whose snapshot files are all there
  // and whole; 0: none.
  uint64_t NewestWholeSnapshot() const {
    for (auto it = snapshot_names_.rbegin(); it != snapshot_names_.rend(); ++it) {
      const auto& [generation, names] = *it;
      bool whole = true;
      uint32_t shards = 0;
      for (size_t i = 0; i < names.size() && whole; ++i) {
        absl::StatusOr<Source> source = OpenSource(dir_, names[i]);
        whole = source.ok() && !source->headerless() && source->header.shard == i &&
                (i == 0 || source->header.shards == shards) &&
                Whole(Load(*source, 0, [](const Record&) {}));
        if (whole) shards = source->header.shards;
      }
      if (whole && shards == names.size()) return generation;
      Log(LogLevel::kWarning,
          "--load-intact: the snapshot of generation %d is not whole; "
          "trying an older one",
          generation);
    }
    return 0;
  }

  // The file, if it opens; with --load-intact, nullopt for a damaged one (refused otherwise).
  absl::StatusOr<std::optional<Source>> OpenOrRefuse(const std::string& name) {
    absl::StatusOr<Source> source = OpenSource(dir_, name);
    if (source.ok()) return std::optional<Source>(std::move(*source));
    if (source.status().code() != absl::StatusCode::kDataLoss) return source.status();
    if (absl::Status s = Refuse(std::string(source.status().message()), kWayOutWithoutFile);
        !s.ok()) {
      return s;
    }
    return std::optional<Source>();
  }

  absl::Status OpenSnapshot(const std::vector<std::string>& names) {
    for (uint32_t i = 0; snapshot_generation_ > 0 && i < snapshot_shards_; ++i) {
      const std::string name = SnapshotName(snapshot_generation_, i);
      const std::string path = absl::StrCat(dir_, "/", name);
      if (!std::binary_search(names.begin(), names.end(), name)) {
        absl::Status s =
            Refuse(absl::StrCat(path, " is missing; the MANIFEST names a snapshot of ",
                                snapshot_shards_, " files (generation ", snapshot_generation_, ")"),
                   kWayOutWithoutFile);
        if (!s.ok()) return s;
        continue;
      }
      absl::StatusOr<std::optional<Source>> source = OpenOrRefuse(name);
      if (!source.ok()) return source.status();
      if (!source->has_value()) continue;
      if ((*source)->headerless()) {
        absl::Status s = Refuse(absl::StrCat(path, " has no whole header"), kWayOutWithoutFile);
        if (!s.ok()) return s;
        continue;
      }
      snapshot_.push_back(std::move(**source));
    }
    return absl::OkStatus();
  }

  absl::Status OpenListedLogs(const std::vector<LogEntry>& entries) {
    for (const LogEntry& entry : entries) {
      listed_.insert({entry.generation, entry.worker});
      const std::string name = LogName(entry.generation, entry.worker);
      const std::string path = absl::StrCat(dir_, "/", name);
      if (!log_names_.contains({entry.generation, entry.worker})) {
        absl::Status s =
            Refuse(absl::StrCat(path, " is missing; the MANIFEST lists it"), kWayOutWithoutFile);
        if (!s.ok()) return s;
        continue;
      }
      absl::StatusOr<std::optional<Source>> opened = OpenOrRefuse(name);
      if (!opened.ok()) return opened.status();
      if (!opened->has_value()) continue;
      Source& source = **opened;
      // A listed log had its header synced before the MANIFEST named it, and nothing shortens
      // a log: a file without them was cut or replaced.
      if (source.headerless() || source.file_bytes < entry.intact_bytes) {
        const std::string what =
            absl::StrCat(path, " is ", source.file_bytes, " bytes, without ",
                         source.headerless() ? "its header" : "the blocks it had",
                         "; the MANIFEST lists it with ",
                         entry.intact_bytes > 0 ? absl::StrCat(entry.intact_bytes, " bytes intact")
                                                : std::string("its header"));
        absl::Status s = Refuse(what, source.headerless() ? kWayOutWithoutFile : kWayOutShort);
        if (!s.ok()) return s;
        if (source.headerless()) continue;
      } else {
        source.limit = entry.intact_bytes;  // With --load-intact, a short one is read whole.
      }
      logs_[entry.generation].push_back(std::move(source));
    }
    return absl::OkStatus();
  }

  // The logs the MANIFEST does not list (every log from the snapshot's generation on, without
  // an inventory).
  absl::Status OpenOtherLogs() {
    for (const auto& [key, name] : log_names_) {
      const uint64_t generation = key.first;
      if (generation < snapshot_generation_ || listed_.contains(key)) continue;
      absl::StatusOr<std::optional<Source>> opened = OpenOrRefuse(name);
      if (!opened.ok()) return opened.status();
      if (!opened->has_value()) continue;
      Source& source = **opened;
      if (source.empty()) {
        // Made, and not listed yet, when a crash came: it never took a record.
        if (inventory_) {
          leftovers_.push_back(source.path);
        } else if (source.headerless()) {
          Log(LogLevel::kWarning,
              "%s: a log that a crash cut short as it was created; it "
              "holds nothing",
              source.path);
        }
        continue;
      }
      if (inventory_) {
        absl::Status s =
            Refuse(absl::StrCat(source.path, " holds records, but the MANIFEST does not list it"),
                   kWayOutUnlisted);
        if (!s.ok()) return s;
      }
      logs_[generation].push_back(std::move(source));
    }
    return absl::OkStatus();
  }

  const std::string dir_;
  const bool load_intact_;
  bool repair_ = false;
  // The directory's data files.
  std::map<uint64_t, std::vector<std::string>> snapshot_names_;     // By generation, in order.
  std::map<std::pair<uint64_t, uint32_t>, std::string> log_names_;  // By generation, worker.
  uint64_t newest_ = 0;
  // The plan.
  uint64_t snapshot_generation_ = 0;  // 0: none.
  uint32_t snapshot_shards_ = 0;
  bool inventory_ = false;  // The MANIFEST lists the logs (format 2).
  std::set<std::pair<uint64_t, uint32_t>> listed_;
  std::vector<Source> snapshot_;
  std::map<uint64_t, std::vector<Source>> logs_;
  std::vector<std::string> leftovers_;
};

// A replica's worker's position after the restore (persist/format.h's position records): the
// last one its files hold, unless data records follow it. None for files of another worker
// count.
Positions RestoredPositions(const std::vector<const Source*>& order,
                            const std::vector<Outcome>& outcomes, uint32_t workers) {
  Positions positions;
  for (const Source* source : order) {
    if (source->header.shards != workers) return positions;
  }
  positions.resize(workers);
  std::vector<bool> known(workers, false);
  for (size_t f = 0; f < order.size(); ++f) {
    const Source& source = *order[f];
    const Outcome& o = outcomes[f];
    const uint32_t w = source.header.shard;
    if (o.left_out) {
      Log(LogLevel::kInfo,
          "%s: left out: it follows a replica's full sync whose snapshot never committed, so "
          "worker %d restores the data it held before that sync",
          source.path, w);
      continue;
    }
    if (o.has_position) {
      positions[w] = o.position;
      known[w] = !o.data_after_position && !o.position.history.empty();
    } else if (o.data_after_position || source.header.kind == FileKind::kSnapshot) {
      known[w] = false;
    }
  }
  for (uint32_t w = 0; w < workers; ++w) {
    if (!known[w]) positions[w] = std::nullopt;
  }
  return positions;
}

}  // namespace

DataDir::DataDir(std::string path, const Options& options, int lock_fd)
    : path_(std::move(path)),
      mode_(options.fsync),
      load_intact_(options.load_intact),
      env_(options.env != nullptr ? *options.env : *DefaultEnv()),
      lock_fd_(lock_fd) {}

DataDir::~DataDir() {
  StopSnapshotter();
  (void)CloseLogs();
  close(lock_fd_);
}

absl::StatusOr<std::unique_ptr<DataDir>> DataDir::Open(const std::string& path,
                                                       const Options& options) {
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
  std::unique_ptr<DataDir> dir(new DataDir(path, options, lock_fd));
  absl::StatusOr<std::string> manifest = ReadFile(path + "/MANIFEST");
  if (manifest.ok()) {
    dir->manifest_found_ = true;
    if (absl::Status s = DecodeManifest(*manifest, &dir->manifest_); !s.ok()) {
      // A newer format is no damage, and --load-intact must not read past it.
      if (s.code() != absl::StatusCode::kDataLoss) {
        return absl::Status(s.code(), absl::StrCat(path, "/MANIFEST: ", s.message()));
      }
      dir->manifest_damaged_ = true;
      dir->manifest_ = Manifest();
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
  RestorePlan plan(path_, load_intact_);
  const bool usable = manifest_found_ && !manifest_damaged_;
  if (absl::Status s = plan.Make(*names, usable ? &manifest_ : nullptr, manifest_damaged_);
      !s.ok()) {
    return s;
  }

  // Every file is read by the threads that need it; outcomes[f] is file f's, set by whichever
  // read it (they agree).
  const std::vector<const Source*> order = plan.Order();
  const uint32_t n = static_cast<uint32_t>(shards.size());
  const uint64_t snapshot_generation = plan.snapshot_generation();
  std::vector<Outcome> outcomes(order.size());
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      for (size_t f = 0; f < order.size(); ++f) {
        const Source& source = *order[f];
        if (source.header.shards == n) {
          if (source.header.shard != t) continue;
          outcomes[f] =
              LoadInto(source, snapshot_generation, *shards[t], [](uint64_t) { return true; });
        } else {
          Outcome o = LoadInto(source, snapshot_generation, *shards[t],
                               [&](uint64_t hash) { return router.ShardOf(hash) == t; });
          if (t == 0) outcomes[f] = o;
        }
      }
      // Deadlines are judged on each key's final state (a later record may have cleared one).
      shards[t]->FinishLoad(now_ms);
    });
  }
  for (std::thread& thread : threads) thread.join();

  read_logs_.clear();
  // Logs a crash left with the zeros written ahead of their records: where the records end.
  std::vector<std::pair<std::string, size_t>> zero_tails;
  uint64_t revision = 0;  // The highest version any shard gave, deleted keys' included.
  for (size_t f = 0; f < order.size(); ++f) {
    const Source& source = *order[f];
    const Outcome& o = outcomes[f];
    const bool log = source.header.kind == FileKind::kLog;
    revision = std::max(revision, o.revision);
    if (log) {
      read_logs_.push_back({.generation = source.header.generation,
                            .worker = source.header.shard,
                            .workers = source.header.shards,
                            .intact_bytes = o.offset});
    }
    if (Whole(o)) continue;
    if (log && !o.malformed && o.end == BlockReader::End::kTorn && source.limit == 0 &&
        o.zeros_to_end) {
      zero_tails.emplace_back(source.path, o.offset);
      Log(LogLevel::kInfo,
          "%s: its records end at offset %d, followed by %d bytes of zeros, which are left out "
          "(a log with --fsync=always writes zeros ahead of its records, and a crash leaves "
          "them; so does a write whose pages never reached the disk)",
          source.path, o.offset, source.file_bytes - o.offset);
      continue;
    }
    if (log && !o.malformed && o.end == BlockReader::End::kTorn && source.limit == 0) {
      Log(LogLevel::kWarning,
          "%s: its last block (from offset %d of %d bytes) is incomplete; the log is read up to "
          "it and the rest is left out. A crash in the middle of a write leaves such a block, "
          "and so does a file cut short; with --fsync=always a crash cannot tear a block that "
          "held an acknowledged write (a write is answered once its block is synced whole)",
          source.path, o.offset, source.file_bytes);
      continue;
    }
    const std::string what = absl::StrCat(source.path, " is damaged at offset ", o.offset, " (of ",
                                          source.file_bytes, " bytes)");
    if (absl::Status s = plan.Refuse(what, kWayOutDamage); !s.ok()) return s;
  }
  positions_ = RestoredPositions(order, outcomes, n);
  for (Shard* shard : shards) revision = std::max(revision, shard->revision());
  for (Shard* shard : shards) shard->RaiseRevision(revision);
  for (Shard* shard : shards) restored_keys_ += shard->size();
  restore_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  // This run's logs: a generation no log has yet, and none below the snapshot's. A repair
  // writes a snapshot of that generation first.
  generation_ = plan.repair() ? plan.newest() + 1
                              : std::max<uint64_t>(plan.newest() + (plan.has_logs() ? 1 : 0), 1);
  if (plan.repair()) return Repair(shards, now_ms);
  for (const std::string& leftover : plan.leftovers()) {
    if (unlink(leftover.c_str()) != 0) return IoError("cannot remove", leftover, errno);
  }
  // The zeros go now (nothing reads those files again in this run; the MANIFEST lists them
  // with their records' end): else each crash would leave its 33 MiB a worker until the next
  // snapshot. Not needed for correctness, so a failure is only a warning, and a crash before
  // the cut is durable just leaves the zeros again.
  for (const auto& [path, records] : zero_tails) {
    if (truncate(path.c_str(), static_cast<off_t>(records)) != 0) {
      Log(LogLevel::kWarning, "cannot cut the zeros off %s: %s", path, std::strerror(errno));
    }
  }
  return RemoveStale(plan.snapshot_generation(), plan.snapshot_generation());
}

absl::Status DataDir::Repair(const std::vector<Shard*>& shards, int64_t now_ms) {
  // The new snapshot first, then the MANIFEST naming it: until that is in place, every file
  // this restore read is where it was. Only then are the others moved aside, never deleted.
  const std::string aside = absl::StrCat(path_, "/set-aside-", WallClockMs());
  if (mkdir(aside.c_str(), 0755) != 0) return IoError("cannot create", aside, errno);
  const std::string manifest = path_ + "/MANIFEST";
  if (link(manifest.c_str(), (aside + "/MANIFEST").c_str()) != 0 && errno != ENOENT) {
    return IoError("cannot keep a copy of", manifest, errno);
  }
  const std::vector<const Shard*> readonly(shards.begin(), shards.end());
  const SnapshotInfo info{.generation = generation_, .unix_ms = WallClockMs()};
  absl::StatusOr<SnapshotInfo> written = WriteSnapshot(readonly, info, now_ms);
  if (!written.ok()) return written.status();
  if (absl::Status s = CommitManifest(*written, static_cast<uint32_t>(shards.size()), {});
      !s.ok()) {
    return s;
  }
  read_logs_.clear();  // Set aside below: the next MANIFEST lists none of them.
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(path_);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    const std::optional<ParsedName> parsed = ParseName(name);
    if (!parsed && !name.ends_with(".tmp")) continue;
    if (parsed && parsed->kind == FileKind::kSnapshot && parsed->generation == generation_) {
      continue;
    }
    const std::string from = absl::StrCat(path_, "/", name);
    const std::string to = absl::StrCat(aside, "/", name);
    if (rename(from.c_str(), to.c_str()) != 0) return IoError("cannot move", from, errno);
  }
  if (absl::Status s = SyncDirectory(aside); !s.ok()) return s;
  if (absl::Status s = SyncDirectory(path_); !s.ok()) return s;
  Log(LogLevel::kWarning,
      "--load-intact: started from what was intact (%d keys), now snapshot "
      "%d; the files it replaces are in %s",
      written->keys, generation_, aside);
  return absl::OkStatus();
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
    env_.AtSnapshotStep("cleanup");
  }
  return removed ? SyncDirectory(path_) : absl::OkStatus();
}

absl::Status DataDir::OpenLogs(uint32_t workers, const std::function<void(uint16_t)>& on_progress) {
  if (generation_ == 0) generation_ = std::max<uint64_t>(manifest_.generation, 1);
  on_progress_ = on_progress;
  std::vector<LogWriter::Segment> segments;
  const absl::Status opened = OpenLogFiles(workers, &segments);
  if (!opened.ok() && !IsOutOfSpace(opened)) return opened;
  for (uint32_t i = 0; i < workers; ++i) {
    auto progress = [on_progress, i] { on_progress(static_cast<uint16_t>(i)); };
    if (opened.ok()) {
      logs_.push_back(LogWriter::Start(std::move(segments[i]), mode_, progress, &log_group_, env_));
    } else {
      logs_.push_back(LogWriter::CreateWaiting(absl::StrCat(path_, "/", LogName(generation_, i)),
                                               mode_, progress, &log_group_, env_));
    }
  }
  if (!opened.ok()) {
    Log(LogLevel::kError,
        "%s; serving reads only: writes are refused until the logs can be created (retried "
        "every 2 s at most)",
        opened.message());
    std::lock_guard<std::mutex> lock(opener_mu_);
    logs_waiting_ = true;
    opener_ = std::thread([this, workers] { OpenLogsWhenThereIsRoom(workers); });
  }
  logs_open_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status DataDir::OpenLogFiles(uint32_t workers, std::vector<LogWriter::Segment>* segments) {
  const int64_t now_ms = WallClockMs();
  auto undo = [&](const absl::Status& s) {
    for (const LogWriter::Segment& segment : *segments) {
      env_.CloseLog(segment.fd);
      unlink(segment.path.c_str());
    }
    segments->clear();
    return s;
  };
  for (uint32_t i = 0; i < workers; ++i) {
    const FileHeader header{.kind = FileKind::kLog,
                            .generation = generation_,
                            .shard = i,
                            .shards = workers,
                            .created_ms = now_ms};
    absl::StatusOr<LogWriter::Segment> segment = LogWriter::OpenSegment(path_, header, mode_, env_);
    if (!segment.ok()) return undo(segment.status());
    segments->push_back(std::move(*segment));
  }
  if (absl::Status s = SyncDirectory(path_); !s.ok()) return undo(s);
  // Listed only now that their headers are synced, and before any takes a record: the logs this
  // restore read, with what was intact in them, then the new ones.
  Manifest manifest = CurrentManifest();
  manifest.logs = read_logs_;
  for (uint32_t i = 0; i < workers; ++i) {
    manifest.logs.push_back({.generation = generation_, .worker = i, .workers = workers});
  }
  if (absl::Status s = WriteManifest(manifest); !s.ok()) return undo(s);
  return absl::OkStatus();
}

void DataDir::OpenLogsWhenThereIsRoom(uint32_t workers) {
  auto backoff = std::chrono::milliseconds(50);
  std::unique_lock<std::mutex> lock(opener_mu_);
  for (;;) {
    opener_cv_.wait_for(lock, backoff, [this] { return opener_stop_; });
    if (opener_stop_) return;  // The logs stay stalled; StopRetrying fails them.
    lock.unlock();
    std::vector<LogWriter::Segment> segments;
    const absl::Status opened = OpenLogFiles(workers, &segments);
    lock.lock();
    if (opened.ok()) {
      for (uint32_t i = 0; i < workers; ++i) logs_[i]->Attach(std::move(segments[i]));
      logs_waiting_ = false;
      Log(LogLevel::kWarning,
          "the logs of %s are created; writes are taken again once each has "
          "synced",
          path_);
      return;
    }
    if (!IsOutOfSpace(opened)) {
      Log(LogLevel::kError, "%s; writes are refused until a restart", opened.message());
      for (const auto& log : logs_) log->StopRetrying();
      return;
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

void DataDir::StopOpener() {
  {
    std::lock_guard<std::mutex> lock(opener_mu_);
    opener_stop_ = true;
  }
  opener_cv_.notify_one();
  if (opener_.joinable()) opener_.join();
}

Manifest DataDir::CurrentManifest() const {
  std::lock_guard<std::mutex> lock(manifest_mu_);
  return manifest_;
}

absl::Status DataDir::WriteManifest(const Manifest& manifest) {
  if (absl::Status s = WriteFileAtomically(path_, "MANIFEST", EncodeManifest(manifest)); !s.ok()) {
    return s;
  }
  std::lock_guard<std::mutex> lock(manifest_mu_);
  manifest_ = manifest;
  return absl::OkStatus();
}

absl::Status DataDir::CloseLogs() {
  StopOpener();
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
  done(
      absl::UnavailableError("the server is stopping; it takes a snapshot at exit unless "
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
    done(
        absl::UnavailableError("the server is stopping; it takes a snapshot at exit unless "
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
        i == 0 ? std::function<void()>([this] { env_.AtSnapshotStep("writing"); }) : nullptr);
    if (!file.ok()) return file.status();
    files.push_back(std::move(*file));
  }
  return files;
}

absl::StatusOr<SnapshotInfo> DataDir::TakeLiveSnapshot() {
  {
    std::lock_guard<std::mutex> lock(opener_mu_);
    if (logs_waiting_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the snapshot was not taken: the logs of ", path_,
                       " are not created yet (the disk is full); the data is as it was loaded"));
    }
  }
  const auto started = std::chrono::steady_clock::now();
  SnapshotInfo info{.generation = generation_ + 1, .unix_ms = WallClockMs()};
  const uint32_t n = static_cast<uint32_t>(logs_.size());
  auto failed = [](const absl::Status& s) {
    return absl::Status(
        s.code(), absl::StrCat("the snapshot failed (", s.message(), "); the logs keep the data"));
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
    absl::StatusOr<LogWriter::Segment> segment = LogWriter::OpenSegment(path_, header, mode_, env_);
    if (segment.ok()) {
      segments.push_back(std::move(*segment));
    } else {
      status = segment.status();
    }
  }
  if (status.ok()) status = SyncDirectory(path_);
  if (status.ok()) {
    // The next generation's logs are listed before any takes a record: should this snapshot
    // fail, a restore reads them after the old snapshot and the logs before them.
    Manifest manifest = CurrentManifest();
    for (uint32_t i = 0; i < n; ++i) {
      manifest.logs.push_back({.generation = info.generation, .worker = i, .workers = n});
    }
    status = WriteManifest(manifest);
  }
  if (!status.ok()) {
    for (const LogWriter::Segment& segment : segments) {
      env_.CloseLog(segment.fd);
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
  info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return info;
}

absl::Status DataDir::CommitSnapshot(const SnapshotInfo& info, uint32_t shards) {
  // The logs from the snapshot's generation on: the records after its cut.
  std::vector<LogEntry> logs;
  for (const LogEntry& log : CurrentManifest().logs) {
    if (log.generation >= info.generation) logs.push_back(log);
  }
  if (absl::Status s = CommitManifest(info, shards, std::move(logs)); !s.ok()) return s;
  return RemoveStale(info.generation, info.generation);
}

absl::Status DataDir::CommitManifest(const SnapshotInfo& info, uint32_t shards,
                                     std::vector<LogEntry> logs) {
  env_.AtSnapshotStep("renamed");
  const Manifest manifest{.generation = info.generation,
                          .shards = shards,
                          .keys = info.keys,
                          .bytes = info.bytes,
                          .created_ms = info.unix_ms,
                          .logs = std::move(logs)};
  if (absl::Status s = WriteManifest(manifest); !s.ok()) return s;
  env_.AtSnapshotStep("manifest");
  return absl::OkStatus();
}

absl::StatusOr<SnapshotInfo> DataDir::WriteSnapshot(const std::vector<const Shard*>& shards,
                                                    SnapshotInfo info, int64_t now_ms,
                                                    const Positions& positions) {
  const uint32_t n = static_cast<uint32_t>(shards.size());
  auto created = CreateSnapshotFiles(info, n, /*wake_workers=*/false);
  if (!created.ok()) return created.status();
  std::vector<std::unique_ptr<SnapshotFile>>& files = *created;
  // A thread per shard walks it (nothing else touches the shards), a writer thread per file
  // writes.
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      SnapshotFile& file = *files[i];
      shards[i]->ForEach(
          [&](std::string_view key, std::string_view value, uint64_t version, int64_t deadline_ms) {
            if (deadline_ms > 0 && deadline_ms <= now_ms) return;  // Expired: not worth keeping.
            if (file.backlogged()) file.WaitForRoom();
            file.Add(key, value, version, deadline_ms);
          });
      if (i < positions.size() && positions[i].has_value()) file.set_position(*positions[i]);
      file.Finish(shards[i]->revision());
    });
  }
  for (std::thread& thread : threads) thread.join();
  absl::Status status;
  for (auto& file : files) {
    if (absl::Status s = file->Wait(); !s.ok() && status.ok()) status = s;
    info.keys += file->keys();
    info.bytes += file->bytes();
  }
  if (!status.ok()) return status;
  return info;
}

absl::Status DataDir::CloseAndSnapshot(const std::vector<const Shard*>& shards, int64_t now_ms,
                                       const Positions& positions) {
  StopSnapshotter();
  const absl::Status log_status = CloseLogs();
  const uint32_t n = static_cast<uint32_t>(shards.size());
  const SnapshotInfo info{.generation = generation_ + 1, .unix_ms = now_ms};
  absl::StatusOr<SnapshotInfo> written = WriteSnapshot(shards, info, now_ms, positions);
  absl::Status status = written.status();
  if (status.ok()) status = CommitSnapshot(*written, n);
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

void DataDir::StopRetrying() {
  if (!logs_open_.load(std::memory_order_acquire)) return;
  StopOpener();
  for (const auto& log : logs_) log->StopRetrying();
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
