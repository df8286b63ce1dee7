// Persistence end to end (--data-dir): a real ringkv-server process, written to by the real
// client library, stopped cleanly, killed with SIGKILL, or made to lose what it had not synced
// (the power-loss seam of ringkv-server-faults, --fault-power-loss-on-sigusr1), and started
// again on the same directory.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/testing/temp_dir.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "server/testing/server_process.h"
#include "shard/router.h"

namespace ringkv {
namespace {

namespace fs = std::filesystem;
using testing::ServerProcess;

class PersistTest : public ::testing::Test {
 protected:
  void TearDown() override { server_.reset(); }  // Before the directory goes.

  // Starts a server on dir_ with `flags`; fails the test if it does not start.
  // `faults`: ringkv-server-faults's flags (server/testing/faults_main.cc); with any, that
  // binary runs instead of ringkv-server.
  void Start(std::vector<std::string> flags, std::vector<std::string> faults = {}) {
    flags.push_back("--data-dir=" + data_dir_);
    const bool faulty = !faults.empty();
    flags.insert(flags.end(), faults.begin(), faults.end());
    server_ = std::make_unique<ServerProcess>(
        flags, faulty ? ServerProcess::Binary::kFaults : ServerProcess::Binary::kServer);
    ASSERT_TRUE(server_->Start()) << server_->log();
    client_ = std::make_unique<Client>(server_->address(), absl::Seconds(10));
  }

  ringkv::TempDir temp_{"ringkv-persist-test"};
  const std::string dir_ = temp_.Path("data");
  std::string data_dir_ = dir_;  // Start's --data-dir.
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(PersistTest, ARestartKeepsValuesVersionsAndTtlsWithAnyThreadCount) {
  Start({"--threads=2"});
  std::map<std::string, uint64_t> versions;
  for (int i = 0; i < 200; ++i) {
    const std::string key = absl::StrCat("key", i);
    versions[key] = client_->Put(key, absl::StrCat("value", i)).value();
  }
  ASSERT_TRUE(client_->Put("ttl", "soon", {.ttl_ms = 3'600'000}).ok());
  ASSERT_TRUE(client_->Put("short", "gone", {.ttl_ms = 300}).ok());
  ASSERT_TRUE(client_->Increment("counter", 41).ok());
  ASSERT_TRUE(client_->Delete("key7").ok());
  versions.erase("key7");
  // A clean stop (a snapshot), then kill -9 (the log), each with another thread count.
  ASSERT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
  Start({"--threads=3"});
  // The shards' figures are there before any call has touched them.
  const auto restored = client_->Stats().value();
  uint64_t keys = 0;
  uint64_t payload = 0;
  for (const auto& shard : restored.shards()) {
    keys += shard.keys();
    payload += shard.payload_bytes();
    EXPECT_GT(shard.memory_bytes(), 0u) << shard.shard();
  }
  EXPECT_EQ(keys, versions.size() + 3);
  EXPECT_GT(payload, 0u);
  ASSERT_TRUE(client_->Increment("counter", 1).ok());
  const uint64_t after = client_->Put("after", "restart").value();
  for (const auto& [key, version] : versions) EXPECT_GT(after, version) << key;
  ASSERT_EQ(server_->Stop(SIGKILL, 10), 137);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // "short" expires.
  Start({"--threads=1"});
  for (const auto& [key, version] : versions) {
    const auto entry = client_->GetEntry(key);
    ASSERT_TRUE(entry.ok()) << key << ": " << entry.status();
    EXPECT_EQ(entry->value, "value" + key.substr(3)) << key;
    EXPECT_EQ(entry->version, version) << key;
  }
  EXPECT_EQ(client_->Get("key7").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Get("short").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Get("counter").value(), "42");
  EXPECT_EQ(client_->Get("after").value(), "restart");
  const auto ttl = client_->GetEntry("ttl");
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT(ttl->ttl_ms, 3'500'000);
  EXPECT_LE(ttl->ttl_ms, 3'600'000);
  const auto stats = client_->Stats().value();
  ASSERT_TRUE(stats.has_persistence());
  EXPECT_EQ(stats.persistence().data_dir(), dir_);
  EXPECT_EQ(stats.persistence().fsync(), "everysec");
  EXPECT_EQ(stats.persistence().restored_keys(), versions.size() + 3);
  EXPECT_GT(stats.persistence().snapshot_unix_ms(), 0);
  EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
}

// Writers record each write the server acknowledged; the server is killed (SIGKILL, or the
// power-loss seam that also drops what was written but not synced) at a random moment; after
// the restart every acknowledged write is there with its value or a later one, and no value
// appears that was never written.
constexpr int kWriters = 4;

struct Acked {
  std::mutex mu;
  std::map<std::string, int64_t> last;     // The last acknowledged value of each key.
  std::map<std::string, int64_t> written;  // The highest value ever sent for each key.
  std::atomic<uint64_t> acks{0};
  // Each writer's next value: it goes on across rounds, so that every key's values only grow
  // (a write sent but never acknowledged may or may not survive, and must not look like a
  // value older than one acknowledged later).
  std::atomic<int64_t> next[kWriters] = {1, 1, 1, 1};
};

void Write(const std::string& address, int writer, std::atomic<bool>& stop, Acked& acked) {
  Client client(address, absl::Seconds(5));
  for (int64_t n = acked.next[writer]++; !stop.load(); n = acked.next[writer]++) {
    const std::string key = absl::StrCat("w", writer, ":", n % 64);
    {
      std::lock_guard<std::mutex> lock(acked.mu);
      acked.written[key] = n;
    }
    if (!client.Put(key, std::to_string(n)).ok()) return;  // The server is gone.
    std::lock_guard<std::mutex> lock(acked.mu);
    acked.last[key] = n;
    acked.acks.fetch_add(1);
  }
}

// kWriters writers against `server` until it is crashed by `crash_signal` at a random moment;
// with `snapshots`, another client asks for one snapshot after another meanwhile, so that the
// crash often comes in the middle of one.
void CrashRound(ServerProcess& server, int crash_signal, std::mt19937& random, Acked& acked,
                bool snapshots = false) {
  const std::string address = server.address();
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] { Write(address, w, stop, acked); });
  }
  if (snapshots) {
    writers.emplace_back([&] {
      Client client(address, absl::Seconds(10));
      while (!stop.load() && client.Snapshot().ok()) {
      }
    });
  }
  const uint64_t before = acked.acks.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(100 + random() % 300));
  EXPECT_GT(acked.acks.load(), before) << "no write was acknowledged";
  EXPECT_EQ(server.Stop(crash_signal, 10), 137) << server.log();
  stop = true;
  for (std::thread& t : writers) t.join();
}

