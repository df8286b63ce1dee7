#include "shard/lock_engine.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ringkv {
namespace {

const std::string kEmpty;

// The request points at `key` and `value`: they must outlive it.
Request Make(Op op, const std::string& key, const std::string& value = kEmpty) {
  Request r;
  r.op = op;
  r.key = key;
  r.value = value;
  return r;
}

// Threads write their own keys and shared ones at once; afterwards each own key holds its last
// value and each shared key holds some thread's last value for it.
TEST(LockEngine, ConcurrentWritersLeaveLastValues) {
  constexpr int kThreads = 4;
  constexpr int kKeys = 2000;
  LockEngine engine(3, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < kKeys; ++i) {
          const std::string own = absl::StrCat("own/", t, "/", i);
          const std::string value = std::to_string(round), tag = absl::StrCat("t", t);
          Request put = Make(Op::kPut, own, value);
          engine.Execute(put);
          ASSERT_EQ(put.result, Result::kOk);
          const std::string shared = absl::StrCat("shared/", i);
          Request sput = Make(Op::kPut, shared, tag);
          engine.Execute(sput);
          Request get = Make(Op::kGet, own);
          engine.Execute(get);
          ASSERT_EQ(get.result, Result::kOk);
          ASSERT_EQ(get.out, std::to_string(round));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  size_t total = 0;
  for (uint32_t m = 0; m < 3; ++m) total += engine.shard(m).size();
  EXPECT_EQ(total, size_t{kThreads} * kKeys + kKeys);
  for (int i = 0; i < kKeys; ++i) {
    const std::string shared = absl::StrCat("shared/", i);
    Request get = Make(Op::kGet, shared);
    engine.Execute(get);
    ASSERT_EQ(get.result, Result::kOk);
    ASSERT_EQ(get.out.size(), 2u);
    EXPECT_EQ(get.out[0], 't');
  }
  const std::string gone = "own/0/0";
  Request del = Make(Op::kDelete, gone);
  engine.Execute(del);
  EXPECT_EQ(del.result, Result::kOk);
  engine.Execute(del);
  EXPECT_EQ(del.result, Result::kNotFound);
}

}  // namespace
}  // namespace ringkv
