// The data directory in-process: round trips through logs and snapshots into real Shards, a
// changed shard count, and damage: every truncation and every flipped byte of a log and of a
// snapshot gives either the documented cut or a refusal naming the file and offset, never a
// crash (run under ASan too) or a wrong key.
#include "persist/data_dir.h"

#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/testing/temp_dir.h"
#include "persist/block.h"
#include "persist/file.h"
#include "persist/testing/fault_env.h"

namespace ringkv::persist {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kNow = 1'700'000'000'000;

// A state as a map, for comparing shards with models.
using State = std::map<std::string, std::pair<std::string, uint64_t>>;

State StateOf(const std::vector<std::unique_ptr<Shard>>& shards) {
  State state;
  for (const auto& shard : shards) {
    shard->ForEach([&](std::string_view k, std::string_view v, uint64_t version, int64_t) {
      EXPECT_TRUE(state.emplace(std::string(k), std::make_pair(std::string(v), version)).second);
    });
  }
  return state;
}

class DataDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogLevel(LogLevel::kError);  // Each damaged file would log a warning.
  }

  // Restores `dir` into `n` fresh shards; the status, and the shards in *out.
  absl::Status Restore(const std::string& dir, uint32_t n, bool load_intact,
                       std::vector<std::unique_ptr<Shard>>* out) {
    auto opened = DataDir::Open(dir, {.fsync = SyncMode::kAlways, .load_intact = load_intact});
    if (!opened.ok()) return opened.status();
    out->clear();
    std::vector<Shard*> raw;
    for (uint32_t i = 0; i < n; ++i) {
      out->push_back(std::make_unique<Shard>());
      raw.push_back(out->back().get());
    }
    Router router(n);
    return (*opened)->Restore(raw, router, kNow);
  }

  // Makes dir_ a copy of `pristine` (a --load-intact restore rewrites the directory).
  void ResetTo(const std::string& pristine) {
    fs::remove_all(dir_);
    fs::copy(pristine, dir_, fs::copy_options::recursive);
  }
  // A copy of dir_ as it is now, beside it.
  std::string Keep() {
    const std::string pristine = dir_ + "-pristine";
    fs::remove_all(pristine);
    fs::copy(dir_, pristine, fs::copy_options::recursive);
    return pristine;
  }

  ringkv::TempDir temp_{"ringkv-data-dir-test"};
  const std::string dir_ = temp_.Path("data");
};

// `key` and `value` must outlive the request (it holds views of them).
Request PutRequest(std::string_view key, std::string_view value) {
  Request put;
  put.op = Op::kPut;
  put.key = key;
  put.value = value;
  put.hash = Router::Hash(put.key);
  return put;
}