void CheckAcked(Client& client, Acked& acked, bool expect_all, int* missing) {
  std::lock_guard<std::mutex> lock(acked.mu);
  *missing = 0;
  for (const auto& [key, written] : acked.written) {
    const auto value = client.Get(key);
    const auto last = acked.last.find(key);
    if (!value.ok()) {
      ASSERT_EQ(value.status().code(), absl::StatusCode::kNotFound) << value.status();
      if (last != acked.last.end()) ++*missing;
      continue;
    }
    const int64_t n = std::stoll(*value);
    EXPECT_LE(n, written) << key << ": a value that was never written";
    if (last != acked.last.end() && n < last->second) ++*missing;
  }
  if (expect_all) {
    EXPECT_EQ(*missing, 0);
  }
}

// Starts a server on `dir` and kills it (SIGKILL) after `delay`, without waiting for it to
// listen: a kill in the middle of the restore. Returns the exit status.
int KillDuringStart(const std::string& dir, std::chrono::milliseconds delay) {
  std::vector<std::string> args = {std::getenv("RINGKV_SERVER"), "--listen=127.0.0.1:0",
                                   "--data-dir=" + dir, "--log-level=error"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  std::this_thread::sleep_for(delay);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

// A bulk of keys that stay as they are, so that each snapshot takes a while.
constexpr int kStillKeys = 60000;
std::string StillKey(int i) { return absl::StrCat("still:", i); }
std::string StillValue(int i) { return absl::StrCat(std::string(80, 'v'), i); }

TEST_F(PersistTest, KillNineUnderLoadLosesNoAcknowledgedWriteWithAlwaysOrEverysec) {
  std::mt19937 random(std::random_device{}());
  Acked acked;
  Start({"--threads=2"});
  for (int i = 0; i < kStillKeys; i += 1000) {
    std::vector<std::pair<std::string, std::string>> items;
    for (int j = i; j < i + 1000; ++j) items.emplace_back(StillKey(j), StillValue(j));
    ASSERT_TRUE(client_->MultiPut(items).ok());
  }
  ASSERT_EQ(server_->Stop(SIGKILL, 10), 137);
  for (int round = 0; round < 6; ++round) {
    // Killed while it restores, at a random moment (it may already be serving).
    EXPECT_EQ(KillDuringStart(dir_, std::chrono::milliseconds(random() % 60)), 137);
    // Both modes that answer only what is safe from a process crash (always: synced; everysec:
    // written), alternate thread counts, so the restart re-routes every key too, and
    // snapshots one after another in every other round, so that kills come during them.
    Start({round < 3 ? "--fsync=always" : "--fsync=everysec",
           round % 2 == 0 ? "--threads=2" : "--threads=1"});
    int missing = 0;
    CheckAcked(*client_, acked, true, &missing);
    for (int i = round; i < kStillKeys; i += 997) {
      ASSERT_EQ(client_->Get(StillKey(i)).value_or("(missing)"), StillValue(i)) << i;
    }
    CrashRound(*server_, SIGKILL, random, acked, /*snapshots=*/round % 2 == 1);
  }
  Start({"--threads=2"});
  int missing = 0;
  CheckAcked(*client_, acked, true, &missing);
  EXPECT_GT(acked.acks.load(), 100u);
  EXPECT_GE(client_->Stats().value().persistence().restored_keys(), kStillKeys + acked.last.size());
}

// A snapshot taken while one client writes (one call at a time, so the order of the writes is
// the order the server ran them in): restored alone (the logs removed), each shard holds the
// state after some prefix of the writes, one that ends between the last write acknowledged
// before the Snapshot call and the last write sent before its answer.
TEST_F(PersistTest, ALiveSnapshotHoldsEachShardAtOneMomentOfItsWrites) {
  constexpr int kShards = 2;
  constexpr int kKeys = 40000;
  Start({absl::StrCat("--threads=", kShards), "--fsync=no"});
  std::map<std::string, std::string> base;
  for (int i = 0; i < kKeys; i += 1000) {
    std::vector<std::pair<std::string, std::string>> items;
    for (int j = i; j < i + 1000; ++j) {
      // Large values: the walk then waits for the disk, and many writes run during it.
      items.emplace_back(absl::StrCat("k", j), absl::StrCat(std::string(1000, 'b'), j));
      base[items.back().first] = items.back().second;
    }
    ASSERT_TRUE(client_->MultiPut(items).ok());
  }
  // The writes, in order: a put (value) or a delete (nullopt).
  std::vector<std::pair<std::string, std::optional<std::string>>> writes;
  std::mutex mu;
  std::atomic<size_t> acked{0};
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    Client client(server_->address(), absl::Seconds(10));
    std::mt19937 random(7);
    for (int n = 0; !stop.load(); ++n) {
      const std::string key = absl::StrCat("k", random() % (kKeys + kKeys / 10));
      std::optional<std::string> value;
      if (random() % 4 != 0) value = absl::StrCat("w", n);
      {
        std::lock_guard<std::mutex> lock(mu);
        writes.emplace_back(key, value);
      }
      const bool ok = value ? client.Put(key, *value).ok() : [&] {
        const absl::Status s = client.Delete(key);
        return s.ok() || s.code() == absl::StatusCode::kNotFound;
      }();
      ASSERT_TRUE(ok);
      acked = writes.size();
    }
  });
  while (acked.load() < 200) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const size_t low = acked.load();
  const auto snapshot = client_->Snapshot();
  size_t high;
  {
    std::lock_guard<std::mutex> lock(mu);
    high = writes.size();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  stop = true;
  writer.join();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->keys(), client_->Stats().value().persistence().snapshot_keys());
  ASSERT_EQ(server_->Stop(SIGKILL, 10), 137);
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (entry.path().filename().string().starts_with("log-")) fs::remove(entry.path());
  }
  // The snapshot alone: without the logs the MANIFEST lists, only --load-intact starts.
  Start({absl::StrCat("--threads=", kShards), "--load-intact"});
  // The state after the first `low` writes; then, write by write, how far each shard's
  // restored state is from the state after that write.
  std::map<std::string, std::optional<std::string>> state(base.begin(), base.end());
  for (size_t w = 0; w < low; ++w) state[writes[w].first] = writes[w].second;
  std::map<std::string, std::optional<std::string>> restored;
  for (const auto& [key, value] : state) restored[key];
  for (size_t w = low; w < high; ++w) restored[writes[w].first];
  std::vector<std::string> keys;
  for (const auto& [key, value] : restored) keys.push_back(key);
  for (size_t i = 0; i < keys.size(); i += 1000) {
    const std::vector<std::string> part(keys.begin() + i,
                                        keys.begin() + std::min(i + 1000, keys.size()));
    const auto items = client_->MultiGet(part);
    ASSERT_TRUE(items.ok()) << items.status();
    for (size_t j = 0; j < part.size(); ++j) {
      if ((*items)[j].status.ok()) restored[part[j]] = (*items)[j].value;
    }
  }
  const Router router(kShards);
  auto shard_of = [&](const std::string& key) { return router.ShardOf(Router::Hash(key)); };
  std::vector<int> differing(kShards, 0);
  for (const auto& [key, value] : restored) {
    const auto at = state.find(key);
    const std::optional<std::string> expected = at == state.end() ? std::nullopt : at->second;
    if (value != expected) ++differing[shard_of(key)];
  }
  std::vector<bool> matched(kShards, false);
  for (size_t w = low;; ++w) {
    for (int s = 0; s < kShards; ++s) matched[s] = matched[s] || differing[s] == 0;
    if (w == high) break;
    const auto& [key, value] = writes[w];
    const auto& got = restored[key];
    const bool was = got != state[key];
    state[key] = value;
    const bool is = got != state[key];
    differing[shard_of(key)] += int(is) - int(was);
  }
  for (int s = 0; s < kShards; ++s) {
    EXPECT_TRUE(matched[s]) << "shard " << s << " matches no moment between write " << low
                            << " and " << high;
  }
  EXPECT_GT(high, low) << "no write ran during the snapshot";
  EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
}

