#include "shard/router.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ringkv {
namespace {

TEST(Router, SpreadsKeysEvenlyOverEveryShard) {
  for (uint32_t shards : {1u, 2u, 3u, 7u, 16u}) {
    Router router(shards);
    std::vector<int> count(shards, 0);
    constexpr int kKeys = 100'000;
    for (int i = 0; i < kKeys; ++i) {
      const std::string key = absl::StrCat("file.mdtest.", i, ".", i * 7);
      const uint32_t s = router.ShardOf(Router::Hash(key));
      ASSERT_LT(s, shards);
      ++count[s];
    }
    const double expected = static_cast<double>(kKeys) / shards;
    for (uint32_t s = 0; s < shards; ++s) {
      EXPECT_NEAR(count[s], expected, expected * 0.05) << "shard " << s << " of " << shards;
    }
  }
}

TEST(Router, SameKeySameShardAndHash) {
  Router router(5);
  EXPECT_EQ(Router::Hash("abc"), Router::Hash(std::string("abc")));
  EXPECT_NE(Router::Hash("abc"), Router::Hash("abd"));
  EXPECT_NE(Router::Hash(""), Router::Hash(std::string_view("\0", 1)));
  EXPECT_EQ(router.ShardOf(Router::Hash("k")), router.ShardOf(Router::Hash("k")));
}

}  // namespace
}  // namespace ringkv
