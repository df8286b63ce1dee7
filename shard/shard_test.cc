#include "shard/shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"

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
  Request Scan(uint64_t cursor, size_t limit, std::string_view prefix = {}) {
    Request r = Make(Op::kScan, prefix);
    r.version = cursor;
    r.number = static_cast<int64_t>(limit);
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

TEST(Shard, AGetTakesItsValueFromTheServersReplyMemoryOnlyIfItsCallsBudgetFitsToo) {
  Shard shard;
  Driver run{shard};
  const std::string large(kBudgetedValueBytes, 'l');
  ASSERT_EQ(run.Put("large", large).result, Result::kOk);
  const auto size = static_cast<int64_t>(large.size());
  std::atomic<int64_t> call{3 * size};
  std::atomic<int64_t> server{size + 10};
  auto get = [&](bool with_call) {
    Request r = Make(Op::kGet, "large");
    r.budget = with_call ? &call : nullptr;
    r.reply_memory = &server;
    return run.Do(r);
  };
  const Request first = get(true);
  ASSERT_EQ(first.result, Result::kOk);
  EXPECT_EQ(ReplyMemoryTaken(first), size);
  EXPECT_EQ(call.load(), 2 * size);
  EXPECT_EQ(server.load(), 10);
  // The server's is spent: nothing taken from either, nothing copied.
  const Request over = get(true);
  EXPECT_EQ(over.result, Result::kOverReplyMemory);
  EXPECT_TRUE(over.out.empty());
  EXPECT_EQ(ReplyMemoryTaken(over), 0);
  EXPECT_EQ(call.load(), 2 * size);
  EXPECT_EQ(server.load(), 10);
  EXPECT_EQ(get(false).result, Result::kOverReplyMemory);  // No call budget: the server's alone.
  // The call's spent first: the server's is not touched.
  server += size;
  call = size - 1;
  EXPECT_EQ(get(true).result, Result::kOverBudget);
  EXPECT_EQ(server.load(), size + 10);
  // A small value takes from neither.
  ASSERT_EQ(run.Put("small", "s").result, Result::kOk);
  Request small = Make(Op::kGet, "small");
  small.reply_memory = &server;
  const Request got = run.Do(small);
  EXPECT_EQ(got.out, "s");
  EXPECT_EQ(ReplyMemoryTaken(got), 0);
  EXPECT_EQ(server.load(), size + 10);
}

TEST(Shard, GetsWithABudgetTakeLargeValuesFromItWhileItWouldNotGoBelowZero) {
  Shard shard;
  Driver run{shard};
  const std::string large(kBudgetedValueBytes, 'l');
  ASSERT_EQ(run.Put("large", large).result, Result::kOk);
  ASSERT_EQ(run.Put("small", "s").result, Result::kOk);
  std::atomic<int64_t> budget{static_cast<int64_t>(2 * kBudgetedValueBytes + 10)};
  auto get = [&](std::string_view key) {
    Request r = Make(Op::kGet, key);
    r.budget = &budget;
    return run.Do(r);
  };
  for (int i = 0; i < 2; ++i) {
    const Request r = get("large");
    EXPECT_EQ(r.result, Result::kOk);
    EXPECT_EQ(r.out, large);
  }
  EXPECT_EQ(budget.load(), 10);
  const Request over = get("large");  // Past what is left: neither copied nor lent.
  EXPECT_EQ(over.result, Result::kOverBudget);
  EXPECT_TRUE(over.out.empty());
  EXPECT_EQ(over.lent, nullptr);
  EXPECT_EQ(budget.load(), 10);  // Nothing taken.
  // A value under kBudgetedValueBytes is copied uncounted; a missing key costs nothing.
  EXPECT_EQ(get("small").out, "s");
  EXPECT_EQ(get("missing").result, Result::kNotFound);
  EXPECT_EQ(budget.load(), 10);
  budget += static_cast<int64_t>(kBudgetedValueBytes);  // Given back (a Stream's reply written).
  EXPECT_EQ(get("large").result, Result::kOk);
  EXPECT_EQ(budget.load(), 10);
  EXPECT_EQ(run.Get("large").out, large);  // No budget: no bound.
  // A value the shard would lend: past the budget, not lent either.
  const std::string lendable(Shard::kLendBytes, 'x');
  ASSERT_EQ(run.Put("lendable", lendable).result, Result::kOk);
  Request lend = Make(Op::kGet, "lendable");
  lend.lend = true;
  lend.budget = &budget;
  const Request refused = run.Do(lend);
  EXPECT_EQ(refused.result, Result::kOverBudget);
  EXPECT_EQ(refused.lent, nullptr);
  EXPECT_EQ(budget.load(), 10);
  budget += static_cast<int64_t>(lendable.size());
  const Request lent = run.Do(lend);
  ASSERT_EQ(lent.result, Result::kOk);
  ASSERT_NE(lent.lent, nullptr);
  EXPECT_EQ(lent.lent->view(), lendable);
  EXPECT_EQ(budget.load(), 10);
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
  EXPECT_EQ(run.Delete("k", Condition::kVersion, created.version).result, Result::kConditionFailed);
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
  EXPECT_EQ(shard.size(), 3u);                           // Still held, until reclaimed.
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

// What a shard tells its journal, as text: "set k=v@version", "deadline k", "delete k",
// "expired k".
struct RecordingJournal : Journal {
  std::vector<std::string> said;
  void Set(std::string_view key, std::string_view value, uint64_t version, int64_t) override {
    said.push_back(absl::StrCat("set ", std::string(key), "=", std::string(value), "@", version));
  }
  void SetDeadline(std::string_view key, int64_t) override {
    said.push_back(absl::StrCat("deadline ", std::string(key)));
  }
  void Delete(std::string_view key) override {
    said.push_back(absl::StrCat("delete ", std::string(key)));
  }
  void Expired(std::string_view key) override {
    said.push_back(absl::StrCat("expired ", std::string(key)));
  }
  uint64_t appended() const override { return said.size(); }
  uint64_t durable() const override { return said.size(); }
  bool holds_acks() const override { return false; }
  void Commit() override {}
  bool failed() const override { return false; }
  bool backlogged() const override { return false; }
  void Cut() override {}
};

TEST(Shard, TellsItsJournalOfEveryExpiryForReplicas) {
  Shard shard;
  RecordingJournal journal;
  shard.set_journal(&journal);
  Driver run{shard};
  run.Put("a", "1", run.now + 10);
  run.Put("b", "2", run.now + 20);
  run.now += 10;
  EXPECT_EQ(run.Get("a").result, Result::kNotFound);  // A read hides it and tells no one.
  EXPECT_EQ(journal.said.size(), 2u);
  run.Put("a", "3");  // A write reclaims it first.
  run.now += 10;
  EXPECT_EQ(shard.ExpireDue(run.now, 10), 1u);  // "b", reclaimed by the sweep.
  EXPECT_EQ(journal.said, (std::vector<std::string>{"set a=1@1", "set b=2@2", "expired a",
                                                    "set a=3@3", "expired b"}));
}

TEST(Shard, ClearDropsEveryKeyAndKeepsTheRevision) {
  Shard shard;
  Driver run{shard};
  for (int i = 0; i < 1000; ++i) {
    run.Put(absl::StrCat("k", i), std::string(i % 3 == 0 ? 300 : 10, 'v'),
            i % 2 == 0 ? run.now + 1000 : 0);
  }
  shard.Clear();
  EXPECT_EQ(shard.size(), 0u);
  EXPECT_EQ(shard.ttl_keys(), 0u);
  EXPECT_EQ(shard.payload_bytes(), 0u);
  EXPECT_EQ(shard.arena_bytes(), 0u);
  EXPECT_EQ(run.Get("k0").result, Result::kNotFound);
  EXPECT_EQ(run.Put("k0", "again").version, 1001u);  // Versions never come back.
  EXPECT_EQ(shard.ExpireDue(run.now + 5000, 10), 0u);
}

TEST(Shard, SwapDataExchangesKeysRecordsAndDeadlinesNotCounters) {
  // Enough keys that both tables are growing, with arena records (300 bytes) and heap ones.
  Shard mine;
  Shard theirs;
  Driver a{mine};
  Driver b{theirs};
  for (int i = 0; i < 3000; ++i) a.Put(absl::StrCat("a", i), std::string(i % 2 ? 300 : 10, 'a'));
  for (int i = 0; i < 5000; ++i) {
    b.Put(absl::StrCat("b", i), std::string(i % 50 ? 300 : 20000, 'b'), i % 4 ? 0 : b.now + 100);
  }
  const uint64_t my_revision = mine.revision();
  const uint64_t their_payload = theirs.payload_bytes();
  const uint64_t their_arena = theirs.arena_bytes();
  mine.SwapData(theirs);
  EXPECT_EQ(mine.size(), 5000u);
  EXPECT_EQ(mine.ttl_keys(), 1250u);
  EXPECT_EQ(mine.payload_bytes(), their_payload);
  EXPECT_EQ(mine.arena_bytes(), their_arena);
  EXPECT_EQ(theirs.size(), 3000u);
  EXPECT_EQ(theirs.ttl_keys(), 0u);
  EXPECT_EQ(mine.revision(), my_revision);  // The revision stays with the shard.
  EXPECT_EQ(a.Get("a1").result, Result::kNotFound);
  EXPECT_EQ(a.Get("b4999").out, std::string(300, 'b'));
  EXPECT_EQ(a.Get("b50").out, std::string(20000, 'b'));
  EXPECT_EQ(b.Get("a1").out, std::string(300, 'a'));
  // Both go on working: writes, and the deadlines that came along expire.
  EXPECT_EQ(a.Put("b1", "new").result, Result::kOk);
  EXPECT_EQ(a.Get("b1").out, "new");
  EXPECT_EQ(mine.ExpireDue(a.now + 200, 10000), 1250u);
  EXPECT_EQ(mine.size(), 3750u);
  EXPECT_EQ(b.Delete("a2").result, Result::kOk);
  EXPECT_EQ(theirs.size(), 2999u);
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
        const Request r =
            run.Delete(key, versioned ? Condition::kVersion : Condition::kNone, expect);
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
      case 7: {  // A partial reclaim: the earliest deadlines first, ties by the key's hash.
        const size_t budget = rng() % 5;
        std::vector<std::tuple<int64_t, uint64_t, std::string>> due;
        for (const auto& [k, item] : model) {
          if (item.deadline != 0 && item.deadline <= run.now) {
            due.emplace_back(item.deadline, Router::Hash(k), k);
          }
        }
        std::sort(due.begin(), due.end());
        const size_t n = std::min(budget, due.size());
        ASSERT_EQ(shard.ExpireDue(run.now, budget), n) << step;
        for (size_t i = 0; i < n; ++i) model.erase(std::get<2>(due[i]));
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

// A scan pages through the shard in position order while keys come and go and the table grows
// several times: every key there for the whole scan comes back exactly once.
TEST(Shard, ScanReturnsEveryLastingKeyOnceWhileTheTableGrows) {
  Shard shard;
  Driver run{shard};
  std::vector<std::string> lasting;
  for (int i = 0; i < 1000; ++i) {
    lasting.push_back("keep-" + std::to_string(i));
    run.Put(lasting.back(), "v");
  }
  std::map<std::string, int> seen;
  uint64_t cursor = 0;
  uint64_t last_position = 0;
  int pages = 0;
  int churn = 0;
  int mid_growth = 0;
  for (;;) {
    Request page = run.Scan(cursor, 7);
    ASSERT_EQ(page.result, Result::kOk);
    ++pages;
    size_t records = 0;
    for (ScanRecordReader r(page.out); r.Next(); ++records) {
      EXPECT_GE(r.position(), cursor);
      EXPECT_TRUE((pages == 1 && records == 0) || r.position() > last_position);
      last_position = r.position();
      EXPECT_EQ(r.position(), ScanPosition(Router::Hash(r.key())));
      ++seen[std::string(r.key())];
    }
    EXPECT_LE(records, 7u + 8u);  // Whole buckets: the last may take a page past its limit.
    if (page.number == 1) break;
    ASSERT_GT(page.version, cursor);
    cursor = page.version;
    // Between pages: 40 new keys (the table grows from 2048 to 8192 slots on the way), and
    // every other one of the previous 40 goes again.
    for (int i = 0; i < 40; ++i, ++churn) {
      run.Put("churn-" + std::to_string(churn), "v");
      if (churn >= 40 && churn % 2 == 0) run.Delete("churn-" + std::to_string(churn - 40));
    }
    mid_growth += shard.growing();
  }
  EXPECT_GT(mid_growth, 10);  // Pages that began with the table mid-growth.
  EXPECT_GT(shard.size(), 4000u);
  for (const std::string& key : lasting) EXPECT_EQ(seen[key], 1) << key;
  for (const auto& [key, times] : seen) EXPECT_EQ(times, 1) << key;
}

TEST(Shard, ScanSkipsOtherPrefixesAndExpiredKeys) {
  Shard shard;
  Driver run{shard};
  for (int i = 0; i < 50; ++i) {
    run.Put("user:" + std::to_string(i), "v");
    run.Put("item:" + std::to_string(i), "v");
  }
  run.Put("user:gone", "v", run.now + 10);
  run.now += 10;  // user:gone has expired, but nothing reclaimed it yet.
  std::vector<std::string> users;
  for (uint64_t cursor = 0;;) {
    Request page = run.Scan(cursor, 1000, "user:");
    for (ScanRecordReader r(page.out); r.Next();) users.emplace_back(r.key());
    if (page.number == 1) break;
    cursor = page.version;
  }
  EXPECT_EQ(users.size(), 50u);
  for (const std::string& key : users) EXPECT_EQ(key.rfind("user:", 0), 0u) << key;
  EXPECT_EQ(std::count(users.begin(), users.end(), "user:gone"), 0);
}

// Memory limits: a shard never holds more than its limit, whatever the policy; what goes, and
// when a write fails instead, is the policy's.
Shard LimitedShard(Eviction eviction) {
  // Room for the 16k-slot table (128 KiB) and about 500 values of 1000 bytes.
  return Shard(/*reserve=*/10'000, {.bytes = (128 + 500) * 1024, .eviction = eviction});
}

TEST(ShardMemory, NoEvictionRefusesWritesThatNeedMemoryOnly) {
  Shard shard = LimitedShard(Eviction::kNoEviction);
  Driver run{shard};
  const std::string value(1000, 'v');
  int stored = 0;
  Request r;
  for (; stored < 10'000; ++stored) {
    r = run.Put(absl::StrCat("k", stored), value);
    if (r.result != Result::kOk) break;
    ASSERT_LE(shard.memory_bytes(), shard.memory_limit().bytes);
  }
  EXPECT_EQ(r.result, Result::kNoMemory);
  EXPECT_GT(stored, 400);
  EXPECT_EQ(r.no_memory.limit_bytes, shard.memory_limit().bytes);  // For the message.
  EXPECT_GT(r.no_memory.needed_bytes, 0u);                         // What the write needed.
  EXPECT_EQ(shard.size(), static_cast<size_t>(stored));
  EXPECT_EQ(shard.evicted(), 0u);
  // Nothing stored is lost; reads, overwrites that take no more, and deletes go on.
  EXPECT_EQ(run.Get("k0").out, value);
  EXPECT_EQ(run.Put("new", value).result, Result::kNoMemory);
  EXPECT_EQ(run.Put("k0", "small").result, Result::kOk);
  EXPECT_EQ(run.Delete("k1").result, Result::kOk);
  EXPECT_EQ(run.Put("new", value).result, Result::kOk);
  EXPECT_EQ(run.Put("new", std::string(100'000, 'v')).result, Result::kNoMemory);
  EXPECT_EQ(run.Get("new").out, value);  // A failed write leaves the old value.
}

TEST(ShardMemory, AllKeysLruKeepsTheKeysInUse) {
  Shard shard = LimitedShard(Eviction::kAllKeysLru);
  Driver run{shard};
  const std::string value(1000, 'v');
  for (int i = 0; i < 5000; ++i) {
    ASSERT_EQ(run.Put(absl::StrCat("k", i), value).result, Result::kOk) << i;
    ASSERT_LE(shard.memory_bytes(), shard.memory_limit().bytes);
    // hot-0 .. hot-9 are read all the time.
    if (i < 10) {
      ASSERT_EQ(run.Put(absl::StrCat("hot-", i), value).result, Result::kOk);
    }
    for (int h = 0; h < 10 && i >= 10; ++h) run.Get(absl::StrCat("hot-", h));
  }
  EXPECT_GT(shard.evicted(), 4000u);
  for (int h = 0; h < 10; ++h) EXPECT_EQ(run.Get(absl::StrCat("hot-", h)).result, Result::kOk);
  EXPECT_EQ(run.Get("k4999").result, Result::kOk);  // The newest stays too.
  EXPECT_EQ(run.Get("k0").result, Result::kNotFound);
}

TEST(ShardMemory, VolatileTtlEvictsTheSoonestDeadlinesOnly) {
  Shard shard = LimitedShard(Eviction::kVolatileTtl);
  Driver run{shard};
  const std::string value(1000, 'v');
  for (int i = 0; i < 200; ++i) run.Put(absl::StrCat("plain-", i), value);
  // TTL keys whose deadlines run backwards: the later-written expire sooner.
  int i = 0;
  for (; i < 2000; ++i) {
    Request r = run.Put(absl::StrCat("ttl-", i), value, run.now + 1'000'000 - i);
    ASSERT_EQ(r.result, Result::kOk) << i;
  }
  EXPECT_GT(shard.evicted(), 1000u);
  for (int p = 0; p < 200; ++p) EXPECT_EQ(run.Get(absl::StrCat("plain-", p)).result, Result::kOk);
  EXPECT_EQ(run.Get("ttl-0").result, Result::kOk);           // The latest deadline stays...
  EXPECT_EQ(run.Get("ttl-1998").result, Result::kNotFound);  // ... the soonest went.
  // With no TTL key left to evict, a write fails as under noeviction.
  for (int j = 0; j < 2000 && shard.ttl_keys() > 0; ++j) run.Delete(absl::StrCat("ttl-", j));
  Request r;
  for (int j = 0; j < 2000 && (r = run.Put(absl::StrCat("more-", j), value)).result == Result::kOk;
       ++j) {
  }
  EXPECT_EQ(r.result, Result::kNoMemory);
}

TEST(ShardMemory, AllKeysRandomStaysUnderTheLimitAndNeverEvictsTheKeyWritten) {
  Shard shard = LimitedShard(Eviction::kAllKeysRandom);
  Driver run{shard};
  for (int i = 0; i < 3000; ++i) {
    ASSERT_EQ(run.Put(absl::StrCat("k", i), std::string(1000, 'v')).result, Result::kOk);
    ASSERT_LE(shard.memory_bytes(), shard.memory_limit().bytes);
    ASSERT_EQ(run.Get(absl::StrCat("k", i)).result, Result::kOk);
  }
  EXPECT_GT(shard.evicted(), 2000u);
  // A value that needs all the room there is: everything else goes, the key itself stays.
  const std::string big(400 * 1000, 'b');
  ASSERT_EQ(run.Put("k2999", big).result, Result::kOk);
  EXPECT_EQ(run.Get("k2999").out, big);
}

// The shards' parts of a page merge into keys every shard has covered, in position order, with
// a cursor that resumes exactly where the page stopped.
TEST(ScanMerge, TakesWhatEveryShardCoveredAndNeverSplitsAPosition) {
  std::string a;
  std::string b;
  AppendScanRecord(&a, 10, "a10");
  AppendScanRecord(&a, 30, "a30");
  AppendScanRecord(&b, 20, "b20");
  AppendScanRecord(&b, 30, "b30");  // Same position as a30: a hash collision.
  AppendScanRecord(&b, 50, "b50");
  // Shard a covered up to 40, shard b up to 60: b50 is not covered by a yet.
  const std::vector<ShardScanPart> parts = {{a, false, 40}, {b, false, 60}};
  std::vector<std::string_view> keys;
  EXPECT_EQ(MergeScanPages(parts, 10, 1 << 20, &keys), 40u);
  EXPECT_EQ(keys, (std::vector<std::string_view>{"a10", "b20", "a30", "b30"}));
  keys.clear();
  // A limit that would split position 30 backs off before it...
  EXPECT_EQ(MergeScanPages(parts, 3, 1 << 20, &keys), 21u);
  EXPECT_EQ(keys, (std::vector<std::string_view>{"a10", "b20"}));
  keys.clear();
  // ... unless the position comes first: then the page takes all of it.
  EXPECT_EQ(MergeScanPages(parts, 1, 1 << 20, &keys), 11u);
  keys.clear();
  const std::vector<ShardScanPart> from30 = {{std::string_view(a).substr(15), false, 40},
                                             {std::string_view(b).substr(15), false, 60}};
  EXPECT_EQ(MergeScanPages(from30, 1, 1 << 20, &keys), 40u);
  EXPECT_EQ(keys.size(), 2u);
  keys.clear();
  // The byte bound stops a page early; every shard done: the cursor is 0.
  EXPECT_EQ(MergeScanPages(parts, 10, 4, &keys), 21u);
  EXPECT_EQ(keys.size(), 2u);
  keys.clear();
  EXPECT_EQ(MergeScanPages({{a, true, 0}, {b, true, 0}}, 10, 1 << 20, &keys), 0u);
  EXPECT_EQ(keys.size(), 5u);
}

}  // namespace
}  // namespace ringkv

namespace ringkv {
namespace {

// (value, version, deadline) of every key, as a snapshot or ForEach sees them.
using Copy = std::map<std::string, std::tuple<std::string, uint64_t, int64_t>>;

struct CopySink : SnapshotSink {
  Copy copy;
  size_t duplicates = 0;
  void Add(std::string_view key, std::string_view value, uint64_t version,
           int64_t deadline_ms) override {
    if (!copy.emplace(std::string(key), std::make_tuple(std::string(value), version, deadline_ms))
             .second) {
      ++duplicates;
    }
  }
};

TEST(Shard, AWalkThatSwapDataFinishedIsDoneForTheWorkerThatStillHoldsIt) {
  // A replica's full sync swaps its image in (SwapData) while the data directory's snapshot
  // walks the shard: SwapData walks it to its end, and the worker's next step must say done,
  // not walk again into a sink it no longer has (a SIGSEGV in replication_test).
  Shard mine;
  Shard theirs;
  Driver a{mine};
  Driver b{theirs};
  for (int i = 0; i < 3000; ++i) a.Put(absl::StrCat("a", i), "v");
  for (int i = 0; i < 100; ++i) b.Put(absl::StrCat("b", i), "w");
  CopySink sink;
  mine.BeginSnapshot(&sink, a.now);
  EXPECT_FALSE(mine.SnapshotStep(4));
  mine.SwapData(theirs);
  EXPECT_EQ(sink.copy.size(), 3000u);  // Every key it held at the cut, handed over.
  const size_t handed = sink.copy.size();
  EXPECT_TRUE(mine.SnapshotStep(4));
  EXPECT_TRUE(mine.SnapshotStep(4));
  EXPECT_EQ(sink.copy.size(), handed);
  EXPECT_EQ(sink.duplicates, 0u);
}

// The keys live at `now_ms`, as the shard holds them.
Copy LiveCopy(const Shard& shard, int64_t now_ms) {
  Copy copy;
  shard.ForEach([&](std::string_view k, std::string_view v, uint64_t version, int64_t deadline) {
    if (deadline == 0 || deadline > now_ms) {
      copy.emplace(std::string(k), std::make_tuple(std::string(v), version, deadline));
    }
  });
  return copy;
}

// Growth is incremental (internal::Table): after the table fills to 4/5, for capacity / 8 new
// keys its entries are in two arrays. Writes, deletes, TTLs, expiries, evictions (with a limit),
// lookups and whole scans run against a reference map while the key range keeps widening, so
// the table is mid-growth for much of the run. With evictions the map cannot know which keys
// went: a key the shard lacks may be gone only if evictions happened, and a key it has must
// hold what the map says; deleted keys never come back.
TEST(Shard, MidGrowthMatchesAReferenceModel) {
  for (const uint64_t limit : {uint64_t{0}, uint64_t{512} << 10}) {
    SCOPED_TRACE(limit);
    Shard shard(
        /*reserve=*/0,
        {.bytes = limit, .eviction = limit == 0 ? Eviction::kNoEviction : Eviction::kAllKeysLru});
    Driver run{shard};
    std::map<std::string, std::pair<std::string, int64_t>> model;  // Value, deadline (0: none).
    std::mt19937_64 rng(limit + 21);
    auto live = [&](const std::string& key) {
      auto it = model.find(key);
      return it != model.end() && (it->second.second == 0 || it->second.second > run.now);
    };
    // A key the model has live and the shard does not: evicted, which only a limit allows.
    auto gone = [&](const std::string& key) {
      ASSERT_TRUE(limit != 0 && shard.evicted() > 0) << key << " lost";
      model.erase(key);
    };
    int checks = 0;
    int mid_growth = 0;
    for (int step = 0; step < 40'000; ++step) {
      const std::string key = absl::StrCat("k", rng() % (200 + step));
      const uint64_t op = rng() % 20;
      if (op < 10) {
        // Without a limit, a quarter of the values go to the table's arena (records over 128
        // bytes), whose compaction then moves records under the scans and the growth. (With
        // one, they would leave too few keys for the table to grow; ShardMemory's tests evict
        // arena records.)
        const size_t len = limit == 0 && rng() % 4 == 0 ? 120 + rng() % 3000 : rng() % 60;
        const std::string value(len, static_cast<char>('a' + step % 26));
        const int64_t deadline =
            rng() % 4 == 0 ? run.now + 1 + static_cast<int64_t>(rng() % 300) : 0;
        ASSERT_EQ(run.Put(key, value, deadline).result, Result::kOk) << step;
        model[key] = {value, deadline};
      } else if (op < 13) {
        const Request r = run.Get(key);
        if (r.result == Result::kOk) {
          ASSERT_TRUE(live(key)) << key << " came back";
          ASSERT_EQ(r.out, model[key].first) << key;
          ASSERT_EQ(r.deadline_ms, model[key].second) << key;
        } else {
          ASSERT_EQ(r.result, Result::kNotFound);
          if (live(key)) gone(key);
        }
      } else if (op < 15) {
        const Request r = run.Delete(key);
        if (r.result == Result::kOk) {
          ASSERT_TRUE(live(key)) << key << " came back";
        } else if (live(key)) {
          gone(key);
        }
        model.erase(key);
      } else if (op < 16) {
        const int64_t deadline = run.now + 1 + static_cast<int64_t>(rng() % 300);
        const Request r = run.Ttl(Op::kExpire, key, deadline);
        if (r.result == Result::kOk) {
          ASSERT_TRUE(live(key)) << key << " came back";
          model[key].second = deadline;
        } else if (live(key)) {
          gone(key);
        }
      } else if (op < 18) {
        run.now += static_cast<int64_t>(rng() % 10);
        shard.ExpireDue(run.now, rng() % 50);
      } else if (op < 19 && step % 8 == 0) {  // A whole scan, in pages.
        std::map<std::string, int> seen;
        uint64_t cursor = 0;
        for (;;) {
          const Request page = run.Scan(cursor, 50);
          ASSERT_EQ(page.result, Result::kOk);
          for (ScanRecordReader r(page.out); r.Next();) ++seen[std::string(r.key())];
          if (page.number == 1) break;
          cursor = page.version;
        }
        const Copy copy = LiveCopy(shard, run.now);
        ASSERT_EQ(seen.size(), copy.size()) << step;
        for (const auto& [k, times] : seen) {
          ASSERT_EQ(times, 1) << k;
          ASSERT_TRUE(copy.contains(k)) << k;
        }
      }
      if (step % 500 == 0) {
        ++checks;
        mid_growth += shard.growing();
        const Copy copy = LiveCopy(shard, run.now);
        for (const auto& [k, item] : copy) {
          ASSERT_TRUE(live(k)) << k << " came back";
          ASSERT_EQ(std::get<0>(item), model[k].first) << k;
          ASSERT_EQ(std::get<2>(item), model[k].second) << k;
        }
        std::vector<std::string> missing;
        for (const auto& [k, item] : model) {
          if (live(k) && !copy.contains(k)) missing.push_back(k);
        }
        for (const std::string& k : missing) gone(k);
      }
    }
    EXPECT_GT(mid_growth, 3) << "of " << checks;
    if (limit != 0) {
      EXPECT_GT(shard.evicted(), 0u);
      EXPECT_LE(shard.memory_bytes(), limit);
    } else {
      EXPECT_GT(shard.compacted_bytes(), 0u);
    }
  }
}

// A snapshot taken a few buckets at a time while random writes, deletes, TTL changes,
// increments, expiries and (with a memory limit) evictions run between the steps, the table
// growing meanwhile: it holds exactly the state at the cut. A second snapshot right after
// shows the walk left no mark behind.
TEST(ShardSnapshot, IsThePointInTimeStateWhateverChangesMeanwhile) {
  for (const uint64_t limit : {uint64_t{0}, uint64_t{1} << 20}) {
    Shard shard(/*reserve=*/0,
                {.bytes = limit,
                 .eviction = limit == 0 ? Eviction::kNoEviction : Eviction::kAllKeysRandom});
    Driver run{shard};
    std::mt19937_64 random(limit + 7);
    auto key = [&](uint64_t range) { return absl::StrCat("key", random() % range); };
    for (int i = 0; i < 20'000; ++i) {
      run.Put(key(30'000), std::string(random() % 40, 'a' + i % 26),
              i % 5 == 0 ? run.now + 1 + static_cast<int64_t>(random() % 2000) : 0);
    }
    for (int round = 0; round < 2; ++round) {
      const Copy at_cut = LiveCopy(shard, run.now);
      CopySink sink;
      size_t mid_growth = 0;  // Steps taken with the table mid-growth.
      shard.BeginSnapshot(&sink, run.now);
      size_t steps = 0;
      while (!shard.SnapshotStep(1 + random() % 8)) {
        ++steps;
        for (int j = 0; j < 20; ++j) {  // Keys outside the first range make the table grow.
          const std::string k = key(round == 0 ? 120'000 : 30'000);
          switch (random() % 6) {
            case 0:
            case 1:
              run.Put(k, std::string(random() % 40, 'z'),
                      random() % 4 == 0 ? run.now + 1 + static_cast<int64_t>(random() % 500) : 0);
              break;
            case 2:
              run.Delete(k);
              break;
            case 3:
              run.Ttl(Op::kExpire, k, run.now + 1 + static_cast<int64_t>(random() % 500));
              break;
            case 4:
              run.Ttl(Op::kPersist, k);
              break;
            case 5:
              run.Increment(absl::StrCat("n", random() % 100), 1);
              break;
          }
        }
        run.now += 1;
        shard.ExpireDue(run.now, 64);
        mid_growth += shard.growing();
      }
      EXPECT_FALSE(shard.snapshotting());
      EXPECT_GT(steps, 100u);
      if (round == 0 && limit == 0) {  // At the limit the table stays as it is.
        EXPECT_GT(mid_growth, 10u);
      }
      EXPECT_EQ(sink.duplicates, 0u);
      ASSERT_EQ(sink.copy.size(), at_cut.size()) << "limit " << limit << ", round " << round;
      EXPECT_TRUE(sink.copy == at_cut) << "limit " << limit << ", round " << round;
    }
    if (limit != 0) {
      EXPECT_GT(shard.evicted(), 0u);
    }
  }
}

}  // namespace
}  // namespace ringkv
