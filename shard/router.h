// Router: which shard owns a key. The key's 64-bit wyhash is computed once per request and is
// reused as the shard map's hash (see Shard and HashedKey), so a request is hashed exactly once.
//
// The shard is taken from the hash's top bits by a multiply-shift range reduction; the map takes
// its probe position from the low and middle bits, so the two choices stay independent.
// Constant after construction; any thread.
//
//   Router router(4);
//   uint64_t h = Router::Hash("user:42");
//   uint32_t shard = router.ShardOf(h);
#ifndef RINGKV_SHARD_ROUTER_H_
#define RINGKV_SHARD_ROUTER_H_

#include <cstdint>
#include <string_view>

namespace ringkv {

class Router {
 public:
  explicit Router(uint32_t shards);

  static uint64_t Hash(std::string_view key);
  uint32_t ShardOf(uint64_t hash) const {
    return static_cast<uint32_t>(((hash >> 32) * shards_) >> 32);
  }
  uint32_t shards() const { return shards_; }

 private:
  const uint32_t shards_;
};

}  // namespace ringkv

#endif  // RINGKV_SHARD_ROUTER_H_
