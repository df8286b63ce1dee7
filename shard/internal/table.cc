#include "shard/internal/table.h"

#include <malloc.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <new>
#include <utility>

#include "shard/internal/huge_page_allocator.h"
#include "shard/router.h"

namespace ringkv::internal {
namespace {

// Zeroed slots (dist 0: empty). Big arrays are huge-page mappings, pre-faulted (see
// HugePageAllocator); small ones come from calloc.
Table::Entry* AllocateSlots(size_t capacity) {
  const size_t bytes = capacity * sizeof(Table::Entry);
  void* p = bytes >= kHugePage ? AllocateHuge(bytes) : std::calloc(capacity, sizeof(Table::Entry));
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
  slots_ = AllocateSlots(capacity);
  mask_ = capacity - 1;
  grow_at_ = capacity - capacity / 5;
}

Table::~Table() {
  for (size_t i = 0; i <= mask_; ++i) {
    if (slots_[i].full() && slots_[i].on_heap()) std::free(Block(slots_[i]));
  }
  FreeSlots(slots_, capacity());
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

size_t Table::BucketRun(size_t bucket, size_t* count) const {
  // From the home slot on, Robin Hood order puts entries displaced from earlier buckets first
  // (farther from home than this slot is from `bucket`), then the bucket's own (exactly as
  // far), then later buckets' (nearer).
  size_t i = bucket;
  for (size_t off = 0;; ++off, i = (i + 1) & mask_) {
    const Entry& e = slots_[i];
    if (!e.full() || size_t{e.dist} - 1 <= off) break;
  }
  const size_t first = i;
  size_t n = 0;
  for (size_t off = (first - bucket) & mask_;; ++off, i = (i + 1) & mask_) {
    const Entry& e = slots_[i];
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

Table::Entry* Table::Find(std::string_view key, uint64_t hash) const {
  size_t i = hash & mask_;
  // Robin Hood order: past an entry nearer its home than we are to ours, the key cannot be.
  for (uint8_t d = 1;; ++d) {
    Entry& s = slots_[i];
    if (s.dist < d) return nullptr;
    if (s.dist == d && Matches(s, key, hash)) return &s;
    i = (i + 1) & mask_;
  }
}

Table::Entry* Table::FindByAux(uint64_t hash, uint64_t aux) const {
  size_t i = hash & mask_;
  for (uint8_t d = 1;; ++d) {
    Entry& s = slots_[i];
    if (s.dist < d) return nullptr;
    if (s.dist == d && s.has_aux() && Aux(s) == aux && HashOf(s) == hash) return &s;
    i = (i + 1) & mask_;
  }
}

bool Table::Place(Entry* slots, size_t mask, Entry* carry, uint64_t hash, Entry** placed) {
  size_t i = hash & mask;
  carry->dist = 1;
  *placed = nullptr;
  for (;;) {
    Entry& s = slots[i];
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

bool Table::PlaceOrGrow(Entry entry, uint64_t hash, Entry** placed) {
  bool grew = false;
  while (!Place(slots_, mask_, &entry, hash, placed)) {
    // The entry carried when the probe got too long is in no slot: grow, and place it anew.
    Grow(capacity() * 2);
    hash = HashOf(entry);
    grew = true;
  }
  return !grew;
}

void Table::Grow(size_t min_capacity) {
  for (size_t capacity = min_capacity;; capacity *= 2) {
    Entry* slots = AllocateSlots(capacity);
    const size_t mask = capacity - 1;
    bool ok = true;
    for (size_t i = 0; ok && i <= mask_; ++i) {
      if (!slots_[i].full()) continue;
      Entry carry = slots_[i];
      Entry* placed;
      ok = Place(slots, mask, &carry, HashOf(slots_[i]), &placed);
    }
    if (!ok) {  // Entries are copied, not moved: dropping the new array loses nothing.
      FreeSlots(slots, capacity);
      continue;
    }
    FreeSlots(slots_, this->capacity());
    slots_ = slots;
    mask_ = mask;
    grow_at_ = capacity - capacity / 5;
    return;
  }
}

Table::Entry* Table::Insert(std::string_view key, uint64_t hash, bool* inserted) {
  if (Entry* e = Find(key, hash)) {
    *inserted = false;
    return e;
  }
  *inserted = true;
  if (size_ >= grow_at_) Grow(capacity() * 2);
  Entry fresh{};
  if (key.size() <= kInlineBytes) {
    std::memcpy(fresh.data, key.data(), key.size());
    fresh.key_len = static_cast<uint8_t>(key.size());
  } else {
    char* block = NewBlock(key.size());
    std::memcpy(block, key.data(), key.size());
    SetHeap(&fresh, block, key.size(), 0, hash);
  }
  Entry* placed;
  ++size_;
  if (PlaceOrGrow(fresh, hash, &placed)) return placed;
  return Find(key, hash);  // The table grew on the way: look the entry up again.
}

void Table::Erase(Entry* entry) {
  if (entry->on_heap()) FreeBlock(Block(*entry));
  // Backward shift: the entries after it that are not at home move one slot nearer.
  size_t i = static_cast<size_t>(entry - slots_);
  for (;;) {
    const size_t j = (i + 1) & mask_;
    if (slots_[j].dist <= 1) {
      slots_[i].dist = 0;
      break;
    }
    slots_[i] = slots_[j];
    --slots_[i].dist;
    i = j;
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
