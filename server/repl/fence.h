// Fence: whether a primary of a group on etcd (--etcd, --group; issue 23) may acknowledge
// writes now. It may until a deadline that falls before the lease holding its leader key could
// expire in etcd: cluster/membership.h sets it from each renewal that etcd answered (the send
// time of the renewal, plus the TTL granted, less a margin), and closes it at once when the
// server loses the leadership. A primary that cannot reach etcd stops acknowledging writes by
// itself before another server can be elected (self-fencing): no two primaries of one group
// acknowledge writes at overlapping times, as long as clocks on both sides run at nearly the
// same rate. Outside a group the fence stays open.
//
// Writes check it when they run (server/repl/source.h), when their answers are made
// (Handler::MayAcknowledge) and, on the h2 transport, until those answers are in the kernel
// (server/shard_loop.cc, LoopIo::DropAcks), so that a primary paused or held back between the
// two (SIGSTOP, a long stall, a client's flow control) does not send an acknowledgement after
// its deadline.
//
// The clock is CLOCK_BOOTTIME: it goes on through a suspend, when etcd's does too.
//
// Threads: any (atomics).
#ifndef RINGKV_SERVER_REPL_FENCE_H_
#define RINGKV_SERVER_REPL_FENCE_H_

#include <time.h>

#include <atomic>
#include <cstdint>
#include <limits>

namespace ringkv::repl {

class Fence {
 public:
  static constexpr int64_t kOpen = std::numeric_limits<int64_t>::max();

  // CLOCK_BOOTTIME in nanoseconds.
  static int64_t NowNs() {
    timespec ts{};
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
  }

  // Writes may be acknowledged until `deadline_ns` (NowNs's clock); 0 closes the fence now,
  // kOpen opens it for good.
  void Until(int64_t deadline_ns) { until_.store(deadline_ns, std::memory_order_release); }
  // Keeps the fence closed, whatever the deadline, while `held` (a planned failover hands the
  // leadership over: Server::HandOver).
  void Hold(bool held) { held_.store(held, std::memory_order_release); }
  bool closed() const {
    if (held_.load(std::memory_order_acquire)) return true;
    const int64_t until = until_.load(std::memory_order_acquire);
    return until != kOpen && NowNs() >= until;
  }
  // Nanoseconds left before it closes (kOpen: never; 0: closed).
  int64_t left_ns() const {
    if (held_.load(std::memory_order_acquire)) return 0;
    const int64_t until = until_.load(std::memory_order_acquire);
    if (until == kOpen) return kOpen;
    const int64_t left = until - NowNs();
    return left > 0 ? left : 0;
  }

 private:
  std::atomic<int64_t> until_{kOpen};
  std::atomic<bool> held_{false};
};

}  // namespace ringkv::repl

#endif  // RINGKV_SERVER_REPL_FENCE_H_