// A replica's positions (persist/format.h): the last position record of a worker's logs, or a
// stop snapshot's footer, unless data records follow it; a log of a generation above the
// restored snapshot that begins with a reset is left out whole.
TEST_F(DataDirTest, ReplicaPositionsAndResetLogs) {
  // One run of the directory: restores into one shard, then `write` logs, then closes (with a
  // snapshot whose footers get `at_stop`, if given). The restore's positions and state.
  const auto run = [&](const std::function<void(LogWriter&)>& write,
                       std::optional<Positions> at_stop, Positions* positions, State* state) {
    auto dir = DataDir::Open(dir_, {.fsync = SyncMode::kAlways}).value();
    std::vector<std::unique_ptr<Shard>> shards;
    shards.push_back(std::make_unique<Shard>());
    ASSERT_TRUE(dir->Restore({shards[0].get()}, Router(1), kNow).ok());
    *positions = dir->restored_positions();
    *state = StateOf(shards);
    ASSERT_TRUE(dir->OpenLogs(1, [](uint16_t) {}).ok());
    write(dir->log(0));
    if (at_stop.has_value()) {
      ASSERT_TRUE(dir->CloseAndSnapshot({shards[0].get()}, kNow, *at_stop).ok());
    } else {
      ASSERT_TRUE(dir->CloseLogs().ok());
    }
  };
  const auto nothing = [](LogWriter&) {};
  Positions positions;
  State state;
  run(
      [](LogWriter& log) {
        log.Set("a", "1", 1, 0);
        log.Position("h1", 5, false);
        log.Commit();
      },
      std::nullopt, &positions, &state);
  run(nothing, std::nullopt, &positions, &state);
  EXPECT_EQ(positions, (Positions{ReplPosition{"h1", 5}}));
  EXPECT_EQ(state.size(), 1u);
  // Data after the last position: none (the primary's writes after a promotion).
  run(
      [](LogWriter& log) {
        log.Set("b", "2", 2, 0);
        log.Commit();
      },
      std::nullopt, &positions, &state);
  run(nothing, Positions{ReplPosition{"h2", 9}}, &positions, &state);
  EXPECT_EQ(positions, Positions{std::nullopt});
  EXPECT_EQ(state.size(), 2u);
  // The stop's snapshot's footer gives the position (this run's logs share its generation).
  run(nothing, std::nullopt, &positions, &state);
  EXPECT_EQ(positions, (Positions{ReplPosition{"h2", 9}}));
  run(
      [](LogWriter& log) {
        // A log above the snapshot's generation that begins with a reset (a live snapshot's
        // segment after a full sync, whose snapshot never committed): left out.
        log.Position("h3", 1, true);
        log.Set("mixed", "3", 3, 0);
        log.Position("h3", 2, false);
        log.Commit();
      },
      std::nullopt, &positions, &state);
  EXPECT_EQ(positions, (Positions{ReplPosition{"h2", 9}}));
  EXPECT_EQ(state.size(), 2u);
  run(nothing, std::nullopt, &positions, &state);
  EXPECT_EQ(positions, (Positions{ReplPosition{"h2", 9}}));
  EXPECT_EQ(state.count("mixed"), 0u);
  EXPECT_EQ(state.size(), 2u);
  // An empty history says "no position".
  run(
      [](LogWriter& log) {
        log.Position("", 0, false);
        log.Commit();
      },
      std::nullopt, &positions, &state);
  run(nothing, std::nullopt, &positions, &state);
  EXPECT_EQ(positions, Positions{std::nullopt});
  // Files of another worker count give no positions.
  run(
      [](LogWriter& log) {
        log.Position("h4", 7, false);
        log.Commit();
      },
      std::nullopt, &positions, &state);
  std::vector<std::unique_ptr<Shard>> two;
  ASSERT_TRUE(Restore(dir_, 2, false, &two).ok());
  auto dir = DataDir::Open(dir_, {.fsync = SyncMode::kAlways}).value();
  std::vector<std::unique_ptr<Shard>> one;
  one.push_back(std::make_unique<Shard>());
  ASSERT_TRUE(dir->Restore({one[0].get()}, Router(1), kNow).ok());
  EXPECT_EQ(dir->restored_positions(), (Positions{ReplPosition{"h4", 7}}));
  dir.reset();
  auto again = DataDir::Open(dir_, {.fsync = SyncMode::kAlways}).value();
  std::vector<Shard*> raw;
  for (auto& shard : two) raw.push_back(shard.get());
  ASSERT_TRUE(again->Restore(raw, Router(2), kNow).ok());
  EXPECT_TRUE(again->restored_positions().empty());
}

TEST_F(DataDirTest, LogsAndSnapshotsRoundTripWithVersionsDeadlinesAndDeletes) {
  State model;
  auto dir = DataDir::Open(dir_, {.fsync = SyncMode::kAlways}).value();
  std::vector<std::unique_ptr<Shard>> none;
  ASSERT_TRUE(dir->Restore({}, Router(1), kNow).ok());
  ASSERT_TRUE(dir->OpenLogs(2, [](uint16_t) {}).ok());
  Router router(2);
  // Records go to the log of the worker that owns the key, as the shards would write them.
  for (int i = 0; i < 200; ++i) {
    const std::string key = absl::StrCat("key", i);
    LogWriter& log = dir->log(router.ShardOf(Router::Hash(key)));
    log.Set(key, absl::StrCat("v", i), 10 + i, i % 3 == 0 ? kNow + 60'000 : 0);
    model[key] = {absl::StrCat("v", i), 10 + i};
    if (i % 7 == 0) {
      log.Delete(key);
      model.erase(key);
    } else if (i % 11 == 0) {
      log.SetDeadline(key, kNow - 1);  // Expired by the time of the restore: dropped.
      model.erase(key);
    }
    if (i % 10 == 0) log.Commit();
  }
  ASSERT_TRUE(dir->CloseLogs().ok());
  dir.reset();
  std::vector<std::unique_ptr<Shard>> shards;
  ASSERT_TRUE(Restore(dir_, 2, false, &shards).ok());
  EXPECT_EQ(StateOf(shards), model);

  // A snapshot of those shards restores the same state, into another shard count too, and the
  // logs it covers are gone.
  {
    auto again = DataDir::Open(dir_, {.fsync = SyncMode::kAlways}).value();
    std::vector<std::unique_ptr<Shard>> loaded;
    std::vector<Shard*> raw;
    for (int i = 0; i < 2; ++i) {
      loaded.push_back(std::make_unique<Shard>());
      raw.push_back(loaded.back().get());
    }
    ASSERT_TRUE(again->Restore(raw, router, kNow).ok());
    ASSERT_TRUE(again->OpenLogs(2, [](uint16_t) {}).ok());
    ASSERT_TRUE(again->CloseAndSnapshot({raw[0], raw[1]}, kNow).ok());
    EXPECT_EQ(again->Stats().snapshot_keys, model.size());
  }
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_FALSE(entry.path().filename().string().starts_with("log-")) << entry.path();
  }
  for (uint32_t n : {1u, 2u, 3u}) {
    ASSERT_TRUE(Restore(dir_, n, false, &shards).ok());
    EXPECT_EQ(StateOf(shards), model) << n << " shards";
    Router r(n);
    for (uint32_t i = 0; i < n; ++i) {
      shards[i]->ForEach([&](std::string_view k, std::string_view, uint64_t, int64_t) {
        EXPECT_EQ(r.ShardOf(Router::Hash(k)), i) << k;
      });
    }
  }
}

