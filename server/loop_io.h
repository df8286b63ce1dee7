// LoopIo: a transport's network side of one ShardLoop. The loop thread calls it each turn:
//
//   io.Poll();       take whatever I/O is ready, without waiting: new calls, request messages,
//                    cancellations; handlers submit engine Requests from inside it
//   <engine turn>    Requests run; handlers write their answers (CallSink)
//   io.EndTurn();    send what the turn produced: one write per connection per turn
//   io.Wait(t);      only when the loop parks: block until I/O, a Wake or the timeout
//
// Wake() is the only method for other threads: it ends a Wait. ShardLoop decides when to call
// it (the parked flag and one wake-up in flight at a time, ShardLoop::WakeIfParked); the
// implementation delivers it as an event of its own and calls ShardLoop::OnWakeEvent when that
// event is taken. The transports: server/grpc/ (a completion queue per loop) and server/h2/ (an
// epoll set per loop).
#ifndef RINGKV_SERVER_LOOP_IO_H_
#define RINGKV_SERVER_LOOP_IO_H_

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ringkv {

class LoopIo {
 public:
  virtual ~LoopIo() = default;

  // Loop thread, once, before the first turn: start taking calls.
  virtual void Start() = 0;
  // Loop thread: handles the I/O that is ready now; returns how many events it handled.
  virtual size_t Poll() = 0;
  // Loop thread, after each engine turn: sends what the turn produced.
  virtual void EndTurn() {}
  // Loop thread, before EndTurn: whether answers that acknowledge writes (CallSink::
  // Acknowledges) may still wait to reach the kernel, and closing their connections, which
  // ShardLoop does once the server's fence has closed (server/repl/fence.h), so that no
  // acknowledgement leaves after it. A transport whose answers leave its hands as they are made
  // (grpc++, which buffers them itself) holds none.
  virtual bool HoldsAcks() const { return false; }
  virtual void DropAcks() {}
  // Loop thread: waits up to `timeout` for I/O or a Wake and handles what came; false if the
  // wait timed out with nothing to do.
  virtual bool Wait(std::chrono::nanoseconds timeout) = 0;
  // Any thread: ends a Wait in progress, or the next one.
  virtual void Wake() = 0;
  // Loop thread: the server has started draining (ShardLoop tells its handlers too).
  virtual void OnDraining() {}
  // Loop thread: the transport has stopped (Transport::Stop), no call of this loop is left and
  // no event will come any more.
  virtual bool Finished() const = 0;

  // The steady clock in nanoseconds: the time base of call deadlines and call timings.
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_LOOP_IO_H_
