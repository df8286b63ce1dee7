// MemoryLimit: how much a shard may hold, and what it does when a write needs more
// (--max-memory and --eviction; the daemon gives each shard an equal share).
//
// What counts (Shard::memory_bytes): the table's slots, the records that hold each key with its
// value (as the allocator sized them; arena records for 1/7 or 1/8 more, the dead bytes
// compaction lets stand: internal::Table::Charge), and the TTL index. That is the memory
// the data holds; the process adds its own base and per-connection buffers on top.
//
// Policies, as Redis names them:
//   noeviction      a write that needs memory the shard does not have fails (RESOURCE_EXHAUSTED);
//                   reads, deletes and writes that need no more memory go on.
//   allkeys-lru     evicts keys not used lately: a CLOCK sweep over the slots (from a random
//                   slot each eviction), each slot with a
//                   referenced bit that reads and writes set and the sweep clears
//                   (memcached's and Linux's approximation of LRU).
//   volatile-ttl    evicts the key with a TTL that expires soonest (exactly: the TTL index is
//                   ordered by deadline); with no TTL key left, fails as noeviction does.
//   allkeys-random  evicts keys at random slots.
#ifndef RINGKV_SHARD_MEMORY_H_
#define RINGKV_SHARD_MEMORY_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace ringkv {

enum class Eviction : uint8_t { kNoEviction, kAllKeysLru, kVolatileTtl, kAllKeysRandom };

struct MemoryLimit {
  uint64_t bytes = 0;  // 0: none.
  Eviction eviction = Eviction::kNoEviction;
};

inline std::string_view EvictionName(Eviction e) {
  switch (e) {
    case Eviction::kNoEviction:
      return "noeviction";
    case Eviction::kAllKeysLru:
      return "allkeys-lru";
    case Eviction::kVolatileTtl:
      return "volatile-ttl";
    case Eviction::kAllKeysRandom:
      return "allkeys-random";
  }
  return "?";
}

inline std::optional<Eviction> ParseEviction(std::string_view name) {
  for (Eviction e : {Eviction::kNoEviction, Eviction::kAllKeysLru, Eviction::kVolatileTtl,
                     Eviction::kAllKeysRandom}) {
    if (name == EvictionName(e)) return e;
  }
  return std::nullopt;
}

}  // namespace ringkv

#endif  // RINGKV_SHARD_MEMORY_H_