// A SIGKILL cannot catch a missing fsync (the page cache outlives the process), so this seam
// drops what was written but not synced before it exits: with --fsync=always nothing
// acknowledged is lost; with --fsync=no, acknowledged writes are lost, which shows the seam
// really drops them.
TEST_F(PersistTest, APowerLossLosesNoAcknowledgedWriteWithFsyncAlways) {
  std::mt19937 random(std::random_device{}());
  for (const std::string mode : {"always", "no"}) {
    fs::remove_all(dir_);
    Acked acked;
    Start({"--fsync=" + mode, "--threads=2"}, {"--fault-power-loss-on-sigusr1"});
    CrashRound(*server_, SIGUSR1, random, acked);
    Start({"--threads=2"});
    int missing = 0;
    CheckAcked(*client_, acked, mode == "always", &missing);
    if (mode == "no") {
      EXPECT_GT(missing, 0) << "the seam dropped nothing";
    }
    EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
  }
}

// A disk that stays full (ringkv-server-faults's log limit): the write whose record did not fit
// waits for its answer, every later write is refused by name, reads go on, and a stop still
// ends (the waiting write is given up) with everything acknowledged kept.
TEST_F(PersistTest, ADiskThatStaysFullRefusesWritesKeepsServingReadsAndStops) {
  Start({"--fsync=always", "--threads=2", "--shutdown-grace=1"},
        {"--fault-log-fail-after-bytes=20000"});
  Client quick(server_->address(), absl::Seconds(1));
  std::map<std::string, std::string> stored;
  absl::Status refused;
  for (int i = 0; i < 1000 && refused.ok(); ++i) {
    const std::string key = absl::StrCat("k", i);
    const auto put = quick.Put(key, std::string(100, 'a' + i % 26));
    if (put.ok()) {
      stored[key] = std::string(100, 'a' + i % 26);
    } else if (put.status().code() != absl::StatusCode::kDeadlineExceeded) {
      refused = put.status();
    }
  }
  ASSERT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find(dir_), std::string::npos) << refused;
  ASSERT_GT(stored.size(), 10u);
  // Every later write is refused; reads go on.
  EXPECT_EQ(client_->Put("later", "x").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client_->Delete("k0").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client_->Get("k0").value(), stored["k0"]);
  const auto stats = client_->Stats().value();
  EXPECT_NE(stats.persistence().error().find("No space left on device"), std::string::npos)
      << stats.persistence().error();
  // A write left waiting for the log: the stop gives it up and still ends.
  std::thread waiting([&] { (void)client_->Put("waiting", "w"); });
  absl::SleepFor(absl::Milliseconds(200));
  const int stopped = server_->Stop(SIGTERM, 20);
  waiting.join();
  EXPECT_NE(stopped, -1) << server_->log();
  EXPECT_NE(server_->log().find("cannot write the log at the stop"), std::string::npos)
      << server_->log();
  Start({"--threads=2"});
  for (const auto& [key, value] : stored) EXPECT_EQ(client_->Get(key).value(), value) << key;
  EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
}

