// Shard: one worker's slice of the key space, and the data model of a key: its value, its
// version, and an optional expiry. The keys live in an internal::Table (8-byte slots, each
// pointing to a record that holds key, value and version together); only the worker that owns
// the shard touches it (the lock engine wraps shards in locks instead); it is not thread-safe.
//
// The data model (Execute runs one Request; request.h lists the operations):
//   - Versions: every write of a value (Put, Increment) gives the key the shard's next
//     revision, so a version never repeats for a key, even across a delete and a re-create,
//     and a compare-and-set (Condition::kVersion) cannot be fooled by an old version coming
//     back (ABA).
//   - Expiry: a deadline is absolute wall-clock time (milliseconds since the Unix epoch), so it
//     means the same after a restart. It is kept with the entry (the table's aux word) and in
//     an index ordered by deadline; keys without a TTL pay for neither. An expired key is never
//     returned: reads check the deadline (and leave the key for the reclaim), writes treat it
//     as absent. ExpireDue reclaims expired keys in deadline order, a bounded number at a time,
//     so their memory is given back even if nobody asks for them again.
//   - Counters: Increment parses the value as a decimal int64 (a missing key is 0), adds, and
//     stores the sum as decimal text, keeping the key's TTL.
//   - Memory: with a MemoryLimit, a write that needs more memory than the shard has left first
//     evicts keys as the policy says (shard/memory.h), and fails (kNoMemory) if it cannot
//     make room. The key being written is never the one evicted.
//   - Scan: the shard's keys in scan order (shard/scan.h), one home bucket at a time, from a
//     position on; a table that grows or shrinks between two pages changes nothing for the
//     cursor.
//   - Snapshots: a point-in-time copy of the shard, taken while it keeps serving, a slice at a
//     time (no fork, no pause). BeginSnapshot fixes the cut (the revision and the time now);
//     SnapshotStep walks the home buckets in scan order and hands each key that was live at
//     the cut to the SnapshotSink. A change to a key the walk has not reached yet first hands
//     the key's state at the cut to the sink and marks the entry (serialize-before-mutate, as
//     Dragonfly does), and the walk skips marked entries and keys written after the cut
//     (their version is above it). So the sink gets every key live at the cut exactly once,
//     with its state at the cut, however the shard changes meanwhile. Memory beyond the sink's
//     buffers: one bit per entry.
//
// Lookups take a HashedKey, the key with its Router::Hash already computed, so the table reuses
// that hash instead of hashing the key again. Prefetch() starts the DRAM fetch of a key's home
// bucket, PrefetchRecord() that of its record once the slot is in; calling each for a whole
// burst before touching any of them overlaps the misses.
//
//   Shard shard(/*reserve=*/1000);
//   Request put;
//   put.op = Op::kPut, put.key = "user:42", put.value = "v", put.hash = Router::Hash(put.key);
//   shard.Execute(put, SystemClockMs());   // put.version is the key's version now
#ifndef RINGKV_SHARD_SHARD_H_
#define RINGKV_SHARD_SHARD_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/btree_set.h"
#include "shard/internal/table.h"
#include "shard/journal.h"
#include "shard/memory.h"
#include "shard/request.h"
#include "shard/router.h"
#include "shard/scan.h"

namespace ringkv {

struct HashedKey {
  std::string_view bytes;
  uint64_t hash;
};

// Where a snapshot's keys go (Shard::BeginSnapshot); called on the shard's thread.
class SnapshotSink {
 public:
  virtual ~SnapshotSink() = default;
  virtual void Add(std::string_view key, std::string_view value, uint64_t version,
                   int64_t deadline_ms) = 0;
};

class Shard {
 public:
  // A shard sized for `reserve` keys; with `reserve_payload`, also their records for keys and
  // values of up to that many bytes together (Table's record pool), unless `limit` has bytes:
  // the limit would not count the pool's unused blocks.
  explicit Shard(size_t reserve = 0, MemoryLimit limit = {}, size_t reserve_payload = 0)
      : limit_(limit),
        track_access_(limit.eviction == Eviction::kAllKeysLru),
        table_(reserve, limit.bytes == 0 ? reserve_payload : 0) {}

  // A GET with Request::lend of a value from this size takes it lent (Table::Lend: records of
  // about this much are the table's big ones) rather than copied.
  static constexpr size_t kLendBytes = 16 * 1024;

  void Prefetch(const HashedKey& key) const { table_.Prefetch(key.hash); }
  // After Prefetch, once the slot is likely in: starts the DRAM fetch of the key's record.
  void PrefetchRecord(const HashedKey& key) const { table_.PrefetchRecord(key.hash); }

  // Every change to the data is recorded in `journal` from now on (null: none). Not owned.
  void set_journal(Journal* journal) { journal_ = journal; }

