// Table: a shard's hash table, of ringkv's own: open addressing with Robin Hood placement and
// backward-shift deletion, over 8-byte slots that point to records, power-of-two capacity, at
// most 4/5 full.
//
// Why not absl::flat_hash_map, which it replaced:
//   - a record carries a version and flags beside its key and value, in one allocation;
//   - Robin Hood placement keeps the entries of one home bucket together and in bucket order,
//     so a scan can visit home buckets one at a time in reverse-binary order, which survives
//     growth (Shard::Scan), and eviction can sample entries by index;
//   - a slot carries 8 bits of its key's hash, so a probe reads records only for likely
//     matches: a lookup is one DRAM miss for the slot and one for the record, and the worker
//     prefetches both for a burst of requests (PrefetchRecord).
//
// Why slots and records, not entries that hold the key and value: bytes per key. Entries of 48
// bytes at the loads a power-of-two table runs at (2/5 to 4/5) cost 60-120 bytes a key before
// any key or value that does not fit in them; a slot costs 10-20, and a record its key, value
// and 16 bytes, rounded up to 16 (jemalloc's classes up to 128 bytes, the arenas' above that,
// and pages above 512 KiB). 5M keys of 16 + 32 bytes took 670 MB with entries and take 414 MB
// now, against Redis's 781 in the same run.
//
// Slot (a uint64_t, 0 when empty):
//   bits  0..47  the record's address (user-space addresses fit in 47 bits)
//   bits 48..55  dist: 1 + how many slots the entry sits past its home bucket
//   bits 56..63  tag: bits 40..47 of the key's hash (the home bucket is the low bits, Router
//                takes the shard from the top ones)
// Record (so that it knows its own size, neither a write nor the accounting asks the allocator):
//   meta       8  the owner's (the shard keeps a version and flags there), but for the top
//                 bit, kHasAux, which is the table's
//   key word   4  bits 0..20 the key's length (keys are at most 1 MiB); bits 21..30 the
//                 record's size: if bit 31 is set, 16-byte units less one, in the Arena; else
//                 a jemalloc size class (SizeClass; a reserved block's, for a record in the
//                 reserved records' pool), or kBigSize for a big record
//   value_len  4  (values are at most 1 GiB)
//   key, value
// Records of at most 128 bytes are malloc'd at exactly one of jemalloc's size classes (16
// bytes apart up to 128), or take a block of a reserved table's pre-faulted pool (one class,
// which the record is not more than a class smaller than); bigger ones up to 16 KiB go to the
// table's Arena (16 bytes apart, where jemalloc's classes are a quarter of a power of two apart: a
// record of 16,440 bytes took 20 KiB). Bigger ones are big records, in a block that starts with a
// 16-byte prefix (the block's size, and its pool and a dead mark): up to 512 KiB in the big arena
// (16 MiB segments that give freed pages back at once, so a segment's unused end is at most 1/32 of
// it), and above that in a mapping of their own, rounded up to pages (malloc's size class if mmap
// fails).
//   aux        8  with kHasAux only: an optional word the owner keeps with an entry (the shard:
//                 a TTL's deadline), unaligned, after the value
// The key's hash is not kept: growth, scans and snapshots compute it again from the key
// (wyhash, a few nanoseconds for short keys). The home bucket of a key is its hash's low bits.
//
// Growth is incremental, as Redis's rehash is, so that no request waits for a whole table to be
// copied (one of 9M keys took 1.6 s at once). When an Insert finds the table 4/5 full it maps
// an array twice the size (4 KiB pages, faulted in as entries reach them) and from
// then on each Insert of a new key, and GrowStep when the owner is idle, copies the next
// kGrowStepBuckets home buckets of the old array to the new one. Old bucket b's entries go to
// new buckets b and b + old capacity. While it grows, a key whose old home bucket is below the
// moved mark is in the new array and the others are in the old one (new keys too), so a lookup
// still probes one array. The old array keeps the moved slots as stale copies, which nothing
// reads (erasing them would shift whole clusters back, step after step); its pages below the
// mark are given back (MADV_DONTNEED) as the mark passes them, so the two arrays together hold
// less than the new one's size. Records never move in a growth. A probe that would reach
// kMaxDist (keys made to collide) rebuilds at once, as before: Rebuild.
//
// The arena's compaction moves live records out of its emptiest segment, a bounded number of
// bytes at a time (kCompactStepBytes per Insert of a new key, or per record moved by SetValue
// or SetAux, while it is due; more per Upkeep when the owner is idle), and re-points their
// slots; the big arena's the same way (CompactBigBudget).
//
// A big record's value can be lent where it lies (Lend), so that a GET's answer reaches the
// socket with no copy in user space (the kernel's own is the only one). A record has at most one
// loan, which all its holders share; a flag in its block's prefix tells the paths below in one
// load whether it has one, and a map from records finds it. When a lent record moves with its
// value (the big arena's compaction, a move to make room for an aux word) the loan is re-pointed
// to where it went; before anything writes or frees it (SetValue, Erase, the table's end) the
// value is copied into the loan (SharedBytes::Own), once, whatever the number of holders, and
// the holders read it from there. So a value is copied in user space only when its record is
// written or freed while an answer that shares it is still on its way.
//
// Entry pointers (to slots) are valid until the next Insert (which may move entries as the
// table grows), Erase (which shifts the entries after the erased one) or Upkeep. A record's
// bytes (KeyOf, ValueOf) are valid until the next Insert, SetValue, SetAux or Upkeep, any of
// which may move it (the last three keep every slot where it is). Not thread-safe: the shard's
// owner only.
//
//   Table table(/*reserve=*/1000);
//   bool inserted;
//   Table::Entry* e = table.Insert("k", Router::Hash("k"), &inserted);
//   table.SetValue(e, "v");
//   std::string_view v = Table::ValueOf(*table.Find("k", Router::Hash("k")));
#ifndef RINGKV_SHARD_INTERNAL_TABLE_H_
#define RINGKV_SHARD_INTERNAL_TABLE_H_

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "base/shared_bytes.h"
#include "shard/internal/arena.h"
#include "shard/internal/prefetch.h"

