// Shard: one worker's slice of the key space, an absl::flat_hash_map of byte strings to byte
// strings. Only the worker that owns the shard touches it (the lock engine wraps shards in locks
// instead); it is not thread-safe.
//
// Lookups take a HashedKey, the key with its Router::Hash already computed, so the map reuses that
// hash instead of hashing the key again. Prefetch() starts the DRAM fetch of a key's first probe
// slot; calling it for a whole burst before touching any of them overlaps the misses.
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

#include "absl/container/flat_hash_map.h"
#include "shard/internal/huge_page_allocator.h"
#include "shard/internal/inline_bytes.h"
#include "shard/router.h"

namespace ringkv {

struct HashedKey {
  std::string_view bytes;
  uint64_t hash;
};

class Shard {
 public:
  // The stored key; built from a HashedKey when a PUT inserts (try_emplace constructs it so).
  struct Key : internal::InlineBytes<32> {
    using InlineBytes::InlineBytes;
    explicit Key(const HashedKey& key) : InlineBytes(key.bytes) {}
  };
  using Value = internal::InlineBytes<16>;

  explicit Shard(size_t reserve = 0);

  void Prefetch(const HashedKey& key) const { map_.prefetch(key); }
  // Copies the value into *value and returns true, or returns false if the key is absent.
  bool Get(const HashedKey& key, std::string* value) const;
  // Inserts or overwrites.
  void Put(const HashedKey& key, std::string_view value);
  // Returns whether the key was there.
  bool Delete(const HashedKey& key);

  size_t size() const { return map_.size(); }
  // Key and value bytes stored (what clients sent), not counting the table.
  uint64_t payload_bytes() const { return payload_bytes_; }
  // The table's own footprint: slots and control bytes.
  size_t table_bytes() const { return map_.capacity() * (sizeof(Key) + sizeof(Value) + 1); }

 private:
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(const Key& key) const { return Router::Hash(key.view()); }
    size_t operator()(const HashedKey& key) const { return key.hash; }
  };
  struct KeyEq {
    using is_transparent = void;
    bool operator()(const Key& a, const Key& b) const { return a.view() == b.view(); }
    bool operator()(const Key& a, const HashedKey& b) const { return a.view() == b.bytes; }
    bool operator()(const HashedKey& a, const Key& b) const { return a.bytes == b.view(); }
  };

  // Owning thread only.
  absl::flat_hash_map<Key, Value, KeyHash, KeyEq,
                      internal::HugePageAllocator<std::pair<const Key, Value>>>
      map_;
  uint64_t payload_bytes_ = 0;  // Owning thread only.
};

}  // namespace ringkv

#endif  // RINGKV_SHARD_SHARD_H_