  // Restore (persist/): the key's state as a journal record or a snapshot says, with the
  // version it had; records are applied in the order they were made. A deadline is kept as
  // recorded, even one that has passed: a later record may clear or move it (Persist, Expire),
  // so whether the key lives is judged on its final state, by FinishLoad. Versions given later
  // stay above every version loaded. Bypasses the memory limit.
  void LoadSet(const HashedKey& key, std::string_view value, uint64_t version, int64_t deadline_ms);
  void LoadDeadline(const HashedKey& key, int64_t deadline_ms);
  void LoadDelete(const HashedKey& key);
  // Every key goes at once, journaled nowhere (a replica's full sync starts from nothing); the
  // revision stays, and the table is made anew for `reserve` keys (with no reserved records'
  // pool, whatever the shard was made with). A snapshot under way is
  // walked to its end first.
  void Clear(size_t reserve = 0);
  // The data (keys, their records and deadlines) changes places with `other`'s, in O(1); the
  // counters, revision, limit and journal stay. A replica's full sync loads into a shard of its
  // own and swaps it in once whole. A snapshot under way is walked to its end first.
  void SwapData(Shard& other);
  // The end of a restore: removes the keys whose deadline is at or before `now_ms` (not
  // counted as expired()); how many.
  size_t FinishLoad(int64_t now_ms);
  // Versions given from now on are above `revision` (a restore's high-water mark: versions
  // that deleted keys had, which no loaded key holds any more).
  void RaiseRevision(uint64_t revision) { revision_ = std::max(revision_, revision); }
  // The version the last write gave its key: every version given so far is at most this.
  uint64_t revision() const { return revision_; }
  // The revision at the cut of the last snapshot begun (BeginSnapshot).
  uint64_t snapshot_revision() const { return snapshot_revision_; }

  // Starts a snapshot of the shard as it is now (the time is `now_ms`: keys expired by then are
  // left out). `sink` outlives the snapshot. One at a time.
  void BeginSnapshot(SnapshotSink* sink, int64_t now_ms);
  // Hands the next `buckets` home buckets' keys to the sink; true once every key is handed
  // over, and the snapshot is over.
  bool SnapshotStep(size_t buckets);
  bool snapshotting() const { return snapshot_sink_ != nullptr; }