namespace ringkv::internal {

class Table {
 public:
  // The bit of a record's meta that is the table's; the owner must leave it as it is.
  static constexpr uint64_t kHasAux = uint64_t{1} << 63;
  // A record's bytes before its key: meta, key length, value length.
  static constexpr size_t kRecordHeader = 16;

  class Entry {
   public:
    bool full() const { return bits_ != 0; }
    // 1 + how many slots the entry sits past its home bucket; 0 when empty.
    uint8_t dist() const { return static_cast<uint8_t>(bits_ >> kDistShift); }
    // The record's meta word (a full entry's).
    uint64_t& meta() const { return *reinterpret_cast<uint64_t*>(record()); }
    bool has_aux() const { return (meta() & kHasAux) != 0; }

   private:
    friend class Table;
    static constexpr int kDistShift = 48;
    static constexpr int kTagShift = 56;
    static constexpr uint64_t kPointerMask = (uint64_t{1} << kDistShift) - 1;
    static constexpr uint64_t kDistOne = uint64_t{1} << kDistShift;

    char* record() const { return reinterpret_cast<char*>(bits_ & kPointerMask); }
    uint8_t tag() const { return static_cast<uint8_t>(bits_ >> kTagShift); }
    void set_dist(uint64_t d) {
      bits_ = (bits_ & ~(uint64_t{0xff} << kDistShift)) | d << kDistShift;
    }
    void set_record(char* r) { bits_ = (bits_ & ~kPointerMask) | reinterpret_cast<uint64_t>(r); }

    uint64_t bits_;
  };
  static_assert(sizeof(Entry) == 8);

  // The capacity a table reserved for `n` entries starts with: the smallest power of two (and
  // kMinCapacity) that holds them at most 4/5 full.
  static size_t CapacityFor(size_t n);