TEST_F(DataDirTest, ASecondOpenOfTheSameDirectoryIsRefused) {
  auto first = DataDir::Open(dir_, {.fsync = SyncMode::kAlways});
  ASSERT_TRUE(first.ok());
  auto second = DataDir::Open(dir_, {.fsync = SyncMode::kAlways});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use"), std::string::npos) << second.status();
}

TEST_F(DataDirTest, VersionsGoOnAboveTheLoadedOnes) {
  auto dir = DataDir::Open(dir_, {.fsync = SyncMode::kAlways}).value();
  ASSERT_TRUE(dir->Restore({}, Router(1), kNow).ok());
  ASSERT_TRUE(dir->OpenLogs(1, [](uint16_t) {}).ok());
  dir->log(0).Set("k", "v", 1000, 0);
  ASSERT_TRUE(dir->CloseLogs().ok());
  dir.reset();
  std::vector<std::unique_ptr<Shard>> shards;
  ASSERT_TRUE(Restore(dir_, 1, false, &shards).ok());
  Request put;
  put.op = Op::kPut;
  put.key = "other";
  put.value = "x";
  put.hash = Router::Hash(put.key);
  shards[0]->Execute(put, kNow);
  EXPECT_EQ(put.version, 1001u);
}

// Builds a log of several blocks in dir_ (one worker), and returns its path and the state after
// each block.
std::string WriteLog(const std::string& dir, std::vector<State>* after_block) {
  auto data = DataDir::Open(dir, {.fsync = SyncMode::kAlways}).value();
  EXPECT_TRUE(data->Restore({}, Router(1), kNow).ok());
  EXPECT_TRUE(data->OpenLogs(1, [](uint16_t) {}).ok());
  LogWriter& log = data->log(0);
  State state;
  after_block->push_back(state);
  for (int block = 0; block < 6; ++block) {
    for (int i = 0; i < 4; ++i) {
      const std::string key = absl::StrCat("k", (block * 4 + i) % 9);
      const std::string value = absl::StrCat("value-", block, "-", i);
      log.Set(key, value, block * 4 + i + 1, 0);
      state[key] = {value, block * 4 + i + 1};
    }
    log.Commit();
    while (log.durable() != log.appended()) usleep(100);  // One block per Commit.
    after_block->push_back(state);
  }
  const std::string path = log.path();
  EXPECT_TRUE(data->CloseLogs().ok());
  return path;
}

TEST_F(DataDirTest, EveryTruncationOfALogLoadsTheBlocksBeforeIt) {
  std::vector<State> after_block;
  const std::string path = WriteLog(dir_, &after_block);
  const std::string whole = ReadFile(path).value();
  std::vector<std::unique_ptr<Shard>> shards;
  size_t last_blocks = 0;
  const size_t header = kBlockHeaderBytes + EncodeHeader({}).size();
  for (size_t length = 0; length <= whole.size(); ++length) {
    { std::ofstream(path, std::ios::binary | std::ios::trunc) << whole.substr(0, length); }
    const absl::Status s = Restore(dir_, 1, false, &shards);
    if (length < header) {  // The MANIFEST lists the log: it had its header once.
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << length << ": " << s;
      EXPECT_NE(s.message().find(path), std::string::npos) << s;
      continue;
    }
    ASSERT_TRUE(s.ok()) << length << ": " << s;
    const State state = StateOf(shards);
    // The state is the one after some number of whole blocks, never fewer than before.
    size_t blocks = after_block.size();
    for (size_t b = 0; b < after_block.size(); ++b) {
      if (after_block[b] == state) blocks = b;
    }
    ASSERT_LT(blocks, after_block.size()) << "a state no prefix had, at length " << length;
    ASSERT_GE(blocks, last_blocks) << length;
    last_blocks = blocks;
  }
  EXPECT_EQ(last_blocks, after_block.size() - 1);
}

