// LockEngine: the lock-based baseline of the report, for side-by-side runs with RingEngine.
// There are `maps` Shards, a key's map chosen by the same Router as the ring engine. Every caller
// runs its own requests directly: it takes the key's stripe lock (one of `key_locks` mutexes,
// chosen by hash), then the map's std::shared_mutex, exclusively to write and shared to read
// (Shard::ReadsOnly). Requests are not prefetched: probing a map outside its lock would race with
// its writers. Whoever runs the engine reclaims expired keys (ExpireDue) now and then.
//
// Threads: Execute from any thread; shard(i) only while no thread executes.
//
//   LockEngine engine(/*maps=*/2, /*reserve_per_map=*/1000);
//   Request r; r.op = Op::kPut; r.key = "k"; r.value = "v";
//   engine.Execute(r);
#ifndef RINGKV_SHARD_LOCK_ENGINE_H_
#define RINGKV_SHARD_LOCK_ENGINE_H_

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "shard/clock.h"
#include "shard/request.h"
#include "shard/router.h"
#include "shard/shard.h"

namespace ringkv {

class LockEngine {
 public:
  static constexpr size_t kDefaultKeyLocks = 100'000;

  // `limit` applies to each map; `reserve_payload` is Shard's (records pre-faulted for the
  // reserved keys).
  LockEngine(uint32_t maps, size_t reserve_per_map, size_t key_locks = kDefaultKeyLocks,
             Clock clock = SystemClockMs, MemoryLimit limit = {}, size_t reserve_payload = 0);

  // Hashes the key, runs the request on its map under the locks, sets r.result.
  void Execute(Request& r);
  // Reclaims up to `budget` expired keys of map `i`, under its lock; returns how many.
  size_t ExpireDue(uint32_t i, size_t budget);

  const Shard& shard(uint32_t i) const { return maps_[i]->shard; }
  uint32_t maps() const { return static_cast<uint32_t>(maps_.size()); }

  // Any thread: a map's size and payload, read under its shared lock.
  struct MapStats {
    uint64_t keys = 0;
    uint64_t payload_bytes = 0;
    uint64_t ttl_keys = 0;
    uint64_t expired = 0;
    uint64_t memory_bytes = 0;
    uint64_t evicted = 0;
    uint64_t table_bytes = 0;
    uint64_t arena_bytes = 0;
    uint64_t arena_dead_bytes = 0;
    uint64_t compacted_bytes = 0;
  };
  MapStats Stats(uint32_t i) const;
  const Router& router() const { return router_; }

 private:
  // One map and its lock on cache lines of their own, so two maps' locks never share a line.
  struct alignas(64) LockedShard {
    LockedShard(size_t reserve, MemoryLimit limit, size_t reserve_payload)
        : shard(reserve, limit, reserve_payload) {}
    mutable std::shared_mutex mu;
    Shard shard ABSL_GUARDED_BY(mu);
  };

  // Constant after construction; the locks and maps inside are shared, guarded as marked.
  const Router router_;
  const Clock clock_;
  std::vector<std::unique_ptr<LockedShard>> maps_;
  std::vector<std::mutex> key_locks_;
};

}  // namespace ringkv

#endif  // RINGKV_SHARD_LOCK_ENGINE_H_
