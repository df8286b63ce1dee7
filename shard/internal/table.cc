#include "shard/internal/table.h"

#include <sys/mman.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "shard/internal/huge_page_allocator.h"
#include "shard/router.h"

// LeakSanitizer's (null outside sanitizer builds).
// NOLINTNEXTLINE(readability-identifier-naming): LeakSanitizer names it.
extern "C" void __lsan_ignore_object(const void* p) __attribute__((weak));

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

Table::Table(size_t reserve, size_t reserve_payload) {
  const size_t capacity = CapacityFor(reserve);
  slots_ = AllocateSlots(capacity, /*huge=*/true);
  mask_ = capacity - 1;
  grow_at_ = capacity - capacity / 5;
  const size_t record = kRecordHeader + reserve_payload;
  if (reserve > 0 && reserve_payload > 0 && PoolFor(record) == Pool::kHeap) {
    pool_block_ = SizeClass(record);
    pool_min_ = 1;
    while (!Fits(pool_min_, pool_block_)) ++pool_min_;
    const size_t bytes = reserve * pool_block_;
    pool_ = static_cast<char*>(AllocateHuge(bytes));
    pool_next_ = pool_;
    pool_end_ = pool_ + bytes;
    pool_left_ = reserve;
  }
}

Table::~Table() {
  UnlendAll();  // Before any record goes.
  for (size_t i = 0; i < slot_count(); ++i) {
    if (!IsLive(i)) continue;
    if (InPool(slot(i).record())) continue;  // Its block goes with the pool.
    Pool pool;
    Allocation(slot(i).record(), &pool);
    // The arenas' records go with their segments.
    if (pool != Pool::kArena && pool != Pool::kBigArena) FreeRecord(slot(i).record());
  }
  FreeSlots(slots_, capacity());
  if (growing()) FreeSlots(old_, old_mask_ + 1);
  if (pool_ != nullptr) FreeHuge(pool_, static_cast<size_t>(pool_end_ - pool_));
}

uint64_t Table::HashOf(const Entry& e) { return Router::Hash(KeyOf(e)); }

std::shared_ptr<const SharedBytes> Table::Lend(const Entry& e) {
  char* record = e.record();
  if (!IsBig(record)) return nullptr;
  if (IsLent(record)) return loans_.at(record)->shared_from_this();  // Shared by its holders.
  auto loan = std::make_shared<Loan>(record, ValueOf(e));
  loans_.emplace(record, loan.get());  // If this throws, the loan goes unlisted: no harm.
  loan->lender_ = this;
  SetLent(record, true);
  return loan;
}

void Table::Return(Loan* loan) {
  SetLent(loan->record_, false);
  loans_.erase(loan->record_);
}

void Table::Unlend(char* record) {
  const auto it = loans_.find(record);
  Loan* loan = it->second;
  loans_.erase(it);
  SetLent(record, false);
  loan->lender_ = nullptr;
  loan->Own();
}

void Table::MoveLoan(char* from, char* to) {
  const auto it = loans_.find(from);
  Loan* loan = it->second;
  loans_.erase(it);
  SetLent(from, false);
  loans_.emplace(to, loan);
  SetLent(to, true);
  loan->record_ = to;
  loan->MovedTo(to + kRecordHeader + KeyLen(to));
}

void Table::UnlendAll() {
  for (const auto& [record, loan] : loans_) {
    loan->lender_ = nullptr;
    loan->Own();
  }
  loans_.clear();  // The records' flags go with them.
}

void Table::SwapLoans(Table& other) {
  loans_.swap(other.loans_);
  for (const auto& [record, loan] : loans_) loan->lender_ = this;
  for (const auto& [record, loan] : other.loans_) loan->lender_ = &other;
}

size_t Table::BucketRun(const Entry* slots, size_t mask, size_t bucket, size_t* count) {
  // From the home slot on, Robin Hood order puts entries displaced from earlier buckets first
  // (farther from home than this slot is from `bucket`), then the bucket's own (exactly as
  // far), then later buckets' (nearer).
  size_t i = bucket;
  for (size_t off = 0;; ++off, i = (i + 1) & mask) {
    const Entry& e = slots[i];
    if (!e.full() || size_t{e.dist()} - 1 <= off) break;
  }
  const size_t first = i;
  size_t n = 0;
  for (size_t off = (first - bucket) & mask;; ++off, i = (i + 1) & mask) {
    const Entry& e = slots[i];
    if (!e.full() || size_t{e.dist()} - 1 != off) break;
    ++n;
  }
  *count = n;
  return first;
}

