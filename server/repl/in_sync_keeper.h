// InSyncKeeper: a group primary's in-sync set (--acks=isr; issue 23). Every write waits for
// every member's acknowledgement (server/repl/source.h), and the set is recorded in etcd
// (cluster/membership.h: PREFIX/in_sync), where it says who may take over: the leader and
// the members hold every write the group acknowledged (Kafka's in-sync replicas,
// ../shared/research/scale-out.md). The keeper's thread looks at the replicas' flows every
// kTickMs while this server leads:
//   - Shrink: a member that has had no flow in sync on some worker, or has not acknowledged
//     the highest position a write there waited for, for `lag_limit_ms`, leaves the set:
//     recorded in etcd first (from then on it may not take over), then the workers stop
//     waiting for it. Until etcd has it, writes wait (and time out, unacknowledged).
//   - Growth: a replica (by server id) with a flow in sync on every worker joins in the other
//     order: the workers wait for it first; once each has taken that set, and the replica has
//     acknowledged every position the worker had made when it did (so it holds every write
//     acknowledged before), the set is recorded in etcd. One replica at a time, and only one
//     that is alive (it acknowledged something since the last tick, or holds every position:
//     a stopped replica's connection may stay open). One that lacks what a write waits for
//     for `lag_limit_ms`, as a member may, or does not catch up within kJoinMs, is let go;
//     it, and a member that left, is asked again kJoinMs later at the earliest, so that
//     writes do not keep waiting for a replica that cannot keep up.
// A new leader starts with no member (the membership records that at its win): a replica
// joins once it has followed the new primary, so no write is acknowledged until one has.
//
// Threads: its own; Lead and Stop from the membership's thread.
#ifndef RINGKV_SERVER_REPL_IN_SYNC_KEEPER_H_
#define RINGKV_SERVER_REPL_IN_SYNC_KEEPER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "server/repl/in_sync_set.h"
#include "server/repl/replica_flows.h"
#include "server/repl/source.h"

namespace ringkv::repl {

class InSyncKeeper {
 public:
  static constexpr int64_t kTickMs = 20;
  static constexpr int64_t kJoinMs = 5'000;

  struct Options {
    std::vector<const ReplSource*> sources;  // One per worker.
    const ReplicaFlows* flows = nullptr;
    InSyncSet* set = nullptr;
    // Records `members` as the in-sync set of `term` in etcd (Membership::RecordInSync).
    std::function<absl::Status(uint64_t term, const std::vector<std::string>& members)> record;
    int64_t lag_limit_ms = 500;
  };
  explicit InSyncKeeper(Options options);
  ~InSyncKeeper();

  // This server leads `term`, whose empty set etcd holds: the workers wait for nobody yet.
  void Lead(uint64_t term);
  // It no longer leads: the set is left as it is, and no longer changed.
  void Stop();

 private:
  // The set as etcd holds it (replica server ids).
  std::vector<std::string> recorded() const;
  void Run();
  void Tick(uint64_t term, int64_t now_ms);
  // Each replica streaming (by id): where it listens, and what it acknowledged through a flow
  // in sync, per worker (nullopt: none).
  struct Replica {
    std::string address;
    std::vector<std::optional<uint64_t>> acked;
  };
  std::map<std::string, Replica> Replicas() const;
  // Records `members` (with the leader's term); true once etcd holds it.
  bool Record(uint64_t term, std::vector<std::string> members);

  const Options options_;
  // The keeper's thread only.
  struct Behind {
    int64_t since_ms = 0;
    uint64_t target = 0;  // The position the member has to acknowledge.
  };
  std::map<std::pair<std::string, size_t>, Behind> behind_;  // By member and worker.
  struct Joining {
    std::string id;
    uint64_t generation = 0;  // The local set that waits for it.
    int64_t since_ms = 0;
    int64_t behind_since_ms = 0;  // Since when it lacks what a write waits for (0: it does not).
  };
  std::optional<Joining> joining_;
  // Replicas that failed to join or left the set, and when: not asked to join for kJoinMs.
  std::map<std::string, int64_t> let_go_ms_;
  // What each replica had acknowledged at the last tick (a candidate must move, or be whole).
  std::map<std::string, std::vector<std::optional<uint64_t>>> last_acked_;
  uint64_t ticked_term_ = 0;
  bool record_failing_ = false;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                  // Guarded by mu_.
  uint64_t term_ = 0;                  // Guarded by mu_: the term led (0: none).
  std::vector<std::string> recorded_;  // Guarded by mu_.
  std::thread thread_;
};

}  // namespace ringkv::repl

#endif  // RINGKV_SERVER_REPL_IN_SYNC_KEEPER_H_
