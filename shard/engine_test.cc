// The ring engine under N threads, every ring kind, random GET/PUT/DELETE checked against a model.
// Each thread works on keys of its own, so its model fixes the answer of every request, while
// the keys' owners are spread over all shards, so the answers cross rings. Tiny rings and a small
// request pool force full rings, back-pressure and interleaving.
#include "shard/engine.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ringkv {
namespace {

class ModelSource : public RequestSource {
 public:
  ModelSource(int thread, int ops, size_t pool) : ops_(ops), rng_(thread + 1), slots_(pool) {
    for (int j = 0; j < 400; ++j) {
      // Every third key is past the 31-byte inline limit.
      std::string key = absl::StrCat("t", thread, "/", j);
      if (j % 3 == 0) key += std::string(40, 'k');
      keys_.push_back(key);
    }
    for (size_t i = 0; i < pool; ++i) free_.push_back(&slots_[i]);
  }

  size_t Poll(Request** out, size_t max) override {
    size_t n = 0;
    while (n < max && !free_.empty() && issued_ < ops_) {
      Slot* s = free_.back();
      free_.pop_back();
      s->key = keys_[rng_() % keys_.size()];
      s->request.key = s->key;
      s->request.tag = s;
      auto it = model_.find(s->key);
      const uint64_t dice = rng_() % 10;
      if (dice < 4) {
        s->request.op = Op::kPut;
        s->value = std::string(rng_() % 30, static_cast<char>('a' + rng_() % 26));
        s->request.value = s->value;
        model_[s->key] = s->value;
        s->expect_result = Result::kOk;
      } else if (dice < 8) {
        s->request.op = Op::kGet;
        s->expect_result = it == model_.end() ? Result::kNotFound : Result::kOk;
        s->expect_value = it == model_.end() ? "" : it->second;
      } else {
        s->request.op = Op::kDelete;
        s->expect_result = it == model_.end() ? Result::kNotFound : Result::kOk;
        if (it != model_.end()) model_.erase(it);
      }
      out[n++] = &s->request;
      ++issued_;
    }
    return n;
  }

  void Complete(Request* r) override {
    Slot* s = static_cast<Slot*>(r->tag);
    if (r->result != s->expect_result) {
      ++errors_;
    } else if (r->op == Op::kGet && r->result == Result::kOk && r->out != s->expect_value) {
      ++errors_;
    }
    ++completed_;
    free_.push_back(s);
  }

  bool Finished() const override { return completed_ == ops_; }

  int errors_ = 0;
  int completed_ = 0;
  std::map<std::string, std::string> model_;

 private:
  struct Slot {
    Request request;
    std::string key, value, expect_value;
    Result expect_result = Result::kPending;
  };
  const int ops_;
  int issued_ = 0;
  std::mt19937_64 rng_;
  std::vector<std::string> keys_;
  std::vector<Slot> slots_;
  std::vector<Slot*> free_;
};

struct Case {
  RingKind ring;
  uint32_t workers;
};

class EngineTest : public ::testing::TestWithParam<Case> {};

TEST_P(EngineTest, RandomOpsMatchTheModel) {
  const Case c = GetParam();
  constexpr int kOps = 20'000;
  auto engine =
      RingEngine::Create({.workers = c.workers, .ring = c.ring, .ring_capacity = 16, .burst = 8});
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<std::unique_ptr<ModelSource>> sources;
  for (uint32_t i = 0; i < c.workers; ++i) {
    sources.push_back(std::make_unique<ModelSource>(i, kOps, /*pool=*/64));
  }
  std::atomic<uint32_t> finished{0};
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < c.workers; ++i) {
    threads.emplace_back(
        [&, i] { (*engine)->worker(i).RunToCompletion(*sources[i], finished, c.workers); });
  }
  for (auto& t : threads) t.join();

  size_t model_keys = 0;
  uint64_t sent = 0, received = 0, executed = 0;
  for (uint32_t i = 0; i < c.workers; ++i) {
    EXPECT_EQ(sources[i]->errors_, 0) << "worker " << i << " saw wrong answers";
    EXPECT_EQ(sources[i]->completed_, kOps);
    EXPECT_TRUE((*engine)->worker(i).Drained());
    model_keys += sources[i]->model_.size();
    const WorkerCounters& wc = (*engine)->worker(i).counters();
    sent += WorkerCounters::Read(wc.sent);
    received += WorkerCounters::Read(wc.received);
    executed += WorkerCounters::Read(wc.executed);
  }
  EXPECT_EQ(sent, received) << "pointers lost or duplicated between rings";
  EXPECT_EQ(executed, uint64_t{kOps} * c.workers) << "every request runs exactly once";
  if (c.workers > 1) {
    EXPECT_GT(sent, 0u);
  }

