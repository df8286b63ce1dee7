// ConnectionGate: what the h2 transport's loops share about connections: the one listening
// socket every loop accepts from, the count of open connections against --max-connections,
// the refusals by why (for /metrics), and whether the transport is stopping. H2Transport owns
// it; each H2LoopIo and its Connections use it.
//
// Threads: any loop thread; Stop from the control thread. Counts are relaxed: they order
// nothing else.
#ifndef RINGKV_SERVER_H2_CONNECTION_GATE_H_
#define RINGKV_SERVER_H2_CONNECTION_GATE_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "net/listener.h"

namespace ringkv {

class ConnectionGate {
 public:
  ConnectionGate(std::unique_ptr<Listener> listener, uint32_t max_connections)
      : listener_(std::move(listener)), max_connections_(max_connections) {}

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

  // Set (release) by Stop, which also shuts the listening socket: loops end their calls and
  // close their connections when they see it.
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }
  void Stop() {
    stopping_.store(true, std::memory_order_release);
    listener_->Shutdown();
  }

 private:
  const std::unique_ptr<Listener> listener_;
  const uint32_t max_connections_;
  alignas(64) std::atomic<int64_t> connections_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> refused_[kRefusals] = {};
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_H2_CONNECTION_GATE_H_
