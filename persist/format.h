// The formats of ringkv's data directory (--data-dir): what each file is called and what its
// blocks (persist/block.h) hold. Everything is little-endian; lengths and numbers inside
// records are LEB128 varints.
//
// Files:
//   MANIFEST                   one block: the inventory of what a restore reads: the snapshot
//                              it starts from (its generation, shard count, keys, bytes and
//                              time; generation 0: none) and every log it replays after it,
//                              each with the length that was intact when the server last
//                              started (0: still being written, read to its end). Written
//                              before any log it lists takes a record, so a listed log that
//                              is missing, shorter, or without its header is damage. A data
//                              directory with data files and no MANIFEST is refused.
//   snap-GGGGGGGGGGGG-SSSS.rkv shard S's snapshot of generation G: a header block, blocks of
//                              records, and a footer block (records and data blocks written,
//                              and the shard's revision at the cut: every version it had given
//                              by then is at most this, deleted keys' too).
//   log-GGGGGGGGGGGG-WWWW.rkv  worker W's log of generation G: a header block, then one block
//                              per group commit.
//   LOCK                       held (flock) by the server that uses the directory.
//   set-aside-<ms>/            the files a --load-intact start replaced with the snapshot it
//                              wrote (the old MANIFEST too), moved there, never deleted.
// Formats: 1 (no inventory in the MANIFEST, no revision in snapshot footers) is still read;
// everything written is format 2. Position records and footers with a position, which only a
// replica writes, came later within format 2: a ringkv-server older than them refuses such a
// file as damaged.
// A generation begins at each start of the server and at each snapshot. The snapshot of
// generation G holds everything the logs of generations before G held: restore loads it, then
// replays the logs of generation G on, oldest first. Within one generation a key lives in one
// shard only, so the logs of one generation can be replayed in any order.
//
// A header block is checked with seed 0 and names the file's kind, the format, its generation,
// its shard and the shard count; the file's other blocks are checked with SeedOf(header), so a
// block copied from another file fails its check.
//
// Records (one block holds many; a record never spans blocks):
//   u8 kind (1 set, 2 deadline, 3 delete, 4 position), varint key length, key, then
//   set:      varint version, varint deadline (ms since the epoch; 0: none), varint value
//             length, value
//   deadline: varint deadline
//   delete:   nothing
//   position: (a replica's log only; its "key" is the primary's history, empty for none) varint
//             lsn, u8 reset (0 or 1). The records before it in this worker's logs bring the
//             shard to the primary's state at that position (server/repl/sink.h). With reset,
//             the records before it in this file were replaced by a full sync: the log is
//             replayed only on the snapshot of its own generation, which holds the new data;
//             on an older one (that snapshot never committed) it is left out, so a restore
//             gives the data held before the full sync, never a mix.
// A record holds a key's state after a change, not the change: replaying any prefix gives a
// state the shard had.
//
// A snapshot's footer may carry a replica's position too (a stop's snapshot, which removes the
// logs): the records of the file are the primary's state at it.
#ifndef RINGKV_PERSIST_FORMAT_H_
#define RINGKV_PERSIST_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace ringkv::persist {

inline constexpr uint32_t kFormatVersion = 2;
// The oldest format this ringkv-server reads.
inline constexpr uint32_t kOldestFormatVersion = 1;

enum class FileKind : uint8_t { kLog = 'L', kSnapshot = 'S' };

struct FileHeader {
  FileKind kind = FileKind::kLog;
  uint32_t format = kFormatVersion;
  uint64_t generation = 0;
  uint32_t shard = 0;   // The worker (log) or shard (snapshot).
  uint32_t shards = 0;  // How many there were when the file was written.
  int64_t created_ms = 0;
};

std::string EncodeHeader(const FileHeader& header);
// The header in `payload`; an error saying what is wrong (not a header, another format).
absl::Status DecodeHeader(std::string_view payload, FileHeader* header);
// The seed of the file's blocks after its header.
uint32_t SeedOf(const FileHeader& header);

std::string LogName(uint64_t generation, uint32_t worker);
std::string SnapshotName(uint64_t generation, uint32_t shard);
// What a name in the data directory is: its kind, generation and shard; nullopt for others.
struct ParsedName {
  FileKind kind;
  uint64_t generation;
  uint32_t shard;
};
std::optional<ParsedName> ParseName(std::string_view name);

enum class RecordKind : uint8_t { kSet = 1, kDeadline = 2, kDelete = 3, kPosition = 4 };

struct Record {
  RecordKind kind = RecordKind::kSet;
  std::string_view key;  // kPosition: the history.
  std::string_view value;
  uint64_t version = 0;  // kPosition: the lsn.
  int64_t deadline_ms = 0;
  bool reset = false;  // kPosition.
};

// Where a replica's worker stands in its primary's stream (server/repl/): the primary's
// history and the position of the next record.
struct ReplPosition {
  std::string history;
  uint64_t lsn = 0;
  bool operator==(const ReplPosition&) const = default;
};

void AppendSet(std::string* out, std::string_view key, std::string_view value, uint64_t version,
               int64_t deadline_ms);
void AppendDeadline(std::string* out, std::string_view key, int64_t deadline_ms);
void AppendDelete(std::string* out, std::string_view key);
void AppendPosition(std::string* out, std::string_view history, uint64_t lsn, bool reset);
// The bytes AppendSet adds, at most.
size_t MaxSetBytes(size_t key_bytes, size_t value_bytes);

// Reads the records of one block's payload.
class RecordReader {
 public:
  explicit RecordReader(std::string_view payload) : data_(payload) {}
  // The next record (views into the payload); false at the end or at a malformed record.
  bool Next(Record* record);
  // A record was malformed (a block that checked out but holds garbage: a writer's bug).
  bool malformed() const { return malformed_; }
  // The bytes not read yet.
  std::string_view rest() const { return data_; }

 private:
  std::string_view data_;
  bool malformed_ = false;
};

// The footer block of a snapshot.
struct SnapshotFooter {
  uint64_t records = 0;
  uint64_t data_blocks = 0;
  uint64_t revision = 0;  // The shard's revision at the cut (format 1: 0, unknown).
  // A replica's position at the cut, if it had one (empty history: none).
  std::string history;
  uint64_t lsn = 0;
};
std::string EncodeFooter(const SnapshotFooter& footer);
bool DecodeFooter(std::string_view payload, SnapshotFooter* footer);

// One log the MANIFEST lists.
struct LogEntry {
  uint64_t generation = 0;
  uint32_t worker = 0;
  uint32_t workers = 0;
  // The bytes (header included) that were intact when a restart read it last; nothing is
  // written to it since. 0: the log may still be written to; read it to its end.
  uint64_t intact_bytes = 0;
  bool operator==(const LogEntry&) const = default;
};

// The MANIFEST's one block.
struct Manifest {
  uint64_t generation = 0;  // Of the snapshot; 0: none.
  uint32_t shards = 0;
  uint64_t keys = 0;
  uint64_t bytes = 0;  // Of the snapshot files together.
  int64_t created_ms = 0;
  // Format 2: the logs a restore replays, oldest generation first. A format 1 MANIFEST has no
  // inventory (has_inventory false): every log from the snapshot's generation on is read.
  bool has_inventory = true;
  std::vector<LogEntry> logs;
};
std::string EncodeManifest(const Manifest& manifest);
absl::Status DecodeManifest(std::string_view file, Manifest* manifest);

}  // namespace ringkv::persist

#endif  // RINGKV_PERSIST_FORMAT_H_