// Every flipped byte is refused, in the last block too (a whole block that fails its check was
// changed, not cut short), naming the file and the offset; --load-intact then starts from a
// state some prefix of the blocks had (none of them, for a flip in the header), and leaves a
// directory that starts without it.
TEST_F(DataDirTest, EveryFlippedByteOfALogIsRefusedWithItsOffset) {
  std::vector<State> after_block;
  const std::string path = WriteLog(dir_, &after_block);
  const std::string whole = ReadFile(path).value();
  const std::string pristine = Keep();
  std::vector<std::unique_ptr<Shard>> shards;
  for (size_t at = 0; at < whole.size(); ++at) {
    ResetTo(pristine);
    std::string bad = whole;
    bad[at] ^= 0x20;
    { std::ofstream(path, std::ios::binary | std::ios::trunc) << bad; }
    const absl::Status s = Restore(dir_, 1, false, &shards);
    ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << at << ": " << s;
    EXPECT_NE(s.message().find(path), std::string::npos) << s;
    EXPECT_NE(s.message().find("offset"), std::string::npos) << s;
    EXPECT_NE(s.message().find("--load-intact"), std::string::npos) << s;
    if (at % 5 != 0) continue;  // Each --load-intact rewrites the directory: a sample.
    const absl::Status intact = Restore(dir_, 1, true, &shards);
    ASSERT_TRUE(intact.ok()) << at << ": " << intact;
    const State state = StateOf(shards);
    bool a_prefix = false;
    for (const State& s2 : after_block) a_prefix = a_prefix || s2 == state;
    EXPECT_TRUE(a_prefix) << at;
    ASSERT_TRUE(Restore(dir_, 1, false, &shards).ok()) << at;
    EXPECT_EQ(StateOf(shards), state) << at;
  }
}

TEST_F(DataDirTest, EveryDamageToASnapshotIsRefused) {
  State model;
  {
    auto dir = DataDir::Open(dir_, {.fsync = SyncMode::kAlways}).value();
    ASSERT_TRUE(dir->Restore({}, Router(1), kNow).ok());
    Shard shard;
    for (int i = 0; i < 30; ++i) {
      const std::string key = absl::StrCat("key", i);
      shard.LoadSet({key, Router::Hash(key)}, std::string(i, 'v'), i + 1, 0);
      model[key] = {std::string(i, 'v'), i + 1};
    }
    ASSERT_TRUE(dir->OpenLogs(1, [](uint16_t) {}).ok());
    ASSERT_TRUE(dir->CloseAndSnapshot({&shard}, kNow).ok());
  }
  std::string path;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (entry.path().filename().string().starts_with("snap-")) path = entry.path();
  }
  ASSERT_FALSE(path.empty());
  const std::string whole = ReadFile(path).value();
  std::vector<std::unique_ptr<Shard>> shards;
  ASSERT_TRUE(Restore(dir_, 1, false, &shards).ok());
  EXPECT_EQ(StateOf(shards), model);
  const std::string pristine = Keep();
  for (size_t at = 0; at <= whole.size(); ++at) {
    for (bool truncate : {true, false}) {
      if (!truncate && at == whole.size()) continue;
      ResetTo(pristine);
      std::string bad = truncate ? whole.substr(0, at) : whole;
      if (!truncate) bad[at] ^= 0x01;
      if (truncate && at == whole.size()) continue;
      { std::ofstream(path, std::ios::binary | std::ios::trunc) << bad; }
      const absl::Status s = Restore(dir_, 1, false, &shards);
      ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss)
          << (truncate ? "cut at " : "flip at ") << at << ": " << s;
      EXPECT_NE(s.message().find(path), std::string::npos) << s;
      if (at % 5 != 0) continue;  // Each --load-intact rewrites the directory: a sample.
      ASSERT_TRUE(Restore(dir_, 1, true, &shards).ok()) << at;
      for (const auto& [key, entry] : StateOf(shards)) {
        EXPECT_EQ(model.at(key), entry) << "a key no snapshot held, " << at;
      }
    }
  }
  // A damaged MANIFEST is refused; --load-intact finds the snapshot, which is whole.
  ResetTo(pristine);
  const std::string manifest = ReadFile(dir_ + "/MANIFEST").value();
  for (size_t at = 0; at < manifest.size(); ++at) {
    ResetTo(pristine);
    std::string bad = manifest;
    bad[at] ^= 0x04;
    { std::ofstream(dir_ + "/MANIFEST", std::ios::binary | std::ios::trunc) << bad; }
    const absl::Status s = Restore(dir_, 1, false, &shards);
    ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << at << ": " << s;
    EXPECT_NE(s.message().find("MANIFEST is damaged"), std::string::npos) << s;
    if (at % 5 != 0) continue;
    ASSERT_TRUE(Restore(dir_, 1, true, &shards).ok()) << at;
    EXPECT_EQ(StateOf(shards), model) << at;
  }
}