bool Table::Matches(const Entry& e, std::string_view key, uint8_t tag) {
  if (e.tag() != tag) return false;
  const char* r = e.record();
  return KeyLen(r) == key.size() && std::memcmp(r + kRecordHeader, key.data(), key.size()) == 0;
}

size_t Table::Allocation(const char* record, Pool* pool) {
  if (IsArenaRecord(record)) {
    *pool = Pool::kArena;
    return Capacity(record);
  }
  if (!IsBig(record)) {
    *pool = Pool::kHeap;
    return Capacity(record);
  }
  *pool = static_cast<Pool>(Load<uint64_t>(record - kBigPrefix + 8) & 0xff);
  return Load<uint64_t>(record - kBigPrefix);
}

size_t Table::BlockBytes(const Entry& e) {
  Pool pool;
  const size_t bytes = Allocation(e.record(), &pool);
  return Charge(bytes, pool);
}

namespace {

// Slots hold a record's address with a tag and a distance in its top bits, which
// LeakSanitizer does not take for a pointer; the table's destructor frees every record.
char* Malloc(size_t bytes) {
  char* p = static_cast<char*>(std::malloc(bytes));
  if (p == nullptr) throw std::bad_alloc();
  if (&__lsan_ignore_object != nullptr) __lsan_ignore_object(p);
  return p;
}

}  // namespace

char* Table::TakePooled(size_t bytes) {
  if (pool_left_ == 0 || bytes < pool_min_ || bytes > pool_block_) return nullptr;
  char* block;
  if (pool_free_ != nullptr) {
    block = pool_free_;
    pool_free_ = Load<char*>(block);
  } else {
    block = pool_next_;
    pool_next_ += pool_block_;
  }
  --pool_left_;
  return block;
}

char* Table::NewRecord(size_t bytes, size_t key_len) {
  char* record;
  Pool pool = PoolFor(bytes);
  size_t allocated = AllocatedBytes(bytes);
  uint32_t size;
  if (pool == Pool::kHeap) {
    uint8_t c = ClassOf(bytes);
    record = TakePooled(bytes);
    if (record != nullptr) {
      c = ClassOf(pool_block_);
      allocated = pool_block_;
    } else {
      record = Malloc(allocated);
    }
    size = uint32_t{c} << kSizeShift;
  } else if (pool == Pool::kArena) {
    record = arena_.Allocate(allocated);
    size = kArenaBit | static_cast<uint32_t>(allocated / Arena::kGrain - 1) << kSizeShift;
  } else {
    char* block;
    if (pool == Pool::kBigArena) {
      block = big_.Allocate(allocated);
    } else {
      void* p =
          mmap(nullptr, allocated, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p != MAP_FAILED) {
        block = static_cast<char*>(p);
      } else {  // Out of mappings (vm.max_map_count) or address space: malloc may still have.
        pool = Pool::kBigHeap;
        allocated = SizeClass(bytes + kBigPrefix);
        block = Malloc(allocated);
      }
    }
    const uint64_t block_bytes = allocated;
    const uint64_t flags = static_cast<uint64_t>(pool);
    std::memcpy(block, &block_bytes, sizeof(block_bytes));
    std::memcpy(block + 8, &flags, sizeof(flags));
    record = block + kBigPrefix;
    size = kBigSize << kSizeShift;
  }
  const uint64_t meta = 0;
  const uint32_t key_word = static_cast<uint32_t>(key_len) | size;
  const uint32_t value_len = 0;
  std::memcpy(record, &meta, sizeof(meta));
  std::memcpy(record + 8, &key_word, sizeof(key_word));
  std::memcpy(record + 12, &value_len, sizeof(value_len));
  heap_bytes_ += Charge(allocated, pool);
  return record;
}

void Table::FreeRecord(char* record) {
  BeforeChange(record);
  Pool pool;
  const size_t allocated = Allocation(record, &pool);
  heap_bytes_ -= Charge(allocated, pool);
  char* block = record - kBigPrefix;
  switch (pool) {
    case Pool::kHeap:
      if (InPool(record)) {
        std::memcpy(record, &pool_free_, sizeof(pool_free_));
        pool_free_ = record;
        ++pool_left_;
      } else {
        std::free(record);
      }
      break;
    case Pool::kArena:
      arena_.Free(record, allocated);
      break;
    case Pool::kBigArena: {
      // Marked for the compaction walk, which cannot read the key of a block given back.
      const uint64_t flags = static_cast<uint64_t>(pool) | kDeadBlock;
      std::memcpy(block + 8, &flags, sizeof(flags));
      big_.Free(block, allocated);
      break;
    }
    case Pool::kMapped:
      munmap(block, allocated);
      break;
    case Pool::kBigHeap:
      std::free(block);
      break;
  }
}

