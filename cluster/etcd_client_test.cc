// EtcdClient against a real etcd (Debian's etcd-server), started by the test on loopback with a
// data directory of its own: leases, and elections whose terms only grow, with one winner
// however many candidates race.
#include "cluster/etcd_client.h"

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/testing/temp_dir.h"
#include "gtest/gtest.h"

extern char** environ;

namespace ringkv::etcd {
namespace {

// A port nothing listens on now (the kernel's pick for a socket bound to port 0).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  close(fd);
  return ntohs(address.sin_port);
}

// One etcd member on loopback, killed (SIGKILL) at the end.
class EtcdProcess {
 public:
  explicit EtcdProcess(const std::string& dir) {
    const int client = FreePort();
    const int peer = FreePort();
    endpoint_ = absl::StrCat("127.0.0.1:", client);
    const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer);
    const std::string client_url = absl::StrCat("http://", endpoint_);
    std::vector<std::string> args = {"etcd",
                                     "--name=ringkv-test",
                                     "--data-dir=" + dir,
                                     "--listen-client-urls=" + client_url,
                                     "--advertise-client-urls=" + client_url,
                                     "--listen-peer-urls=" + peer_url,
                                     "--initial-advertise-peer-urls=" + peer_url,
                                     "--initial-cluster=ringkv-test=" + peer_url,
                                     "--logger=zap",
                                     "--log-outputs=" + dir + ".log"};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    started_ = posix_spawnp(&pid_, "etcd", nullptr, nullptr, argv.data(), environ) == 0;
  }
  ~EtcdProcess() {
    if (!started_) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  bool started() const { return started_; }
  // Whether it exited (and so will never answer).
  bool exited() {
    int status;
    if (!started_ || waitpid(pid_, &status, WNOHANG) != pid_) return false;
    started_ = false;
    return true;
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  pid_t pid_ = 0;
  bool started_ = false;
  std::string endpoint_;
};

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    etcd_ = std::make_unique<EtcdProcess>(temp_.Path("etcd"));
    ASSERT_TRUE(etcd_->started()) << "cannot start etcd (Debian's etcd-server: scripts/setup.sh)";
    // Until it answers (it elects itself first).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (true) {
      absl::StatusOr<std::unique_ptr<EtcdClient>> client =
          EtcdClient::Connect({.endpoints = {etcd_->endpoint()}});
      if (client.ok()) break;
      ASSERT_FALSE(etcd_->exited()) << "etcd exited: see " << temp_.Path("etcd.log");
      ASSERT_LT(std::chrono::steady_clock::now(), until) << client.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  std::unique_ptr<EtcdClient> NewClient() {
    // A dead endpoint first: the client goes on to the live one.
    auto client = EtcdClient::Connect(
        {.endpoints = {absl::StrCat("127.0.0.1:", FreePort()), etcd_->endpoint()}});
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  ringkv::TempDir temp_{"ringkv-etcd-test"};
  std::unique_ptr<EtcdProcess> etcd_;
};

TEST_F(EtcdClientTest, AnUnreachableEtcdIsNamed) {
  const std::string dead = absl::StrCat("127.0.0.1:", FreePort());
  auto client = EtcdClient::Connect({.endpoints = {dead}, .timeout = absl::Milliseconds(300)});
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(client.status().message().find(dead), std::string::npos) << client.status();
}

TEST_F(EtcdClientTest, KeysAndLeases) {
  std::unique_ptr<EtcdClient> client = NewClient();
  ASSERT_NE(client, nullptr);
  EXPECT_FALSE(client->Get("k").value().has_value());
  const int64_t lease = client->Grant(5).value();
  ASSERT_TRUE(client->Put("k", "v", lease).ok());
  const auto got = client->Get("k").value();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->value, "v");
  EXPECT_EQ(got->lease, lease);
  EXPECT_GT(client->KeepAlive(lease).value(), 0);
  ASSERT_TRUE(client->Revoke(lease).ok());
  EXPECT_FALSE(client->Get("k").value().has_value());  // Gone with its lease.
  EXPECT_EQ(client->KeepAlive(lease).value(), 0);
}

// A watch (made through a dead endpoint first) calls back once established, then at each put
// and delete of its key, and not for other keys.
TEST_F(EtcdClientTest, AWatchSeesItsKeyChange) {
  std::unique_ptr<EtcdClient> client = NewClient();
  ASSERT_NE(client, nullptr);
  std::atomic<int> calls{0};
  auto watch = client->WatchKey("w", [&calls] { calls.fetch_add(1); });
  const auto wait_for = [&calls](int n) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (calls.load() < n && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return calls.load();
  };
  ASSERT_EQ(wait_for(1), 1);  // Established.
  ASSERT_TRUE(client->Put("other", "x").ok());
  ASSERT_TRUE(client->Put("w", "1").ok());
  EXPECT_EQ(wait_for(2), 2);
  const int64_t lease = client->Grant(5).value();
  ASSERT_TRUE(client->Put("w", "2", lease).ok());
  EXPECT_EQ(wait_for(3), 3);
  ASSERT_TRUE(client->Revoke(lease).ok());  // The key goes with its lease: a delete.
  EXPECT_EQ(wait_for(4), 4);
  watch.reset();  // Ends the stream and joins its thread.
  ASSERT_TRUE(client->Put("w", "3").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(calls.load(), 4);
}

TEST_F(EtcdClientTest, OneWinnerATermThatGrowsAndALeaderKeyThatGoesWithItsLease) {
  std::unique_ptr<EtcdClient> a = NewClient();
  std::unique_ptr<EtcdClient> b = NewClient();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const int64_t a_lease = a->Grant(2).value();
  const int64_t b_lease = b->Grant(2).value();
  EXPECT_EQ(a->Campaign("/g", "a:1", a_lease).value(), 1u);
  EtcdClient::Leader holder;
  EXPECT_EQ(b->Campaign("/g", "b:2", b_lease, &holder).value(), std::nullopt);
  EXPECT_EQ(holder.term, 1u);
  EXPECT_EQ(holder.value, "a:1");
  EXPECT_EQ(holder.lease, a_lease);
  // The holder asking again does not win twice either.
  EXPECT_EQ(a->Campaign("/g", "a:1", a_lease).value(), std::nullopt);
  // Revoked: the key goes at once, and the next winner has the next term.
  ASSERT_TRUE(a->Revoke(a_lease).ok());
  EXPECT_EQ(b->Campaign("/g", "b:2", b_lease).value(), 2u);
  EXPECT_EQ(a->CurrentLeader("/g").value()->value, "b:2");
  // Not kept alive: the key goes when the lease expires (etcd grants at least its minimum).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (a->CurrentLeader("/g").value().has_value()) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the leader key outlived its lease";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const int64_t again = a->Grant(2).value();
  EXPECT_EQ(a->Campaign("/g", "a:1", again).value(), 3u);
  // Another group's terms are its own.
  // A campaign under an expired lease is refused by etcd, and elects nobody.
  EXPECT_EQ(b->Campaign("/other", "b:2", b_lease).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(b->CurrentLeader("/other").value().has_value());
  const int64_t fresh = b->Grant(2).value();
  EXPECT_EQ(b->Campaign("/other", "b:2", fresh).value(), 1u);
}

TEST_F(EtcdClientTest, OnlyTheLeaderWritesAsLeaderAndAGuardedCampaignFailsOnAChange) {
  std::unique_ptr<EtcdClient> a = NewClient();
  ASSERT_NE(a, nullptr);
  const int64_t lease = a->Grant(2).value();
  // Nobody leads: nothing is written as a leader.
  EXPECT_EQ(a->PutAsLeader("/s", "1 a:1", "/s/set", "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(a->Get("/s/set").value().has_value());
  // The guard: a campaign fails if the guarded key changed since it was read (here: it was
  // read absent, then written).
  ASSERT_TRUE(a->Put("/s/set", "y").ok());
  const std::pair<std::string, int64_t> stale("/s/set", 0);
  EXPECT_EQ(a->Campaign("/s", "a:1", lease, nullptr, &stale).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(a->CurrentLeader("/s").value().has_value());
  const std::pair<std::string, int64_t> fresh("/s/set", a->Get("/s/set").value()->mod_revision);
  EXPECT_EQ(a->Campaign("/s", "a:1", lease, nullptr, &fresh).value(), 1u);
  // The leader writes and deletes; a stale leader value does neither.
  ASSERT_TRUE(a->PutAsLeader("/s", "1 a:1", "/s/set", "z").ok());
  EXPECT_EQ(a->Get("/s/set").value()->value, "z");
  EXPECT_EQ(a->DeleteAsLeader("/s", "0 a:1", "/s/set").code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(a->DeleteAsLeader("/s", "1 a:1", "/s/set").ok());
  EXPECT_FALSE(a->Get("/s/set").value().has_value());
  // What it wrote has no lease: it outlives the leader's.
  ASSERT_TRUE(a->PutAsLeader("/s", "1 a:1", "/s/set", "kept").ok());
  ASSERT_TRUE(a->Revoke(lease).ok());
  EXPECT_FALSE(a->CurrentLeader("/s").value().has_value());
  EXPECT_EQ(a->Get("/s/set").value()->value, "kept");
}

TEST_F(EtcdClientTest, RacingCandidatesElectOneAtATime) {
  constexpr int kCandidates = 6;
  std::vector<std::unique_ptr<EtcdClient>> clients;
  for (int i = 0; i < kCandidates; ++i) {
    clients.push_back(NewClient());
    ASSERT_NE(clients.back(), nullptr);
  }
  uint64_t last_term = 0;
  for (int round = 0; round < 5; ++round) {
    std::vector<int64_t> leases;
    for (auto& client : clients) leases.push_back(client->Grant(10).value());
    std::vector<std::optional<uint64_t>> won(kCandidates);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kCandidates; ++i) {
      threads.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < kCandidates) {
        }
        absl::StatusOr<std::optional<uint64_t>> got =
            clients[i]->Campaign("/race", absl::StrCat("c", i), leases[i]);
        ASSERT_TRUE(got.ok()) << got.status();
        won[i] = *got;
      });
    }
    for (std::thread& t : threads) t.join();
    int winners = 0;
    int winner = -1;
    for (int i = 0; i < kCandidates; ++i) {
      if (won[i].has_value()) {
        ++winners;
        winner = i;
      }
    }
    ASSERT_EQ(winners, 1) << "round " << round;
    EXPECT_EQ(*won[winner], last_term + 1) << "round " << round;
    last_term = *won[winner];
    EXPECT_EQ(clients[0]->CurrentLeader("/race").value()->value, absl::StrCat("c", winner));
    for (int i = 0; i < kCandidates; ++i) ASSERT_TRUE(clients[i]->Revoke(leases[i]).ok());
  }
}

}  // namespace
}  // namespace ringkv::etcd
