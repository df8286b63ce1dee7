// Table: a shard's hash table, of ringkv's own: open addressing with Robin Hood placement and
// backward-shift deletion, over 48-byte entries, power-of-two capacity, at most 4/5 full.
//
// Why not absl::flat_hash_map, which it replaced:
//   - an entry carries a version and flags beside its key and value in the same 48 bytes
//     (a report-style 29-byte key and 8-byte value still need no allocation);
//   - Robin Hood placement keeps the entries of one home bucket together and in bucket order,
//     so a scan can visit home buckets one at a time in reverse-binary order, which survives
//     growth (Shard::Scan), and eviction can sample entries by index;
//   - a probe reads entries only: at the loads the shards run at, a lookup is one DRAM miss,
//     where SwissTable reads its control bytes and then, dependent on them, the slot.
//
// Entry layout:
//   meta       8  the owner's (the shard keeps a version and flags there), but for the top
//                 bit, kHasAux, which is the table's
//   dist       1  0: empty; else 1 + how many slots the entry sits past its home bucket
//   key_len    1  the inline key's length, or kHeap
//   value_len  1  the inline value's length
//   data      37  inline: key bytes, then value bytes, and with an aux word its 8 bytes at the
//                 end (offset 29);
//                 heap: 5 bytes unused, block pointer (8, at entry offset 16, aligned so that
//                 leak checkers see it), key length (4), value length (4), hash (8), aux (8,
//                 at offset 29 as inline); the block holds the key, then the value
// An entry is inline when key + value fit in 37 bytes, 29 with an aux word. The aux word is an
// optional 8 bytes the owner keeps with an entry (the shard: a TTL's deadline), so entries
// without one pay nothing for it. The home bucket of a key is its hash's low bits (Router takes
// the shard from the top bits).
//
// Growth is incremental, as Redis's rehash is, so that no request waits for a whole table to be
// copied (one of 9M keys took 1.6 s at once). When an Insert finds the table 4/5 full it maps
// an array twice the size (4 KiB pages, faulted in as entries reach them) and from
// then on each Insert of a new key, and GrowStep when the owner is idle, copies the next
// kGrowStepBuckets home buckets of the old array to the new one. Old bucket b's entries go to
// new buckets b and b + old capacity. While it grows, a key whose old home bucket is below the
// moved mark is in the new array and the others are in the old one (new keys too), so a lookup
// still probes one array. The old array keeps the moved entries as stale copies, which nothing
// reads (erasing them would shift whole clusters back, step after step); its pages below the
// mark are given back (MADV_DONTNEED) as the mark passes them, so the two arrays together hold
// less than the new one's size. A probe that would reach kMaxDist (keys made to collide)
// rebuilds at once, as before: Rebuild.
//
// Entry pointers are valid until the next Insert (which may move entries as the table grows),
// Erase (which shifts the entries after the erased one) or GrowStep. Not thread-safe: the
// shard's owner only.
//
//   Table table(/*reserve=*/1000);
//   bool inserted;
//   Table::Entry* e = table.Insert("k", Router::Hash("k"), &inserted);
//   table.SetValue(e, "v");
//   std::string_view v = Table::ValueOf(*table.Find("k", Router::Hash("k")));
#ifndef RINGKV_SHARD_INTERNAL_TABLE_H_
#define RINGKV_SHARD_INTERNAL_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace ringkv::internal {

class Table {
 public:
  static constexpr size_t kInlineBytes = 37;  // Key and value bytes an entry holds itself.
  static constexpr size_t kInlineBytesWithAux = kInlineBytes - 8;
  // The bit of Entry::meta that is the table's; the owner must leave it as it is.
  static constexpr uint64_t kHasAux = uint64_t{1} << 63;

  struct Entry {
    uint64_t meta;
    uint8_t dist;
    uint8_t key_len;
    uint8_t value_len;
    char data[kInlineBytes];