  // A table for `reserve` entries. With `reserve_payload` too (a key and value together, of
  // at most 112 bytes), also a pool of `reserve` records for them, pre-faulted as the slots
  // are: what a reserved table of 48-byte entries gave before slots and records, whose inline
  // keys and values were paid for at start. (Fresh records otherwise fault their pages in as
  // keys arrive: on this project's VMs that cost the report's PUT workload a third of its
  // rate, BENCHMARKS.md.) A record takes a block of the pool while one is left, if the block
  // fits it (Fits: not more than a size class too big); a freed one goes back. Others come
  // from malloc.
  explicit Table(size_t reserve = 0, size_t reserve_payload = 0);
  ~Table();
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;
  // Exchanges every entry, record and growth under way with `other` (O(1): the arrays and
  // the arena's segments change hands, nothing is copied).
  void Swap(Table& other) {
    std::swap(slots_, other.slots_);
    std::swap(mask_, other.mask_);
    std::swap(size_, other.size_);
    std::swap(grow_at_, other.grow_at_);
    std::swap(heap_bytes_, other.heap_bytes_);
    arena_.Swap(other.arena_);
    big_.Swap(other.big_);
    std::swap(old_, other.old_);
    std::swap(old_mask_, other.old_mask_);
    std::swap(moved_, other.moved_);
    std::swap(released_to_, other.released_to_);
    std::swap(growth_writes_, other.growth_writes_);
    std::swap(pool_, other.pool_);
    std::swap(pool_next_, other.pool_next_);
    std::swap(pool_end_, other.pool_end_);
    std::swap(pool_free_, other.pool_free_);
    std::swap(pool_left_, other.pool_left_);
    std::swap(pool_block_, other.pool_block_);
    std::swap(pool_min_, other.pool_min_);
    SwapLoans(other);  // Their records change hands too.
  }

  static constexpr size_t kMinCapacity = 16;
  // Old home buckets each Insert of a new key moves while the table grows: at 4/5 full about
  // 13 entries, a microsecond or so. The growth is over after old capacity / 16 inserts, long
  // before the new array is 4/5 full, and the old array, which still takes new keys whose
  // buckets are not yet moved, gets at most 1/16 fuller meanwhile where it is fullest.
  static constexpr size_t kGrowStepBuckets = 16;

  // Starts the DRAM fetch of `hash`'s home bucket.
  void Prefetch(uint64_t hash) const {
    size_t mask;
    const Entry* slots = ArrayFor(hash, &mask);
    PrefetchLine(&slots[hash & mask]);
  }
  // Starts the DRAM fetch of the record of the first of the slots from `hash`'s home bucket on
  // (a few) whose tag is the hash's, if any: after Prefetch(hash) has brought the slots in, for
  // a burst's second pass.
  void PrefetchRecord(uint64_t hash) const {
    size_t mask;
    const Entry* slots = ArrayFor(hash, &mask);
    const uint8_t tag = TagOf(hash);
    for (size_t k = 0, i = hash & mask; k < kPrefetchProbe; ++k, i = (i + 1) & mask) {
      const Entry& s = slots[i];
      if (!s.full()) return;
      if (s.tag() == tag) {
        PrefetchLine(s.record());
        return;
      }
    }
  }

  // The entry of `key`, or null.
  Entry* Find(std::string_view key, uint64_t hash) const;
  // The entry whose key hashes to `hash` and whose aux word is `aux`, or null; where two such
  // entries exist (a 64-bit hash collision with the same aux), either.
  Entry* FindByAux(uint64_t hash, uint64_t aux) const;
  // The entry of `key`, inserted (empty value, meta 0) if absent; *inserted says which. A new
  // key's record has room for a value of `value_room` bytes, so that the SetValue that follows
  // does not move it. A new key may start a growth, or take it a step further.
  Entry* Insert(std::string_view key, uint64_t hash, bool* inserted, size_t value_room = 0);
  void Erase(Entry* entry);

