#include "shard/shard.h"

namespace ringkv {

static_assert(sizeof(Shard::Key) + sizeof(Shard::Value) == 48, "a map slot should be 48 bytes");

Shard::Shard(size_t reserve) { map_.reserve(reserve); }

bool Shard::Get(const HashedKey& key, std::string* value) const {
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  const std::string_view v = it->second.view();
  value->assign(v.data(), v.size());
  return true;
}

void Shard::Put(const HashedKey& key, std::string_view value) {
  // try_emplace builds the stored key from the HashedKey only when the key is new.
  auto [it, inserted] = map_.try_emplace(key);
  if (inserted) {
    payload_bytes_ += key.bytes.size();
  } else {
    payload_bytes_ -= it->second.size();
  }
  payload_bytes_ += value.size();
  it->second.Assign(value);
}

bool Shard::Delete(const HashedKey& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  payload_bytes_ -= key.bytes.size() + it->second.size();
  map_.erase(it);
  return true;
}

}  // namespace ringkv
