// Listener: a listening TCP socket. The server's h2 transport has one, shared by its loops, and
// the --metrics-listen endpoint another. Every h2 loop adds the transport's socket to its own
// epoll set (EPOLLEXCLUSIVE, so a new connection wakes one parked loop, not all) and accepts
// from it itself; the loop that accepts a connection serves it for good.
//
// Why one shared socket rather than a SO_REUSEPORT socket per loop: no acceptor thread and no
// hand-off either way, but SO_REUSEPORT would let a second daemon on the same port silently
// take a share of the connections instead of failing to start, and a kernel that hashes
// connections onto sockets gives a loop connections even while it is the busier one; a loop
// that accepts only when it polls takes more of them when it has more time.
//
// Threads: Bind and the destructor on the control thread; fd() from any thread; Shutdown from
// the control thread while loops may be accepting.
//
//   auto listener = Listener::Bind("127.0.0.1:0");
//   if (!listener.ok()) return listener.status();  // "cannot listen on 127.0.0.1:0: ..."
//   int port = (*listener)->port();
#ifndef RINGKV_NET_LISTENER_H_
#define RINGKV_NET_LISTENER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ringkv {

// The IP address of a connected socket's peer, as text ("127.0.0.1", "::1"); empty if the
// socket has none (closed, or not an IP socket).
std::string PeerHost(int fd);

class Listener {
 public:
  // Binds and listens on "HOST:PORT" ("[v6]:PORT" for IPv6; port 0 picks a free one).
  // UNAVAILABLE, naming the address and the reason, if it cannot.
  static absl::StatusOr<std::unique_ptr<Listener>> Bind(const std::string& address);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  int fd() const { return fd_; }
  int port() const { return port_; }
  // Stops listening: the kernel refuses new connections from now on, and the loops' accept
  // fails with EINVAL, which tells them to drop the socket from their epoll sets. The file
  // descriptor stays open (so its number cannot be reused under the loops) until destruction.
  void Shutdown();

 private:
  Listener(int fd, int port) : fd_(fd), port_(port) {}

  const int fd_;
  const int port_;
};

}  // namespace ringkv

#endif  // RINGKV_NET_LISTENER_H_