  // The shards hold exactly the union of the models.
  size_t shard_keys = 0;
  for (uint32_t i = 0; i < c.workers; ++i) shard_keys += (*engine)->worker(i).shard().size();
  EXPECT_EQ(shard_keys, model_keys);
  for (const auto& source : sources) {
    for (const auto& [key, value] : source->model_) {
      const uint64_t h = Router::Hash(key);
      std::string got;
      ASSERT_TRUE((*engine)
                      ->worker((*engine)->router().ShardOf(h))
                      .shard()
                      .Peek({key, h}, SystemClockMs(), &got))
          << key;
      EXPECT_EQ(got, value);
    }
  }
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (RingKind kind : kAllRingKinds) {
    for (uint32_t workers : {1u, 2u, 3u}) cases.push_back({kind, workers});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllRings, EngineTest, ::testing::ValuesIn(Cases()), [](const auto& info) {
  std::string name(RingKindName(info.param.ring));
  for (char& c : name) c = c == '-' ? '_' : c;
  return name + "_" + std::to_string(info.param.workers) + "workers";
});

// PUTs `count` new keys, then has nothing more to send.
class PutSource : public RequestSource {
 public:
  explicit PutSource(int count) : requests_(count), keys_(count) {
    for (int i = 0; i < count; ++i) {
      keys_[i] = absl::StrCat("grow-", i);
      requests_[i].op = Op::kPut;
      requests_[i].key = keys_[i];
      requests_[i].value = "v";
    }
  }
  size_t Poll(Request** out, size_t max) override {
    size_t n = 0;
    while (n < max && next_ < requests_.size()) out[n++] = &requests_[next_++];
    return n;
  }
  void Complete(Request* r) override { ok_ += r->result == Result::kOk; }
  bool Finished() const override { return ok_ == requests_.size(); }
  const std::vector<std::string>& keys() const { return keys_; }

 private:
  std::vector<Request> requests_;
  std::vector<std::string> keys_;
  size_t next_ = 0;
  size_t ok_ = 0;
};

// Turns with nothing else to do take a growth further (Worker, step 7), so a shard that stops
// getting new keys mid-growth still finishes it and gives the old array back.
TEST(Worker, IdleTurnsFinishAGrowth) {
  auto engine = RingEngine::Create({.workers = 1});
  ASSERT_TRUE(engine.ok()) << engine.status();
  Worker& worker = (*engine)->worker(0);
  PutSource source(3300);  // 4,096 slots start growing at 3,277 keys: 23 steps of 16 buckets.
  for (int turn = 0; turn < 10'000 && !source.Finished(); ++turn) worker.RunOnce(source);
  ASSERT_TRUE(source.Finished());
  ASSERT_TRUE(worker.shard().growing());
  PutSource nothing(0);
  int turns = 0;
  while (worker.shard().growing() && turns < 100) {
    EXPECT_GT(worker.RunOnce(nothing), 0u);  // Counts as work, so the loop does not park.
    ++turns;
  }
  EXPECT_FALSE(worker.shard().growing());
  EXPECT_LE(turns, 4);  // What is left of 4,096 old buckets, 1,024 a turn.
  EXPECT_EQ(worker.RunOnce(nothing), 0u);
  EXPECT_EQ(worker.shard().size(), source.keys().size());
  for (const std::string& key : source.keys()) {
    std::string value;
    ASSERT_TRUE(worker.shard().Peek({key, Router::Hash(key)}, SystemClockMs(), &value)) << key;
  }
}

TEST(RingEngine, RejectsBadOptions) {
  auto zero = RingEngine::Create({.workers = 0});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("1 .. 1024"), std::string::npos) << zero.status();
  auto burst = RingEngine::Create({.workers = 2, .burst = 1000});
  ASSERT_FALSE(burst.ok());
  EXPECT_NE(burst.status().message().find("1 .. 256"), std::string::npos) << burst.status();
}

}  // namespace
}  // namespace ringkv
