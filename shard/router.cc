#include "shard/router.h"

#include <wyhash/wyhash.h>

#include "absl/base/internal/raw_logging.h"

namespace ringkv {

namespace {
// Fixed so that a key's shard is the same in every process: tests and tools can predict it.
constexpr uint64_t kSeed = 0x72696e676b76ULL;  // "ringkv"
}  // namespace

Router::Router(uint32_t shards) : shards_(shards) {
  ABSL_RAW_CHECK(shards > 0, "a router needs at least one shard");
}

uint64_t Router::Hash(std::string_view key) { return wyhash(key.data(), key.size(), kSeed, _wyp); }

}  // namespace ringkv
