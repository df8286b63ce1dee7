// The formats of ringkv's data directory (--data-dir): what each file is called and what its
// blocks (persist/block.h) hold. Everything is little-endian; lengths and numbers inside
// records are LEB128 varints.
//
// Files:
//   MANIFEST                   one block: the snapshot that restore starts from (its
//                              generation, shard count, keys, bytes and time). Absent: none.
//   snap-GGGGGGGGGGGG-SSSS.rkv shard S's snapshot of generation G: a header block, blocks of
//                              records, and a footer block (records and data blocks written).
//   log-GGGGGGGGGGGG-WWWW.rkv  worker W's log of generation G: a header block, then one block
//                              per group commit.
//   LOCK                       held (flock) by the server that uses the directory.
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
//   u8 kind (1 set, 2 deadline, 3 delete), varint key length, key, then
//   set:      varint version, varint deadline (ms since the epoch; 0: none), varint value
//             length, value
//   deadline: varint deadline
//   delete:   nothing
// A record holds a key's state after a change, not the change: replaying any prefix gives a
// state the shard had.
#ifndef RINGKV_PERSIST_FORMAT_H_
#define RINGKV_PERSIST_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace ringkv::persist {

inline constexpr uint32_t kFormatVersion = 1;

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

enum class RecordKind : uint8_t { kSet = 1, kDeadline = 2, kDelete = 3 };

struct Record {
  RecordKind kind = RecordKind::kSet;
  std::string_view key;
  std::string_view value;
  uint64_t version = 0;
  int64_t deadline_ms = 0;
};

void AppendSet(std::string* out, std::string_view key, std::string_view value, uint64_t version,
               int64_t deadline_ms);
void AppendDeadline(std::string* out, std::string_view key, int64_t deadline_ms);
void AppendDelete(std::string* out, std::string_view key);
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

 private:
  std::string_view data_;
  bool malformed_ = false;
};

// The footer block of a snapshot.
struct SnapshotFooter {
  uint64_t records = 0;
  uint64_t data_blocks = 0;
};
std::string EncodeFooter(const SnapshotFooter& footer);
bool DecodeFooter(std::string_view payload, SnapshotFooter* footer);

// The MANIFEST's one block.
struct Manifest {
  uint64_t generation = 0;  // Of the snapshot; 0: none.
  uint32_t shards = 0;
  uint64_t keys = 0;
  uint64_t bytes = 0;  // Of the snapshot files together.
  int64_t created_ms = 0;
};
std::string EncodeManifest(const Manifest& manifest);
absl::Status DecodeManifest(std::string_view file, Manifest* manifest);

}  // namespace ringkv::persist

#endif  // RINGKV_PERSIST_FORMAT_H_