// A small tmpfs, mounted for the life of the object (tests run as root in CI).
class SmallDisk {
 public:
  SmallDisk(const std::string& path, int megabytes) : path_(path) {
    fs::create_directories(path);
    const std::string options = absl::StrCat("size=", megabytes, "m");
    mounted_ = mount("ringkv-test", path.c_str(), "tmpfs", 0, options.c_str()) == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  ~SmallDisk() {
    if (mounted_) umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

  // Fills what is free with FILE; the bytes written.
  uint64_t Fill(const std::string& file) const {
    std::ofstream out(file, std::ios::binary);
    const std::string chunk(64 << 10, 'b');
    uint64_t written = 0;
    while (out.write(chunk.data(), chunk.size())) written += chunk.size();
    return written;
  }

 private:
  const std::string path_;
  bool mounted_ = false;
  std::string error_;
};

// The disk of the data directory fills (a real tmpfs): writes are refused, reads go on, and once
// space is freed writes are taken again without a restart; nothing acknowledged is lost.
TEST_F(PersistTest, AFullDiskRecoversWithoutARestartOnceSpaceIsFreed) {
  SmallDisk disk(temp_.Path("small-disk"), 8);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs (needs root): " << disk.error();
  data_dir_ = temp_.Path("small-disk/data");
  Start({"--fsync=always", "--threads=2"});
  const std::string ballast = temp_.Path("small-disk/ballast");
  ASSERT_GT(disk.Fill(ballast), 0u);
  // Writes until the full disk refuses one. A write whose record stalled waits for its answer
  // (held until the log is written): with a short deadline it ends DEADLINE_EXCEEDED, and may
  // or may not be stored.
  Client quick(server_->address(), absl::Seconds(1));
  std::map<std::string, std::string> acked;
  absl::Status refused;
  for (int i = 0; i < 20000 && refused.ok(); ++i) {
    const std::string key = absl::StrCat("k", i);
    const std::string value(1000, 'a' + i % 26);
    const auto put = quick.Put(key, value);
    if (put.ok()) {
      acked[key] = value;
    } else if (put.status().code() != absl::StatusCode::kDeadlineExceeded) {
      refused = put.status();
    }
  }
  ASSERT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find("out of space"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find(data_dir_), std::string::npos) << refused;
  ASSERT_FALSE(acked.empty());
  EXPECT_EQ(client_->Get(acked.begin()->first).value(), acked.begin()->second);
  auto stats = client_->Stats().value();
  EXPECT_NE(stats.persistence().error().find("No space left on device"), std::string::npos)
      << stats.persistence().error();
  // Space comes back: writes are taken again within the retries' 2 s, on every shard.
  fs::remove(ballast);
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  bool resumed = false;
  while (!resumed && absl::Now() < deadline) {
    resumed = quick.Put("after-0", "x").ok() && quick.Put("after-1", "y").ok() &&
              quick.Put("after-2", "z").ok();
    if (!resumed) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(resumed) << server_->log();
  for (int i = 0; i < 100; ++i) {
    const std::string key = absl::StrCat("later", i);
    ASSERT_TRUE(client_->Put(key, "v").ok()) << key;
    acked[key] = "v";
  }
  stats = client_->Stats().value();
  EXPECT_EQ(stats.persistence().error(), "");
  EXPECT_NE(server_->log().find("is written again"), std::string::npos) << server_->log();
  // Nothing acknowledged is lost, before the disk filled or after.
  ASSERT_EQ(server_->Stop(SIGKILL, 10), 137);
  Start({"--threads=2"});
  for (const auto& [key, value] : acked) EXPECT_EQ(client_->Get(key).value(), value) << key;
  EXPECT_EQ(client_->Get("after-2").value(), "z");
  EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
}

// A start on a full disk (a real tmpfs) loads the data and serves reads, refusing writes; once
// space is freed the logs are made and writes are taken, with no restart.
TEST_F(PersistTest, AStartOnAFullDiskServesReadsAndTakesWritesOnceSpaceIsFreed) {
  SmallDisk disk(temp_.Path("small-disk"), 8);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs (needs root): " << disk.error();
  data_dir_ = temp_.Path("small-disk/data");
  Start({"--threads=2"});
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(client_->Put(absl::StrCat("k", i), "v").ok());
  ASSERT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
  const std::string ballast = temp_.Path("small-disk/ballast");
  ASSERT_GT(disk.Fill(ballast), 0u);
  Start({"--threads=2"});
  EXPECT_NE(server_->log().find("serving reads only"), std::string::npos) << server_->log();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(client_->Get(absl::StrCat("k", i)).value(), "v");
  const absl::Status refused = client_->Put("new", "x").status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find("out of space"), std::string::npos) << refused;
  fs::remove(ballast);
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  bool taken = false;
  while (!taken && absl::Now() < deadline) {
    taken = client_->Put("new", "x").ok() && client_->Put("new2", "y").ok();
    if (!taken) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(taken) << server_->log();
  ASSERT_EQ(server_->Stop(SIGKILL, 10), 137);
  Start({"--threads=2"});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(client_->Get(absl::StrCat("k", i)).value(), "v");
  EXPECT_EQ(client_->Get("new").value(), "x");
  EXPECT_EQ(client_->Get("new2").value(), "y");
  EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
}

// A snapshot (at exit, or live on the Snapshot RPC) killed at each step of its commit: the next
// start finds every write, from the old snapshot and the logs or from the new snapshot.
TEST_F(PersistTest, ACrashAtEachStepOfTheSnapshotCommitLosesNothing) {
  for (const std::string step : {"writing", "renamed", "manifest", "cleanup"}) {
    for (const bool live : {false, true}) {
      fs::remove_all(dir_);
      Start({"--threads=2"});
      std::map<std::string, std::string> model;
      for (int i = 0; i < 100; ++i) {
        model[absl::StrCat("a", i)] = absl::StrCat("first", i);
        ASSERT_TRUE(client_->Put(absl::StrCat("a", i), model[absl::StrCat("a", i)]).ok());
      }
      ASSERT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();  // An old snapshot.
      Start({"--threads=2"});
      for (int i = 0; i < 100; i += 2) {
        model[absl::StrCat("a", i)] = absl::StrCat("second", i);
        ASSERT_TRUE(client_->Put(absl::StrCat("a", i), model[absl::StrCat("a", i)]).ok());
        model[absl::StrCat("b", i)] = "new";
        ASSERT_TRUE(client_->Put(absl::StrCat("b", i), "new").ok());
      }
      for (int i = 1; i < 100; i += 10) {
        model.erase(absl::StrCat("a", i));
        ASSERT_TRUE(client_->Delete(absl::StrCat("a", i)).ok());
      }
      ASSERT_EQ(server_->Stop(SIGKILL, 10), 137);  // Logs over the old snapshot.
      Start({"--threads=2"}, {"--fault-crash-in-snapshot=" + step});
      if (live) {
        // Before the cut: in the old generation's log, and in the new snapshot.
        ASSERT_TRUE(client_->Put("b1", "live").ok());
        model["b1"] = "live";
        EXPECT_FALSE(client_->Snapshot().ok()) << step;
        ASSERT_EQ(server_->Wait(20), 137) << step << "\n" << server_->log();
      } else {
        ASSERT_EQ(server_->Stop(SIGTERM, 20), 137) << step << "\n" << server_->log();
      }
      Start({"--threads=2"});
      const auto stats = client_->Stats().value();
      EXPECT_EQ(stats.persistence().restored_keys(), model.size()) << step;
      for (const auto& [key, value] : model) {
        EXPECT_EQ(client_->Get(key).value_or("(missing)"), value) << step << " " << key;
      }
      EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
      EXPECT_TRUE(fs::exists(dir_ + "/MANIFEST"));
    }
  }
}

TEST_F(PersistTest, DamageRefusesTheStartUnlessLoadIntact) {
  Start({"--threads=1", "--fsync=always"});
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(client_->Put(absl::StrCat("k", i), "v").ok());
  ASSERT_EQ(server_->Stop(SIGKILL, 10), 137);
  std::string log;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (entry.path().filename().string().starts_with("log-")) log = entry.path();
  }
  ASSERT_FALSE(log.empty());
  std::string bytes;
  {
    std::ifstream in(log, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t records = bytes.find_last_not_of('\0') + 1;  // Zeros follow (--fsync=always).
  ASSERT_GT(records, 1000u);
  bytes[records / 2] ^= 0x10;  // A block in the middle, with good blocks after it.
  { std::ofstream(log, std::ios::binary | std::ios::trunc) << bytes; }

  ServerProcess refused({"--listen=127.0.0.1:0", "--data-dir=" + dir_});
  EXPECT_FALSE(refused.Start());
  EXPECT_EQ(refused.Wait(10), 1);
  EXPECT_NE(refused.log().find(log + " is damaged at offset"), std::string::npos) << refused.log();
  EXPECT_NE(refused.log().find("--load-intact"), std::string::npos) << refused.log();

  Start({"--load-intact"});
  EXPECT_EQ(client_->Get("k0").value(), "v");  // From the intact prefix.
  EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
}

// A Persist or an Expire after a TTL was set: once the old deadline has passed, a crash (kill
// -9, or the power-loss seam with --fsync=always, which drops whatever was not synced) must not
// lose the key; a key whose TTL nothing changed is gone.
TEST_F(PersistTest, APersistOrExpireOfAKeyWithATtlSurvivesACrashAfterTheOldDeadline) {
  for (const int crash : {SIGKILL, SIGUSR1}) {
    fs::remove_all(dir_);
    Start({"--threads=2", "--fsync=always"}, {"--fault-power-loss-on-sigusr1"});
    for (const char* key : {"persisted", "extended", "expires"}) {
      ASSERT_TRUE(client_->Put(key, "v", {.ttl_ms = 1500}).ok());
    }
    ASSERT_TRUE(client_->Persist("persisted").ok());
    ASSERT_TRUE(client_->Expire("extended", 3'600'000).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(1700));  // Past the first deadline.
    EXPECT_EQ(client_->GetEntry("persisted").value().ttl_ms, -1);
    ASSERT_EQ(server_->Stop(crash, 10), 137) << server_->log();
    Start({"--threads=2"});
    const auto persisted = client_->GetEntry("persisted");
    ASSERT_TRUE(persisted.ok()) << crash << ": " << persisted.status();
    EXPECT_EQ(persisted->ttl_ms, -1);
    const auto extended = client_->GetEntry("extended");
    ASSERT_TRUE(extended.ok()) << crash << ": " << extended.status();
    EXPECT_GT(extended->ttl_ms, 3'500'000);
    EXPECT_EQ(client_->Get("expires").status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(client_->Stats().value().persistence().restored_keys(), 2u);
    EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
  }
}

// A client holds a version of a key that is then deleted; after a clean stop, or a live
// snapshot and a kill -9, the key written again gets a higher version, so the stale
// compare-and-set fails.
TEST_F(PersistTest, AVersionNeverComesBackAfterADeleteAndARestart) {
  for (const bool clean : {true, false}) {
    fs::remove_all(dir_);
    Start({"--threads=2"});
    ASSERT_TRUE(client_->Put("a", "1").ok());
    const uint64_t held = client_->Put("x", "first").value();
    ASSERT_TRUE(client_->Delete("x").ok());
    if (clean) {
      ASSERT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
    } else {
      ASSERT_TRUE(client_->Snapshot().ok());
      ASSERT_EQ(server_->Stop(SIGKILL, 10), 137);
    }
    Start({"--threads=2"});
    const uint64_t again = client_->Put("x", "second").value();
    EXPECT_GT(again, held) << (clean ? "clean stop" : "snapshot and kill -9");
    EXPECT_EQ(
        client_->Put("x", "stale", {.condition = WriteCondition::Version(held)}).status().code(),
        absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(client_->Get("x").value(), "second");
    EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
  }
}

// The names and sizes of the files in a directory (and its folders), to show nothing changed.
std::map<std::string, uintmax_t> Listing(const std::string& dir) {
  std::map<std::string, uintmax_t> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) {
      files[fs::relative(entry.path(), dir).string()] = entry.file_size();
    }
  }
  return files;
}

std::string FileNamed(const std::string& dir, std::string_view prefix) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with(prefix)) return entry.path();
  }
  return "";
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class PersistRefusalTest : public PersistTest {
 protected:
  // A snapshot of "snap*" keys and, over it, logs of "log*" keys from two workers (one block
  // per write, --fsync=always); the server is killed with SIGKILL.
  void Fill() {
    Start({"--threads=2", "--fsync=always"});
    for (int i = 0; i < 40; ++i) ASSERT_TRUE(client_->Put(absl::StrCat("snap", i), "s").ok());
    ASSERT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
    Start({"--threads=2", "--fsync=always"});
    for (int i = 0; i < 40; ++i) ASSERT_TRUE(client_->Put(absl::StrCat("log", i), "l").ok());
    ASSERT_EQ(server_->Stop(SIGKILL, 10), 137);
  }
  // Starts on dir_ and expects a refusal (exit 1) whose message holds each of `words`; the
  // directory is left as it was.
  void ExpectRefused(const std::vector<std::string>& words) {
    const auto before = Listing(dir_);
    ServerProcess refused({"--listen=127.0.0.1:0", "--data-dir=" + dir_});
    EXPECT_FALSE(refused.Start());
    EXPECT_EQ(refused.Wait(10), 1);
    for (const std::string& word : words) {
      EXPECT_NE(refused.log().find(word), std::string::npos) << word << "\n" << refused.log();
    }
    EXPECT_NE(refused.log().find("--load-intact"), std::string::npos) << refused.log();
    EXPECT_EQ(Listing(dir_), before) << "a refused start changed the data directory";
  }
  // Starts with --load-intact, then again without it: both serve `keys` keys, and the files
  // it replaced are in a set-aside folder, not deleted.
  void ExpectLoadIntact(uint64_t keys) {
    const size_t files_before = Listing(dir_).size();
    Start({"--load-intact", "--threads=2"});
    EXPECT_EQ(client_->Stats().value().persistence().restored_keys(), keys) << server_->log();
    EXPECT_NE(server_->log().find("set-aside-"), std::string::npos) << server_->log();
    ASSERT_TRUE(client_->Put("after", "repair").ok());
    ASSERT_EQ(server_->Stop(SIGKILL, 10), 137);
    const std::string aside = FileNamed(dir_, "set-aside-");
    ASSERT_FALSE(aside.empty());
    EXPECT_GE(Listing(aside).size() + 1, files_before - 1);  // All but LOCK (and a lost file).
    Start({"--threads=2"});
    EXPECT_EQ(client_->Stats().value().persistence().restored_keys(), keys + 1);
    EXPECT_EQ(client_->Get("after").value(), "repair");
    EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
  }
};

TEST_F(PersistRefusalTest, AMissingManifestIsRefusedAndDeletesNothing) {
  Fill();
  ASSERT_TRUE(fs::remove(dir_ + "/MANIFEST"));
  ExpectRefused({"no MANIFEST", "2 snapshot files (generation", "2 logs (generation"});
  ExpectLoadIntact(80);  // The newest whole snapshot, and the logs after it.
}

TEST_F(PersistRefusalTest, ADamagedManifestIsRefused) {
  Fill();
  std::string bytes = ReadBytes(dir_ + "/MANIFEST");
  bytes[bytes.size() / 2] ^= 0x08;
  WriteBytes(dir_ + "/MANIFEST", bytes);
  ExpectRefused({"MANIFEST is damaged"});
  ExpectLoadIntact(80);
}

TEST_F(PersistRefusalTest, ADeletedOrEmptiedLogIsRefused) {
  for (const bool remove : {true, false}) {
    fs::remove_all(dir_);
    Fill();
    const std::string log = FileNamed(dir_, "log-");
    ASSERT_FALSE(log.empty());
    if (remove) {
      ASSERT_TRUE(fs::remove(log));
      ExpectRefused({log + " is missing"});
    } else {
      fs::resize_file(log, 0);
      ExpectRefused({log + " is 0 bytes"});
    }
    // Without that log: the snapshot and the other worker's keys.
    Start({"--load-intact", "--threads=2"});
    const uint64_t restored = client_->Stats().value().persistence().restored_keys();
    EXPECT_GE(restored, 40u);
    EXPECT_LT(restored, 80u);
    EXPECT_EQ(client_->Get("snap0").value(), "s");
    EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
  }
}

TEST_F(PersistRefusalTest, ADamagedLogHeaderOrAMissingSnapshotFileIsRefused) {
  for (const bool header : {true, false}) {
    fs::remove_all(dir_);
    Fill();
    if (header) {
      const std::string log = FileNamed(dir_, "log-");
      std::string bytes = ReadBytes(log);
      bytes[14] ^= 0x01;  // In the header block's payload.
      WriteBytes(log, bytes);
      ExpectRefused({log + " is damaged at offset 0"});
    } else {
      const std::string snapshot = FileNamed(dir_, "snap-");
      ASSERT_TRUE(fs::remove(snapshot));
      ExpectRefused({snapshot + " is missing"});
    }
    Start({"--load-intact", "--threads=2"});
    const uint64_t restored = client_->Stats().value().persistence().restored_keys();
    EXPECT_GE(restored, 40u);
    EXPECT_LT(restored, 80u);
    EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
  }
}

// With --fsync=always each write is one block; a byte changed in the last, with the file's
// length intact, is damage (a crash cannot change a block it wrote whole), not a torn write.
// The zeros --fsync=always writes ahead of the records follow it.
TEST_F(PersistRefusalTest, AChangedByteInTheLastBlockIsDamageNotATear) {
  Start({"--threads=1", "--fsync=always"});
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(client_->Put(absl::StrCat("k", i), std::string(64, 'a' + i)).ok());
  }
  ASSERT_EQ(server_->Stop(SIGKILL, 10), 137);
  const std::string log = FileNamed(dir_, "log-");
  std::string bytes = ReadBytes(log);
  // The last value's last byte (zeros may follow: none on a tmpfs or a nearly full disk).
  const size_t records = bytes.find_last_not_of('\0') + 1;
  bytes[records - 10] ^= 0x01;  // In the last value.
  WriteBytes(log, bytes);
  ExpectRefused({log + " is damaged at offset"});
  Start({"--load-intact", "--threads=1"});
  EXPECT_EQ(client_->Stats().value().persistence().restored_keys(), 19u);
  EXPECT_EQ(client_->Get("k18").value(), std::string(64, 'a' + 18));
  EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
}

TEST_F(PersistTest, SnapshotEveryTakesSnapshotsOnItsOwnAndTheRpcNeedsADataDir) {
  Start({"--snapshot-every=1s"});
  ASSERT_TRUE(client_->Put("k", "v").ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (client_->Stats().value().persistence().snapshot_keys() == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(client_->Stats().value().persistence().snapshot_keys(), 1u);
  EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
  EXPECT_NE(server_->log().find("snapshot 2 of 1 keys"), std::string::npos) << server_->log();

  ServerProcess memory_only({});
  ASSERT_TRUE(memory_only.Start()) << memory_only.log();
  Client client(memory_only.address(), absl::Seconds(10));
  const auto snapshot = client.Snapshot();
  EXPECT_EQ(snapshot.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(snapshot.status().message().find("--data-dir"), std::string::npos) << snapshot.status();
}

TEST_F(PersistTest, ASecondServerOnTheSameDirectoryIsRefused) {
  Start({});
  ServerProcess second({"--listen=127.0.0.1:0", "--data-dir=" + dir_});
  EXPECT_FALSE(second.Start());
  EXPECT_EQ(second.Wait(10), 1);
  EXPECT_NE(second.log().find("in use by another ringkv-server"), std::string::npos)
      << second.log();
  EXPECT_EQ(server_->Stop(SIGTERM, 20), 0) << server_->log();
}

}  // namespace
}  // namespace ringkv
