// H2Transport: --transport=h2, gRPC over HTTP/2 on libnghttp2, with every loop its own network
// front end: an epoll set of its own (H2LoopIo) holding the connections it accepted from the one
// shared listening socket (Listener), and no thread, lock or hand-off besides.
//
// A call's path (server/h2/):
//   Listener --accept4 in some loop--> Connection (nghttp2 server session, one socket)
//     --HTTP/2 frames--> H2Call (one stream: headers, gRPC message framing, deadline)
//     --messages--> Handler (server/handlers/) --Requests--> engine --answers--> Handler
//     --CallSink--> H2Call (response message, trailers) --nghttp2--> Connection's output
//     --one send per connection per turn--> socket
//
// Connections are counted across loops (--max-connections, refused promptly past it), and a
// loop that runs out of file descriptors refuses the connection waiting with a spare one and
// serves again as soon as descriptors free up (H2LoopIo).
//
// Stop(): the listening socket shuts (new connections are refused by the kernel), and each loop
// ends its calls left with UNAVAILABLE, sends GOAWAY and closes its connections.
//
// Threads: Start, MakeLoopIo, Stop and the destructor on the control thread; the connection
// count and stopping() from any loop thread.
#ifndef RINGKV_SERVER_H2_H2_TRANSPORT_H_
#define RINGKV_SERVER_H2_H2_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "net/listener.h"
#include "server/transport.h"

namespace ringkv {

class H2LoopIo;
class ServerContext;

class H2Transport : public Transport {
 public:
  // Binds the server's --listen address.
  static absl::StatusOr<std::unique_ptr<Transport>> Start(ServerContext& context);

  int port() const override { return listener_->port(); }
  std::unique_ptr<LoopIo> MakeLoopIo(ShardLoop& loop) override;
  void Stop() override;
  Connections connections() const override {
    return {.known = true,
            .open = open_connections(),
            .refused_limit = refused(kTooManyConnections),
            .refused_descriptors = refused(kOutOfDescriptors),
            .refused_tls = refused(kTlsHandshake),
            .refused_handshake_timeout = refused(kHandshakeTimeout)};
  }

  // For the loops, any loop thread.
  const Listener& listener() const { return *listener_; }
  // Set (release) by Stop: loops end their calls and close their connections when they see it.
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }
  // A connection is being accepted: false (and nothing counted) if --max-connections are open.
  bool TakeConnectionSlot();
  void ReleaseConnectionSlot() { connections_.fetch_sub(1, std::memory_order_relaxed); }

  // Connections refused, by why (for /metrics); any thread. Relaxed: counts, ordering nothing.
  enum Refusal {
    kTooManyConnections,
    kOutOfDescriptors,
    kTlsHandshake,
    kHandshakeTimeout,
    kRefusals
  };
  void CountRefused(Refusal why) { refused_[why].fetch_add(1, std::memory_order_relaxed); }
  uint64_t refused(Refusal why) const { return refused_[why].load(std::memory_order_relaxed); }
  int64_t open_connections() const { return connections_.load(std::memory_order_relaxed); }

 private:
  H2Transport(ServerContext& context, std::unique_ptr<Listener> listener)
      : context_(context), listener_(std::move(listener)) {}

  // Constant after Start.
  ServerContext& context_;
  const std::unique_ptr<Listener> listener_;

  // Control thread only: the LoopIos made (owned by their loops), for Stop to wake.
  std::vector<H2LoopIo*> ios_;

  // Shared. connections_: open connections of every loop; a relaxed counter is enough, it
  // orders nothing else. stopping_: see stopping().
  alignas(64) std::atomic<int64_t> connections_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> refused_[kRefusals] = {};
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_H2_H2_TRANSPORT_H_
