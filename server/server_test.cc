// Integration tests: a real ringkv-server process on a free loopback port, driven through the
// real client library (and, for Stream, the generated stub).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/testing/server_process.h"

namespace ringkv {
namespace {

namespace pb = ::ringkv::v1;
namespace health = ::grpc::health::v1;
using testing::ServerProcess;

std::unique_ptr<health::Health::Stub> HealthStub(const std::string& address) {
  return health::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

// Every server variant runs the same functional body.
class ServerTest : public ::testing::TestWithParam<std::vector<std::string>> {
 protected:
  void SetUp() override {
    std::vector<std::string> args = {"--threads=3"};
    for (const std::string& a : GetParam()) args.push_back(a);
    server_ = std::make_unique<ServerProcess>(args);
    ASSERT_TRUE(server_->Start()) << server_->log();
    client_ = std::make_unique<Client>(server_->address(), absl::Seconds(10));
  }
  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(SIGTERM, 10), 0) << server_->log();
    }
  }

  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Client> client_;
};

TEST_P(ServerTest, UnaryCalls) {
  EXPECT_EQ(client_->Get("absent").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(client_->Put("k1", "v1").ok());
  ASSERT_EQ(client_->Get("k1").value(), "v1");
  ASSERT_TRUE(client_->Put("k1", std::string(100'000, 'x')).ok());  // Overwrite, heap value.
  EXPECT_EQ(client_->Get("k1").value(), std::string(100'000, 'x'));
  const std::string binary("\0\xff\n\x01", 4);
  ASSERT_TRUE(client_->Put(binary, binary).ok());
  EXPECT_EQ(client_->Get(binary).value(), binary);
  EXPECT_TRUE(client_->Delete("k1").ok());
  EXPECT_EQ(client_->Delete("k1").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Get("k1").status().code(), absl::StatusCode::kNotFound);
}

TEST_P(ServerTest, HealthCheckNamesTheService) {
  auto stub = HealthStub(server_->address());
  for (const std::string service : {"", "ringkv.v1.KV"}) {
    grpc::ClientContext context;
    health::HealthCheckRequest request;
    request.set_service(service);
    health::HealthCheckResponse response;
    ASSERT_TRUE(stub->Check(&context, request, &response).ok()) << service;
    EXPECT_EQ(response.status(), health::HealthCheckResponse::SERVING) << service;
  }
  grpc::ClientContext context;
  health::HealthCheckRequest request;
  request.set_service("no.such.Service");
  health::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("no.such.Service"), std::string::npos);
}

TEST_P(ServerTest, BatchesSpreadOverEveryShard) {
  std::vector<std::pair<std::string, std::string>> items;
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) {
    items.emplace_back(absl::StrCat("key-", i), absl::StrCat("value-", i));
    keys.push_back(absl::StrCat("key-", i));
  }
  auto put = client_->MultiPut(items);
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(put->size(), items.size());
  for (const auto& item : *put) EXPECT_TRUE(item.status.ok()) << item.status;
  keys.push_back("never-written");
  auto got = client_->MultiGet(keys);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), keys.size());
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE((*got)[i].status.ok()) << keys[i];
    EXPECT_EQ((*got)[i].value, items[i].second);
  }
  EXPECT_EQ(got->back().status.code(), absl::StatusCode::kNotFound);

  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->shards_size(), 3);
  uint64_t keys_total = 0;
  for (const auto& shard : stats->shards()) {
    EXPECT_GT(shard.keys(), 50u) << "shard " << shard.shard() << " got too few of 300 keys";
    keys_total += shard.keys();
  }
  EXPECT_EQ(keys_total, 300u);
  EXPECT_GT(stats->uptime_seconds(), 0);
}

