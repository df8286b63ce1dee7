#include "shard/shard.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

namespace ringkv {
namespace {

using internal::Table;

uint64_t VersionOf(const Table::Entry& e) { return e.meta() & ((uint64_t{1} << 56) - 1); }

// Takes `size` from `budget` if that leaves it at 0 or more; else takes nothing (not taken and
// given back, which could refuse another shard's GET that fitted).
bool TakeIfFits(std::atomic<int64_t>& budget, int64_t size) {
  int64_t left = budget.load(std::memory_order_relaxed);
  do {
    if (left < size) return false;
  } while (!budget.compare_exchange_weak(left, left - size, std::memory_order_relaxed));
  return true;
}

// A decimal int64 in canonical form: an optional '-', then digits without leading zeros (just
// "0" for zero; no "-0"), as Increment writes them.
bool ParseCanonicalInt64(std::string_view text, int64_t* out) {
  const bool negative = !text.empty() && text.front() == '-';
  const std::string_view digits = text.substr(negative ? 1 : 0);
  if (digits.empty() || (digits.front() == '0' && (digits.size() > 1 || negative))) return false;
  uint64_t magnitude = 0;
  const auto [end, error] =
      std::from_chars(digits.data(), digits.data() + digits.size(), magnitude);
  if (error != std::errc() || end != digits.data() + digits.size()) return false;
  const uint64_t limit = uint64_t{std::numeric_limits<int64_t>::max()} + (negative ? 1 : 0);
  if (magnitude > limit) return false;
  *out = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
  return true;
}

}  // namespace

Shard::Entry* Shard::Live(const HashedKey& key, int64_t now_ms) const {
  Entry* e = table_.Find(key.bytes, key.hash);
  if (e != nullptr && e->has_aux() && static_cast<int64_t>(Table::Aux(*e)) <= now_ms) {
    return nullptr;  // Expired: never returned, reclaimed by ExpireDue or the next write.
  }
  return e;
}

bool Shard::Peek(const HashedKey& key, int64_t now_ms, std::string* value) const {
  const Entry* e = Live(key, now_ms);
  if (e == nullptr) return false;
  const std::string_view v = Table::ValueOf(*e);
  value->assign(v.data(), v.size());
  return true;
}

Shard::Entry* Shard::LiveForWrite(const HashedKey& key, int64_t now_ms) {
  Entry* e = table_.Find(key.bytes, key.hash);
  if (e != nullptr && e->has_aux() && static_cast<int64_t>(Table::Aux(*e)) <= now_ms) {
    Remove(key, e);
    if (journal_ != nullptr) journal_->Expired(key.bytes);
    ++expired_;
    return nullptr;
  }
  return e;
}

Shard::Entry* Shard::Write(const HashedKey& key, Entry* e, std::string_view value) {
  if (e == nullptr) {
    bool inserted;
    e = table_.Insert(key.bytes, key.hash, &inserted, value.size());
    payload_bytes_ += key.bytes.size();
  } else {
    BeforeChange(e);
    payload_bytes_ -= Table::ValueOf(*e).size();
  }
  payload_bytes_ += value.size();
  table_.SetValue(e, value);
  e->meta() = (e->meta() & ~kVersionMask) | (++revision_ & kVersionMask) | kReferenced;
  return e;
}

void Shard::Remove(const HashedKey& key, Entry* e) {
  BeforeChange(e);
  ClearDeadline(key, e);
  payload_bytes_ -= key.bytes.size() + Table::ValueOf(*e).size();
  table_.Erase(e);
}

void Shard::SetDeadline(const HashedKey& key, Entry* e, int64_t deadline_ms) {
  if (e->has_aux()) {
    const int64_t old = static_cast<int64_t>(Table::Aux(*e));
    if (old == deadline_ms) return;
  }
  BeforeChange(e);
  if (e->has_aux()) {
    const int64_t old = static_cast<int64_t>(Table::Aux(*e));
    by_deadline_.erase(by_deadline_.find({old, key.hash}));
  }
  table_.SetAux(e, static_cast<uint64_t>(deadline_ms));
  by_deadline_.emplace(deadline_ms, key.hash);
}

void Shard::SetTtl(const HashedKey& key, Entry* e, int64_t deadline_ms) {
  if (deadline_ms > 0) {
    SetDeadline(key, e, deadline_ms);
  } else {
    ClearDeadline(key, e);
  }
}

void Shard::ClearDeadline(const HashedKey& key, Entry* e) {
  if (!e->has_aux()) return;
  BeforeChange(e);
  by_deadline_.erase(by_deadline_.find({static_cast<int64_t>(Table::Aux(*e)), key.hash}));
  Table::ClearAux(e);
}

bool Shard::ConditionHolds(Request& r, const Entry* e) const {
  const uint64_t version = e == nullptr ? 0 : VersionOf(*e);
  bool holds = true;
  switch (r.condition) {
    case Condition::kNone:
      break;
    case Condition::kAbsent:
      holds = e == nullptr;
      break;
    case Condition::kPresent:
      holds = e != nullptr;
      break;
    case Condition::kVersion:
      holds = version == r.version;
      break;
  }
  if (!holds) {
    r.result = Result::kConditionFailed;
    r.version = version;
  }
  return holds;
}

void Shard::Increment(const HashedKey& key, Entry* e, Request& r) {
  int64_t current = 0;
  if (e != nullptr && !ParseCanonicalInt64(Table::ValueOf(*e), &current)) {
    r.result = Result::kNotInteger;
    return;
  }
  int64_t sum;
  if (__builtin_add_overflow(current, r.number, &sum)) {
    r.result = Result::kOverflow;
    return;
  }
  char text[24];
  const auto [end, error] = std::to_chars(text, text + sizeof text, sum);
  const std::string_view stored(text, static_cast<size_t>(end - text));
  e = Write(key, e, stored);
  if (journal_ != nullptr) {
    journal_->Set(key.bytes, stored, VersionOf(*e),
                  e->has_aux() ? static_cast<int64_t>(Table::Aux(*e)) : 0);
  }
  r.number = sum;
  r.version = VersionOf(*e);
  r.result = Result::kOk;
}

void Shard::Execute(Request& r, int64_t now_ms) {
  const HashedKey key{r.key, r.hash};
  if (r.op == Op::kScan) return Scan(r, now_ms);
  if (r.op == Op::kGet) {
    Entry* e = Live(key, now_ms);
    if (e == nullptr) {
      r.result = Result::kNotFound;
      return;
    }
    if (track_access_ && (e->meta() & kReferenced) == 0) e->meta() |= kReferenced;
    const std::string_view value = Table::ValueOf(*e);
    if (value.size() >= kBudgetedValueBytes && (r.budget != nullptr || r.reply_memory != nullptr)) {
      const auto size = static_cast<int64_t>(value.size());
      if (r.budget != nullptr && !TakeIfFits(*r.budget, size)) {
        r.result = Result::kOverBudget;
        return;
      }
      if (r.reply_memory != nullptr && !TakeIfFits(*r.reply_memory, size)) {
        // The call's share goes back: only a GET of the same call could have been refused it
        // meanwhile, and the server's memory is spent for it too.
        if (r.budget != nullptr) r.budget->fetch_add(size, std::memory_order_relaxed);
        r.result = Result::kOverReplyMemory;
        return;
      }
      r.budget_taken = size;
    }
    // A large value lent where it lies (Table::Lend), where the origin can take it: no copy.
    if (!r.lend || value.size() < kLendBytes || (r.lent = table_.Lend(*e)) == nullptr) {
      r.out.assign(value.data(), value.size());
    }
    r.version = VersionOf(*e);
    r.deadline_ms = e->has_aux() ? static_cast<int64_t>(Table::Aux(*e)) : 0;
    r.result = Result::kOk;
    return;
  }
  Entry* e = LiveForWrite(key, now_ms);
  if (limit_.bytes != 0 && !MakeRoom(r, key, now_ms, &e)) return;
  switch (r.op) {
    case Op::kGet:
    case Op::kScan:
      break;  // Above.
    case Op::kReplicate:
      return;  // The worker's (Worker::Execute); never here.
    case Op::kPut:
      if (!ConditionHolds(r, e)) return;
      e = Write(key, e, r.value);
      SetTtl(key, e, r.deadline_ms);
      if (journal_ != nullptr) journal_->Set(key.bytes, r.value, VersionOf(*e), r.deadline_ms);
      break;
    case Op::kDelete:
      if (e == nullptr) {
        r.result = Result::kNotFound;
        r.version = 0;
        return;
      }
      if (!ConditionHolds(r, e)) return;
      Remove(key, e);
      if (journal_ != nullptr) journal_->Delete(key.bytes);
      r.result = Result::kOk;
      return;
    case Op::kExpire:
    case Op::kPersist: {
      if (e == nullptr) {
        r.result = Result::kNotFound;
        return;
      }
      const int64_t deadline_ms = r.op == Op::kExpire ? r.deadline_ms : 0;
      SetTtl(key, e, deadline_ms);
      if (journal_ != nullptr) journal_->SetDeadline(key.bytes, deadline_ms);
      break;
    }
    case Op::kIncrement:
      Increment(key, e, r);
      return;
  }
  // A Put, Expire or Persist that took effect.
  r.version = VersionOf(*e);
  r.result = Result::kOk;
}

int64_t Shard::MemoryNeeded(const Request& r, const HashedKey& key, const Entry* e) const {
  const int64_t old_block = e == nullptr ? 0 : static_cast<int64_t>(Table::BlockBytes(*e));
  const int64_t growth = e == nullptr ? static_cast<int64_t>(table_.growth_bytes()) : 0;
  const bool had_ttl = e != nullptr && e->has_aux();
  const int64_t index = static_cast<int64_t>(kTtlIndexEntryBytes);
  switch (r.op) {
    case Op::kPut: {
      const bool ttl = r.deadline_ms > 0;
      return growth +
             static_cast<int64_t>(Table::BlockBytesFor(key.bytes.size(), r.value.size(), ttl)) -
             old_block + (ttl && !had_ttl ? index : 0) - (!ttl && had_ttl ? index : 0);
    }
    case Op::kIncrement: {
      constexpr size_t kLongestInt64 = 20;
      return growth +
             static_cast<int64_t>(Table::BlockBytesFor(key.bytes.size(), kLongestInt64, had_ttl)) -
             old_block;
    }
    case Op::kExpire:
      if (e == nullptr || had_ttl) return 0;
      return index +
             static_cast<int64_t>(
                 Table::BlockBytesFor(key.bytes.size(), Table::ValueOf(*e).size(), true)) -
             old_block;
    default:  // Reads, deletes and Persist take no memory.
      return 0;
  }
}

bool Shard::MakeRoom(Request& r, const HashedKey& key, int64_t now_ms, Entry** e) {
  int64_t need = MemoryNeeded(r, key, *e);
  auto fits = [&] {
    return need <= 0 || memory_bytes() + static_cast<uint64_t>(need) <= limit_.bytes;
  };
  if (fits()) return true;
  // Keys whose TTL has passed go first, before any live key is evicted.
  if (has_ttls() && ExpireDue(now_ms, kMaxExpireOnWrite) > 0) {
    *e = table_.Find(key.bytes, key.hash);
    need = MemoryNeeded(r, key, *e);
  }
  while (!fits()) {
    const int64_t victim = PickVictim(key);
    if (victim < 0) {
      r.result = Result::kNoMemory;
      r.no_memory = {.needed_bytes = static_cast<uint64_t>(need),
                     .used_bytes = memory_bytes(),
                     .limit_bytes = limit_.bytes};
      return false;
    }
    Evict(static_cast<size_t>(victim));
    // Erasing shifts entries, and fewer keys may spare the table a growth: look again.
    *e = table_.Find(key.bytes, key.hash);
    need = MemoryNeeded(r, key, *e);
  }
  return true;
}

int64_t Shard::PickVictim(const HashedKey& key) {
  // Slots by index, both arrays while the table grows (Table::slot).
  const size_t n = table_.slot_count();
  auto next = [n](size_t i) { return i + 1 == n ? 0 : i + 1; };
  auto is_key = [&](const Entry& s) { return Table::KeyOf(s) == key.bytes; };
  switch (limit_.eviction) {
    case Eviction::kNoEviction:
      return -1;
    case Eviction::kAllKeysLru: {
      // CLOCK, from a random slot each time: a referenced key gets a second chance (its bit
      // cleared); the first one found without the bit goes. Two sweeps clear every bit, so one
      // is always found. Not one hand going round, nor runs of evictions from one place: those
      // empty some stretches of the table while inserts land everywhere, the fuller stretches
      // grow probe runs until the table must double, and at a 32 MiB limit the table then
      // held 17% fewer keys. The next start is fetched from DRAM one eviction ahead.
      const size_t start = next_sweep_ % n;
      next_sweep_ = NextRandom();
      internal::PrefetchLine(&table_.slot(next_sweep_ % n));
      for (size_t step = 0, i = start; step <= 2 * n; ++step, i = next(i)) {
        if (!table_.IsLive(i)) continue;
        Entry& s = table_.slot(i);
        if (is_key(s)) continue;
        if (s.meta() & kReferenced) {
          s.meta() &= ~kReferenced;
          continue;
        }
        return static_cast<int64_t>(i);
      }
      return -1;
    }
    case Eviction::kAllKeysRandom: {
      for (size_t step = 0, i = NextRandom() % n; step < n; ++step, i = next(i)) {
        if (table_.IsLive(i) && !is_key(table_.slot(i))) return static_cast<int64_t>(i);
      }
      return -1;
    }
    case Eviction::kVolatileTtl:
      for (const auto& [deadline, hash] : by_deadline_) {
        const Entry* s = table_.FindByAux(hash, static_cast<uint64_t>(deadline));
        if (is_key(*s)) continue;
        return static_cast<int64_t>(table_.IndexOf(s));
      }
      return -1;
  }
  return -1;
}

void Shard::Evict(size_t slot) {
  Entry* e = &table_.slot(slot);
  const HashedKey key{Table::KeyOf(*e), Table::HashOf(*e)};
  // The key's bytes live in the entry (or its block), which Remove frees last.
  if (journal_ != nullptr) journal_->Delete(key.bytes);
  Remove(key, e);
  ++evicted_;
}

void Shard::Scan(Request& r, int64_t now_ms) const {
  // Buckets one page may visit: enough to find `limit` keys in a table at the usual loads,
  // few enough (each a likely cache miss) to keep the shard's other requests waiting at most
  // about a millisecond when the prefix matches nothing.
  const size_t limit = static_cast<size_t>(r.number);
  const size_t budget = std::clamp<size_t>(4 * limit, 256, 16384);
  const std::string_view prefix = r.key;
  const int bits = std::countr_zero(table_.capacity());  // Bucket bits: 2^bits buckets.
  const uint64_t buckets = table_.capacity();
  uint64_t p = r.version >> (64 - bits);  // The bucket, in scan order, the cursor is in.
  size_t found = 0;
  std::vector<std::pair<uint64_t, const Entry*>> run;
  r.out.clear();
  for (size_t visited = 0; p < buckets && found < limit && visited < budget; ++p, ++visited) {
    const size_t bucket = static_cast<size_t>(ReverseBits(p) >> (64 - bits));
    run.clear();
    table_.ForEachInBucket(bucket, [&](const Entry& e) {
      const uint64_t position = ScanPosition(internal::Table::HashOf(e));
      if (position < r.version) return;  // Before the cursor (its first bucket only).
      if (e.has_aux() && static_cast<int64_t>(internal::Table::Aux(e)) <= now_ms) return;
      if (!internal::Table::KeyOf(e).starts_with(prefix)) return;
      run.emplace_back(position, &e);
    });
    std::sort(run.begin(), run.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [position, e] : run) {
      AppendScanRecord(&r.out, position, internal::Table::KeyOf(*e));
    }
    found += run.size();
  }
  r.number = p == buckets ? 1 : 0;
  r.version = p == buckets ? 0 : p << (64 - bits);
  r.result = Result::kOk;
}

void Shard::BeginSnapshot(SnapshotSink* sink, int64_t now_ms) {
  snapshot_sink_ = sink;
  snapshot_revision_ = revision_;
  snapshot_now_ms_ = now_ms;
  snapshot_position_ = 0;
}

bool Shard::InSnapshot(const Entry& e) const {
  if ((e.meta() & kSnapshotted) != 0 || VersionOf(e) > snapshot_revision_) return false;
  return !e.has_aux() || static_cast<int64_t>(Table::Aux(e)) > snapshot_now_ms_;
}

void Shard::SaveForSnapshot(Entry* e) {
  if (ScanPosition(Table::HashOf(*e)) < snapshot_position_ || !InSnapshot(*e)) return;
  snapshot_sink_->Add(Table::KeyOf(*e), Table::ValueOf(*e), VersionOf(*e),
                      e->has_aux() ? static_cast<int64_t>(Table::Aux(*e)) : 0);
  e->meta() |= kSnapshotted;
}

bool Shard::SnapshotStep(size_t buckets) {
  // Done already: Clear or SwapData walked it to its end for a worker that still holds the
  // job, and whose next step must find it done, not walk again (the position wrapped to 0).
  if (snapshot_sink_ == nullptr) return true;
  // As Scan: the position reached names a bucket of the table as it is now, whatever its size
  // was when the walk began, and within that bucket keys before the position are skipped.
  const int bits = std::countr_zero(table_.capacity());
  const uint64_t count = table_.capacity();
  uint64_t p = snapshot_position_ >> (64 - bits);
  // Scan order visits the slots far apart: fetch them, then their records, ahead of the walk.
  constexpr uint64_t kSlotsAhead = 16;
  constexpr uint64_t kRecordsAhead = 8;
  auto bucket_at = [bits](uint64_t q) {
    return static_cast<size_t>(ReverseBits(q) >> (64 - bits));
  };
  for (uint64_t q = p; q < p + kSlotsAhead && q < count; ++q) {
    table_.PrefetchBucket(bucket_at(q));
    if (q < p + kRecordsAhead) table_.PrefetchBucketRecords(bucket_at(q));
  }
  for (size_t visited = 0; p < count && visited < buckets; ++p, ++visited) {
    if (p + kSlotsAhead < count) table_.PrefetchBucket(bucket_at(p + kSlotsAhead));
    if (p + kRecordsAhead < count) table_.PrefetchBucketRecords(bucket_at(p + kRecordsAhead));
    const size_t bucket = bucket_at(p);
    table_.ForEachInBucket(bucket, [&](Entry& e) {
      if (ScanPosition(Table::HashOf(e)) < snapshot_position_) return;
      if (InSnapshot(e)) {
        snapshot_sink_->Add(Table::KeyOf(e), Table::ValueOf(e), VersionOf(e),
                            e.has_aux() ? static_cast<int64_t>(Table::Aux(e)) : 0);
      }
      e.meta() &= ~kSnapshotted;  // Handed over before it changed, or now: either way, done.
    });
    snapshot_position_ = (p + 1) << (64 - bits);
  }
  if (p < count) return false;
  snapshot_sink_ = nullptr;
  return true;
}

void Shard::LoadSet(const HashedKey& key, std::string_view value, uint64_t version,
                    int64_t deadline_ms) {
  Entry* e = Write(key, table_.Find(key.bytes, key.hash), value);
  revision_ = std::max(revision_ - 1, version);  // Write took one; the record says which.
  e->meta() = (e->meta() & ~(kVersionMask | kReferenced)) | (version & kVersionMask);
  SetTtl(key, e, deadline_ms);
}

void Shard::LoadDeadline(const HashedKey& key, int64_t deadline_ms) {
  if (Entry* e = table_.Find(key.bytes, key.hash); e != nullptr) SetTtl(key, e, deadline_ms);
}

void Shard::LoadDelete(const HashedKey& key) {
  if (Entry* e = table_.Find(key.bytes, key.hash); e != nullptr) Remove(key, e);
}

void Shard::Clear(size_t reserve) {
  if (snapshot_sink_ != nullptr) {
    while (!SnapshotStep(size_t{1} << 20)) {
    }
  }
  std::destroy_at(&table_);
  std::construct_at(&table_, reserve);
  by_deadline_.clear();
  payload_bytes_ = 0;
}

void Shard::SwapData(Shard& other) {
  for (Shard* s : {this, &other}) {
    if (s->snapshot_sink_ != nullptr) {
      while (!s->SnapshotStep(size_t{1} << 20)) {
      }
    }
  }
  table_.Swap(other.table_);
  by_deadline_.swap(other.by_deadline_);
  std::swap(payload_bytes_, other.payload_bytes_);
  next_sweep_ = 0;
  other.next_sweep_ = 0;
}

size_t Shard::FinishLoad(int64_t now_ms) {
  return RemoveDue(now_ms, std::numeric_limits<size_t>::max());
}

size_t Shard::ExpireDue(int64_t now_ms, size_t budget) {
  const size_t reclaimed = RemoveDue(now_ms, budget);
  expired_ += reclaimed;
  return reclaimed;
}

size_t Shard::RemoveDue(int64_t now_ms, size_t budget) {
  size_t removed = 0;
  while (removed < budget && !by_deadline_.empty() && by_deadline_.begin()->first <= now_ms) {
    // The index and the entries' deadlines agree exactly: every change of one changes the other.
    const auto [deadline, hash] = *by_deadline_.begin();
    Entry* e = table_.FindByAux(hash, static_cast<uint64_t>(deadline));
    BeforeChange(e);
    // The key's bytes live in its record, which Erase frees.
    if (journal_ != nullptr) journal_->Expired(Table::KeyOf(*e));
    Table::ClearAux(e);
    payload_bytes_ -= Table::KeyOf(*e).size() + Table::ValueOf(*e).size();
    table_.Erase(e);
    by_deadline_.erase(by_deadline_.begin());
    ++removed;
  }
  return removed;
}

}  // namespace ringkv