// Records are states in order: a deadline that has passed by the restore but was cleared
// (Persist) or moved (Expire) by a later record keeps the key; one that nothing changed drops it.
TEST_F(DataDirTest, ADeadlineIsJudgedOnTheKeysFinalStateAfterReplay) {
  {
    auto dir = DataDir::Open(dir_, {.fsync = SyncMode::kAlways}).value();
    ASSERT_TRUE(dir->Restore({}, Router(1), kNow).ok());
    ASSERT_TRUE(dir->OpenLogs(1, [](uint16_t) {}).ok());
    LogWriter& log = dir->log(0);
    for (const char* key : {"persisted", "extended", "expired"}) log.Set(key, "v", 1, kNow - 10);
    log.SetDeadline("persisted", 0);
    log.SetDeadline("extended", kNow + 3'600'000);
    log.Set("rewritten", "old", 2, kNow + 3'600'000);
    log.SetDeadline("rewritten", kNow - 5);
    log.Set("rewritten", "new", 3, 0);
    ASSERT_TRUE(dir->CloseLogs().ok());
  }
  std::vector<std::unique_ptr<Shard>> shards;
  ASSERT_TRUE(Restore(dir_, 1, false, &shards).ok());
  EXPECT_EQ(StateOf(shards),
            (State{{"persisted", {"v", 1}}, {"extended", {"v", 1}}, {"rewritten", {"new", 3}}}));
  EXPECT_EQ(shards[0]->ttl_keys(), 1u);
  EXPECT_EQ(shards[0]->expired(), 0u);  // Dropped at the restore, not reclaimed later.
}

// A key deleted before a snapshot leaves no record, but its version must not come back: the
// snapshot keeps each shard's revision, and every shard goes on above the highest, whatever
// the shard count.
TEST_F(DataDirTest, AVersionNeverComesBackAfterADeleteASnapshotAndARestart) {
  uint64_t deleted_version = 0;
  {
    auto dir = DataDir::Open(dir_, {.fsync = SyncMode::kAlways}).value();
    ASSERT_TRUE(dir->Restore({}, Router(1), kNow).ok());
    ASSERT_TRUE(dir->OpenLogs(1, [](uint16_t) {}).ok());
    Shard shard;
    Request a = PutRequest("a", "1");
    shard.Execute(a, kNow);
    for (int i = 0; i < 3; ++i) {
      Request x = PutRequest("x", "v");
      shard.Execute(x, kNow);
      deleted_version = x.version;
    }
    Request del;
    del.op = Op::kDelete;
    del.key = "x";
    del.hash = Router::Hash(del.key);
    shard.Execute(del, kNow);
    ASSERT_EQ(del.result, Result::kOk);
    ASSERT_TRUE(dir->CloseAndSnapshot({&shard}, kNow).ok());
  }
  ASSERT_GT(deleted_version, 1u);
  for (uint32_t n : {1u, 3u}) {
    std::vector<std::unique_ptr<Shard>> shards;
    ASSERT_TRUE(Restore(dir_, n, false, &shards).ok());
    ASSERT_EQ(StateOf(shards).size(), 1u);
    Router router(n);
    Request x = PutRequest("x", "again");
    shards[router.ShardOf(x.hash)]->Execute(x, kNow);
    EXPECT_GT(x.version, deleted_version) << n << " shards";
  }
}

// A log of `generation` for worker 0 of 1, made outside any MANIFEST, holding `keys`.
void WriteStrayLog(const std::string& dir, uint64_t generation, uint32_t format,
                   const std::vector<std::string>& keys) {
  const FileHeader header{.kind = FileKind::kLog,
                          .format = format,
                          .generation = generation,
                          .shard = 0,
                          .shards = 1,
                          .created_ms = kNow};
  auto log = LogWriter::Create(
                 dir, header, SyncMode::kAlways, [] {}, nullptr)
                 .value();
  for (const std::string& key : keys) log->Set(key, "v", 1, 0);
  ASSERT_TRUE(log->Close().ok());
}