// A stream with many operations in flight; results come back tagged, every one exactly once.
TEST_P(ServerTest, StreamAnswersEveryTaggedOp) {
  constexpr int kOps = 3000;
  grpc::ClientContext context;
  auto stream = client_->stub().Stream(&context);
  std::thread writer([&] {
    for (int i = 0; i < kOps; i += 100) {
      pb::StreamRequest request;
      for (int j = i; j < i + 100; ++j) {
        pb::StreamOp* op = request.add_ops();
        op->set_id(static_cast<uint64_t>(j));
        op->set_type(pb::OP_TYPE_PUT);
        op->set_key(absl::StrCat("s-", j));
        op->set_value(absl::StrCat("v-", j));
      }
      ASSERT_TRUE(stream->Write(request));
    }
    pb::StreamRequest bad;        // One bad op among good ones: answered alone, the rest run.
    bad.add_ops()->set_id(kOps);  // Type unset.
    pb::StreamOp* get = bad.add_ops();
    get->set_id(kOps + 1);
    get->set_type(pb::OP_TYPE_GET);
    get->set_key("s-7");
    ASSERT_TRUE(stream->Write(bad));
    stream->WritesDone();
  });
  std::map<uint64_t, pb::ItemResult> results;
  pb::StreamResponse response;
  while (stream->Read(&response)) {
    for (const auto& r : response.results()) {
      EXPECT_TRUE(results.emplace(r.id(), r.result()).second) << "id " << r.id() << " twice";
    }
  }
  writer.join();
  ASSERT_TRUE(stream->Finish().ok());
  ASSERT_EQ(results.size(), static_cast<size_t>(kOps + 2));
  for (int i = 0; i < kOps; ++i) EXPECT_EQ(results[i].code(), 0) << results[i].message();
  EXPECT_EQ(results[kOps].code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Ops of one stream are not ordered across shards, so the GET of s-7 may run before or after
  // its PUT: it finds the value or NOT_FOUND, nothing else.
  const auto& get = results[kOps + 1];
  EXPECT_TRUE((get.code() == 0 && get.value() == "v-7") ||
              get.code() == grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(client_->Get("s-2999").value(), "v-2999");
}

TEST_P(ServerTest, ConcurrentClientsKeepLastAcknowledgedValue) {
  constexpr int kThreads = 4;
  constexpr int kKeysPerThread = 50;
  constexpr int kWrites = 400;
  std::vector<std::map<std::string, std::string>> last(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Client client(server_->address(), absl::Seconds(10));
      std::mt19937 rng(t);
      for (int i = 0; i < kWrites; ++i) {
        const std::string key = absl::StrCat("c", t, "-", rng() % kKeysPerThread);
        const std::string value = absl::StrCat("t", t, "-w", i);
        if (client.Put(key, value).ok()) {
          last[t][key] = value;
        } else {
          ++failures;
        }
        if (i % 7 == 0) {
          auto got = client.Get(key);
          if (!got.ok() || *got != value) ++failures;  // Read-your-write on one client.
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    std::vector<std::string> keys;
    for (const auto& [key, value] : last[t]) keys.push_back(key);
    auto got = client_->MultiGet(keys);
    ASSERT_TRUE(got.ok());
    size_t i = 0;
    for (const auto& [key, value] : last[t]) {
      EXPECT_EQ((*got)[i].value, value) << key;
      ++i;
    }
  }
}

// Versions grow with every write of a key and never come back; a write whose condition fails
// changes nothing and names the key's version.
TEST_P(ServerTest, ConditionalWritesFollowTheKeysVersion) {
  const auto failed = absl::StatusCode::kFailedPrecondition;
  absl::StatusOr<uint64_t> v1 = client_->Put("cas", "a", {.condition = WriteCondition::Absent()});
  ASSERT_TRUE(v1.ok()) << v1.status();
  absl::StatusOr<uint64_t> again =
      client_->Put("cas", "b", {.condition = WriteCondition::Absent()});
  EXPECT_EQ(again.status().code(), failed);
  EXPECT_NE(again.status().message().find(absl::StrCat("version is ", *v1)), std::string::npos)
      << again.status();
  EXPECT_EQ(client_->Put("nokey", "x", {.condition = WriteCondition::Present()}).status().code(),
            failed);
  EXPECT_EQ(client_->Get("nokey").status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<uint64_t> v2 =
      client_->Put("cas", "c", {.condition = WriteCondition::Version(*v1)});
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_GT(*v2, *v1);
  EXPECT_EQ(
      client_->Put("cas", "stale", {.condition = WriteCondition::Version(*v1)}).status().code(),
      failed);
  absl::StatusOr<Client::Entry> entry = client_->GetEntry("cas");
  ASSERT_TRUE(entry.ok()) << entry.status();
  EXPECT_EQ(entry->value, "c");
  EXPECT_EQ(entry->version, *v2);
  EXPECT_EQ(entry->ttl_ms, -1);

  EXPECT_EQ(client_->Delete("cas", WriteCondition::Version(*v1)).code(), failed);
  EXPECT_TRUE(client_->Delete("cas", WriteCondition::Version(*v2)).ok());
  // Created again, the key does not get an old version back (no ABA).
  absl::StatusOr<uint64_t> v3 = client_->Put("cas", "a", {.condition = WriteCondition::Version(0)});
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_GT(*v3, *v2);

  // In a batch each item's condition is its own.
  auto items = client_->MultiPut({{"cas", "batch"}, {"cas-new", "batch"}},
                                 {.condition = WriteCondition::Absent()});
  ASSERT_TRUE(items.ok()) << items.status();
  EXPECT_EQ((*items)[0].status.code(), failed);
  EXPECT_EQ((*items)[0].version, *v3);
  EXPECT_TRUE((*items)[1].status.ok()) << (*items)[1].status;
  EXPECT_EQ(client_->Get("cas").value(), "a");
}

// Concurrent read-modify-write loses nothing: compare-and-set retried on conflict, and
// Increment, from several clients on one key each.
TEST_P(ServerTest, ConcurrentCompareAndSetAndIncrementLoseNoUpdate) {
  constexpr int kThreads = 4;
  constexpr int kUpdates = 100;
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  std::atomic<int> conflicts{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      Client client(server_->address(), absl::Seconds(10));
      for (int i = 0; i < kUpdates; ++i) {
        if (!client.Increment("counter", 2).ok()) ++errors;
        for (;;) {  // counter-cas += 1, by compare-and-set.
          absl::StatusOr<Client::Entry> entry = client.GetEntry("counter-cas");
          int64_t n = 0;
          uint64_t version = 0;
          if (entry.ok()) {
            n = std::stoll(entry->value);
            version = entry->version;
          } else if (entry.status().code() != absl::StatusCode::kNotFound) {
            ++errors;
            break;
          }
          absl::StatusOr<uint64_t> put =
              client.Put("counter-cas", std::to_string(n + 1),
                         {.condition = WriteCondition::Version(version)});
          if (put.ok()) break;
          if (put.status().code() != absl::StatusCode::kFailedPrecondition) {
            ++errors;
            break;
          }
          ++conflicts;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(client_->Get("counter").value(), std::to_string(2 * kThreads * kUpdates));
  EXPECT_EQ(client_->Get("counter-cas").value(), std::to_string(kThreads * kUpdates));
  std::printf("compare-and-set conflicts retried: %d\n", conflicts.load());

  // What is not a counter stays as it was.
  ASSERT_TRUE(client_->Put("text", "12a").ok());
  EXPECT_EQ(client_->Increment("text", 1).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(client_->Put("big", "9223372036854775800").ok());
  EXPECT_EQ(client_->Increment("big", 8).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(client_->Get("big").value(), "9223372036854775800");
  EXPECT_EQ(client_->Increment("big", -9223372036854775807).value(), -7);
}

// TTLs: given by Put, Expire or a batch, removed by Persist or a plain Put; an expired key is
// gone for every call and its memory is reclaimed without anyone asking for it.
TEST_P(ServerTest, KeysExpireAfterTheirTtl) {
  ASSERT_TRUE(client_->Put("ttl-put", "v", {.ttl_ms = 300}).ok());
  absl::StatusOr<Client::Entry> entry = client_->GetEntry("ttl-put");
  ASSERT_TRUE(entry.ok()) << entry.status();
  EXPECT_GT(entry->ttl_ms, 0);
  EXPECT_LE(entry->ttl_ms, 300);
  ASSERT_TRUE(client_->Put("ttl-expire", "v").ok());
  ASSERT_TRUE(client_->Expire("ttl-expire", 300).ok());
  ASSERT_TRUE(client_->Put("ttl-persist", "v", {.ttl_ms = 300}).ok());
  ASSERT_TRUE(client_->Persist("ttl-persist").ok());
  ASSERT_TRUE(client_->Put("ttl-overwritten", "v", {.ttl_ms = 300}).ok());
  ASSERT_TRUE(client_->Put("ttl-overwritten", "w").ok());
  auto batch = client_->MultiPut({{"ttl-b1", "v"}, {"ttl-b2", "v"}}, {.ttl_ms = 300});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(client_->Expire("ttl-absent", 300).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->GetEntry("ttl-persist")->ttl_ms, -1);

  // Bad TTLs are refused with the limit named, and nothing is stored.
  for (int64_t bad : {int64_t{-1}, int64_t{100} * 366 * 24 * 3600 * 1000}) {
    absl::Status s = client_->Put("ttl-bad", "v", {.ttl_ms = bad}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("100 years"), std::string::npos) << s;
    EXPECT_EQ(client_->Expire("ttl-persist", bad).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(client_->Get("ttl-bad").status().code(), absl::StatusCode::kNotFound);

  absl::SleepFor(absl::Milliseconds(400));
  for (const char* key : {"ttl-put", "ttl-expire", "ttl-b1", "ttl-b2"}) {
    EXPECT_EQ(client_->Get(key).status().code(), absl::StatusCode::kNotFound) << key;
  }
  EXPECT_EQ(client_->Increment("ttl-put", 1).value(), 1);  // Expired: counts from 0.
  EXPECT_EQ(client_->GetEntry("ttl-put")->ttl_ms, -1);
  EXPECT_EQ(client_->Get("ttl-persist").value(), "v");
  EXPECT_EQ(client_->Get("ttl-overwritten").value(), "w");

  // The three keys nobody wrote again are reclaimed in the background (ttl-put was, by its
  // Increment).
  uint64_t expired = 0;
  uint64_t ttl_keys = 0;
  for (int i = 0; i < 100; ++i) {
    auto stats = client_->Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    expired = ttl_keys = 0;
    for (const auto& shard : stats->shards()) {
      expired += shard.expired();
      ttl_keys += shard.ttl_keys();
    }
    if (ttl_keys == 0) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(ttl_keys, 0u);
  EXPECT_EQ(expired, 4u);
}

// The new operations on a Stream, tagged like the others.
TEST_P(ServerTest, StreamRunsCountersTtlsAndConditions) {
  grpc::ClientContext context;
  auto stream = client_->stub().Stream(&context);
  pb::StreamRequest request;
  auto add = [&](pb::OpType type, const std::string& key) {
    pb::StreamOp* op = request.add_ops();
    op->set_id(static_cast<uint64_t>(request.ops_size() - 1));
    op->set_type(type);
    op->set_key(key);
    return op;
  };
  add(pb::OP_TYPE_INCREMENT, "st-a")->set_delta(5);                     // 0: 5
  add(pb::OP_TYPE_INCREMENT, "st-b")->set_delta(-3);                    // 1: -3
  add(pb::OP_TYPE_PUT, "st-c")->mutable_condition()->set_absent(true);  // 2: written
  add(pb::OP_TYPE_EXPIRE, "st-missing")->set_ttl_ms(1000);              // 3: NOT_FOUND
  add(pb::OP_TYPE_PERSIST, "st-missing");                               // 4: NOT_FOUND
  add(pb::OP_TYPE_EXPIRE, "st-b")->set_ttl_ms(0);                       // 5: INVALID_ARGUMENT
  pb::StreamOp* put = add(pb::OP_TYPE_PUT, "st-d");                     // 6: with a TTL
  put->set_value("v");
  put->set_ttl_ms(60'000);
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  std::map<uint64_t, pb::ItemResult> results;
  pb::StreamResponse response;
  while (stream->Read(&response)) {
    for (const auto& r : response.results()) results[r.id()] = r.result();
  }
  ASSERT_TRUE(stream->Finish().ok());
  ASSERT_EQ(results.size(), 7u);
  EXPECT_EQ(results[0].number(), 5);
  EXPECT_EQ(results[1].number(), -3);
  EXPECT_EQ(results[2].code(), 0) << results[2].message();
  EXPECT_GT(results[2].version(), 0u);
  EXPECT_EQ(results[3].code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(results[4].code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(results[5].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(results[6].code(), 0) << results[6].message();
  absl::StatusOr<Client::Entry> d = client_->GetEntry("st-d");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_GT(d->ttl_ms, 50'000);
  EXPECT_EQ(d->version, results[6].version());
}

// A scan pages through every shard while another client writes and deletes keys fast enough
// to grow every table several times: each key there for the whole scan comes back exactly
// once, and no page passes its limit.
TEST_P(ServerTest, ScanUnderConcurrentWritesReturnsEveryLastingKeyOnce) {
  constexpr int kLasting = 3000;
  std::vector<std::pair<std::string, std::string>> items;
  for (int i = 0; i < kLasting; ++i) items.emplace_back(absl::StrCat("keep-", i), "v");
  ASSERT_TRUE(client_->MultiPut(items).ok());
  std::atomic<bool> done{false};
  std::atomic<int> written{0};
  std::thread writer([&] {
    Client client(server_->address(), absl::Seconds(10));
    std::vector<std::pair<std::string, std::string>> batch;
    for (int n = 0; !done.load() && n < 200'000; n += 100) {
      batch.clear();
      for (int i = n; i < n + 100; ++i) batch.emplace_back(absl::StrCat("churn-", i), "v");
      if (!client.MultiPut(batch).ok()) break;
      if (n >= 100) (void)client.Delete(absl::StrCat("churn-", n - 100));
      written = n + 100;
    }
  });
  std::map<std::string, int> seen;
  uint64_t cursor = 0;
  int pages = 0;
  do {
    auto page = client_->Scan(cursor, "", 50);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->keys.size(), 50u);
    for (const std::string& key : page->keys) ++seen[key];
    cursor = page->cursor;
    ++pages;
    // Let the writer get ahead, so that tables grow between pages.
    if (pages % 10 == 0) absl::SleepFor(absl::Milliseconds(2));
  } while (cursor != 0);
  done = true;
  writer.join();
  EXPECT_GT(written.load(), 3000) << "the writer hardly ran during the scan";
  for (int i = 0; i < kLasting; ++i) EXPECT_EQ(seen[absl::StrCat("keep-", i)], 1) << i;
  for (const auto& [key, times] : seen) EXPECT_EQ(times, 1) << key;

  // A prefix scan: a page also ends at its budget of buckets, so with tables grown by the churn
  // it may take more than one page even with room for every match.
  std::vector<std::string> users;
  cursor = 0;
  do {
    auto page = client_->Scan(cursor, "keep-12", 10000);
    ASSERT_TRUE(page.ok()) << page.status();
    users.insert(users.end(), page->keys.begin(), page->keys.end());
    cursor = page->cursor;
  } while (cursor != 0);
  EXPECT_EQ(users.size(), 111u);  // keep-12, keep-120 .. keep-129, keep-1200 .. keep-1299.
  EXPECT_EQ(client_->Scan(0, "", 10001).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(ServerTest, BadInputIsRefusedAndNothingIsStored) {
  absl::Status empty = client_->Put("", "v").status();
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.message().find("empty"), std::string::npos) << empty.message();

  const std::string long_key(4097, 'k');
  absl::Status key = client_->Put(long_key, "v").status();
  EXPECT_EQ(key.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(key.message().find("--max-key-bytes=4096"), std::string::npos) << key.message();
  EXPECT_EQ(client_->Get(long_key).status().code(), absl::StatusCode::kInvalidArgument);

  absl::Status value = client_->Put("big", std::string((4 << 20) + 1, 'v')).status();
  EXPECT_EQ(value.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(value.message().find("--max-value-bytes=4194304"), std::string::npos)
      << value.message();
  EXPECT_EQ(client_->Get("big").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(client_->Put("max", std::string(4 << 20, 'm')).ok());  // At the limit: fine.
  EXPECT_EQ(client_->Get("max")->size(), size_t{4} << 20);

  auto mixed = client_->MultiPut(
      {{"good-1", "a"}, {"", "b"}, {"good-2", "c"}, {"too-big", std::string((4 << 20) + 1, 'x')}});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  ASSERT_EQ(mixed->size(), 4u);
  EXPECT_TRUE((*mixed)[0].status.ok());
  EXPECT_EQ((*mixed)[1].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*mixed)[2].status.ok());
  EXPECT_EQ((*mixed)[3].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Get("good-1").value(), "a");
  EXPECT_EQ(client_->Get("good-2").value(), "c");
  EXPECT_EQ(client_->Get("too-big").status().code(), absl::StatusCode::kNotFound);

  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  uint64_t keys = 0;
  for (const auto& s : stats->shards()) keys += s.keys();
  EXPECT_EQ(keys, 3u);  // max, good-1, good-2.
}

// Values at the 4 MiB limit, both ways and through every RPC shape: they cross HTTP/2 flow
// control in many frames, and must come back byte for byte.
TEST_P(ServerTest, LargeValuesBothWays) {
  std::mt19937_64 rng(42);
  auto random_value = [&](size_t size) {
    std::string value(size, '\0');
    for (char& c : value) c = static_cast<char>(rng());
    return value;
  };
  const std::string a = random_value(size_t{4} << 20);
  const std::string b = random_value((size_t{4} << 20) - 1);
  ASSERT_TRUE(client_->Put("large-a", a).ok());
  ASSERT_TRUE(client_->Put("large-b", b).ok());
  EXPECT_TRUE(client_->Get("large-a").value() == a);
  auto both = client_->MultiGet({"large-a", "large-b"});  // An 8 MiB reply.
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_TRUE((*both)[0].value == a);
  EXPECT_TRUE((*both)[1].value == b);

  grpc::ClientContext context;
  auto stream = client_->stub().Stream(&context);
  pb::StreamRequest put;
  pb::StreamOp* op = put.add_ops();
  op->set_id(1);
  op->set_type(pb::OP_TYPE_PUT);
  op->set_key("large-c");
  op->set_value(b);
  ASSERT_TRUE(stream->Write(put));
  pb::StreamResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_EQ(response.results(0).result().code(), 0);
  pb::StreamRequest get;
  op = get.add_ops();
  op->set_id(2);
  op->set_type(pb::OP_TYPE_GET);
  op->set_key("large-c");
  ASSERT_TRUE(stream->Write(get));
  stream->WritesDone();
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_TRUE(response.results(0).result().value() == b);
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_P(ServerTest, ClientCancellingMidStreamLeavesServerServing) {
  for (int round = 0; round < 5; ++round) {
    grpc::ClientContext context;
    auto stream = client_->stub().Stream(&context);
    pb::StreamRequest request;
    for (int j = 0; j < 500; ++j) {
      pb::StreamOp* op = request.add_ops();
      op->set_id(static_cast<uint64_t>(j));
      op->set_type(pb::OP_TYPE_PUT);
      op->set_key(absl::StrCat("cancel-", j));
      op->set_value("v");
    }
    stream->Write(request);
    stream->Write(request);
    context.TryCancel();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  ASSERT_TRUE(client_->Put("after-cancel", "ok").ok());
  EXPECT_EQ(client_->Get("after-cancel").value(), "ok");
}

TEST_P(ServerTest, ExpiredDeadlineLeavesServerServing) {
  // A stream that says nothing until its deadline: the server sees the call end.
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  auto stream = client_->stub().Stream(&context);
  pb::StreamResponse response;
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);

  // A unary call whose deadline passed before it was sent fails without being run.
  Client late(server_->address(), absl::Seconds(-1));
  EXPECT_EQ(late.Put("late", "v").status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(client_->Get("late").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(client_->Put("after-deadline", "ok").ok());
  EXPECT_EQ(client_->Get("after-deadline").value(), "ok");
}

// A test name from server flags: "--transport=h2 --ring=spsc" -> "h2_ring_spsc".
std::string FlagsName(const std::vector<std::string>& flags) {
  std::string name;
  for (const std::string& flag : flags) {
    std::string part = flag.substr(2);
    if (part.rfind("transport=", 0) == 0) part = part.substr(10);
    if (!name.empty()) name += "_";
    name += part;
  }
  for (char& c : name) {
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

// Whether the server runs under a sanitizer (meson says which): then jemalloc is not its
// allocator, and the sanitizer's own bookkeeping makes resident memory meaningless.
bool UnderSanitizer() {
  const char* sanitizer = std::getenv("RINGKV_SANITIZER");
  return sanitizer != nullptr && *sanitizer != '\0' && std::string(sanitizer) != "none";
}

struct MemorySnapshot {
  uint64_t allocated = 0;    // jemalloc's stats.allocated.
  uint64_t data = 0;         // The shards' memory_bytes.
  uint64_t huge_tables = 0;  // Tables of 2 MiB and more: huge-page mappings, not jemalloc's.
  uint64_t evicted = 0;
};

MemorySnapshot TakeMemorySnapshot(Client& client) {
  MemorySnapshot m;
  auto stats = client.Stats();
  EXPECT_TRUE(stats.ok()) << stats.status();
  if (!stats.ok()) return m;
  m.allocated = stats->memory_allocated_bytes();
  for (const auto& shard : stats->shards()) {
    m.data += shard.memory_bytes();
    if (shard.table_bytes() >= (uint64_t{2} << 20)) m.huge_tables += shard.table_bytes();
    m.evicted += shard.evicted();
  }
  return m;
}

// What the shards count as their memory is what the allocator handed out for them: small keys
// in the table, big values on the heap, and keys with a TTL, checked against jemalloc. Under
// ASan, where jemalloc is not the allocator, the same load checks the leak check at exit instead:
// it must find every heap block, through tables big enough for huge-page mappings.
TEST(ServerMemory, AccountingMatchesJemalloc) {
  ServerProcess server({"--threads=2"});
  ASSERT_TRUE(server.Start()) << server.log();
  Client client(server.address(), absl::Seconds(30));
  const MemorySnapshot before = UnderSanitizer() ? MemorySnapshot{} : TakeMemorySnapshot(client);
  auto load = [&](const std::string& prefix, int n, size_t value_bytes, int64_t ttl_ms) {
    std::vector<std::pair<std::string, std::string>> batch;
    for (int i = 0; i < n; i += 1000) {
      batch.clear();
      for (int j = i; j < i + 1000; ++j) {
        batch.emplace_back(absl::StrCat(prefix, j), std::string(value_bytes, 'v'));
      }
      auto put = client.MultiPut(batch, {.ttl_ms = ttl_ms});
      ASSERT_TRUE(put.ok()) << put.status();
    }
  };
  load("small-", 100'000, 8, 0);                                  // Inline in the table.
  load("heap-", 40'000, 300, 0);                                  // On the heap.
  load("a-key-long-enough-for-the-heap-", 20'000, 8, 3'600'000);  // In the TTL index.
  if (UnderSanitizer()) {
    EXPECT_EQ(server.Stop(SIGTERM, 30), 0) << server.log();
    return;
  }
  const MemorySnapshot after = TakeMemorySnapshot(client);
  const double counted =
      static_cast<double>((after.data - after.huge_tables) - (before.data - before.huge_tables));
  const double allocated = static_cast<double>(after.allocated - before.allocated);
  std::printf(
      "jemalloc allocated %.1f MiB for the data, shards count %.1f MiB (+ %.1f MiB of "
      "huge-page tables)\n",
      allocated / 1048576, counted / 1048576, after.huge_tables / 1048576.0);
  EXPECT_NEAR(allocated, counted, 0.1 * counted);
  EXPECT_EQ(server.Stop(SIGTERM, 10), 0) << server.log();
}

// `ringkv stats` gives the process's resident memory as /proc counts it, and beside it the
// data as the shards count it (metrics_test checks /metrics gives the same two). Its header once
// gave jemalloc's heap alone, which misses every table of 2 MiB and more.
TEST(ServerMemory, StatsGiveTheProcessResidentMemoryAndTheDataBesideIt) {
  ServerProcess server({"--threads=2"});
  ASSERT_TRUE(server.Start()) << server.log();
  Client client(server.address(), absl::Seconds(30));
  std::vector<std::pair<std::string, std::string>> batch;
  for (int i = 0; i < 200'000; i += 1000) {  // 16-byte keys, 32-byte values: the shape.
    batch.clear();
    for (int j = i; j < i + 1000; ++j) {
      batch.emplace_back(absl::StrFormat("key:%012d", j), std::string(32, 'v'));
    }
    ASSERT_TRUE(client.MultiPut(batch).ok());
  }
  auto stats = client.Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  const uint64_t rss = server.RssBytes();
  uint64_t data = 0;
  uint64_t tables = 0;
  for (const auto& shard : stats->shards()) {
    data += shard.memory_bytes();
    tables += shard.table_bytes();
  }
  EXPECT_EQ(stats->data_memory_bytes(), data);
  EXPECT_GT(data, uint64_t{200'000} * 48);
  EXPECT_NEAR(static_cast<double>(stats->process_resident_bytes()), static_cast<double>(rss),
              0.05 * static_cast<double>(rss));
  EXPECT_GT(stats->process_resident_bytes(), data);
  if (!UnderSanitizer()) {  // jemalloc's heap leaves out the tables (mappings of their own).
    EXPECT_LT(stats->memory_resident_bytes() + tables / 2, stats->process_resident_bytes());
  }
  EXPECT_EQ(server.Stop(SIGTERM, 10), 0) << server.log();
}

// A client writes twice --max-memory in 4 KiB values. noeviction refuses the writes past the
// limit, naming it, and loses nothing; allkeys-lru takes every write by evicting old keys.
// Either way the shards stay under the limit, and the process's resident memory within the
// margin BENCHMARKS.md states: the limit plus 10%, over what it held before.
class ServerMemoryLimit : public ::testing::TestWithParam<std::string> {};

TEST_P(ServerMemoryLimit, TwiceTheLimitInLargeValues) {
  constexpr uint64_t kLimit = uint64_t{64} << 20;
  constexpr int kKeys = 2 * kLimit / 4096;
  constexpr int kBatch = 64;
  const bool evicts = GetParam() != "noeviction";
  ServerProcess server({"--threads=2", "--max-memory=64MiB", "--eviction=" + GetParam()});
  ASSERT_TRUE(server.Start()) << server.log();
  Client client(server.address(), absl::Seconds(30));
  const uint64_t base_rss = server.RssBytes();
  std::vector<std::string> stored;
  int refused = 0;
  std::vector<std::pair<std::string, std::string>> batch;
  for (int i = 0; i < kKeys; i += kBatch) {
    batch.clear();
    for (int j = i; j < i + kBatch; ++j) {
      batch.emplace_back(absl::StrCat("big-", j),
                         std::string(4096, static_cast<char>('a' + j % 26)));
    }
    auto put = client.MultiPut(batch);
    ASSERT_TRUE(put.ok()) << put.status();
    for (int j = 0; j < kBatch; ++j) {
      const absl::Status& s = (*put)[j].status;
      if (s.ok()) {
        stored.push_back(batch[j].first);
      } else {
        ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
        ASSERT_NE(s.message().find("--max-memory"), std::string::npos) << s;
        ++refused;
      }
    }
  }
  const MemorySnapshot m = TakeMemorySnapshot(client);
  const uint64_t peak_rss = server.PeakRssBytes();
  EXPECT_LE(m.data, kLimit);
  std::printf(
      "%s: %zu writes taken, %d refused, %lu evicted; data %.1f MiB; resident %.1f MiB "
      "before, %.1f MiB at the peak\n",
      GetParam().c_str(), stored.size(), refused, m.evicted, m.data / 1048576.0,
      base_rss / 1048576.0, peak_rss / 1048576.0);
  if (evicts) {
    EXPECT_EQ(refused, 0);
    EXPECT_GT(m.evicted, static_cast<uint64_t>(kKeys / 3));
    // The newest keys are there.
    auto last = client.MultiGet({stored.end() - kBatch, stored.end()});
    ASSERT_TRUE(last.ok()) << last.status();
    for (const auto& item : *last) EXPECT_TRUE(item.status.ok()) << item.status;
  } else {
    EXPECT_GT(refused, kKeys / 3);
    EXPECT_EQ(m.evicted, 0u);
    // Every write that was taken is there to read; a delete makes room for another.
    for (size_t i = 0; i < stored.size(); i += kBatch) {
      std::vector<std::string> keys(stored.begin() + i,
                                    stored.begin() + std::min(stored.size(), i + kBatch));
      auto got = client.MultiGet(keys);
      ASSERT_TRUE(got.ok()) << got.status();
      for (const auto& item : *got) ASSERT_TRUE(item.status.ok()) << item.status;
    }
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(client.Delete(stored[i]).ok());
    EXPECT_TRUE(client.Put("after-delete", std::string(4096, 'z')).ok());
  }
  if (!UnderSanitizer()) {
    EXPECT_LE(peak_rss, base_rss + kLimit + kLimit / 10);
  }
  EXPECT_EQ(server.Stop(SIGTERM, 10), 0) << server.log();
}

INSTANTIATE_TEST_SUITE_P(Policies, ServerMemoryLimit,
                         ::testing::Values("noeviction", "allkeys-lru"), [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Every engine and loop variant on the nghttp2 transport; the grpc++ transport runs the same
// bodies with the default engine and the lock baseline.
INSTANTIATE_TEST_SUITE_P(
    Variants, ServerTest,
    ::testing::Values(std::vector<std::string>{"--transport=h2", "--ring=spsc"},
                      std::vector<std::string>{"--transport=h2", "--ring=mpsc"},
                      std::vector<std::string>{"--transport=h2", "--engine=lock"},
                      std::vector<std::string>{"--transport=h2", "--poll-mode"},
                      std::vector<std::string>{"--transport=h2", "--spin-us=200"},
                      std::vector<std::string>{"--transport=grpc", "--ring=spsc"},
                      std::vector<std::string>{"--transport=grpc", "--engine=lock"}),
    [](const auto& info) { return FlagsName(info.param); });

// The daemon's life, on each transport.
class ServerLifecycle : public ::testing::TestWithParam<std::string> {
 protected:
  // Server flags with this test's transport.
  std::vector<std::string> Flags(std::vector<std::string> flags) const {
    flags.push_back("--transport=" + GetParam());
    return flags;
  }
};

TEST_P(ServerLifecycle, SigtermFinishesCallsInFlightAndExitsZero) {
  ServerProcess server(Flags({"--threads=2"}));
  ASSERT_TRUE(server.Start()) << server.log();
  Client client(server.address(), absl::Seconds(10));

  // A stream with answers still to read when the signal comes: it must be answered in full.
  grpc::ClientContext context;
  auto stream = client.stub().Stream(&context);
  pb::StreamRequest request;
  for (int j = 0; j < 1000; ++j) {
    pb::StreamOp* op = request.add_ops();
    op->set_id(static_cast<uint64_t>(j));
    op->set_type(pb::OP_TYPE_PUT);
    op->set_key(absl::StrCat("term-", j));
    op->set_value("v");
  }
  ASSERT_TRUE(stream->Write(request));

  // Unary writers that keep going through the signal: every call either succeeds or is
  // refused as UNAVAILABLE (the server stopped accepting); none is cut off half-way. On grpc++
  // a call that reaches the server as the drain ends (after the last call in flight, before
  // grpc++'s Shutdown) is matched to no handler in time and gRPC cancels it: CANCELLED, never
  // run (seen about once in 15 runs under TSan; README, --transport).
  const bool cancel_is_refusal = GetParam() == "grpc";
  std::atomic<bool> stop{false};
  std::atomic<int> ok_calls{0};
  std::atomic<int> odd_errors{0};
  std::mutex odd_mu;
  std::string odd_status;  // The first odd error, for the failure message.
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t) {
    writers.emplace_back([&, t] {
      Client c(server.address(), absl::Seconds(10));
      for (int i = 0; !stop.load(); ++i) {
        absl::Status s = c.Put(absl::StrCat("w", t, "-", i), "v").status();
        if (s.ok()) {
          ++ok_calls;
        } else if (s.code() != absl::StatusCode::kUnavailable &&
                   !(cancel_is_refusal && s.code() == absl::StatusCode::kCancelled)) {
          ++odd_errors;
          std::lock_guard<std::mutex> lock(odd_mu);
          if (odd_status.empty()) odd_status = s.ToString();
        } else {
          return;
        }
      }
    });
  }
  // A health Watch: SERVING now, NOT_SERVING once the drain starts.
  auto health_stub = HealthStub(server.address());
  grpc::ClientContext watch_context;
  auto watch = health_stub->Watch(&watch_context, health::HealthCheckRequest());
  health::HealthCheckResponse watched;
  ASSERT_TRUE(watch->Read(&watched));
  EXPECT_EQ(watched.status(), health::HealthCheckResponse::SERVING);

  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  kill(server.pid(), SIGTERM);
  ASSERT_TRUE(watch->Read(&watched));
  EXPECT_EQ(watched.status(), health::HealthCheckResponse::NOT_SERVING);
  {  // Health checks are still answered while the stream drains.
    grpc::ClientContext context;
    health::HealthCheckResponse response;
    const grpc::Status status =
        health_stub->Check(&context, health::HealthCheckRequest(), &response);
    ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
    EXPECT_EQ(response.status(), health::HealthCheckResponse::NOT_SERVING);
  }
  stream->WritesDone();
  int answered = 0;
  pb::StreamResponse response;
  while (stream->Read(&response)) answered += response.results_size();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(answered, 1000);
  const int status = server.Wait(5.0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop = true;
  for (auto& w : writers) w.join();
  EXPECT_EQ(status, 0) << server.log();
  EXPECT_LT(seconds, 5.0);
  EXPECT_GT(ok_calls.load(), 0);
  EXPECT_EQ(odd_errors.load(), 0) << odd_status;
  EXPECT_NE(server.log().find("stopped"), std::string::npos) << server.log();
  watch_context.TryCancel();
  watch->Finish();
}

TEST_P(ServerLifecycle, IdleDaemonUsesUnderOnePercentOfACore) {
  ServerProcess server(Flags({"--threads=2"}));
  ASSERT_TRUE(server.Start()) << server.log();
  {
    Client client(server.address(), absl::Seconds(10));
    ASSERT_TRUE(client.Put("warm", "up").ok());  // Some traffic first, then quiet.
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double before = server.CpuSeconds();
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const double used = server.CpuSeconds() - before;
  EXPECT_LT(used, 0.05) << "CPU seconds in 5 idle seconds";
  EXPECT_EQ(server.Stop(SIGTERM, 10), 0);
}

TEST_P(ServerLifecycle, PortInUseAndBadFlagsExitTwoWithOneLine) {
  ServerProcess first(Flags({"--threads=1"}));
  ASSERT_TRUE(first.Start()) << first.log();
  ServerProcess second(Flags({"--threads=1", "--listen=" + first.address()}));
  EXPECT_FALSE(second.Start());
  EXPECT_EQ(second.Wait(10), 2);
  EXPECT_NE(second.log().find("cannot listen on " + first.address()), std::string::npos)
      << second.log();

  ServerProcess bad_flag({"--no-such-flag=1"});
  EXPECT_FALSE(bad_flag.Start());
  EXPECT_EQ(bad_flag.Wait(10), 2);
  EXPECT_NE(bad_flag.log().find("unknown flag --no_such_flag"), std::string::npos)
      << bad_flag.log();

  ServerProcess bad_value(Flags({"--threads=lots"}));
  EXPECT_FALSE(bad_value.Start());
  EXPECT_EQ(bad_value.Wait(10), 2);

  ServerProcess bad_transport({"--transport=http3"});
  EXPECT_FALSE(bad_transport.Start());
  EXPECT_EQ(bad_transport.Wait(10), 2);
  EXPECT_NE(bad_transport.log().find("--transport must be h2 or grpc"), std::string::npos)
      << bad_transport.log();
  const std::pair<std::vector<std::string>, std::string> bad_memory[] = {
      {{"--max-memory=lots"}, "--max-memory must be bytes or a size with a unit"},
      {{"--max-memory=1000", "--threads=2"}, "at least 1MiB per worker (--threads=2)"},
      {{"--eviction=lfu"}, "--eviction must be noeviction, allkeys-lru"},
      {{"--idle-timeout=500ms"}, "--idle-timeout must be 0 (never) or a duration of at least 1s"},
      {{"--idle-timeout=-1s"}, "--idle-timeout must be 0 (never)"},
      {{"--send-timeout=500ms"}, "--send-timeout must be 0 (never) or a duration of at least 1s"}};
  for (const auto& [flags, message] : bad_memory) {
    ServerProcess bad(Flags(flags));
    EXPECT_FALSE(bad.Start());
    EXPECT_EQ(bad.Wait(10), 2);
    EXPECT_NE(bad.log().find(message), std::string::npos) << bad.log();
  }
  if (GetParam() == "grpc") {  // grpc++ cannot bound its connections: said, not ignored.
    ServerProcess unbounded(Flags({"--max-connections=5"}));
    EXPECT_FALSE(unbounded.Start());
    EXPECT_EQ(unbounded.Wait(10), 2);
    EXPECT_NE(unbounded.log().find("--max-connections is enforced by --transport=h2 only"),
              std::string::npos)
        << unbounded.log();
    ServerProcess unsent(Flags({"--send-timeout=30s"}));
    EXPECT_FALSE(unsent.Start());
    EXPECT_EQ(unsent.Wait(10), 2);
    EXPECT_NE(unsent.log().find("--send-timeout is enforced by --transport=h2 only"),
              std::string::npos)
        << unsent.log();
  }
  EXPECT_EQ(first.Stop(SIGINT, 10), 0);
}

INSTANTIATE_TEST_SUITE_P(Transports, ServerLifecycle, ::testing::Values("h2", "grpc"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ringkv
