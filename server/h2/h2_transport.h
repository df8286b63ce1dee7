// H2Transport: --transport=h2, gRPC over HTTP/2 (ringkv's own session, h2_session.h; or
// libnghttp2's with --h2=nghttp2), with every loop its own network
// front end: an epoll set of its own (H2LoopIo) holding the connections it accepted from the one
// shared listening socket (Listener), and no thread, lock or hand-off besides.
//
// A call's path (server/h2/):
//   Listener --accept4 in some loop--> Connection (an HTTP/2 server session, one socket)
//     --HTTP/2 frames--> H2Call (one stream: headers, gRPC message framing, deadline)
//     --messages--> Handler (server/handlers/) --Requests--> engine --answers--> Handler
//     --CallSink--> H2Call (response message, trailers) --session--> Connection's output
//     --one send per connection per turn--> socket
//
// Connections are counted across loops (--max-connections: past it a new one makes the longest
// idle connection go, or is refused promptly if none is idle), connections idle past
// --idle-timeout are closed, and a loop that runs out of file descriptors refuses the
// connection waiting with a spare one and serves again as soon as descriptors free up
// (H2LoopIo).
//
// Stop(): the listening socket shuts (new connections are refused by the kernel), and each loop
// ends its calls left with UNAVAILABLE, sends GOAWAY and closes its connections.
//
// Threads: Start, MakeLoopIo, Stop and the destructor on the control thread; the loops share
// its ConnectionGate (server/h2/connection_gate.h).
#ifndef RINGKV_SERVER_H2_H2_TRANSPORT_H_
#define RINGKV_SERVER_H2_H2_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/h2/connection_gate.h"
#include "server/transport.h"

namespace ringkv {

class H2LoopIo;
class ServerContext;

class H2Transport : public Transport {
 public:
  // Binds the server's --listen address.
  static absl::StatusOr<std::unique_ptr<Transport>> Start(ServerContext& context);

  int port() const override { return gate_.listener().port(); }
  std::unique_ptr<LoopIo> MakeLoopIo(ShardLoop& loop) override;
  void Stop() override;
  Connections connections() const override {
    return {.known = true,
            .open = gate_.open_connections(),
            .refused_limit = gate_.refused(ConnectionGate::kTooManyConnections),
            .refused_descriptors = gate_.refused(ConnectionGate::kOutOfDescriptors),
            .refused_tls = gate_.refused(ConnectionGate::kTlsHandshake),
            .refused_handshake_timeout = gate_.refused(ConnectionGate::kHandshakeTimeout),
            .closed_idle_timeout = gate_.closed(ConnectionGate::kIdleTimeout),
            .closed_idle_evicted = gate_.closed(ConnectionGate::kIdleEvicted),
            .closed_send_timeout = gate_.closed(ConnectionGate::kSendTimeout)};
  }

 private:
  H2Transport(std::unique_ptr<Listener> listener, uint32_t max_connections, uint32_t loops)
      : gate_(std::move(listener), max_connections, loops) {}

  // The listening socket, the connection count, the stop flag and the loops' idle connections,
  // shared by the loops.
  ConnectionGate gate_;
  // Control thread only: the LoopIos made (owned by their loops), for Stop to wake.
  std::vector<H2LoopIo*> ios_;
  bool uring_ = false;  // --io=uring, and io_uring works here.
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_H2_H2_TRANSPORT_H_