  // While the table grows: moves up to `buckets` more old home buckets; returns how many it
  // moved (0 when not growing).
  size_t GrowStep(size_t buckets);
  bool growing() const { return old_ != nullptr; }
  // Work the table has pending (a growth, or a compaction due), and a step of it for an owner
  // with nothing else to do: up to `buckets` buckets moved, and per bucket 64 bytes of the
  // arena's records walked and 1 KiB of the big arena's. Returns a measure of the work done, 0 when
  // there was none to do.
  bool has_upkeep() const {
    return growing() || arena_.compacting() || arena_.NeedsCompaction() || big_.compacting() ||
           big_.NeedsCompaction();
  }
  size_t Upkeep(size_t buckets) {
    return GrowStep(buckets) + CompactStep(buckets * 64) + CompactBigStep(buckets * 1024);
  }
  // Bytes of arena records walked per Insert of a new key or record moved while a compaction
  // is due: at least kCompactStepBytes, and 32 times the record written, so that a step frees
  // more than a write makes dead (by evicting or moving a record of about its size) where the
  // segment walked is 15/16 live.
  static constexpr size_t kCompactStepBytes = size_t{32} << 10;
  static size_t CompactBudget(size_t record) { return std::max(kCompactStepBytes, 32 * record); }
  // Moves the live records of up to `bytes` of the arena's emptiest segment; returns the bytes
  // walked (0 when no compaction is due).
  size_t CompactStep(size_t bytes) { return Compact(arena_, bytes); }
  // The same for the big arena, whose compaction is due at a quarter dead: a step walks at
  // least 4 times the record written, so that it frees more than the write made dead.
  static constexpr size_t kCompactBigStepBytes = size_t{1} << 20;
  static size_t CompactBigBudget(size_t record) {
    return std::max(kCompactBigStepBytes, 4 * record);
  }
  size_t CompactBigStep(size_t bytes) { return Compact(big_, bytes); }
  const Arena& arena() const { return arena_; }
  const Arena& big_arena() const { return big_; }

  // A record's value, lent (above): the bytes where they lie, until the record is about to be
  // written or freed, when they are copied into the loan. Null if the record is not a big one (a
  // value under about 16 KiB), whose value the caller copies. Its last holder returns it, on
  // the owner's thread (or once that has stopped); it may outlive the table (its bytes are then
  // its own).
  class Loan;
  std::shared_ptr<const SharedBytes> Lend(const Entry& e);
  // Records lent, as they are (for tests).
  size_t loans() const { return loans_.size(); }

  static std::string_view KeyOf(const Entry& e) {
    return {e.record() + kRecordHeader, KeyLen(e.record())};
  }
  static std::string_view ValueOf(const Entry& e) {
    const char* r = e.record();
    return {r + kRecordHeader + KeyLen(r), ValueLen(r)};
  }
  // Replaces the value; the record moves if it must grow, or would shrink by more than an
  // allocator size class. A value of 16 KiB or more is written with non-temporal stores
  // (around the caches: a large table's records are rarely in them, and an ordinary store
  // would read each line before writing it).
  void SetValue(Entry* e, std::string_view value);

  // The aux word: set (the record may move to make room), read, and removed.
  void SetAux(Entry* e, uint64_t aux);
  static uint64_t Aux(const Entry& e) {
    const char* r = e.record();
    uint64_t aux;
    std::memcpy(&aux, r + kRecordHeader + KeyLen(r) + ValueLen(r), sizeof(aux));
    return aux;
  }
  static void ClearAux(Entry* e) { e->meta() &= ~kHasAux; }