size_t Table::Compact(Arena& arena, size_t bytes) {
  const bool big = &arena == &big_;
  const size_t prefix = big ? kBigPrefix : 0;
  size_t walked = 0;
  while (walked < bytes) {
    char* block = arena.NextToMove();
    if (block == nullptr) break;
    char* r = block + prefix;
    // A big block gives its size and a dead mark in its prefix: the rest of a dead one may be
    // given back. A freed arena record's bytes are as they were: its header gives its size,
    // and its key says whose it was.
    const size_t allocated = big ? Load<uint64_t>(block) : Capacity(r);
    arena.Skip(allocated);
    walked += allocated;
    if (big && (Load<uint64_t>(block + 8) & kDeadBlock) != 0) continue;
    // Live only if its key's slot still points to it.
    const std::string_view key(r + kRecordHeader, KeyLen(r));
    Entry* e = Find(key, Router::Hash(key));
    if (e == nullptr || e->record() != r) continue;
    // Asked first: the move may give back the page the record's header is on.
    const bool lent = big && IsLent(r);
    char* to = arena.Move(block, allocated) + prefix;  // The prefix too, with its lent flag.
    if (lent) MoveLoan(r, to);                         // Before a send reads the bytes given back.
    e->set_record(to);
  }
  return walked;
}

void Table::CompactDueSteps(size_t record) {
  if (arena_.compacting() || arena_.NeedsCompaction()) CompactStep(CompactBudget(record));
  if (big_.compacting() || big_.NeedsCompaction()) CompactBigStep(CompactBigBudget(record));
}

char* Table::MoveRecord(Entry* e, size_t need, size_t keep) {
  // The move leaves a dead record behind: a compaction step keeps up with those.
  CompactSteps(need);
  char* old = e->record();
  const size_t key_len = KeyLen(old);
  char* record = NewRecord(need, key_len);
  std::memcpy(record, old, sizeof(uint64_t));            // meta
  std::memcpy(record + 12, old + 12, sizeof(uint32_t));  // value length
  std::memcpy(record + kRecordHeader, old + kRecordHeader, key_len + keep);
  // A loan follows a value that moves whole (SetAux's move; SetValue's has ended it).
  if (IsLent(old) && keep >= ValueLen(old) && IsBig(record)) MoveLoan(old, record);
  FreeRecord(old);
  e->set_record(record);
  return record;
}

