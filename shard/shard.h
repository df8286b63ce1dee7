// Shard: one worker's slice of the key space, a hash table of byte strings to byte strings
// (internal::Table: 48-byte entries holding a key, its value and its version). Only the worker
// that owns the shard touches it (the lock engine wraps shards in locks instead); it is not
// thread-safe.
//
// Lookups take a HashedKey, the key with its Router::Hash already computed, so the table reuses
// that hash instead of hashing the key again. Prefetch() starts the DRAM fetch of a key's home
// bucket; calling it for a whole burst before touching any of them overlaps the misses.
//
//   Shard shard(/*reserve=*/1000);
//   HashedKey k{"user:42", Router::Hash("user:42")};
//   shard.Put(k, "v");
//   std::string v; bool found = shard.Get(k, &v);
#ifndef RINGKV_SHARD_SHARD_H_
#define RINGKV_SHARD_SHARD_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "shard/internal/table.h"
#include "shard/router.h"

namespace ringkv {

struct HashedKey {
  std::string_view bytes;
  uint64_t hash;
};

class Shard {
 public:
  explicit Shard(size_t reserve = 0) : table_(reserve) {}

  void Prefetch(const HashedKey& key) const { table_.Prefetch(key.hash); }
  // Copies the value into *value and returns true, or returns false if the key is absent.
  bool Get(const HashedKey& key, std::string* value) const;
  // Inserts or overwrites.
  void Put(const HashedKey& key, std::string_view value);
  // Returns whether the key was there.
  bool Delete(const HashedKey& key);

  size_t size() const { return table_.size(); }
  // Key and value bytes stored (what clients sent), not counting the table.
  uint64_t payload_bytes() const { return payload_bytes_; }
  // The table's own footprint: its slots.
  size_t table_bytes() const { return table_.table_bytes(); }

 private:
  // Owning thread only.
  internal::Table table_;
  uint64_t payload_bytes_ = 0;
  uint64_t revision_ = 0;  // The version the last write gave its key.
};

}  // namespace ringkv

#endif  // RINGKV_SHARD_SHARD_H_