// A log the MANIFEST does not list: one that holds nothing is what a crash between making and
// listing it leaves, and goes; one with records is refused (--load-intact loads it).
TEST_F(DataDirTest, ALogTheManifestDoesNotListIsRemovedIfEmptyAndRefusedIfNot) {
  {
    auto dir = DataDir::Open(dir_, {.fsync = SyncMode::kAlways}).value();
    ASSERT_TRUE(dir->Restore({}, Router(1), kNow).ok());
    ASSERT_TRUE(dir->OpenLogs(1, [](uint16_t) {}).ok());
    dir->log(0).Set("listed", "v", 1, 0);
    ASSERT_TRUE(dir->CloseLogs().ok());
  }
  WriteStrayLog(dir_, 7, kFormatVersion, {});
  const std::string stray = dir_ + "/" + LogName(7, 0);
  // As a crash leaves it with --fsync=always: zeros written ahead after its header.
  std::ofstream(stray, std::ios::binary | std::ios::app) << std::string(1 << 20, '\0');
  std::vector<std::unique_ptr<Shard>> shards;
  ASSERT_TRUE(Restore(dir_, 1, false, &shards).ok());
  EXPECT_EQ(StateOf(shards), (State{{"listed", {"v", 1}}}));
  EXPECT_FALSE(fs::exists(stray));

  WriteStrayLog(dir_, 9, kFormatVersion, {"stray"});
  const absl::Status s = Restore(dir_, 1, false, &shards);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(LogName(9, 0) + " holds records, but the MANIFEST does not list"),
            std::string::npos)
      << s;
  ASSERT_TRUE(Restore(dir_, 1, true, &shards).ok());
  EXPECT_EQ(StateOf(shards), (State{{"listed", {"v", 1}}, {"stray", {"v", 1}}}));
  ASSERT_TRUE(Restore(dir_, 1, false, &shards).ok());  // Repaired: no flag needed now.
  EXPECT_EQ(StateOf(shards).size(), 2u);
}

// Format 1 wrote no MANIFEST before the first snapshot: a directory of format 1 logs alone
// still loads. The same logs in format 2 without a MANIFEST are refused.
TEST_F(DataDirTest, Format1LogsWithoutAManifestStillLoad) {
  fs::create_directories(dir_);
  WriteStrayLog(dir_, 1, 1, {"old"});
  std::vector<std::unique_ptr<Shard>> shards;
  ASSERT_TRUE(Restore(dir_, 1, false, &shards).ok());
  EXPECT_EQ(StateOf(shards), (State{{"old", {"v", 1}}}));
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  WriteStrayLog(dir_, 1, 2, {"new"});
  const absl::Status s = Restore(dir_, 1, false, &shards);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("no MANIFEST"), std::string::npos) << s;
}

// Commits until `done` holds (with everysec and no, a turn that adds nothing writes what the
// last ones coalesced); false after 10 s.
template <typename Done>
bool CommitUntil(LogWriter& log, Done done) {
  for (int i = 0; i < 100000; ++i) {
    if (done()) return true;
    log.Commit();
    usleep(100);
  }
  return done();
}