Table::Entry* Table::FindIn(Entry* slots, size_t mask, std::string_view key, uint64_t hash) {
  size_t i = hash & mask;
  const uint8_t tag = TagOf(hash);
  // Robin Hood order: past an entry nearer its home than we are to ours, the key cannot be.
  for (uint8_t d = 1;; ++d) {
    Entry& s = slots[i];
    if (s.dist() < d) return nullptr;
    if (s.dist() == d && Matches(s, key, tag)) return &s;
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
  const uint8_t tag = TagOf(hash);
  for (uint8_t d = 1;; ++d) {
    Entry& s = slots[i];
    if (s.dist() < d) return nullptr;
    if (s.dist() == d && s.tag() == tag && s.has_aux() && Aux(s) == aux && HashOf(s) == hash) {
      return &s;
    }
    i = (i + 1) & mask;
  }
}

bool Table::Place(Entry* slots, size_t mask, Entry* carry, uint64_t hash, Entry** placed,
                  uint64_t* writes) {
  size_t i = hash & mask;
  carry->set_dist(1);
  *placed = nullptr;
  for (;;) {
    Entry& s = slots[i];
    ++*writes;
    if (!s.full()) {
      s = *carry;
      if (*placed == nullptr) *placed = &s;
      return true;
    }
    if (s.dist() < carry->dist()) {  // Robin Hood: the entry nearer its home moves on instead.
      std::swap(s, *carry);
      if (*placed == nullptr) *placed = &s;
    }
    i = (i + 1) & mask;
    carry->bits_ += Entry::kDistOne;
    if (carry->dist() >= kMaxDist) return false;  // *carry is the entry left out.
  }
}

void Table::EraseAt(Entry* slots, size_t mask, size_t i) {
  // Backward shift: the entries after it that are not at home move one slot nearer.
  for (;;) {
    const size_t j = (i + 1) & mask;
    if (slots[j].dist() <= 1) {
      slots[i].bits_ = 0;
      return;
    }
    slots[i].bits_ = slots[j].bits_ - Entry::kDistOne;
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
  // Each moved entry's hash comes from its record's key: start those fetches together. The
  // buckets' entries sit at about their own slots, a few past at most.
  for (size_t i = start; i < std::min(old_mask_ + 1, end + kPrefetchProbe); ++i) {
    if (old_[i].full()) PrefetchLine(old_[i].record());
  }
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

Table::Entry* Table::Insert(std::string_view key, uint64_t hash, bool* inserted,
                            size_t value_room) {
  if (Entry* e = Find(key, hash)) {
    *inserted = false;
    return e;
  }
  *inserted = true;
  if (!growing() && size_ >= grow_at_) StartGrowth();
  if (growing()) GrowStep(kGrowStepBuckets);
  // The key may have made room by evicting a record of about its size: keep up with that.
  CompactSteps(kRecordHeader + key.size() + value_room);
  char* record = NewRecord(kRecordHeader + key.size() + value_room, key.size());
  std::memcpy(record + kRecordHeader, key.data(), key.size());
  Entry fresh;
  fresh.bits_ = reinterpret_cast<uint64_t>(record) | uint64_t{TagOf(hash)} << Entry::kTagShift;
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
  FreeRecord(entry->record());
  if (InOld(entry)) {
    EraseAt(old_, old_mask_, static_cast<size_t>(entry - old_));
  } else {
    EraseAt(slots_, mask_, static_cast<size_t>(entry - slots_));
  }
  --size_;
}

namespace {

// Values from this size are written with non-temporal stores: a large table's records are
// rarely in the caches, so an ordinary store would first read each line it writes, and the
// value would push hotter lines (the slots, other records' headers) out.
constexpr size_t kStreamBytes = 16 * 1024;

void CopyValue(char* to, std::string_view value) {
  if (value.empty()) return;  // Its data() may be null, which memmove may not be given.
#if defined(__SSE2__)
  const bool overlap = value.data() < to + value.size() && to < value.data() + value.size();
  if (value.size() < kStreamBytes || overlap) {
    std::memmove(to, value.data(), value.size());
    return;
  }
  const char* from = value.data();
  size_t left = value.size();
  // Whole cache lines from the first line boundary, each written by four 16-byte stores.
  const size_t head = (64 - reinterpret_cast<uintptr_t>(to) % 64) % 64;
  std::memcpy(to, from, head);
  to += head;
  from += head;
  left -= head;
  for (; left >= 64; left -= 64, to += 64, from += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(to), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + 48), d);
  }
  std::memcpy(to, from, left);
  _mm_sfence();  // Ordered before what follows, as ordinary stores are.
#else
  std::memmove(to, value.data(), value.size());
#endif
}

}  // namespace

void Table::SetValue(Entry* e, std::string_view value) {
  char* r = e->record();
  BeforeChange(r);  // Written in place, or in a new record.
  const size_t key_end = kRecordHeader + KeyLen(r);
  const bool aux = e->has_aux();
  const uint64_t aux_word = aux ? Aux(*e) : 0;
  const size_t need = key_end + value.size() + (aux ? sizeof(aux_word) : 0);
  if (!Fits(need, Capacity(r))) r = MoveRecord(e, need, 0);
  const uint32_t value_len = static_cast<uint32_t>(value.size());
  std::memcpy(r + 12, &value_len, sizeof(value_len));
  CopyValue(r + key_end, value);
  if (aux) std::memcpy(r + key_end + value.size(), &aux_word, sizeof(aux_word));
}

void Table::SetAux(Entry* e, uint64_t aux) {
  char* r = e->record();
  const size_t end = kRecordHeader + KeyLen(r) + ValueLen(r);
  if (!e->has_aux()) {
    const size_t need = end + sizeof(aux);
    if (Capacity(r) < need) r = MoveRecord(e, need, end - kRecordHeader - KeyLen(r));
    e->meta() |= kHasAux;
  }
  std::memcpy(r + end, &aux, sizeof(aux));
}

}  // namespace ringkv::internal
