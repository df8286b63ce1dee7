// Blocks: how ringkv's data files (snapshots and logs) frame what they hold, so that a reader can
// tell good bytes from torn or damaged ones.
//
// A block is
//   length  u32   payload bytes (at most kMaxBlockPayload)
//   check   u32   CRC-32C of the length bytes, seeded with ~seed
//   crc     u32   CRC-32C of the length bytes and the payload, seeded with the file's seed
//   payload
// little-endian. The seed is the file's own (persist/format.h), so a block that belongs to
// another file fails its check too. A reader takes blocks while they check out and stops at
// the first that does not. A write that a crash cut short leaves a torn last block: a header
// cut short, a checked length that runs past the end of the file, or zeros to the end (a file
// system may extend a file before its data lands: a header of zeros, or a payload that fails
// its checksum and ends in at least a sector of zeros). A log with --fsync=always ends in zeros
// after a crash in any case: it writes them ahead of its records (persist/log_writer.h), so a
// power loss while its last batch was being written can also leave a sector of that batch
// unwritten (zeros) before one that was written: its first block fails its check, a sector of
// its header (or of its payload) is zeros, no good block follows, and the file still ends in
// the zeros written ahead. That is a tear too (BlockReader::TornOutOfOrder has the rule). Anything
// else is damage, which the caller must not mistake for a clean end: a last block that is whole and
// fails its checksum was written whole and changed since. The length's own check is what tells a
// flipped length (damage) from a write cut short.
//
//   std::string file;
//   AppendBlock(&file, seed, "one");
//   AppendBlock(&file, seed, "two");
//   BlockReader reader(file, seed);
//   for (std::string_view payload; reader.Next(&payload);) use(payload);
//   if (reader.end() == BlockReader::End::kDamaged) refuse(reader.offset());
#ifndef RINGKV_PERSIST_BLOCK_H_
#define RINGKV_PERSIST_BLOCK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ringkv::persist {

inline constexpr size_t kBlockHeaderBytes = 12;
// One record of the largest value (--max-value-bytes: 1 GiB) with the longest key (1 MiB).
inline constexpr uint32_t kMaxBlockPayload = (1u << 30) + (2u << 20);

// Appends one block holding `payload` (at most kMaxBlockPayload bytes) to *out.
void AppendBlock(std::string* out, uint32_t seed, std::string_view payload);

// Fills in the header of a block built in place: `block` points at kBlockHeaderBytes reserved
// bytes, followed by its `payload_bytes` of payload.
void SealBlock(char* block, size_t payload_bytes, uint32_t seed);

class BlockReader {
 public:
  enum class End {
    kNone,     // Not at the end yet.
    kClean,    // Every byte was in a good block.
    kTorn,     // The last block is incomplete (cut short, or zeros to the end).
    kDamaged,  // A block fails its check (or claims an impossible length) with bytes after it.
  };

  // `file_offset`: where `data` begins in its file (the sectors a power loss leaves unwritten
  // are aligned in the file).
  BlockReader(std::string_view data, uint32_t seed, uint64_t file_offset = 0)
      : data_(data), seed_(seed), file_offset_(file_offset) {}

  // The next good block's payload (a view into the data); false at the end (see end()).
  bool Next(std::string_view* payload);
  End end() const { return end_; }
  // Where the next block starts: after the end, the length of the longest good prefix.
  size_t offset() const { return offset_; }
  // kTorn with nothing but zeros from the end of the last good block on: a write whose pages
  // never landed, or the zeros a log with --fsync=always writes ahead of its records.
  bool zeros_to_end() const { return zeros_to_end_; }

 private:
  bool HoldsABlock(std::string_view bytes, size_t starts) const;
  bool TornOutOfOrder(std::string_view rest, bool unwritten) const;

  std::string_view data_;
  uint32_t seed_;
  uint64_t file_offset_;
  size_t offset_ = 0;
  End end_ = End::kNone;
  bool zeros_to_end_ = false;
};

}  // namespace ringkv::persist

#endif  // RINGKV_PERSIST_BLOCK_H_