// A full disk stalls the log: nothing it had written is lost, the torn write is cut off, and
// once there is room the retried write makes the waiting record durable, in every mode.
TEST_F(DataDirTest, AFullDiskStallsTheLogUntilThereIsRoomAndLosesNothing) {
  for (const SyncMode mode : {SyncMode::kAlways, SyncMode::kEverySec, SyncMode::kNo}) {
    SCOPED_TRACE(SyncModeName(mode));
    fs::remove_all(dir_);
    FaultEnv env({.fail_log_after_bytes = 200});
    auto dir = DataDir::Open(dir_, {.fsync = mode, .env = &env}).value();
    ASSERT_TRUE(dir->Restore({}, Router(1), kNow).ok());
    ASSERT_TRUE(dir->OpenLogs(1, [](uint16_t) {}).ok());
    LogWriter& log = dir->log(0);
    log.Set("small", "v", 1, 0);
    ASSERT_TRUE(CommitUntil(log, [&] { return log.durable() == 1 || log.failed(); }));
    ASSERT_FALSE(log.failed());
    log.Set("big", std::string(500, 'x'), 2, 0);
    ASSERT_TRUE(CommitUntil(log, [&] { return log.stalled() || log.failed(); }));
    EXPECT_FALSE(log.failed());
    EXPECT_EQ(log.durable(), 1u);
    EXPECT_NE(log.error().find("No space left on device"), std::string::npos) << log.error();
    EXPECT_NE(log.error().find(log.path()), std::string::npos) << log.error();
    EXPECT_NE(dir->Stats().error, "");
    // Retries fail while the disk is full, and the part of the write that fit is cut off. A
    // retry may be between its append and its cut at any one look: the file must come back
    // to the log's size between retries (one every 2 s at most), never stay past it.
    usleep(300'000);
    EXPECT_TRUE(log.stalled());
    bool cut = false;
    for (int i = 0; i < 300 && !cut; ++i, usleep(10'000)) {
      cut = fs::file_size(log.path()) == log.bytes();
    }
    EXPECT_TRUE(cut) << fs::file_size(log.path()) << " bytes on disk, " << log.bytes()
                     << " in the log";
    env.set_fail_log_after_bytes(0);
    ASSERT_TRUE(CommitUntil(log, [&] { return log.durable() == 2 || log.failed(); }));
    EXPECT_FALSE(log.stalled());
    EXPECT_FALSE(log.failed());
    EXPECT_EQ(log.error(), "");
    EXPECT_EQ(dir->Stats().error, "");
    log.Set("after", "w", 3, 0);
    ASSERT_TRUE(CommitUntil(log, [&] { return log.durable() == 3 || log.failed(); }));
    EXPECT_TRUE(dir->CloseLogs().ok());
    dir.reset();
    std::vector<std::unique_ptr<Shard>> shards;
    ASSERT_TRUE(Restore(dir_, 1, false, &shards).ok());
    EXPECT_EQ(
        StateOf(shards),
        (State{{"small", {"v", 1}}, {"big", {std::string(500, 'x'), 2}}, {"after", {"w", 3}}}));
  }
}

// Whether the file system of `dir` has the room a log with always keeps zeros in (beyond
// LogWriter::kZeroReserve) and is not a tmpfs.
bool RoomForZeros(const std::string& dir) {
  struct statfs fs;
  if (statfs(dir.c_str(), &fs) != 0 || fs.f_type == TMPFS_MAGIC) return false;
  return static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_bsize) >
         LogWriter::kZeroReserve + LogWriter::kZeroAhead;
}

// The bytes of the file at `path` from `offset` on.
std::string BytesFrom(const std::string& path, uint64_t offset) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// With always the syncer keeps zeros written ahead of the records (so that a group commit's
// fdatasync does not also commit the file's growth), and a close cuts them off; the other
// modes write none. The records read back whole either way.
TEST_F(DataDirTest, AnAlwaysLogWritesZerosAheadOfItsRecordsAndACloseCutsThemOff) {
  fs::create_directories(dir_);
  if (!RoomForZeros(dir_)) GTEST_SKIP() << dir_ << " is a tmpfs or nearly full";
  for (const SyncMode mode : {SyncMode::kAlways, SyncMode::kEverySec}) {
    SCOPED_TRACE(SyncModeName(mode));
    fs::remove_all(dir_);
    auto dir = DataDir::Open(dir_, {.fsync = mode}).value();
    ASSERT_TRUE(dir->Restore({}, Router(1), kNow).ok());
    ASSERT_TRUE(dir->OpenLogs(1, [](uint16_t) {}).ok());
    LogWriter& log = dir->log(0);
    const std::string path = log.path();
    for (int i = 0; i < 100; ++i) {
      log.Set(absl::StrCat("k", i), std::string(1000, 'v'), i + 1, 0);
      ASSERT_TRUE(CommitUntil(log, [&] { return log.durable() == log.appended(); }));
    }
    const uint64_t records = log.bytes();
    // Once the syncer is idle, kZeroAhead of zeros at least, less a piece more.
    const uint64_t least = records + (mode == SyncMode::kAlways ? LogWriter::kZeroAhead : 0);
    const uint64_t most = mode == SyncMode::kAlways ? least + LogWriter::kZeroPiece - 1 : records;
    bool reached = false;
    for (int i = 0; i < 1000 && !reached; ++i, usleep(10'000)) {
      reached = fs::file_size(path) >= least;
    }
    EXPECT_TRUE(reached) << fs::file_size(path) << " bytes on disk, " << records << " in the log";
    EXPECT_LE(fs::file_size(path), most);
    EXPECT_EQ(BytesFrom(path, records).find_first_not_of('\0'), std::string::npos);
    ASSERT_TRUE(dir->CloseLogs().ok());
    EXPECT_EQ(fs::file_size(path), records);
    dir.reset();
    std::vector<std::unique_ptr<Shard>> shards;
    ASSERT_TRUE(Restore(dir_, 1, false, &shards).ok());
    EXPECT_EQ(StateOf(shards).size(), 100u);
  }
}

// A stop while the disk is still full (StopRetrying) fails the log: what waited is never called
// durable, and the file holds what was written before.
TEST_F(DataDirTest, AStopWhileTheDiskIsFullFailsTheLogAndNeverCallsItDurable) {
  FaultEnv env({.fail_log_after_bytes = 200});
  auto dir = DataDir::Open(dir_, {.fsync = SyncMode::kAlways, .env = &env}).value();
  ASSERT_TRUE(dir->Restore({}, Router(1), kNow).ok());
  ASSERT_TRUE(dir->OpenLogs(1, [](uint16_t) {}).ok());
  LogWriter& log = dir->log(0);
  log.Set("small", "v", 1, 0);
  ASSERT_TRUE(CommitUntil(log, [&] { return log.durable() == 1 || log.failed(); }));
  log.Set("big", std::string(500, 'x'), 2, 0);
  ASSERT_TRUE(CommitUntil(log, [&] { return log.stalled() || log.failed(); }));
  ASSERT_FALSE(log.failed());
  dir->StopRetrying();
  // The syncer fails the log, then ends its stall: wait for both (the stall outlived the
  // failure by a moment under TSan, where this read them in between).
  ASSERT_TRUE(CommitUntil(log, [&] { return log.failed() && !log.stalled(); }));
  EXPECT_EQ(log.durable(), 1u);
  EXPECT_NE(log.error().find("No space left on device"), std::string::npos) << log.error();
  EXPECT_FALSE(dir->CloseLogs().ok());
  dir.reset();
  std::vector<std::unique_ptr<Shard>> shards;
  ASSERT_TRUE(Restore(dir_, 1, false, &shards).ok());
  EXPECT_EQ(StateOf(shards), (State{{"small", {"v", 1}}}));
}

// Any other write error fails the log for good at once.
TEST_F(DataDirTest, AWriteErrorOtherThanSpaceFailsTheLogForGood) {
  class BrokenDisk final : public Env {
   public:
    int Write(int fd, uint64_t offset, std::string_view data) override {
      return broken_.load() ? EIO : Env::Write(fd, offset, data);
    }
    std::atomic<bool> broken_{false};
  } env;
  auto dir = DataDir::Open(dir_, {.fsync = SyncMode::kEverySec, .env = &env}).value();
  ASSERT_TRUE(dir->Restore({}, Router(1), kNow).ok());
  ASSERT_TRUE(dir->OpenLogs(1, [](uint16_t) {}).ok());
  LogWriter& log = dir->log(0);
  env.broken_ = true;
  log.Set("k", "v", 1, 0);
  ASSERT_TRUE(CommitUntil(log, [&] { return log.failed() || log.stalled(); }));
  EXPECT_TRUE(log.failed());
  EXPECT_FALSE(log.stalled());
  EXPECT_EQ(log.durable(), 0u);
  EXPECT_NE(log.error().find("Input/output error"), std::string::npos) << log.error();
  env.broken_ = false;
  EXPECT_FALSE(dir->CloseLogs().ok());
}

// The power loss of FaultEnv, in a child process (a death test forks it; "fast" so that it
// writes to this test's dir_): with always the record is synced before it is durable() and
// survives; with no it is only written, and the cut takes it back to the log's header.
TEST_F(DataDirTest, APowerLossKeepsWhatWasSyncedAndDropsWhatWasOnlyWritten) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "TSan does not support the threads a forked child starts";
#endif
  GTEST_FLAG_SET(death_test_style, "fast");
  for (const SyncMode mode : {SyncMode::kAlways, SyncMode::kNo}) {
    fs::remove_all(dir_);
    EXPECT_EXIT(
        {
          FaultEnv env({});
          auto dir = DataDir::Open(dir_, {.fsync = mode, .env = &env}).value();
          if (!dir->Restore({}, Router(1), kNow).ok()) std::_Exit(1);
          if (!dir->OpenLogs(1, [](uint16_t) {}).ok()) std::_Exit(1);
          LogWriter& log = dir->log(0);
          log.Set("k", "v", 1, 0);
          // With no, a turn that adds nothing writes what the last ones coalesced.
          while (log.durable() != log.appended()) {
            log.Commit();
            usleep(100);
          }
          env.PowerLoss();
        },
        ::testing::KilledBySignal(SIGKILL), "");
    if (mode == SyncMode::kAlways && RoomForZeros(dir_)) {
      // The zeros the log wrote ahead and synced (before its first batch) are still there,
      // after the records: a restore takes them for the end.
      const std::string log = dir_ + "/" + LogName(1, 0);
      ASSERT_GE(fs::file_size(log), LogWriter::kZeroPiece);
      EXPECT_EQ(BytesFrom(log, 4096).find_first_not_of('\0'), std::string::npos);  // After "k".
    }
    std::vector<std::unique_ptr<Shard>> shards;
    ASSERT_TRUE(Restore(dir_, 1, false, &shards).ok()) << SyncModeName(mode);
    const State expected = mode == SyncMode::kAlways ? State{{"k", {"v", 1}}} : State{};
    EXPECT_EQ(StateOf(shards), expected) << SyncModeName(mode);
    // The restore cut the zeros off (at least a piece before): the header and one record are
    // left.
    EXPECT_LT(fs::file_size(dir_ + "/" + LogName(1, 0)), 4096u) << SyncModeName(mode);
  }
}

}  // namespace
}  // namespace ringkv::persist
