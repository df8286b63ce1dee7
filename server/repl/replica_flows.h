// ReplicaFlows: the replicas a primary streams to, for its stats (issue 22: "the connected
// replicas"). Each Flow call (server/handlers/repl_handlers.cc) owns a ReplicaFlow, which it
// adds once the flow begins and removes before it goes; it stores what the replica
// acknowledges in it as it comes (an atomic: no lock per acknowledgement). The stats read
// every flow under the list's lock.
//
// Threads: each ReplicaFlow is written by its call's loop thread; Add, Remove and ForEach from
// any thread.
#ifndef RINGKV_SERVER_REPL_REPLICA_FLOWS_H_
#define RINGKV_SERVER_REPL_REPLICA_FLOWS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ringkv::repl {

struct ReplicaFlow {
  std::string replica_id;  // The replica's server id (random per start).
  // Where the replica listens (HOST:PORT), as it says; a wildcard host (it listens on
  // 0.0.0.0) is replaced by the address its connection comes from.
  std::string address;
  uint32_t worker = 0;
  std::atomic<uint64_t> acked{0};      // Every record before this position is applied there.
  std::atomic<bool> streaming{false};  // Past its full sync (or resumed): it takes the tail.
};

class ReplicaFlows {
 public:
  void Add(const ReplicaFlow* flow) {
    std::lock_guard lock(mu_);
    flows_.push_back(flow);
  }
  void Remove(const ReplicaFlow* flow) {
    std::lock_guard lock(mu_);
    std::erase(flows_, flow);
  }
  // fn(const ReplicaFlow&) for each, oldest first, under the lock.
  template <typename Fn>
  void ForEach(Fn fn) const {
    std::lock_guard lock(mu_);
    for (const ReplicaFlow* flow : flows_) fn(*flow);
  }

 private:
  mutable std::mutex mu_;
  std::vector<const ReplicaFlow*> flows_;  // Guarded by mu_.
};

}  // namespace ringkv::repl

#endif  // RINGKV_SERVER_REPL_REPLICA_FLOWS_H_
