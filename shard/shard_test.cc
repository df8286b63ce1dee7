#include "shard/shard.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

namespace ringkv {
namespace {

HashedKey K(const std::string& key) { return {key, Router::Hash(key)}; }

TEST(Shard, PutGetOverwriteDelete) {
  Shard shard;
  std::string v;
  EXPECT_FALSE(shard.Get(K("a"), &v));
  shard.Put(K("a"), "1");
  ASSERT_TRUE(shard.Get(K("a"), &v));
  EXPECT_EQ(v, "1");
  shard.Put(K("a"), "22");
  ASSERT_TRUE(shard.Get(K("a"), &v));
  EXPECT_EQ(v, "22");
  EXPECT_EQ(shard.size(), 1u);
  EXPECT_EQ(shard.payload_bytes(), 3u);
  EXPECT_TRUE(shard.Delete(K("a")));
  EXPECT_FALSE(shard.Delete(K("a")));
  EXPECT_FALSE(shard.Get(K("a"), &v));
  EXPECT_EQ(shard.payload_bytes(), 0u);
}

// Keys and values on both sides of the inline limit (37 bytes of key and value together),
// binary bytes included, through inserts, overwrites that cross the limit both ways, deletes and
// growth.
TEST(Shard, MatchesAModelAcrossInlineAndHeapSizes) {
  Shard shard;
  std::map<std::string, std::string> model;
  std::mt19937_64 rng(7);
  auto bytes = [&](size_t max_len) {
    std::string s(rng() % (max_len + 1), '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  };
  std::vector<std::string> keys;
  for (int i = 0; i < 3000; ++i) keys.push_back(bytes(i % 2 ? 31 : 70));
  for (int step = 0; step < 60'000; ++step) {
    const std::string& key = keys[rng() % keys.size()];
    switch (rng() % 4) {
      case 0:
      case 1: {
        const std::string value = bytes(rng() % 2 ? 15 : 100);
        shard.Put(K(key), value);
        model[key] = value;
        break;
      }
      case 2: {
        std::string got;
        const bool found = shard.Get(K(key), &got);
        auto it = model.find(key);
        ASSERT_EQ(found, it != model.end());
        if (found) {
          ASSERT_EQ(got, it->second);
        }
        break;
      }
      case 3:
        ASSERT_EQ(shard.Delete(K(key)), model.erase(key) == 1);
        break;
    }
  }
  ASSERT_EQ(shard.size(), model.size());
  uint64_t payload = 0;
  for (const auto& [k, v] : model) {
    payload += k.size() + v.size();
    std::string got;
    ASSERT_TRUE(shard.Get(K(k), &got));
    EXPECT_EQ(got, v);
  }
  EXPECT_EQ(shard.payload_bytes(), payload);
}

}  // namespace
}  // namespace ringkv
