#include "shard/lock_engine.h"

namespace ringkv {

LockEngine::LockEngine(uint32_t maps, size_t reserve_per_map, size_t key_locks, Clock clock,
                       MemoryLimit limit, size_t reserve_payload)
    : router_(maps), clock_(clock), key_locks_(key_locks == 0 ? 1 : key_locks) {
  maps_.reserve(maps);
  for (uint32_t i = 0; i < maps; ++i) {
    maps_.push_back(std::make_unique<LockedShard>(reserve_per_map, limit, reserve_payload));
  }
}

void LockEngine::Execute(Request& r) {
  r.hash = Router::Hash(r.key);
  r.owner = r.op == Op::kScan ? r.target : static_cast<uint16_t>(router_.ShardOf(r.hash));
  r.lend = false;  // Its shards are any thread's: a loan would be returned under no lock.
  LockedShard& map = *maps_[r.owner];
  std::lock_guard<std::mutex> key_lock(key_locks_[r.hash % key_locks_.size()]);
  if (map.shard.ReadsOnly(r)) {
    std::shared_lock<std::shared_mutex> lock(map.mu);
    map.shard.Execute(r, map.shard.has_ttls() ? clock_() : 0);
  } else {
    std::unique_lock<std::shared_mutex> lock(map.mu);
    map.shard.Execute(r, map.shard.has_ttls() ? clock_() : 0);
  }
}

size_t LockEngine::ExpireDue(uint32_t i, size_t budget) {
  std::unique_lock<std::shared_mutex> lock(maps_[i]->mu);
  Shard& shard = maps_[i]->shard;
  return shard.has_ttls() ? shard.ExpireDue(clock_(), budget) : 0;
}

LockEngine::MapStats LockEngine::Stats(uint32_t i) const {
  std::shared_lock lock(maps_[i]->mu);
  const Shard& shard = maps_[i]->shard;
  return {shard.size(),           shard.payload_bytes(), shard.ttl_keys(),
          shard.expired(),        shard.memory_bytes(),  shard.evicted(),
          shard.table_bytes(),    shard.arena_bytes(),   shard.arena_dead_bytes(),
          shard.compacted_bytes()};
}

}  // namespace ringkv
