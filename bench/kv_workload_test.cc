#include "bench/kv_workload.h"

#include <gtest/gtest.h>

#include <charconv>
#include <cstring>
#include <set>

namespace ringkv::bench {
namespace {

TEST(KeyArena, MakesReportKeysInRange) {
  KeyArena arena(5000, 1000, 1);
  std::set<std::string_view> distinct;
  for (uint64_t i = 0; i < arena.size(); ++i) {
    const std::string_view key = arena.key(i);
    ASSERT_TRUE(key.starts_with("file.mdtest.")) << key;
    const std::string_view rest = key.substr(12);
    const size_t dot = rest.find('.');
    ASSERT_NE(dot, std::string_view::npos) << key;
    uint64_t a = 0, b = 0;
    std::from_chars(rest.data(), rest.data() + dot, a);
    std::from_chars(rest.data() + dot + 1, rest.data() + rest.size(), b);
    ASSERT_GE(a, 1u);
    ASSERT_LE(a, 1000u);
    ASSERT_GE(b, 1u);
    ASSERT_LE(b, 1000u);
    distinct.insert(key);
  }
  EXPECT_GT(distinct.size(), 4900u);
  KeyArena again(5000, 1000, 1);
  EXPECT_EQ(again.key(4321), arena.key(4321)) << "the same seed makes the same keys";
}

// The GET check must catch a wrong answer, not only pass right ones.
TEST(KvSource, GetCheckCatchesWrongMissingAndStaleValues) {
  std::vector<std::unique_ptr<KeyArena>> arenas;
  arenas.push_back(std::make_unique<KeyArena>(4, 1'000'000, 3));
  KvSource source(0, arenas);
  source.StartPhase(Op::kGet);
  Request* r[4];
  ASSERT_EQ(source.Poll(r, 4), 4u);
  auto answer = [](Request* req, uint64_t v) {
    req->result = Result::kOk;
    req->out.assign(reinterpret_cast<const char*>(&v), sizeof(v));
  };
  answer(r[0], 0);                   // Its own write (thread 0, op 0): right.
  answer(r[1], 2);                   // Written for op 2, another key: wrong.
  r[2]->result = Result::kNotFound;  // Missing: wrong.
  answer(r[3], uint64_t{7} << 40);   // A thread that does not exist: wrong.
  for (Request* req : r) source.Complete(req);
  EXPECT_TRUE(source.Finished());
  EXPECT_EQ(source.errors(), 3u);
  EXPECT_NE(source.first_error().find("another key"), std::string::npos) << source.first_error();
}

}  // namespace
}  // namespace ringkv::bench
