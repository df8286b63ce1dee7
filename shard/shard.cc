#include "shard/shard.h"

namespace ringkv {
namespace {

using internal::Table;

constexpr uint64_t kVersionMask = (uint64_t{1} << 56) - 1;

}  // namespace

bool Shard::Get(const HashedKey& key, std::string* value) const {
  const Table::Entry* e = table_.Find(key.bytes, key.hash);
  if (e == nullptr) return false;
  const std::string_view v = Table::ValueOf(*e);
  value->assign(v.data(), v.size());
  return true;
}

void Shard::Put(const HashedKey& key, std::string_view value) {
  bool inserted;
  Table::Entry* e = table_.Insert(key.bytes, key.hash, &inserted);
  if (inserted) {
    payload_bytes_ += key.bytes.size();
  } else {
    payload_bytes_ -= Table::ValueOf(*e).size();
  }
  payload_bytes_ += value.size();
  table_.SetValue(e, value, key.hash);
  e->meta = (e->meta & ~kVersionMask) | (++revision_ & kVersionMask);
}

bool Shard::Delete(const HashedKey& key) {
  Table::Entry* e = table_.Find(key.bytes, key.hash);
  if (e == nullptr) return false;
  payload_bytes_ -= key.bytes.size() + Table::ValueOf(*e).size();
  table_.Erase(e);
  return true;
}

}  // namespace ringkv
