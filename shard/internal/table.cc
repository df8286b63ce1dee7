#include "shard/internal/table.h"

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

#include "shard/internal/huge_page_allocator.h"
#include "shard/router.h"

namespace ringkv::internal {
namespace {

// Zeroed slots (dist 0: empty). Big arrays are mappings of their own (see HugePageAllocator):
// of huge pages, pre-faulted, unless `huge` is false (a growth's new array: its 4 KiB pages
// fault in as entries reach them, a few at a step, where pre-faulting them all, or faulting in
// 2 MiB at once, would stall the shard); small ones come from calloc.
Table::Entry* AllocateSlots(size_t capacity, bool huge) {
  const size_t bytes = capacity * sizeof(Table::Entry);
  void* p =
      bytes >= kHugePage ? AllocateHuge(bytes, huge) : std::calloc(capacity, sizeof(Table::Entry));
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<Table::Entry*>(p);
}

void FreeSlots(Table::Entry* slots, size_t capacity) {
  const size_t bytes = capacity * sizeof(Table::Entry);
  if (bytes >= kHugePage) {
    FreeHuge(slots, bytes);
  } else {
    std::free(slots);
  }
}

}  // namespace

size_t Table::CapacityFor(size_t n) { return std::bit_ceil(std::max(kMinCapacity, n + n / 4 + 1)); }

Table::Table(size_t reserve) {
  const size_t capacity = CapacityFor(reserve);
  slots_ = AllocateSlots(capacity, /*huge=*/true);
  mask_ = capacity - 1;
  grow_at_ = capacity - capacity / 5;
}

Table::~Table() {
  for (size_t i = 0; i < slot_count(); ++i) {
    if (IsLive(i) && slot(i).on_heap()) std::free(Block(slot(i)));
  }
  FreeSlots(slots_, capacity());
  if (growing()) FreeSlots(old_, old_mask_ + 1);
}

void Table::SetHeap(Entry* e, char* block, size_t key_len, size_t value_len, uint64_t hash) {
  // The aux word is at the same offset inline and on the heap: the move leaves it in place.
  const uint32_t k = static_cast<uint32_t>(key_len);
  const uint32_t v = static_cast<uint32_t>(value_len);
  std::memcpy(e->data + kBlockOffset, &block, sizeof(block));
  std::memcpy(e->data + kKeyLenOffset, &k, sizeof(k));
  std::memcpy(e->data + kValueLenOffset, &v, sizeof(v));
  std::memcpy(e->data + kHashOffset, &hash, sizeof(hash));
  e->key_len = kHeap;
  e->value_len = 0;
}

uint64_t Table::HashOf(const Entry& e) {
  return e.on_heap() ? HeapHash(e) : Router::Hash(KeyOf(e));
}

size_t Table::BucketRun(const Entry* slots, size_t mask, size_t bucket, size_t* count) {
  // From the home slot on, Robin Hood order puts entries displaced from earlier buckets first
  // (farther from home than this slot is from `bucket`), then the bucket's own (exactly as
  // far), then later buckets' (nearer).
  size_t i = bucket;
  for (size_t off = 0;; ++off, i = (i + 1) & mask) {
    const Entry& e = slots[i];
    if (!e.full() || size_t{e.dist} - 1 <= off) break;
  }
  const size_t first = i;
  size_t n = 0;
  for (size_t off = (first - bucket) & mask;; ++off, i = (i + 1) & mask) {
    const Entry& e = slots[i];
    if (!e.full() || size_t{e.dist} - 1 != off) break;
    ++n;
  }
  *count = n;
  return first;
}

bool Table::Matches(const Entry& e, std::string_view key, uint64_t hash) {
  if (!e.on_heap()) {
    return e.key_len == key.size() && std::memcmp(e.data, key.data(), key.size()) == 0;
  }
  return HeapHash(e) == hash && HeapKeyLen(e) == key.size() &&
         std::memcmp(Block(e), key.data(), key.size()) == 0;
}

size_t Table::BlockBytes(const Entry& e) { return e.on_heap() ? malloc_usable_size(Block(e)) : 0; }

char* Table::NewBlock(size_t bytes) {
  char* block = static_cast<char*>(std::malloc(std::max<size_t>(bytes, 1)));
  if (block == nullptr) throw std::bad_alloc();
  heap_bytes_ += malloc_usable_size(block);
  return block;
}

void Table::FreeBlock(char* block) {
  heap_bytes_ -= malloc_usable_size(block);
  std::free(block);
}

Table::Entry* Table::FindIn(Entry* slots, size_t mask, std::string_view key, uint64_t hash) {
  size_t i = hash & mask;
  // Robin Hood order: past an entry nearer its home than we are to ours, the key cannot be.
  for (uint8_t d = 1;; ++d) {
    Entry& s = slots[i];
    if (s.dist < d) return nullptr;
    if (s.dist == d && Matches(s, key, hash)) return &s;
    i = (i + 1) & mask;
  }
}

Table::Entry* Table::Find(std::string_view key, uint64_t hash) const {
  size_t mask;
  Entry* slots = ArrayFor(hash, &mask);
  return FindIn(slots, mask, key, hash);
}

Table::Entry* Table::FindByAux(uint64_t hash, uint64_t aux) const {
  size_t mask;
  Entry* slots = ArrayFor(hash, &mask);
  size_t i = hash & mask;
  for (uint8_t d = 1;; ++d) {
    Entry& s = slots[i];
    if (s.dist < d) return nullptr;
    if (s.dist == d && s.has_aux() && Aux(s) == aux && HashOf(s) == hash) return &s;
    i = (i + 1) & mask;
  }
}

bool Table::Place(Entry* slots, size_t mask, Entry* carry, uint64_t hash, Entry** placed,
                  uint64_t* writes) {
  size_t i = hash & mask;
  carry->dist = 1;
  *placed = nullptr;
  for (;;) {
    Entry& s = slots[i];
    ++*writes;
    if (!s.full()) {
      s = *carry;
      if (*placed == nullptr) *placed = &s;
      return true;
    }
    if (s.dist < carry->dist) {  // Robin Hood: the entry nearer its home moves on instead.
      std::swap(s, *carry);
      if (*placed == nullptr) *placed = &s;
    }
    i = (i + 1) & mask;
    if (++carry->dist >= kMaxDist) return false;  // *carry is the entry left out.
  }
}

void Table::EraseAt(Entry* slots, size_t mask, size_t i) {
  // Backward shift: the entries after it that are not at home move one slot nearer.
  for (;;) {
    const size_t j = (i + 1) & mask;
    if (slots[j].dist <= 1) {
      slots[i].dist = 0;
      return;
    }
    slots[i] = slots[j];
    --slots[i].dist;
    i = j;
  }
}

void Table::StartGrowth() {
  const size_t capacity = this->capacity() * 2;
  Entry* slots = AllocateSlots(capacity, /*huge=*/false);
  old_ = slots_;
  old_mask_ = mask_;
  moved_ = 0;
  released_to_ = 0;
  slots_ = slots;
  mask_ = capacity - 1;
  grow_at_ = capacity - capacity / 5;
}

size_t Table::GrowStep(size_t buckets) {
  if (!growing()) return 0;
  const size_t end = std::min(old_mask_ + 1, moved_ + buckets);
  const size_t start = moved_;
  while (moved_ < end) {
    if (!MoveBucket(moved_)) return buckets;  // Rebuilt: the growth is over.
    ++moved_;
  }
  if (moved_ <= old_mask_) {
    ReleaseMoved();
  } else {
    FreeSlots(old_, old_mask_ + 1);
    old_ = nullptr;
    old_mask_ = 0;
    moved_ = 0;
  }
  return end - start;
}

bool Table::MoveBucket(size_t bucket) {
  size_t count;
  const size_t first = BucketRun(old_, old_mask_, bucket, &count);
  // Copied, not erased: the old copies go stale as moved_ passes them, and nothing shifts.
  for (size_t k = 0; k < count; ++k) {
    Entry carry = old_[(first + k) & old_mask_];
    Entry* placed;
    if (!Place(slots_, mask_, &carry, HashOf(carry), &placed, &growth_writes_)) {
      // Left out: the entry carried, and the bucket's entries not placed yet. The bucket
      // counts as moved, so that the rebuild takes each of its entries exactly once.
      std::vector<Entry> left_out{carry};
      for (size_t j = k + 1; j < count; ++j) left_out.push_back(old_[(first + j) & old_mask_]);
      moved_ = bucket + 1;
      Rebuild(capacity() * 2, left_out);
      return false;
    }
  }
  return true;
}

void Table::ReleaseMoved() {
  const size_t old_bytes = (old_mask_ + 1) * sizeof(Entry);
  if (old_bytes < kHugePage) return;  // calloc's: freed whole at the end.
  // Below the moved mark the old array holds stale copies and empty slots, but for the run
  // that starts at slot 0 (entries of the last buckets that wrapped around, which the array's
  // remaining keys may still push along): whole pages past that run and below the mark go.
  // One chunk at a time: giving back 2 MiB of 4 KiB pages at once took 250 us (the mark
  // passes 256 KiB in about 340 inserts, so one chunk a step keeps up).
  constexpr size_t kChunk = size_t{256} << 10;
  size_t wrapped = 0;
  while (wrapped <= old_mask_ && old_[wrapped].full()) ++wrapped;
  const size_t from =
      std::max(released_to_, (wrapped * sizeof(Entry) + kChunk - 1) / kChunk * kChunk);
  const size_t to = std::min(from + kChunk, moved_ * sizeof(Entry) / kChunk * kChunk);
  if (to <= from) return;
  madvise(reinterpret_cast<char*>(old_) + from, to - from, MADV_DONTNEED);  // Advice.
  released_to_ = to;
}

void Table::Rebuild(size_t min_capacity, std::span<const Entry> extra) {
  for (size_t capacity = min_capacity;; capacity *= 2) {
    Entry* slots = AllocateSlots(capacity, /*huge=*/true);
    const size_t mask = capacity - 1;
    uint64_t writes = 0;
    auto place = [&](const Entry& e) {
      Entry carry = e;
      Entry* placed;
      return Place(slots, mask, &carry, HashOf(e), &placed, &writes);
    };
    bool ok = true;
    for (size_t i = 0; ok && i < slot_count(); ++i) {
      if (IsLive(i)) ok = place(slot(i));
    }
    for (size_t i = 0; ok && i < extra.size(); ++i) ok = place(extra[i]);
    if (!ok) {  // Entries are copied, not moved: dropping the new array loses nothing.
      FreeSlots(slots, capacity);
      continue;
    }
    FreeSlots(slots_, this->capacity());
    if (growing()) FreeSlots(old_, old_mask_ + 1);
    slots_ = slots;
    mask_ = mask;
    grow_at_ = capacity - capacity / 5;
    old_ = nullptr;
    old_mask_ = 0;
    moved_ = 0;
    return;
  }
}

Table::Entry* Table::Insert(std::string_view key, uint64_t hash, bool* inserted) {
  if (Entry* e = Find(key, hash)) {
    *inserted = false;
    return e;
  }
  *inserted = true;
  if (!growing() && size_ >= grow_at_) StartGrowth();
  if (growing()) GrowStep(kGrowStepBuckets);
  Entry fresh{};
  if (key.size() <= kInlineBytes) {
    std::memcpy(fresh.data, key.data(), key.size());
    fresh.key_len = static_cast<uint8_t>(key.size());
  } else {
    char* block = NewBlock(key.size());
    std::memcpy(block, key.data(), key.size());
    SetHeap(&fresh, block, key.size(), 0, hash);
  }
  ++size_;
  size_t mask;
  Entry* slots = ArrayFor(hash, &mask);
  Entry* placed;
  uint64_t writes = 0;
  if (Place(slots, mask, &fresh, hash, &placed, &writes)) return placed;
  // The probe got too long: `fresh` is now the entry carried then, in no slot.
  Rebuild(capacity() * 2, std::span<const Entry>(&fresh, 1));
  return Find(key, hash);
}

void Table::Erase(Entry* entry) {
  if (entry->on_heap()) FreeBlock(Block(*entry));
  if (InOld(entry)) {
    EraseAt(old_, old_mask_, static_cast<size_t>(entry - old_));
  } else {
    EraseAt(slots_, mask_, static_cast<size_t>(entry - slots_));
  }
  --size_;
}

void Table::MoveToHeap(Entry* e, uint64_t hash) {
  const size_t key_len = e->key_len;
  const size_t value_len = e->value_len;
  char* block = NewBlock(key_len + value_len);
  std::memcpy(block, e->data, key_len + value_len);
  SetHeap(e, block, key_len, value_len, hash);
}

void Table::SetValue(Entry* e, std::string_view value, uint64_t hash) {
  if (!e->on_heap()) {
    if (e->key_len + value.size() <= InlineRoom(*e)) {
      std::memmove(e->data + e->key_len, value.data(), value.size());
      e->value_len = static_cast<uint8_t>(value.size());
      return;
    }
    const size_t key_len = e->key_len;
    char* block = NewBlock(key_len + value.size());
    std::memcpy(block, e->data, key_len);
    std::memcpy(block + key_len, value.data(), value.size());
    SetHeap(e, block, key_len, value.size(), hash);
    return;
  }
  const size_t key_len = HeapKeyLen(*e);
  char* old = Block(*e);
  if (key_len + value.size() <= InlineRoom(*e)) {  // Back inline: key from the block.
    const uint64_t aux = e->has_aux() ? Aux(*e) : 0;
    std::memmove(e->data + key_len, value.data(), value.size());
    std::memcpy(e->data, old, key_len);
    e->key_len = static_cast<uint8_t>(key_len);
    e->value_len = static_cast<uint8_t>(value.size());
    if (e->has_aux()) std::memcpy(e->data + kAuxOffset, &aux, sizeof(aux));
    FreeBlock(old);
    return;
  }
  char* block = NewBlock(key_len + value.size());
  std::memcpy(block, old, key_len);
  std::memcpy(block + key_len, value.data(), value.size());
  FreeBlock(old);
  SetHeap(e, block, key_len, value.size(), hash);
}

void Table::SetAux(Entry* e, uint64_t aux, uint64_t hash) {
  if (!e->on_heap() && e->key_len + e->value_len > kInlineBytesWithAux) MoveToHeap(e, hash);
  e->meta |= kHasAux;
  std::memcpy(e->data + kAuxOffset, &aux, sizeof(aux));
}

}  // namespace ringkv::internal