    bool full() const { return dist != 0; }
    bool on_heap() const { return key_len == kHeap; }
    bool has_aux() const { return (meta & kHasAux) != 0; }
  };
  static_assert(sizeof(Entry) == 48 && alignof(Entry) == 8);

  // The capacity a table reserved for `n` entries starts with: the smallest power of two (and
  // kMinCapacity) that holds them at most 4/5 full.
  static size_t CapacityFor(size_t n);

  explicit Table(size_t reserve = 0);
  ~Table();
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

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
    const char* p = reinterpret_cast<const char*>(&slots[hash & mask]);
    __builtin_prefetch(p);
    __builtin_prefetch(p + sizeof(Entry) - 1);  // An entry may straddle two cache lines.
  }

  // The entry of `key`, or null.
  Entry* Find(std::string_view key, uint64_t hash) const;
  // The entry whose key hashes to `hash` and whose aux word is `aux`, or null; where two such
  // entries exist (a 64-bit hash collision with the same aux), either.
  Entry* FindByAux(uint64_t hash, uint64_t aux) const;
  // The entry of `key`, inserted (empty value, meta 0) if absent; *inserted says which. A new
  // key may start a growth, or take it a step further.
  Entry* Insert(std::string_view key, uint64_t hash, bool* inserted);
  void Erase(Entry* entry);

  // While the table grows: moves up to `buckets` more old home buckets; returns how many it
  // moved (0 when not growing). For an owner with nothing else to do.
  size_t GrowStep(size_t buckets);
  bool growing() const { return old_ != nullptr; }

  static std::string_view KeyOf(const Entry& e) {
    if (!e.on_heap()) return {e.data, e.key_len};
    return {Block(e), HeapKeyLen(e)};
  }
  static std::string_view ValueOf(const Entry& e) {
    if (!e.on_heap()) return {e.data + e.key_len, e.value_len};
    return {Block(e) + HeapKeyLen(e), HeapValueLen(e)};
  }
  // Replaces the value; `hash` is the key's (kept in the entry when it moves to the heap).
  void SetValue(Entry* e, std::string_view value, uint64_t hash);

  // The aux word: set (the entry may move its key and value to the heap to make room), read,
  // and removed.
  void SetAux(Entry* e, uint64_t aux, uint64_t hash);
  static uint64_t Aux(const Entry& e) { return Load<uint64_t>(e, kAuxOffset); }
  static void ClearAux(Entry* e) { e->meta &= ~kHasAux; }

  size_t size() const { return size_; }
  // Home buckets: the new array's while the table grows.
  size_t capacity() const { return mask_ + 1; }
  // Memory: the slot array, and the blocks of heap entries (as the allocator sized them). While
  // the table grows, the new array's size: the part of it touched so far and what is left of
  // the old one add up to less.
  size_t table_bytes() const { return capacity() * sizeof(Entry); }
  size_t heap_bytes() const { return heap_bytes_; }
  // What the next Insert of a new key adds to table_bytes() by starting a growth, or 0.
  size_t growth_bytes() const { return !growing() && size_ >= grow_at_ ? table_bytes() : 0; }
  // Slots that growth has written so far (copies into the new array, and the entries Robin
  // Hood placement pushed along there): its work, for tests that bound a step.
  uint64_t growth_writes() const { return growth_writes_; }
  // The heap block of a heap entry, as the allocator sized it; 0 for an inline one.
  static size_t BlockBytes(const Entry& e);
  // About what a heap block for this key and value would take (0 if they fit in the entry).
  static size_t BlockBytesFor(size_t key_len, size_t value_len, bool aux) {
    const size_t n = key_len + value_len;
    return n <= (aux ? kInlineBytesWithAux : kInlineBytes) ? 0 : (n + 15) / 16 * 16;
  }

  // Slots by index, for eviction's sampling and whole-table walks: 0 .. slot_count() - 1, the
  // new array's first and then, while the table grows, the old one's.
  // Slots of the old array below the moved mark may hold stale copies: IsLive tells.
  size_t slot_count() const { return capacity() + (growing() ? old_mask_ + 1 : 0); }
  bool IsLive(size_t i) const { return slot(i).full() && (i <= mask_ || HomeOf(i) >= moved_); }
  Entry& slot(size_t i) const { return i <= mask_ ? slots_[i] : old_[i - capacity()]; }
  size_t IndexOf(const Entry* e) const {
    return InOld(e) ? capacity() + static_cast<size_t>(e - old_) : static_cast<size_t>(e - slots_);
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
  // A full entry's key hash (kept in heap entries, computed for inline ones).
  static uint64_t HashOf(const Entry& e);

  // For tests of the layout: the home bucket of the full entry at slot(i), and the mask of the
  // array slot(i) is in; the old array's capacity, and the old buckets moved so far (0 when not
  // growing).
  size_t HomeOf(size_t i) const { return (i - (slot(i).dist - 1)) & MaskAt(i); }
  size_t MaskAt(size_t i) const { return i <= mask_ ? mask_ : old_mask_; }
  size_t old_capacity() const { return growing() ? old_mask_ + 1 : 0; }
  size_t moved_buckets() const { return growing() ? moved_ : 0; }

 private:
  static constexpr uint8_t kHeap = 0xff;
  static constexpr uint8_t kMaxDist = 250;
  // Offsets in Entry::data. The aux word is at the same place inline and on the heap.
  static constexpr size_t kAuxOffset = kInlineBytesWithAux;
  static constexpr size_t kBlockOffset = 5;  // Entry offset 16: 8-aligned.
  static constexpr size_t kKeyLenOffset = kBlockOffset + 8;
  static constexpr size_t kValueLenOffset = kKeyLenOffset + 4;
  static constexpr size_t kHashOffset = kValueLenOffset + 4;
  static_assert(kHashOffset + 8 == kAuxOffset);

  static size_t InlineRoom(const Entry& e) {
    return e.has_aux() ? kInlineBytesWithAux : kInlineBytes;
  }
  // Moves an inline entry's key and value (and aux word) to a heap block.
  void MoveToHeap(Entry* e, uint64_t hash);

  // A T stored at `offset` of the entry's data bytes (unaligned, so by memcpy).
  template <typename T>
  static T Load(const Entry& e, size_t offset) {
    T t;
    std::memcpy(&t, e.data + offset, sizeof(t));
    return t;
  }
  static char* Block(const Entry& e) { return Load<char*>(e, kBlockOffset); }
  static uint32_t HeapKeyLen(const Entry& e) { return Load<uint32_t>(e, kKeyLenOffset); }
  static uint32_t HeapValueLen(const Entry& e) { return Load<uint32_t>(e, kValueLenOffset); }
  static uint64_t HeapHash(const Entry& e) { return Load<uint64_t>(e, kHashOffset); }
  // Makes `e` a heap entry whose block is `block` (key then value).
  static void SetHeap(Entry* e, char* block, size_t key_len, size_t value_len, uint64_t hash);
  static bool Matches(const Entry& e, std::string_view key, uint64_t hash);

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
  void FreeBlock(char* block);
  char* NewBlock(size_t bytes);

  Entry* slots_;  // While growing, the new array.
  size_t mask_;
  size_t size_ = 0;
  size_t grow_at_;         // Size at which the next Insert starts a growth.
  size_t heap_bytes_ = 0;  // Blocks of heap entries, as the allocator sized them.
  // While growing: the old array (null otherwise), whose home buckets below moved_ are in
  // slots_ now, and the byte offset in it below which its emptied pages were given back.
  Entry* old_ = nullptr;
  size_t old_mask_ = 0;
  size_t moved_ = 0;
  size_t released_to_ = 0;
  uint64_t growth_writes_ = 0;
};

}  // namespace ringkv::internal

#endif  // RINGKV_SHARD_INTERNAL_TABLE_H_