  // Calls fn(key, value, version, deadline_ms) for every key, expired or not, in slot order.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (size_t i = 0; i < table_.slot_count(); ++i) {
      if (!table_.IsLive(i)) continue;
      const Entry& e = table_.slot(i);
      fn(internal::Table::KeyOf(e), internal::Table::ValueOf(e), e.meta() & kVersionMask,
         e.has_aux() ? static_cast<int64_t>(internal::Table::Aux(e)) : int64_t{0});
    }
  }

  // Runs `request` (its hash already set) at wall-clock time `now_ms`: sets its result and
  // outputs. `now_ms` matters only for keys with a TTL (has_ttls()).
  void Execute(Request& request, int64_t now_ms);
  // Whether Execute would only read: a SCAN, or a GET unless reads mark keys as used (for
  // allkeys-lru). Readers may share the shard (the lock engine).
  bool ReadsOnly(const Request& request) const {
    return request.op == Op::kScan || (request.op == Op::kGet && !track_access_);
  }
  // A key's value as a GET at `now_ms` would return it, for inspection (tests, tools).
  bool Peek(const HashedKey& key, int64_t now_ms, std::string* value) const;

  // Reclaims up to `budget` keys whose deadline is at or before `now_ms`, earliest first;
  // returns how many.
  size_t ExpireDue(int64_t now_ms, size_t budget);
  bool has_ttls() const { return !by_deadline_.empty(); }

  // The table's pending work (internal::Table: a growth moves a few buckets per new key, a
  // compaction a few records), and a step of it for a turn with nothing else to do: up to
  // `buckets` buckets moved and 64 bytes of records per bucket. Returns a measure of the work
  // done, 0 for none.
  size_t Upkeep(size_t buckets) { return table_.Upkeep(buckets); }
  bool has_upkeep() const { return table_.has_upkeep(); }
  bool growing() const { return table_.growing(); }

  size_t size() const { return table_.size(); }
  // Key and value bytes stored (what clients sent), not counting the table.
  uint64_t payload_bytes() const { return payload_bytes_; }
  // The table's own footprint: its slots.
  size_t table_bytes() const { return table_.table_bytes(); }
  size_t ttl_keys() const { return by_deadline_.size(); }
  // Keys reclaimed because their TTL passed, since the shard was made.
  uint64_t expired() const { return expired_; }
  // The memory the data holds, as MemoryLimit counts it (shard/memory.h).
  uint64_t memory_bytes() const {
    return table_.table_bytes() + table_.heap_bytes() + by_deadline_.size() * kTtlIndexEntryBytes;
  }
  const MemoryLimit& memory_limit() const { return limit_; }
  // Keys evicted to make room for writes, since the shard was made.
  uint64_t evicted() const { return evicted_; }
  // Bytes of records the table's arenas moved to give back the space of freed ones, since the
  // shard was made (internal::Arena).
  uint64_t compacted_bytes() const {
    return table_.arena().moved_bytes() + table_.big_arena().moved_bytes();
  }
  // What the arenas' segments hold (records of 129 bytes to 512 KiB), and of that, the dead
  // bytes that compaction has not yet given back (Arena::held_bytes).
  size_t arena_bytes() const {
    return table_.arena().held_bytes() + table_.big_arena().held_bytes();
  }
  size_t arena_dead_bytes() const {
    return table_.arena().held_dead_bytes() + table_.big_arena().held_dead_bytes();
  }

 private:
  using Entry = internal::Table::Entry;

  // Entry::meta: the version in the low 56 bits; bit 62 the referenced bit of allkeys-lru's
  // CLOCK sweep; the table's kHasAux bit on top is left alone.
  static constexpr uint64_t kVersionMask = (uint64_t{1} << 56) - 1;
  static constexpr uint64_t kReferenced = uint64_t{1} << 62;
  // Bit 61: the entry's state at the snapshot's cut has gone to the sink already.
  static constexpr uint64_t kSnapshotted = uint64_t{1} << 61;

  // The entry of a key that is there and not expired at now_ms; null otherwise. Reads only.
  Entry* Live(const HashedKey& key, int64_t now_ms) const;
  // As Live, but an expired entry is removed first (for writes).
  Entry* LiveForWrite(const HashedKey& key, int64_t now_ms);
  // Stores `value` under the key (inserting it if `e` is null), with the next version.
  Entry* Write(const HashedKey& key, Entry* e, std::string_view value);
  void Remove(const HashedKey& key, Entry* e);
  // Before `e` changes or goes: during a snapshot, hands its state at the cut to the sink if
  // the walk has not passed it yet (serialize-before-mutate).
  void BeforeChange(Entry* e) {
    if (snapshot_sink_ != nullptr) SaveForSnapshot(e);
  }
  void SaveForSnapshot(Entry* e);
  // Whether `e` belongs in the snapshot: live at the cut, not handed over yet.
  bool InSnapshot(const Entry& e) const;
  void SetDeadline(const HashedKey& key, Entry* e, int64_t deadline_ms);
  void ClearDeadline(const HashedKey& key, Entry* e);
  // SetDeadline for a deadline > 0, else ClearDeadline.
  void SetTtl(const HashedKey& key, Entry* e, int64_t deadline_ms);
  // False (and the request failed with the key's version) unless the request's condition holds.
  bool ConditionHolds(Request& request, const Entry* e) const;
  void Increment(const HashedKey& key, Entry* e, Request& request);
  void Scan(Request& request, int64_t now_ms) const;
  // Removes up to `budget` keys whose deadline is at or before `now_ms`, earliest first.
  size_t RemoveDue(int64_t now_ms, size_t budget);

  // The memory `request` would add to the shard (negative: free), `e` being its key's live
  // entry or null.
  int64_t MemoryNeeded(const Request& request, const HashedKey& key, const Entry* e) const;
  // Evicts until `request` fits under the limit; false (the request failed) if it cannot.
  // *e is looked up again if anything moved.
  bool MakeRoom(Request& request, const HashedKey& key, int64_t now_ms, Entry** e);
  // The slot of the next key to evict, never `key`'s; -1 if the policy has none.
  int64_t PickVictim(const HashedKey& key);
  void Evict(size_t slot);
  uint64_t NextRandom() {
    random_ ^= random_ << 13;
    random_ ^= random_ >> 7;
    random_ ^= random_ << 17;
    return random_;
  }
  // What a TTL index entry takes: 16 bytes in a B-tree node of 256 that is 2/3 full on average
  // (an estimate; absl does not say), and the node's parents.
  static constexpr size_t kTtlIndexEntryBytes = 26;
  static constexpr size_t kMaxExpireOnWrite = 256;

  // Constant after construction.
  const MemoryLimit limit_;
  const bool track_access_;  // Reads set the referenced bit (allkeys-lru).

  // Owning thread only.
  internal::Table table_;
  // (deadline, key hash) of every key with a TTL, ordered by deadline: no copy of the key, and
  // the hash and the deadline find its entry (Table::FindByAux). A multiset, for two keys whose
  // hashes collide.
  absl::btree_multiset<std::pair<int64_t, uint64_t>> by_deadline_;
  uint64_t payload_bytes_ = 0;
  uint64_t revision_ = 0;  // The version the last write gave its key.
  uint64_t expired_ = 0;
  uint64_t evicted_ = 0;
  Journal* journal_ = nullptr;
  // The snapshot in progress (sink null: none): the cut's revision and time, and the scan
  // position the walk has reached (every key before it is handed over).
  SnapshotSink* snapshot_sink_ = nullptr;
  uint64_t snapshot_revision_ = 0;
  int64_t snapshot_now_ms_ = 0;
  uint64_t snapshot_position_ = 0;
  uint64_t random_ = 0x9e3779b97f4a7c15;  // Eviction's xorshift64 state.
  uint64_t next_sweep_ = 0;               // allkeys-lru: where the next sweep starts.
};

}  // namespace ringkv

#endif  // RINGKV_SHARD_SHARD_H_
