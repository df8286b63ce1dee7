// Transport: how ringkv-server takes calls off the network. Two implement it:
//   - H2Transport (server/h2/, --transport=h2, the default): HTTP/2 (ringkv's own session, or
//     nghttp2's with --h2=nghttp2) inside each loop's own epoll set; every loop accepts from one
//     shared listening socket.
//   - GrpcTransport (server/grpc/, --transport=grpc): grpc++'s async server with a completion
//     queue per loop; the reference implementation and the fallback.
// Both route by the method table (server/handlers/methods.h) and drive the same Handlers, so an
// RPC is written once.
//
// Lifecycle, all on the control thread: the factory binds the listening address (the port is
// known from then on); MakeLoopIo once per loop, before the loops run; after the drain's grace,
// Stop() ends the calls still open and closes every connection, and each LoopIo then reports
// Finished once its loop's calls are gone; the destructor runs after the loops have exited.
#ifndef RINGKV_SERVER_TRANSPORT_H_
#define RINGKV_SERVER_TRANSPORT_H_

#include <cstdint>
#include <memory>

#include "server/loop_io.h"

namespace ringkv {

class ShardLoop;

class Transport {
 public:
  virtual ~Transport() = default;

  // The port bound (the one picked, for a listen address ending in ":0").
  virtual int port() const = 0;
  virtual std::unique_ptr<LoopIo> MakeLoopIo(ShardLoop& loop) = 0;
  virtual void Stop() = 0;

  // Client connections, for /metrics (any thread): open now, refused since start by why, and
  // closed for being idle.
  // `known` is false where the transport cannot tell (grpc++).
  struct Connections {
    bool known = false;
    int64_t open = 0;
    uint64_t refused_limit = 0;              // --max-connections reached.
    uint64_t refused_descriptors = 0;        // Out of file descriptors.
    uint64_t refused_tls = 0;                // Failed TLS handshakes.
    uint64_t refused_handshake_timeout = 0;  // No preface within --handshake-timeout.
    uint64_t closed_idle_timeout = 0;        // Open, but idle past --idle-timeout.
    uint64_t closed_idle_evicted = 0;        // Idle, closed to make room past --max-connections.
    uint64_t closed_send_timeout = 0;        // Its answers unread past --send-timeout.
  };
  virtual Connections connections() const { return {}; }
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_TRANSPORT_H_
