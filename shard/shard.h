// Shard: one worker's slice of the key space, and the data model of a key: its value, its
// version, and an optional expiry. The keys live in an internal::Table (48-byte entries holding
// key, value and version together); only the worker that owns the shard touches it (the lock
// engine wraps shards in locks instead); it is not thread-safe.
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
//   - Scan: the shard's keys in scan order (shard/scan.h), one home bucket at a time, from a
//     position on; a table that grows or shrinks between two pages changes nothing for the
//     cursor.
//
// Lookups take a HashedKey, the key with its Router::Hash already computed, so the table reuses
// that hash instead of hashing the key again. Prefetch() starts the DRAM fetch of a key's home
// bucket; calling it for a whole burst before touching any of them overlaps the misses.
//
//   Shard shard(/*reserve=*/1000);
//   Request put;
//   put.op = Op::kPut, put.key = "user:42", put.value = "v", put.hash = Router::Hash(put.key);
//   shard.Execute(put, SystemClockMs());   // put.version is the key's version now
#ifndef RINGKV_SHARD_SHARD_H_
#define RINGKV_SHARD_SHARD_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/btree_set.h"
#include "shard/internal/table.h"
#include "shard/request.h"
#include "shard/router.h"
#include "shard/scan.h"

namespace ringkv {

struct HashedKey {
  std::string_view bytes;
  uint64_t hash;
};

class Shard {
 public:
  explicit Shard(size_t reserve = 0) : table_(reserve) {}

  void Prefetch(const HashedKey& key) const { table_.Prefetch(key.hash); }

  // Runs `request` (its hash already set) at wall-clock time `now_ms`: sets its result and
  // outputs. `now_ms` matters only for keys with a TTL (has_ttls()).
  void Execute(Request& request, int64_t now_ms);
  // Whether Execute would only read: a GET. Readers may share the shard (the lock engine).
  static bool ReadsOnly(const Request& request) {
    return request.op == Op::kGet || request.op == Op::kScan;
  }
  // A key's value as a GET at `now_ms` would return it, for inspection (tests, tools).
  bool Peek(const HashedKey& key, int64_t now_ms, std::string* value) const;

  // Reclaims up to `budget` keys whose deadline is at or before `now_ms`, earliest first;
  // returns how many.
  size_t ExpireDue(int64_t now_ms, size_t budget);
  bool has_ttls() const { return !by_deadline_.empty(); }

  size_t size() const { return table_.size(); }
  // Key and value bytes stored (what clients sent), not counting the table.
  uint64_t payload_bytes() const { return payload_bytes_; }
  // The table's own footprint: its slots.
  size_t table_bytes() const { return table_.table_bytes(); }
  size_t ttl_keys() const { return by_deadline_.size(); }
  // Keys reclaimed because their TTL passed, since the shard was made.
  uint64_t expired() const { return expired_; }

 private:
  using Entry = internal::Table::Entry;

  // The entry of a key that is there and not expired at now_ms; null otherwise. Reads only.
  Entry* Live(const HashedKey& key, int64_t now_ms) const;
  // As Live, but an expired entry is removed first (for writes).
  Entry* LiveForWrite(const HashedKey& key, int64_t now_ms);
  // Stores `value` under the key (inserting it if `e` is null), with the next version.
  Entry* Write(const HashedKey& key, Entry* e, std::string_view value);
  void Remove(const HashedKey& key, Entry* e);
  void SetDeadline(const HashedKey& key, Entry* e, int64_t deadline_ms);
  void ClearDeadline(const HashedKey& key, Entry* e);
  // False (and the request failed with the key's version) unless the request's condition holds.
  bool ConditionHolds(Request& request, const Entry* e) const;
  void Increment(const HashedKey& key, Entry* e, Request& request);
  void Scan(Request& request, int64_t now_ms) const;

  // (deadline, key), ordered by deadline; finds by (deadline, string_view) without a copy.
  struct ByDeadline {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return a.first != b.first ? a.first < b.first
                                : std::string_view(a.second) < std::string_view(b.second);
    }
  };

  // Owning thread only.
  internal::Table table_;
  absl::btree_set<std::pair<int64_t, std::string>, ByDeadline> by_deadline_;
  uint64_t payload_bytes_ = 0;
  uint64_t revision_ = 0;  // The version the last write gave its key.
  uint64_t expired_ = 0;
};

}  // namespace ringkv

#endif  // RINGKV_SHARD_SHARD_H_
