#include "shard/internal/table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "shard/router.h"

namespace ringkv::internal {
namespace {

uint64_t H(std::string_view key) { return Router::Hash(key); }

// Robin Hood's invariants, which Find's early stop and the scans rely on: every full entry sits
// `dist - 1` slots past its home bucket, no empty slot lies between an entry and its home, and
// along the table the entries' home buckets never go backwards within a run of full slots.
void ExpectRobinHood(const Table& table) {
  size_t full = 0;
  for (size_t i = 0; i <= table.mask(); ++i) {
    const Table::Entry& e = table.slot(i);
    if (!e.full()) continue;
    ++full;
    const uint64_t hash = Router::Hash(Table::KeyOf(e));
    ASSERT_EQ(table.HomeOf(i), hash & table.mask()) << "slot " << i;
    for (size_t back = 1; back < e.dist; ++back) {
      ASSERT_TRUE(table.slot((i - back) & table.mask()).full()) << "a hole before slot " << i;
    }
    const Table::Entry& next = table.slot((i + 1) & table.mask());
    if (next.full()) {
      ASSERT_LE(next.dist, e.dist + 1) << "slot " << i;
    }
  }
  ASSERT_EQ(full, table.size());
}

TEST(Table, InsertFindSetValueErase) {
  Table table;
  bool inserted;
  Table::Entry* e = table.Insert("k", H("k"), &inserted);
  ASSERT_TRUE(inserted);
  EXPECT_EQ(Table::KeyOf(*e), "k");
  EXPECT_EQ(Table::ValueOf(*e), "");
  table.SetValue(e, "v", H("k"));
  EXPECT_EQ(Table::ValueOf(*table.Find("k", H("k"))), "v");
  EXPECT_EQ(table.Insert("k", H("k"), &inserted), table.Find("k", H("k")));
  EXPECT_FALSE(inserted);
  EXPECT_EQ(table.Find("absent", H("absent")), nullptr);
  table.Erase(table.Find("k", H("k")));
  EXPECT_EQ(table.Find("k", H("k")), nullptr);
  EXPECT_EQ(table.size(), 0u);
}

TEST(Table, ValuesMoveBetweenTheEntryAndTheHeap) {
  Table table;
  bool inserted;
  const std::string key(29, 'k');  // A report-style key: 29 + 8 bytes fit in the entry.
  Table::Entry* e = table.Insert(key, H(key), &inserted);
  table.SetValue(e, "12345678", H(key));
  EXPECT_FALSE(e->on_heap());
  EXPECT_EQ(table.heap_bytes(), 0u);
  table.SetValue(e, "123456789", H(key));  // 38 bytes: the heap.
  EXPECT_TRUE(e->on_heap());
  EXPECT_GE(table.heap_bytes(), 38u);
  EXPECT_EQ(Table::KeyOf(*e), key);
  EXPECT_EQ(Table::ValueOf(*e), "123456789");
  table.SetValue(e, std::string(1000, 'x'), H(key));
  EXPECT_EQ(Table::ValueOf(*e), std::string(1000, 'x'));
  table.SetValue(e, "v", H(key));  // Back in the entry, the block freed.
  EXPECT_FALSE(e->on_heap());
  EXPECT_EQ(table.heap_bytes(), 0u);
  EXPECT_EQ(Table::KeyOf(*e), key);
  EXPECT_EQ(Table::ValueOf(*e), "v");
  const std::string long_key(100, 'L');  // A key that alone does not fit.
  Table::Entry* l = table.Insert(long_key, H(long_key), &inserted);
  EXPECT_TRUE(l->on_heap());
  EXPECT_EQ(Table::KeyOf(*l), long_key);
  table.Erase(l);
  EXPECT_EQ(table.heap_bytes(), 0u);
}

TEST(Table, ReserveSizesTheTableToStayFourFifthsFull) {
  EXPECT_EQ(Table(0).capacity(), 16u);
  EXPECT_EQ(Table(1000).capacity(), 2048u);  // 1,250 slots needed.
  EXPECT_EQ(Table(1638).capacity(), 2048u);  // 4/5 of 2,048.
  EXPECT_EQ(Table(1639).capacity(), 4096u);
  // The report's workload reserves 50M: 2^26 slots of 48 bytes, 3.2 GB, as absl's table had.
  EXPECT_EQ(Table::CapacityFor(50'000'000), size_t{1} << 26);
}

// Inserts, overwrites across the inline limit, lookups and erases against a model, through
// growth from 16 slots, with the invariants checked along the way.
TEST(Table, MatchesAModel) {
  Table table;
  std::map<std::string, std::string> model;
  std::mt19937_64 rng(11);
  auto bytes = [&](size_t max_len) {
    std::string s(rng() % (max_len + 1), '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  };
  std::vector<std::string> keys;
  for (int i = 0; i < 4000; ++i) keys.push_back(bytes(i % 3 ? 30 : 80));
  for (int step = 0; step < 80'000; ++step) {
    const std::string& key = keys[rng() % keys.size()];
    const uint64_t hash = H(key);
    switch (rng() % 4) {
      case 0:
      case 1: {
        bool inserted;
        Table::Entry* e = table.Insert(key, hash, &inserted);
        ASSERT_EQ(inserted, model.count(key) == 0);
        const std::string value = bytes(rng() % 2 ? 8 : 60);
        table.SetValue(e, value, hash);
        model[key] = value;
        break;
      }
      case 2: {
        const Table::Entry* e = table.Find(key, hash);
        auto it = model.find(key);
        ASSERT_EQ(e != nullptr, it != model.end());
        if (e != nullptr) {
          ASSERT_EQ(Table::KeyOf(*e), key);
          ASSERT_EQ(Table::ValueOf(*e), it->second);
        }
        break;
      }
      case 3: {
        Table::Entry* e = table.Find(key, hash);
        ASSERT_EQ(e != nullptr, model.erase(key) == 1);
        if (e != nullptr) table.Erase(e);
        break;
      }
    }
    if (step % 10'000 == 0) ExpectRobinHood(table);
  }
  ExpectRobinHood(table);
  ASSERT_EQ(table.size(), model.size());
  for (const auto& [k, v] : model) {
    const Table::Entry* e = table.Find(k, H(k));
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(Table::ValueOf(*e), v);
  }
  EXPECT_LE(table.size(), table.capacity() * 4 / 5);
}

}  // namespace
}  // namespace ringkv::internal
