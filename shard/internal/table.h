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
// Entry pointers are valid until the next Insert (which may grow the table) or Erase (which
// shifts the entries after the erased one). Not thread-safe: the shard's owner only.
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

  static constexpr size_t kMinCapacity = 16;

  // The capacity a table reserved for `n` entries starts with: the smallest power of two (and
  // kMinCapacity) that holds them at most 4/5 full.
  static size_t CapacityFor(size_t n);

  explicit Table(size_t reserve = 0);
  ~Table();
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  // Starts the DRAM fetch of `hash`'s home bucket.
  void Prefetch(uint64_t hash) const {
    const char* p = reinterpret_cast<const char*>(&slots_[hash & mask_]);
    __builtin_prefetch(p);
    __builtin_prefetch(p + sizeof(Entry) - 1);  // An entry may straddle two cache lines.
  }

  // The entry of `key`, or null.
  Entry* Find(std::string_view key, uint64_t hash) const;
  // The entry whose key hashes to `hash` and whose aux word is `aux`, or null; where two such
  // entries exist (a 64-bit hash collision with the same aux), either.
  Entry* FindByAux(uint64_t hash, uint64_t aux) const;
  // The entry of `key`, inserted (empty value, meta 0) if absent; *inserted says which.
  Entry* Insert(std::string_view key, uint64_t hash, bool* inserted);
  void Erase(Entry* entry);

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
  size_t capacity() const { return mask_ + 1; }
  // Memory: the slot array, and the blocks of heap entries (as the allocator sized them).
  size_t table_bytes() const { return capacity() * sizeof(Entry); }
  size_t heap_bytes() const { return heap_bytes_; }
  // What the next Insert of a new key adds to table_bytes() by growing the table, or 0.
  size_t growth_bytes() const { return size_ >= grow_at_ ? table_bytes() : 0; }
  // The heap block of a heap entry, as the allocator sized it; 0 for an inline one.
  static size_t BlockBytes(const Entry& e);
  // About what a heap block for this key and value would take (0 if they fit in the entry).
  static size_t BlockBytesFor(size_t key_len, size_t value_len, bool aux) {
    const size_t n = key_len + value_len;
    return n <= (aux ? kInlineBytesWithAux : kInlineBytes) ? 0 : (n + 15) / 16 * 16;
  }

  // Slots by index, for scans and eviction: index i's entry, and the home bucket of a full one.
  Entry& slot(size_t i) const { return slots_[i]; }
  size_t HomeOf(size_t i) const { return (i - (slots_[i].dist - 1)) & mask_; }
  size_t mask() const { return mask_; }
  // The entries whose home bucket is `bucket`: the slots first, first + 1, ... (mod capacity),
  // *count of them (Robin Hood keeps them together).
  size_t BucketRun(size_t bucket, size_t* count) const;
  // A full entry's key hash (kept in heap entries, computed for inline ones).
  static uint64_t HashOf(const Entry& e);

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

  // Puts *carry (a full entry; dist is set here) into `slots`, moving on the entries nearer
  // their home than it is (Robin Hood); *placed is where it went. False if some entry would sit
  // kMaxDist slots from its home: *carry is then the entry in no slot.
  static bool Place(Entry* slots, size_t mask, Entry* carry, uint64_t hash, Entry** placed);
  // Place into this table, growing it as often as needed; false if it grew (then *placed is
  // stale).
  bool PlaceOrGrow(Entry entry, uint64_t hash, Entry** placed);
  void Grow(size_t min_capacity);
  void FreeBlock(char* block);
  char* NewBlock(size_t bytes);

  Entry* slots_;
  size_t mask_;
  size_t size_ = 0;
  size_t grow_at_;         // Size at which the next Insert grows the table.
  size_t heap_bytes_ = 0;  // Blocks of heap entries, as the allocator sized them.
};

}  // namespace ringkv::internal

#endif  // RINGKV_SHARD_INTERNAL_TABLE_H_
