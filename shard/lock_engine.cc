#include "shard/lock_engine.h"

namespace ringkv {

LockEngine::LockEngine(uint32_t maps, size_t reserve_per_map, size_t key_locks)
    : router_(maps), key_locks_(key_locks == 0 ? 1 : key_locks) {
  maps_.reserve(maps);
  for (uint32_t i = 0; i < maps; ++i) maps_.push_back(std::make_unique<LockedShard>(reserve_per_map));
}

void LockEngine::Execute(Request& r) {
  r.hash = Router::Hash(r.key);
  r.owner = static_cast<uint16_t>(router_.ShardOf(r.hash));
  LockedShard& map = *maps_[r.owner];
  const HashedKey key{r.key, r.hash};
  std::lock_guard<std::mutex> key_lock(key_locks_[r.hash % key_locks_.size()]);
  switch (r.op) {
    case Op::kGet: {
      std::shared_lock<std::shared_mutex> lock(map.mu);
      r.result = map.shard.Get(key, &r.out) ? Result::kOk : Result::kNotFound;
      break;
    }
    case Op::kPut: {
      std::unique_lock<std::shared_mutex> lock(map.mu);
      map.shard.Put(key, r.value);
      r.result = Result::kOk;
      break;
    }
    case Op::kDelete: {
      std::unique_lock<std::shared_mutex> lock(map.mu);
      r.result = map.shard.Delete(key) ? Result::kOk : Result::kNotFound;
      break;
    }
  }
}

LockEngine::MapStats LockEngine::Stats(uint32_t i) const {
  std::shared_lock lock(maps_[i]->mu);
  return {maps_[i]->shard.size(), maps_[i]->shard.payload_bytes()};
}

}  // namespace ringkv
