// ConnectionGate: what the h2 transport's loops share about connections: the one listening
// socket every loop accepts from, the count of open connections against --max-connections,
// the refusals and the idle closes by why (for /metrics), whether the transport is stopping,
// and, per loop, how long its idlest connection has been idle and the evictions other loops ask
// of it (H2LoopIo says how a full gate makes room). H2Transport owns it; each H2LoopIo and its
// Connections use it.
//
// Threads: any loop thread; RegisterLoop and Stop from the control thread. Counts and the idle
// times are relaxed: they order nothing else (an eviction asked for is re-checked by the loop
// that owns the connection, and the asking loop learns the outcome from the connection count).
#ifndef RINGKV_SERVER_H2_CONNECTION_GATE_H_
#define RINGKV_SERVER_H2_CONNECTION_GATE_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>

#include "absl/base/internal/raw_logging.h"
#include "net/listener.h"
#include "server/loop_io.h"

namespace ringkv {

class ConnectionGate {
 public:
  // `loops`: how many loops will RegisterLoop.
  ConnectionGate(std::unique_ptr<Listener> listener, uint32_t max_connections, uint32_t loops)
      : listener_(std::move(listener)),
        max_connections_(max_connections),
        loops_(new LoopSlot[loops]),
        loop_count_(loops) {}

  const Listener& listener() const { return *listener_; }

  // A connection is being accepted: false (and nothing counted) if --max-connections are open.
  bool TakeConnectionSlot() {
    const int64_t open = connections_.fetch_add(1, std::memory_order_relaxed);
    if (open < static_cast<int64_t>(max_connections_)) return true;
    connections_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  void ReleaseConnectionSlot() { connections_.fetch_sub(1, std::memory_order_relaxed); }
  int64_t open_connections() const { return connections_.load(std::memory_order_relaxed); }

  enum Refusal {
    kTooManyConnections,
    kOutOfDescriptors,
    kTlsHandshake,
    kHandshakeTimeout,
    kRefusals
  };
  void CountRefused(Refusal why) { refused_[why].fetch_add(1, std::memory_order_relaxed); }
  uint64_t refused(Refusal why) const { return refused_[why].load(std::memory_order_relaxed); }

  // Open connections the server closed: idle past --idle-timeout, idle and closed to make room
  // for a new one while --max-connections were open, or their answers unmoved (unread) past
  // --send-timeout.
  enum CloseReason { kIdleTimeout, kIdleEvicted, kSendTimeout, kCloseReasons };
  void CountClosed(CloseReason why) { closed_[why].fetch_add(1, std::memory_order_relaxed); }
  uint64_t closed(CloseReason why) const { return closed_[why].load(std::memory_order_relaxed); }

  // Control thread, once per loop before the loops run (the threads' start publishes it):
  // `io` is woken when another loop asks it to evict. Returns the loop's index.
  uint32_t RegisterLoop(LoopIo* io) {
    ABSL_RAW_CHECK(registered_ < loop_count_, "more loops than the gate was made for");
    loops_[registered_].io = io;
    return registered_++;
  }

  // What a loop's idlest connection that may be evicted has been idle since (the steady clock's
  // ns), or kNoIdle: published by the loop at each sweep and eviction, read by the others.
  static constexpr int64_t kNoIdle = std::numeric_limits<int64_t>::max();
  void PublishIdlest(uint32_t loop, int64_t idle_since_ns) {
    loops_[loop].idlest_since_ns.store(idle_since_ns, std::memory_order_relaxed);
  }
  // The loop other than `self` whose published idlest connection is the idlest, with its time
  // in `*idle_since_ns`; -1 if none has one.
  int IdlestOtherLoop(uint32_t self, int64_t* idle_since_ns) const {
    int idlest = -1;
    *idle_since_ns = kNoIdle;
    for (uint32_t i = 0; i < registered_; ++i) {
      const int64_t since = loops_[i].idlest_since_ns.load(std::memory_order_relaxed);
      if (i != self && since < *idle_since_ns) {
        idlest = static_cast<int>(i);
        *idle_since_ns = since;
      }
    }
    return idlest;
  }

  // Any loop: asks `loop` to close its idlest idle connection, and wakes it.
  void RequestEviction(uint32_t loop) {
    loops_[loop].evictions_asked.fetch_add(1, std::memory_order_relaxed);
    loops_[loop].io->Wake();
  }
  // The owning loop: whether evictions were asked of it (cheap: a load of its own line), and
  // taking them.
  bool evictions_asked(uint32_t loop) const {
    return loops_[loop].evictions_asked.load(std::memory_order_relaxed) != 0;
  }
  uint32_t TakeEvictionsAsked(uint32_t loop) {
    return loops_[loop].evictions_asked.exchange(0, std::memory_order_relaxed);
  }

  // Set (release) by Stop, which also shuts the listening socket: loops end their calls and
  // close their connections when they see it.
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }
  void Stop() {
    stopping_.store(true, std::memory_order_release);
    listener_->Shutdown();
  }

 private:
  // One loop's share, on a line of its own: its owner writes idlest_since_ns at each sweep.
  struct alignas(64) LoopSlot {
    LoopIo* io = nullptr;  // Constant once the loops run.
    std::atomic<int64_t> idlest_since_ns{kNoIdle};
    std::atomic<uint32_t> evictions_asked{0};
  };
  static_assert(sizeof(LoopSlot) == 64);

  const std::unique_ptr<Listener> listener_;
  const uint32_t max_connections_;
  const std::unique_ptr<LoopSlot[]> loops_;
  const uint32_t loop_count_;
  uint32_t registered_ = 0;  // Control thread, before the loops run; constant after.
  alignas(64) std::atomic<int64_t> connections_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> refused_[kRefusals] = {};
  std::atomic<uint64_t> closed_[kCloseReasons] = {};
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_H2_CONNECTION_GATE_H_