  size_t size() const { return size_; }
  // Home buckets: the new array's while the table grows.
  size_t capacity() const { return mask_ + 1; }
  // Memory: the slot array, and the records (as the allocator sized them). While the table
  // grows, the new array's size: the part of it touched so far and what is left of the old one
  // add up to less.
  size_t table_bytes() const { return capacity() * sizeof(Entry); }
  size_t heap_bytes() const { return heap_bytes_; }
  // What the next Insert of a new key adds to table_bytes() by starting a growth, or 0.
  size_t growth_bytes() const { return !growing() && size_ >= grow_at_ ? table_bytes() : 0; }
  // Slots that growth has written so far (copies into the new array, and the entries Robin
  // Hood placement pushed along there): its work, for tests that bound a step.
  uint64_t growth_writes() const { return growth_writes_; }
  // Blocks of the reserved records' pool that no record holds (0 without one).
  size_t pool_left() const { return pool_left_; }
  // What the record of an entry counts for (RecordBytes).
  static size_t BlockBytes(const Entry& e);
  // About what the record of this key and value would take (jemalloc's size classes).
  static size_t BlockBytesFor(size_t key_len, size_t value_len, bool aux) {
    return RecordBytes(kRecordHeader + key_len + value_len + (aux ? sizeof(uint64_t) : 0));
  }
  // Where a record's bytes come from: malloc (exactly a size class) or the reserved records'
  // pool (a block of one class; both kHeap), the arena, the big arena,
  // a mapping of its own, or malloc for a big record whose mmap failed.
  enum class Pool : uint8_t { kHeap, kArena, kBigArena, kMapped, kBigHeap };
  static constexpr size_t kMaxBigRecord = size_t{512} << 10;
  static constexpr size_t kBigSegmentBytes = size_t{16} << 20;
  static Pool PoolFor(size_t n) {
    return n <= 128                 ? Pool::kHeap
           : n <= Arena::kMaxRecord ? Pool::kArena
           : n <= kMaxBigRecord     ? Pool::kBigArena
                                    : Pool::kMapped;
  }
  // What a record of `n` bytes counts for (heap_bytes(), and so --max-memory).
  static size_t RecordBytes(size_t n) { return Charge(AllocatedBytes(n), PoolFor(n)); }
  // What a record of `n` bytes is allocated: its jemalloc size class; in the arena, `n` rounded
  // up to 16; a big record, that and its prefix, in pages when mapped.
  static size_t AllocatedBytes(size_t n) {
    switch (PoolFor(n)) {
      case Pool::kHeap:
        return SizeClass(n);
      case Pool::kArena:
        return Arena::Round(n);
      case Pool::kBigArena:
        return Arena::Round(n) + kBigPrefix;
      default:
        return (n + kBigPrefix + Arena::kPageBytes - 1) / Arena::kPageBytes * Arena::kPageBytes;
    }
  }
  // What a record allocated `bytes` counts for, so that the limit bounds the memory the
  // process holds. In the arena, 1/7 more: compaction lets 1/8 of it stand dead, so it is at
  // most 8/7 of its live bytes (and a segment or two: the newest one's unused end, the one
  // being walked). In the big one, 1/8 more, for the parts of pages that freed records could
  // not give back (a quarter of it dead).
  static size_t Charge(size_t bytes, Pool pool) {
    return pool == Pool::kArena      ? bytes + bytes / 7
           : pool == Pool::kBigArena ? bytes + bytes / 8
                                     : bytes;
  }
  // jemalloc's size class for `n` bytes: multiples of 16 up to 128, then four classes per
  // doubling. A record takes exactly its class, in every build (a pooled one, the pool's).
  static size_t SizeClass(size_t n) { return ClassBytes(ClassOf(n)); }

