// One stress body run against every ring backend: per-producer order, no loss, no duplicate,
// wrap-around of a small ring, full-ring back-pressure and the all-or-none bulk calls.
#include "ring/ring.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

namespace ringkv {
namespace {

// Items are not dereferenced: producer p's i-th item is the integer (p << 32) | (i + 1).
void* Item(uint64_t producer, uint64_t seq) {
  return reinterpret_cast<void*>((producer << 32) | (seq + 1));
}
uint64_t ProducerOf(void* item) { return reinterpret_cast<uintptr_t>(item) >> 32; }
uint64_t SeqOf(void* item) { return (reinterpret_cast<uintptr_t>(item) & 0xffffffffu) - 1; }

class RingTest : public ::testing::TestWithParam<RingKind> {
 protected:
  std::unique_ptr<Ring> Make(size_t capacity) {
    auto ring = MakeRing(GetParam(), capacity);
    EXPECT_TRUE(ring.ok()) << ring.status();
    return std::move(ring).value();
  }
  int Producers() const { return IsMultiProducer(GetParam()) ? 3 : 1; }
};

// Producers send `per_producer` items each through a ring of `capacity`, in bursts of varying
// size, while one consumer checks that each producer's items arrive once each and in order.
void Stress(Ring& ring, int producers, uint64_t per_producer) {
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&ring, p, per_producer] {
      void* batch[37];
      uint64_t next = 0;
      size_t burst = 1;
      while (next < per_producer) {
        const size_t n = std::min<uint64_t>(burst, per_producer - next);
        for (size_t i = 0; i < n; ++i) batch[i] = Item(p, next + i);
        size_t sent = 0;
        // Every third round uses the bulk call, which must take all or nothing.
        if (next % 3 == 0) {
          const size_t k = ring.EnqueueBulk(batch, n);
          ASSERT_TRUE(k == 0 || k == n) << "bulk enqueue moved " << k << " of " << n;
          sent = k;
        } else {
          sent = ring.EnqueueBurst(batch, n);
          ASSERT_LE(sent, n);
        }
        if (sent == 0) CpuRelax();
        next += sent;
        burst = burst % 37 + 1;
      }
    });
  }

  std::vector<uint64_t> expected(producers, 0);
  uint64_t received = 0;
  const uint64_t total = per_producer * producers;
  void* out[64];
  size_t want = 1;
  while (received < total) {
    size_t got = 0;
    if (want % 5 == 0) {
      got = ring.DequeueBulk(out, want);
      ASSERT_TRUE(got == 0 || got == want) << "bulk dequeue moved " << got << " of " << want;
    } else {
      got = ring.DequeueBurst(out, want);
      ASSERT_LE(got, want);
    }
    for (size_t i = 0; i < got; ++i) {
      const uint64_t p = ProducerOf(out[i]);
      ASSERT_LT(p, static_cast<uint64_t>(producers));
      ASSERT_EQ(SeqOf(out[i]), expected[p]) << "producer " << p << " out of order or duplicated";
      ++expected[p];
    }
    received += got;
    want = want % 64 + 1;
  }
  for (auto& t : threads) t.join();
  for (int p = 0; p < producers; ++p) EXPECT_EQ(expected[p], per_producer);
  void* extra;
  EXPECT_EQ(ring.DequeueBurst(&extra, 1), 0u) << "the ring delivered more than was sent";
}

TEST_P(RingTest, ManyItemsThroughALargeRing) {
  auto ring = Make(4096);
  Stress(*ring, Producers(), 200'000);
}

TEST_P(RingTest, WrapsAroundASmallRing) {
  auto ring = Make(64);
  Stress(*ring, Producers(), 100'000);
}

TEST_P(RingTest, FullRingRefusesAndRecovers) {
  constexpr size_t kCapacity = 1024;
  auto ring = Make(kCapacity);
  ASSERT_GE(ring->capacity(), kCapacity);
  const bool exact = GetParam() == RingKind::kRteSpsc || GetParam() == RingKind::kRteMpsc ||
                     GetParam() == RingKind::kRteMpscRts || GetParam() == RingKind::kMutex;
  // moodycamel's ConcurrentQueue keeps spare blocks for its producers (MoodyMpscRing).
  const size_t internal_slack = 64 * 2 * 256;
  std::vector<void*> items;
  for (size_t i = 0; i < 4 * kCapacity + 2 * internal_slack; ++i) items.push_back(Item(0, i));

  // Fill it one at a time until it refuses: never before the capacity it promised, and exactly at
  // it for the backends whose capacity is exact (moodycamel's queues round up to whole blocks).
  size_t filled = 0;
  while (filled < items.size() && ring->EnqueueBurst(items.data() + filled, 1) == 1) ++filled;
  ASSERT_LT(filled, items.size()) << "the ring never reported full";
  ASSERT_GE(filled, kCapacity) << "the ring refused items before reaching its capacity";
  if (exact) {
    EXPECT_EQ(filled, kCapacity);
  }
  EXPECT_EQ(ring->EnqueueBulk(items.data() + filled, 1), 0u);
  EXPECT_EQ(ring->SizeApprox(), filled);

  // Bulk dequeue asks for more than is there: nothing moves.
  std::vector<void*> out(filled + 1);
  EXPECT_EQ(ring->DequeueBulk(out.data(), filled + 1), 0u);

  // Taking some out makes room for exactly that many more to go in bulk. (moodycamel's queues
  // reuse a block only once it is empty, so for them this is checked after the full drain.)
  ASSERT_EQ(ring->DequeueBulk(out.data(), 8), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(SeqOf(out[i]), i);
  if (exact) {
    EXPECT_EQ(ring->EnqueueBulk(items.data() + filled, 8), 8u);
    EXPECT_EQ(ring->EnqueueBurst(items.data() + filled + 8, 1), 0u);
    filled += 8;
  }

  // Everything comes out, in order.
  size_t drained = 8;
  while (drained < filled) {
    const size_t k = ring->DequeueBurst(out.data(), 32);
    ASSERT_GT(k, 0u) << "items were lost";
    for (size_t i = 0; i < k; ++i) ASSERT_EQ(SeqOf(out[i]), drained + i);
    drained += k;
  }
  EXPECT_EQ(ring->SizeApprox(), 0u);
  EXPECT_EQ(ring->EnqueueBulk(items.data(), 16), 16u) << "an emptied ring has no room";
}

TEST_P(RingTest, NameRoundTrips) {
  auto kind = ParseRingKind(RingKindName(GetParam()));
  ASSERT_TRUE(kind.ok());
  EXPECT_EQ(*kind, GetParam());
}

INSTANTIATE_TEST_SUITE_P(AllBackends, RingTest, ::testing::ValuesIn(kAllRingKinds),
                         [](const auto& info) {
                           std::string name(RingKindName(info.param));
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST(MakeRing, RejectsCapacityOutOfRange) {
  auto zero = MakeRing(RingKind::kRteSpsc, 0);
  EXPECT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("1 .. "), std::string::npos) << zero.status();
  EXPECT_FALSE(MakeRing(RingKind::kMutex, size_t{1} << 40).ok());
}

TEST(ParseRingKind, NamesTheChoicesOnError) {
  auto bad = ParseRingKind("spmc");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("spsc-rte"), std::string::npos);
}

}  // namespace
}  // namespace ringkv
