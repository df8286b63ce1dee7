#include "shard/shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace ringkv {
namespace {

Request Make(Op op, std::string_view key) {
  Request r;
  r.op = op;
  r.key = key;
  return r;
}

// Requests run on `shard` at the fake time `now`.
struct Driver {
  Shard& shard;
  int64_t now = 1'000'000;

  Request Do(Request r) {
    r.hash = Router::Hash(r.key);
    shard.Execute(r, now);
    return r;
  }
  Request Get(std::string_view key) { return Do(Make(Op::kGet, key)); }
  Request Put(std::string_view key, std::string_view value, int64_t deadline = 0,
              Condition condition = Condition::kNone, uint64_t version = 0) {
    Request r = Make(Op::kPut, key);
    r.value = value;
    r.deadline_ms = deadline;
    r.condition = condition;
    r.version = version;
    return Do(r);
  }
  Request Delete(std::string_view key, Condition condition = Condition::kNone,
                 uint64_t version = 0) {
    Request r = Make(Op::kDelete, key);
    r.condition = condition;
    r.version = version;
    return Do(r);
  }
  Request Increment(std::string_view key, int64_t delta) {
    Request r = Make(Op::kIncrement, key);
    r.number = delta;
    return Do(r);
  }
  Request Ttl(Op op, std::string_view key, int64_t deadline = 0) {
    Request r = Make(op, key);
    r.deadline_ms = deadline;
    return Do(r);
  }
};

TEST(Shard, PutGetDeleteAndGrowingVersions) {
  Shard shard;
  Driver run{shard};
  EXPECT_EQ(run.Get("a").result, Result::kNotFound);
  const Request first = run.Put("a", "1");
  ASSERT_EQ(first.result, Result::kOk);
  const Request got = run.Get("a");
  EXPECT_EQ(got.out, "1");
  EXPECT_EQ(got.version, first.version);
  EXPECT_EQ(got.deadline_ms, 0);
  const Request second = run.Put("a", "22");
  EXPECT_GT(second.version, first.version);
  EXPECT_EQ(shard.size(), 1u);
  EXPECT_EQ(shard.payload_bytes(), 3u);
  EXPECT_EQ(run.Delete("a").result, Result::kOk);
  EXPECT_EQ(run.Delete("a").result, Result::kNotFound);
  EXPECT_EQ(shard.payload_bytes(), 0u);
  // A re-created key never gets an old version back (no ABA for compare-and-set).
  EXPECT_GT(run.Put("a", "1").version, second.version);
}

TEST(Shard, ConditionsHoldOrFailWithTheCurrentVersion) {
  Shard shard;
  Driver run{shard};
  EXPECT_EQ(run.Put("k", "v", 0, Condition::kPresent).result, Result::kConditionFailed);
  const Request created = run.Put("k", "v", 0, Condition::kAbsent);
  ASSERT_EQ(created.result, Result::kOk);
  const Request again = run.Put("k", "w", 0, Condition::kAbsent);
  EXPECT_EQ(again.result, Result::kConditionFailed);
  EXPECT_EQ(again.version, created.version);
  EXPECT_EQ(run.Get("k").out, "v");  // Nothing changed.
  const Request stale = run.Put("k", "w", 0, Condition::kVersion, created.version + 1);
  EXPECT_EQ(stale.result, Result::kConditionFailed);
  EXPECT_EQ(stale.version, created.version);
  const Request cas = run.Put("k", "w", 0, Condition::kVersion, created.version);
  ASSERT_EQ(cas.result, Result::kOk);
  EXPECT_EQ(run.Delete("k", Condition::kVersion, created.version).result,
            Result::kConditionFailed);
  EXPECT_EQ(run.Delete("k", Condition::kVersion, cas.version).result, Result::kOk);
  // Version 0 means "absent".
  EXPECT_EQ(run.Put("k", "x", 0, Condition::kVersion, 0).result, Result::kOk);
}

TEST(Shard, ExpiredKeysAreNeverReturnedAndAreReclaimedInDeadlineOrder) {
  Shard shard;
  Driver run{shard};
  run.Put("late", "1", run.now + 300);
  run.Put("soon", "2", run.now + 100);
  run.Put("forever", "3");
  EXPECT_EQ(shard.ttl_keys(), 2u);
  EXPECT_EQ(run.Get("soon").deadline_ms, run.now + 100);
  run.now += 100;
  EXPECT_EQ(run.Get("soon").result, Result::kNotFound);  // Due at its deadline.
  EXPECT_EQ(shard.size(), 3u);                            // Still held, until reclaimed.
  EXPECT_EQ(shard.ExpireDue(run.now, 10), 1u);
  EXPECT_EQ(shard.size(), 2u);
  EXPECT_EQ(shard.expired(), 1u);
  run.now += 1000;
  EXPECT_EQ(shard.ExpireDue(run.now, 10), 1u);  // "late".
  EXPECT_EQ(shard.ttl_keys(), 0u);
  EXPECT_FALSE(shard.has_ttls());
  EXPECT_EQ(run.Get("forever").out, "3");
  // A write of an expired key treats it as absent.
  run.Put("gone", "x", run.now + 1);
  run.now += 1;
  EXPECT_EQ(run.Put("gone", "y", 0, Condition::kAbsent).result, Result::kOk);
  EXPECT_EQ(shard.expired(), 3u);
}

TEST(Shard, ExpireAndPersistChangeOnlyTheTtl) {
  Shard shard;
  Driver run{shard};
  const Request put = run.Put("k", std::string(30, 'v'));  // 1 + 30 bytes: room for the TTL.
  const Request expire = run.Ttl(Op::kExpire, "k", run.now + 50);
  ASSERT_EQ(expire.result, Result::kOk);
  EXPECT_EQ(expire.version, put.version);
  EXPECT_EQ(run.Get("k").deadline_ms, run.now + 50);
  EXPECT_EQ(run.Get("k").out, std::string(30, 'v'));
  EXPECT_EQ(run.Ttl(Op::kPersist, "k").result, Result::kOk);
  EXPECT_EQ(run.Get("k").deadline_ms, 0);
  EXPECT_FALSE(shard.has_ttls());
  EXPECT_EQ(run.Ttl(Op::kExpire, "nope", run.now + 1).result, Result::kNotFound);
  // A Put without a TTL drops the one the key had; with one, replaces it.
  run.Put("t", "1", run.now + 10);
  run.Put("t", "2");
  EXPECT_EQ(run.Get("t").deadline_ms, 0);
  run.Put("t", "3", run.now + 20);
  run.Put("t", "4", run.now + 30);
  EXPECT_EQ(run.Get("t").deadline_ms, run.now + 30);
  EXPECT_EQ(shard.ttl_keys(), 1u);
}

TEST(Shard, IncrementParsesAddsAndKeepsTheTtl) {
  Shard shard;
  Driver run{shard};
  Request r = run.Increment("n", 5);
  ASSERT_EQ(r.result, Result::kOk);
  EXPECT_EQ(r.number, 5);
  EXPECT_EQ(run.Get("n").out, "5");
  EXPECT_EQ(run.Increment("n", -7).number, -2);
  EXPECT_EQ(run.Get("n").out, "-2");
  run.Put("t", "10", run.now + 100);
  EXPECT_EQ(run.Increment("t", 1).number, 11);
  EXPECT_EQ(run.Get("t").deadline_ms, run.now + 100);
  for (const char* bad : {"x", "", "1.5", " 1", "+1", "01", "-0", "-", "99999999999999999999"}) {
    run.Put("bad", bad);
    EXPECT_EQ(run.Increment("bad", 1).result, Result::kNotInteger) << bad;
    EXPECT_EQ(run.Get("bad").out, bad);  // Untouched.
  }
  run.Put("max", std::to_string(std::numeric_limits<int64_t>::max()));
  EXPECT_EQ(run.Increment("max", 1).result, Result::kOverflow);
  run.Put("min", std::to_string(std::numeric_limits<int64_t>::min()));
  EXPECT_EQ(run.Increment("min", -1).result, Result::kOverflow);
  EXPECT_EQ(run.Increment("min", 1).number, std::numeric_limits<int64_t>::min() + 1);
}

// The randomized model test: puts (every condition, with and without TTLs), deletes,
// increments, expires, persists, reads, the clock moving and partial reclaims, against a
// reference that predicts every result, value, version and deadline, and the shard's counts.
TEST(Shard, MatchesAReferenceModel) {
  struct Item {
    std::string value;
    uint64_t version = 0;
    int64_t deadline = 0;  // 0: none.
  };
  Shard shard;
  Driver run{shard};
  std::map<std::string, Item> model;  // Includes expired keys not yet reclaimed, as the shard.
  uint64_t revision = 0;
  uint64_t expired = 0;
  std::mt19937_64 rng(2026);
  auto bytes = [&](size_t max_len) {
    std::string s(rng() % (max_len + 1), '\0');
    for (char& c : s) c = static_cast<char>('a' + rng() % 26);
    return s;
  };
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) keys.push_back(i % 5 == 0 ? bytes(60) + "k" : bytes(20) + "k");
  auto live = [&](const std::string& key) -> Item* {
    auto it = model.find(key);
    if (it == model.end() || (it->second.deadline != 0 && it->second.deadline <= run.now)) {
      return nullptr;
    }
    return &it->second;
  };
  // What LiveForWrite does: an expired key is dropped before a write looks at it.
  auto drop_expired = [&](const std::string& key) {
    auto it = model.find(key);
    if (it != model.end() && live(key) == nullptr) {
      model.erase(it);
      ++expired;
    }
  };
  auto deadline = [&]() -> int64_t { return rng() % 3 == 0 ? 0 : run.now + 1 + rng() % 50; };