  // Slots by index, for eviction's sampling and whole-table walks: 0 .. slot_count() - 1, the
  // new array's first and then, while the table grows, the old one's.
  // Slots of the old array below the moved mark may hold stale copies: IsLive tells.
  size_t slot_count() const { return capacity() + (growing() ? old_mask_ + 1 : 0); }
  bool IsLive(size_t i) const { return slot(i).full() && (i <= mask_ || HomeOf(i) >= moved_); }
  Entry& slot(size_t i) const { return i <= mask_ ? slots_[i] : old_[i - capacity()]; }
  size_t IndexOf(const Entry* e) const {
    return InOld(e) ? capacity() + static_cast<size_t>(e - old_) : static_cast<size_t>(e - slots_);
  }
  // For walks in scan order (snapshots), a few buckets ahead: the DRAM fetch of home bucket
  // `bucket`'s first slots; later, once they are in, of the records of its first two slots.
  // (While the table grows, only the new array's: a hint, never wrong.)
  void PrefetchBucket(size_t bucket) const { PrefetchLine(&slots_[bucket & mask_]); }
  void PrefetchBucketRecords(size_t bucket) const {
    for (size_t k = 0; k < 2; ++k) {
      const Entry& s = slots_[(bucket + k) & mask_];
      if (s.full()) PrefetchLine(s.record());
    }
  }
  // Calls fn(entry) for each entry whose hash's low bits are `bucket` (0 .. capacity() - 1),
  // in whichever array it is: a home bucket of the table as it is now, for scans.
  template <typename Fn>
  void ForEachInBucket(size_t bucket, Fn&& fn) const {
    size_t count;
    if (growing() && (bucket & old_mask_) >= moved_) {
      size_t i = BucketRun(old_, old_mask_, bucket & old_mask_, &count);
      for (; count > 0; --count, i = (i + 1) & old_mask_) {
        if ((HashOf(old_[i]) & mask_) == bucket) fn(old_[i]);
      }
      return;
    }
    size_t i = BucketRun(slots_, mask_, bucket, &count);
    for (; count > 0; --count, i = (i + 1) & mask_) fn(slots_[i]);
  }
  // A full entry's key hash (computed from its key).
  static uint64_t HashOf(const Entry& e);

  // For tests of the layout: the home bucket of the full entry at slot(i), and the mask of the
  // array slot(i) is in; the old array's capacity, and the old buckets moved so far (0 when not
  // growing).
  size_t HomeOf(size_t i) const { return (i - (slot(i).dist() - 1)) & MaskAt(i); }
  size_t MaskAt(size_t i) const { return i <= mask_ ? mask_ : old_mask_; }
  size_t old_capacity() const { return growing() ? old_mask_ + 1 : 0; }
  size_t moved_buckets() const { return growing() ? moved_ : 0; }

 private:
  static constexpr uint8_t kMaxDist = 250;
  static constexpr size_t kPrefetchProbe = 4;

  static uint8_t TagOf(uint64_t hash) { return static_cast<uint8_t>(hash >> 40); }
  static constexpr uint32_t kKeyLenMask = (uint32_t{1} << 21) - 1;
  static constexpr int kSizeShift = 21;
  static constexpr uint32_t kArenaBit = uint32_t{1} << 31;
  static constexpr uint32_t kBigSize = 0x3ff;
  // A big record's block: its size (uint64_t), then its Pool in the low byte of a uint64_t
  // with kDeadBlock above it, then the record.
  static constexpr size_t kBigPrefix = Arena::kKeptBytes;
  static constexpr uint64_t kDeadBlock = uint64_t{1} << 8;
  static uint32_t KeyLen(const char* record) { return Load<uint32_t>(record + 8) & kKeyLenMask; }
  static bool IsArenaRecord(const char* record) {
    return (Load<uint32_t>(record + 8) & kArenaBit) != 0;
  }
  static bool IsBig(const char* record) {
    return (Load<uint32_t>(record + 8) >> kSizeShift) == kBigSize;  // Arena bit clear.
  }
  // The bytes a record took from its pool (with a big record's prefix), and the pool.
  static size_t Allocation(const char* record, Pool* pool);
  // Bytes for the header, key, value and aux.
  static size_t Capacity(const char* record) {
    const uint32_t word = Load<uint32_t>(record + 8);
    const uint32_t size = (word >> kSizeShift) & 0x3ff;
    if ((word & kArenaBit) != 0) return (size + 1) * Arena::kGrain;
    if (size == kBigSize) return Load<uint64_t>(record - kBigPrefix) - kBigPrefix;
    return ClassBytes(static_cast<uint8_t>(size));
  }
  // The size class of `n` bytes as a number (1 .. about 110), and back.
  static uint8_t ClassOf(size_t n) {
    if (n <= 128) return static_cast<uint8_t>(std::max<size_t>(1, (n + 15) / 16));
    // 2^k < n <= 2^(k+1), k >= 7: four classes of 2^(k-2) bytes each.
    const int k = std::bit_width(n - 1) - 1;
    const size_t step = size_t{1} << (k - 2);
    const size_t quarters = (n + step - 1) / step;  // 5 .. 8
    return static_cast<uint8_t>(8 + (k - 7) * 4 + (quarters - 4));
  }
  static size_t ClassBytes(uint8_t c) {
    if (c <= 8) return size_t{c} * 16;
    const int k = 7 + (c - 9) / 4;
    return static_cast<size_t>(5 + (c - 9) % 4) << (k - 2);
  }
  static uint32_t ValueLen(const char* record) { return Load<uint32_t>(record + 12); }
  template <typename T>
  static T Load(const char* p) {
    T t;
    std::memcpy(&t, p, sizeof(t));
    return t;
  }
  static bool Matches(const Entry& e, std::string_view key, uint8_t tag);

