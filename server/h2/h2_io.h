// H2Io: what a Connection and its H2Calls ask of their loop's network front end (H2LoopIo,
// which implements it): the loop, the ConnectionGate, nghttp2's callbacks and options, the read
// buffer, and the lists of the turn (connections to flush, calls to pump, things to delete at
// the end of the turn, call deadlines). Connections and calls see no more of the loop than this,
// so the loop I/O may own them without their including it back.
//
// Threads: the loop's thread only.
#ifndef RINGKV_SERVER_H2_H2_IO_H_
#define RINGKV_SERVER_H2_H2_IO_H_

#include <nghttp2/nghttp2.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/h2/connection_gate.h"

namespace ringkv {

class Connection;
class H2Call;
class ShardLoop;

class H2Io {
 public:
  // Bytes read from a socket per recv; one buffer per loop, since bytes are handed to the
  // session at once. 16 KiB holds a turn's requests of every small-call shape, and leaves most of
  // a large request message in the socket until its size is known: that rest is then read
  // straight into the call's buffer (H2Session::DataRoom), not into this one and copied.
  static constexpr size_t kReadBufferBytes = 16 * 1024;

  virtual ShardLoop& loop() = 0;
  virtual ConnectionGate& gate() = 0;
  virtual const nghttp2_session_callbacks* callbacks() const = 0;
  virtual const nghttp2_option* option() const = 0;
  virtual char* read_buffer() = 0;  // kReadBufferBytes.
  // The steady clock (LoopIo::NowNs) as of this turn's events, read at its first use in the
  // turn: for what needs the time only roughly (the session's limit on resets, the idle sweep),
  // without a clock read per connection read.
  virtual int64_t TurnNowNs() = 0;
  // `connection` has frames to send: it is flushed at the end of this turn.
  virtual void MarkDirty(Connection* connection) = 0;
  // Events epoll should report for `connection` (EPOLLIN, EPOLLOUT, or none).
  virtual void Watch(Connection* connection, uint32_t events) = 0;
  // --io=uring: a receive into a provided buffer, or a send of `bytes` or a sendmsg of
  // `message` (which stay put until it completes, iovecs and all), for `connection`; its
  // OnReceived or OnSent says how it went.
  virtual void Receive(Connection* connection) = 0;
  virtual void CancelReceive(Connection* connection) = 0;
  virtual void Send(Connection* connection, std::string_view bytes) = 0;
  virtual void Send(Connection* connection, const msghdr* message) = 0;
  // `call` is Pump()ed at the next Poll: a Read it asked for can be answered, or a Write is
  // done. Never from inside the call into its handler.
  virtual void MakeReady(H2Call* call) = 0;
  // Deleted at the end of the turn: never under the caller's feet.
  virtual void Retire(H2Call* call) = 0;
  virtual void Retire(Connection* connection) = 0;
  virtual void AddDeadline(H2Call* call, int64_t at_ns) = 0;
  virtual void RemoveDeadline(H2Call* call, int64_t at_ns) = 0;
  // `connection` holds an answer that acknowledges writes (Connection::HoldsAck): the loop
  // checks it at the end of each turn until it no longer does.
  virtual void ListAckHolder(Connection* connection) = 0;
  virtual void CallMade() = 0;
  virtual void CallGone() = 0;

 protected:
  ~H2Io() = default;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_H2_H2_IO_H_