  for (int step = 0; step < 200'000; ++step) {
    const std::string& key = keys[rng() % keys.size()];
    switch (rng() % 9) {
      case 0: {  // Get.
        const Request r = run.Get(key);
        const Item* item = live(key);
        ASSERT_EQ(r.result, item ? Result::kOk : Result::kNotFound) << step;
        if (item) {
          ASSERT_EQ(r.out, item->value);
          ASSERT_EQ(r.version, item->version);
          ASSERT_EQ(r.deadline_ms, item->deadline);
        }
        break;
      }
      case 1:
      case 2: {  // Put, with a random condition.
        drop_expired(key);
        Item* item = live(key);
        const auto condition = static_cast<Condition>(rng() % 4);
        const uint64_t current = item ? item->version : 0;
        const uint64_t expect = rng() % 2 ? current : current + 1 + rng() % 3;
        const bool holds = condition == Condition::kNone ||
                           (condition == Condition::kAbsent && !item) ||
                           (condition == Condition::kPresent && item) ||
                           (condition == Condition::kVersion && expect == current);
        const std::string value = rng() % 4 ? bytes(12) : bytes(100);
        const int64_t d = deadline();
        const Request r = run.Put(key, value, d, condition, expect);
        if (!holds) {
          ASSERT_EQ(r.result, Result::kConditionFailed) << step;
          ASSERT_EQ(r.version, current);
          break;
        }
        ASSERT_EQ(r.result, Result::kOk) << step;
        model[key] = {value, ++revision, d};
        ASSERT_EQ(r.version, revision);
        break;
      }
      case 3: {  // Delete, sometimes compare-and-delete.
        drop_expired(key);
        Item* item = live(key);
        const bool versioned = rng() % 2;
        const uint64_t expect = item && rng() % 2 ? item->version : rng() % 5;
        const Request r = run.Delete(key, versioned ? Condition::kVersion : Condition::kNone,
                                     expect);
        if (!item) {
          ASSERT_EQ(r.result, Result::kNotFound) << step;
        } else if (versioned && expect != item->version) {
          ASSERT_EQ(r.result, Result::kConditionFailed) << step;
          ASSERT_EQ(r.version, item->version);
        } else {
          ASSERT_EQ(r.result, Result::kOk) << step;
          model.erase(key);
        }
        break;
      }
      case 4: {  // Increment: numbers, and now and then a value that is not one.
        if (rng() % 8 == 0) {
          drop_expired(key);
          run.Put(key, "not a number");
          model[key] = {"not a number", ++revision, 0};
        }
        drop_expired(key);
        Item* item = live(key);
        const int64_t delta = static_cast<int64_t>(rng() % 2001) - 1000;
        const Request r = run.Increment(key, delta);
        int64_t current = 0;
        if (item) {
          size_t used = 0;
          bool number = !item->value.empty();
          try {
            current = std::stoll(item->value, &used);
          } catch (...) {
            number = false;
          }
          if (!number || used != item->value.size() || std::to_string(current) != item->value) {
            ASSERT_EQ(r.result, Result::kNotInteger) << step;
            break;
          }
        }
        ASSERT_EQ(r.result, Result::kOk) << step;
        ASSERT_EQ(r.number, current + delta);
        Item& stored = model[key];
        stored.value = std::to_string(current + delta);
        stored.version = ++revision;
        if (!item) stored.deadline = 0;
        ASSERT_EQ(r.version, revision);
        break;
      }
      case 5: {  // Expire or Persist.
        drop_expired(key);
        Item* item = live(key);
        const bool expire = rng() % 2;
        const Request r = run.Ttl(expire ? Op::kExpire : Op::kPersist, key,
                                  run.now + 1 + static_cast<int64_t>(rng() % 50));
        if (!item) {
          ASSERT_EQ(r.result, Result::kNotFound) << step;
          break;
        }
        ASSERT_EQ(r.result, Result::kOk);
        item->deadline = expire ? r.deadline_ms : 0;
        break;
      }
      case 6:  // Time passes.
        run.now += static_cast<int64_t>(rng() % 20);
        break;
      case 7: {  // A partial reclaim: the earliest deadlines first, ties by key.
        const size_t budget = rng() % 5;
        std::vector<std::pair<int64_t, std::string>> due;
        for (const auto& [k, item] : model) {
          if (item.deadline != 0 && item.deadline <= run.now) due.emplace_back(item.deadline, k);
        }
        std::sort(due.begin(), due.end());
        const size_t n = std::min(budget, due.size());
        ASSERT_EQ(shard.ExpireDue(run.now, budget), n) << step;
        for (size_t i = 0; i < n; ++i) model.erase(due[i].second);
        expired += n;
        break;
      }
      case 8:
        break;
    }
    if (step % 1000 == 0) {
      ASSERT_EQ(shard.size(), model.size()) << step;
      ASSERT_EQ(shard.expired(), expired) << step;
      uint64_t payload = 0;
      size_t ttls = 0;
      for (const auto& [k, item] : model) {
        payload += k.size() + item.value.size();
        ttls += item.deadline != 0;
      }
      ASSERT_EQ(shard.payload_bytes(), payload) << step;
      ASSERT_EQ(shard.ttl_keys(), ttls) << step;
    }
  }
}

}  // namespace
}  // namespace ringkv