  // The array (and its mask) that holds `hash`'s key, or would: while the table grows, the
  // old one if the key's old home bucket is not yet moved.
  Entry* ArrayFor(uint64_t hash, size_t* mask) const {
    if (growing() && (hash & old_mask_) >= moved_) {
      *mask = old_mask_;
      return old_;
    }
    *mask = mask_;
    return slots_;
  }
  bool InOld(const Entry* e) const { return growing() && e >= old_ && e <= old_ + old_mask_; }
  static Entry* FindIn(Entry* slots, size_t mask, std::string_view key, uint64_t hash);
  // The entries of `slots` whose home bucket is `bucket`: the slots first, first + 1, ...
  // (mod mask + 1), *count of them (Robin Hood keeps them together).
  static size_t BucketRun(const Entry* slots, size_t mask, size_t bucket, size_t* count);

  // Puts *carry (a full entry; dist is set here) into `slots`, moving on the entries nearer
  // their home than it is (Robin Hood); *placed is where it went; *writes counts the slots
  // written. False if some entry would sit kMaxDist slots from its home: *carry is then the
  // entry in no slot.
  static bool Place(Entry* slots, size_t mask, Entry* carry, uint64_t hash, Entry** placed,
                    uint64_t* writes);
  // Empties slot i of `slots`, shifting the entries after it that are not at home one nearer.
  static void EraseAt(Entry* slots, size_t mask, size_t i);

  // Maps the array twice the size and starts moving buckets to it.
  void StartGrowth();
  // Moves old bucket `bucket` to the new array; false if a probe reached kMaxDist, in which
  // case the table was rebuilt (and is no longer growing).
  bool MoveBucket(size_t bucket);
  // Gives the kernel back the old array's pages that the moved mark has emptied.
  void ReleaseMoved();
  // Copies every entry (of both arrays, while growing) and `extra` (entries in no slot) into
  // one new array of at least `min_capacity`, doubling it until every probe fits; at once.
  void Rebuild(size_t min_capacity, std::span<const Entry> extra);
  // A record of at least `bytes`, for a key of `key_len` bytes: its header written (meta 0,
  // no value), counted in heap_bytes_; and its release.
  char* NewRecord(size_t bytes, size_t key_len);
  void FreeRecord(char* record);
  // Whether a record the allocator sized `usable` bytes is the right one for `need` bytes:
  // big enough, and not a size class too big.
  // (A big record: not more than 1/32 too big.)
  static bool Fits(size_t need, size_t usable) {
    if (need > Arena::kMaxRecord) return need <= usable && usable <= need + need / 32;
    return need <= usable && usable <= AllocatedBytes(need + need / 4);
  }
  // Moves e's record to a new one of at least `need` bytes, copying its meta, its key and the
  // `keep` bytes after the key.
  char* MoveRecord(Entry* e, size_t need, size_t keep);
  // Compaction steps, where due, that keep up with a write of a `record`-byte record.
  void CompactSteps(size_t record) {
    if (arena_.compacting() || arena_.NeedsCompaction() || big_.compacting() ||
        big_.NeedsCompaction()) {
      CompactDueSteps(record);
    }
  }
  void CompactDueSteps(size_t record);
  // CompactStep or CompactBigStep: walks up to `bytes` of `arena`'s emptiest segment.
  size_t Compact(Arena& arena, size_t bytes);

