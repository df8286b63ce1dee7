// Scan order: where a key falls in a scan of the store. A key's scan position is its hash with
// the bits reversed; a scan visits positions in increasing order, and its cursor is the
// position it has reached: every key before it has been returned.
//
// Why reversed bits: a shard's home bucket of a key is the low bits of its hash (as many as the
// table has bucket bits), which are the top bits of its position, reversed. So one home bucket
// is one contiguous range of positions, and the buckets in scan order are the buckets in
// Redis's reverse-binary order. When a table doubles, a bucket's range splits in two halves,
// each a bucket of the new table; when it halves, two neighbouring ranges merge. A cursor that
// is a position therefore means the same before and after a resize, and a shard can resume
// from it exactly: no key is skipped, and none is returned twice. All shards share one
// position space, so a scan can page through all of them at once, in one order.
//
// A shard hands its part of a page back as records packed in one string (Request::out):
// position (8 bytes), key length (4), key bytes, in position order.
//
// A page of the whole store merges the shards' parts (MergeScanPages): it takes the keys every
// shard has covered, in position order, up to the page's limit, and its cursor is where it
// stopped, so consecutive pages cover consecutive ranges of positions.
//
//   std::string page;
//   AppendScanRecord(&page, ScanPosition(hash), key);
//   for (ScanRecordReader r(page); r.Next();) use(r.position(), r.key());
#ifndef RINGKV_SHARD_SCAN_H_
#define RINGKV_SHARD_SCAN_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ringkv {

inline uint64_t ReverseBits(uint64_t x) {
  x = ((x >> 1) & 0x5555555555555555) | ((x & 0x5555555555555555) << 1);
  x = ((x >> 2) & 0x3333333333333333) | ((x & 0x3333333333333333) << 2);
  x = ((x >> 4) & 0x0f0f0f0f0f0f0f0f) | ((x & 0x0f0f0f0f0f0f0f0f) << 4);
  return __builtin_bswap64(x);
}

inline uint64_t ScanPosition(uint64_t hash) { return ReverseBits(hash); }

inline void AppendScanRecord(std::string* out, uint64_t position, std::string_view key) {
  const uint32_t len = static_cast<uint32_t>(key.size());
  out->append(reinterpret_cast<const char*>(&position), sizeof(position));
  out->append(reinterpret_cast<const char*>(&len), sizeof(len));
  out->append(key.data(), key.size());
}

class ScanRecordReader {
 public:
  explicit ScanRecordReader(std::string_view records) : rest_(records) {}

  // Moves to the next record; false at the end.
  bool Next() {
    if (rest_.size() < 12) return false;
    uint32_t len;
    std::memcpy(&position_, rest_.data(), sizeof(position_));
    std::memcpy(&len, rest_.data() + 8, sizeof(len));
    key_ = rest_.substr(12, len);
    rest_.remove_prefix(12 + key_.size());
    return true;
  }
  uint64_t position() const { return position_; }
  std::string_view key() const { return key_; }

 private:
  std::string_view rest_;
  uint64_t position_ = 0;
  std::string_view key_;
};

// One shard's part of a page: its records, and how far it got (Op::kScan's outputs).
struct ShardScanPart {
  std::string_view records;
  bool done = false;     // The shard has no keys past these.
  uint64_t reached = 0;  // If not done: every key of the shard before this position is here.
};

// Merges the shards' parts of the page that starts at `cursor`: appends to `keys`, in position
// order, the keys every shard has covered, at most `limit` of them and no more once they
// reach `max_bytes`; returns the next page's cursor, 0 if the scan is done. Keys of one
// position (a 64-bit hash collision) are never split between pages, so a page may pass its
// limit only when more than `limit` keys share the first position. `limit` >= 1. The views
// point into the parts.
uint64_t MergeScanPages(const std::vector<ShardScanPart>& parts, size_t limit, size_t max_bytes,
                        std::vector<std::string_view>* keys);

}  // namespace ringkv

#endif  // RINGKV_SHARD_SCAN_H_
