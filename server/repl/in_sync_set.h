// InSyncSet: the replicas (by server id) whose acknowledgements every write waits for, in a
// group with --acks=isr (issue 23; server/repl/in_sync_keeper.h keeps it). The keeper changes
// it; each worker's ReplSource takes the new set at its next turn (one atomic load per turn
// when it has not changed) and says so through its figures (`taken`).
//
// Threads: Set from the keeper's thread; generation and members from any.
#ifndef RINGKV_SERVER_REPL_IN_SYNC_SET_H_
#define RINGKV_SERVER_REPL_IN_SYNC_SET_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ringkv::repl {

class InSyncSet {
 public:
  // The new set; its generation (each Set gets the next one, from 1).
  uint64_t Set(std::vector<std::string> members) {
    std::lock_guard lock(mu_);
    members_ = std::move(members);
    const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
    generation_.store(generation, std::memory_order_release);
    return generation;
  }
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  // The set, and its generation in *generation.
  std::vector<std::string> members(uint64_t* generation) const {
    std::lock_guard lock(mu_);
    *generation = generation_.load(std::memory_order_relaxed);
    return members_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> members_;  // Guarded by mu_.
  std::atomic<uint64_t> generation_{0};
};

}  // namespace ringkv::repl

#endif  // RINGKV_SERVER_REPL_IN_SYNC_SET_H_