  // Whether a record is lent: a flag in a big block's prefix, above kDeadBlock. Unlend copies
  // its value into its loan and ends the loan as one; MoveLoan re-points it to the record's
  // new place, which holds the same value.
  static constexpr uint64_t kLentBlock = uint64_t{1} << 9;
  static bool IsLent(const char* record) {
    return IsBig(record) && (Load<uint64_t>(record - kBigPrefix + 8) & kLentBlock) != 0;
  }
  static void SetLent(char* record, bool lent) {
    uint64_t flags = Load<uint64_t>(record - kBigPrefix + 8);
    flags = lent ? flags | kLentBlock : flags & ~kLentBlock;
    std::memcpy(record - kBigPrefix + 8, &flags, sizeof(flags));
  }
  void Unlend(char* record);
  void MoveLoan(char* from, char* to);
  // Before a record is written or freed: its value copied out of it into its loan, if any.
  void BeforeChange(char* record) {
    if (IsLent(record)) [[unlikely]] {
      Unlend(record);
    }
  }
  void Return(Loan* loan);  // Its last holder has let go of a loan still out.
  void UnlendAll();
  void SwapLoans(Table& other);

  Entry* slots_;  // While growing, the new array.
  size_t mask_;
  size_t size_ = 0;
  size_t grow_at_;         // Size at which the next Insert starts a growth.
  size_t heap_bytes_ = 0;  // Records, as they count (Charge).
  Arena arena_;
  Arena big_{kBigSegmentBytes, /*give_back=*/true};
  // While growing: the old array (null otherwise), whose home buckets below moved_ are in
  // slots_ now, and the byte offset in it below which its emptied pages were given back.
  Entry* old_ = nullptr;
  size_t old_mask_ = 0;
  size_t moved_ = 0;
  size_t released_to_ = 0;
  uint64_t growth_writes_ = 0;
  // The reserved records' pool (Table(reserve, reserve_payload)): blocks of pool_block_ bytes
  // (a size class) from pool_ to pool_end_: the freed ones first (linked
  // through their first word), then from pool_next_ on. Its unused blocks are resident memory
  // that no accounting counts, so a shard with a memory limit makes none (Shard).
  char* pool_ = nullptr;
  char* pool_next_ = nullptr;
  char* pool_end_ = nullptr;
  char* pool_free_ = nullptr;
  size_t pool_left_ = 0;
  size_t pool_block_ = 0;
  size_t pool_min_ = 0;  // The smallest record a block fits.
  bool InPool(const char* record) const {
    const auto r = reinterpret_cast<uintptr_t>(record);
    return r >= reinterpret_cast<uintptr_t>(pool_) && r < reinterpret_cast<uintptr_t>(pool_end_);
  }
  // A block of the pool for a record of `bytes`, or null if none is left or it would not fit.
  char* TakePooled(size_t bytes);

  absl::flat_hash_map<const char*, Loan*> loans_;  // Each lent record's loan.
};

class Table::Loan final : public SharedBytes, public std::enable_shared_from_this<Loan> {
 public:
  Loan(char* record, std::string_view value) : SharedBytes(value), record_(record) {}
  ~Loan() {
    if (lender_ != nullptr) lender_->Return(this);
  }

 private:
  friend class Table;
  Table* lender_ = nullptr;  // Null until it is listed, and once the bytes are its own.
  char* record_;
};

}  // namespace ringkv::internal

#endif  // RINGKV_SHARD_INTERNAL_TABLE_H_
