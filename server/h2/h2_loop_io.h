// H2LoopIo: one loop's network front end for the h2 transport: an epoll set holding the shared
// listening socket (ConnectionGate), an eventfd for wake-ups and the connections this loop
// accepted, which it owns and which see it as their H2Io.
//
// One turn, as ShardLoop drives it:
//   Poll():    epoll_wait without waiting; accept what is pending; read every ready socket
//              into its connection's nghttp2 session, whose callbacks turn complete gRPC
//              messages into handler events (handlers submit engine Requests from there);
//              then the calls made ready since (a message for a waiting Read, a write done),
//              and the deadlines that passed;
//   <engine turn: handlers answer through their H2Call>
//   <ShardLoop: once the fence has closed, DropAcks() closes the connections whose answers
//              acknowledging writes are not in the kernel yet (Connection::HoldsAck)>
//   EndTurn(): each connection with something to send hands nghttp2's frames to its socket
//              with one send; then calls and connections that ended are deleted.
// Wait() blocks in epoll_wait (until the next deadline at most); Wake() writes the eventfd.
//
// --io=uring (server/h2/uring.h): the loop's plaintext connections receive and send through
// its ring instead, and the epoll set keeps the listener and TLS connections only; the ring
// watches the epoll set (a multishot poll of its descriptor) and reads the eventfd. EndTurn
// submits the turn's sends with the receives queued since in one io_uring_enter, which also
// posts the completions due; Poll reaps them (no system call while none are due), and Wait
// submits what is queued and waits in one. A closed connection is deleted once the ring has
// given back what it had out.
//
// Running out of file descriptors: accept4 fails with EMFILE while connections wait in the
// kernel's queue, which epoll keeps reporting. The loop then closes a descriptor it keeps spare
// for this, accepts the waiting connection, tells it why in a GOAWAY and closes it, and opens
// its spare again: every connection is answered promptly, and the loop serves the others all
// along. If even the spare cannot be had back, the loop stops watching the socket for 100 ms.
//
// Clients that connect and stay silent: a connection whose TLS handshake and HTTP/2 preface are
// not in within --handshake-timeout is closed (in plaintext after a GOAWAY that says why), so that
// silent or trickling clients cannot hold the --max-connections slots for good.
//
// Idle connections (no call open, nothing received: Connection::SweepIdle). Every sweep period
// (a quarter of --idle-timeout, at most 1 s) the loop sweeps its connections at one clock read:
// it closes those idle past --idle-timeout with a GOAWAY (NO_ERROR, "idle for longer than
// --idle-timeout=..."), and lists those idle for at least kMinIdleToEvict (1 s) as evictable,
// idlest first, publishing its idlest one's time in the gate. The hot path pays a flag per read.
//
// Answers nobody takes (Connection::SweepStalled): a connection whose answers have waited for
// --send-timeout without moving (its socket full, or the client's flow-control windows shut) is
// closed at the next sweep the same way ("answers unread for longer than --send-timeout=..."),
// and what those answers held (--max-reply-memory among it) goes with it. The sweep's period is
// a quarter of the shorter of the two timeouts. The hot path pays an add per DATA frame.
//
// A full gate (--max-connections open) when a connection arrives: the loop that accepted it
// compares its own idlest evictable connection with the idlest the other loops published.
//   - its own is the idlest: it closes that one (GOAWAY saying why) and admits the new one in the
//     slot that frees, at once;
//   - another loop's is: the new connection waits, accepted but not yet admitted (one per loop;
//     the loop stops accepting meanwhile, the others go on), and that loop is asked, through the
//     gate, to evict its idlest idle connection and woken. It re-checks that the connection is
//     still idle (it owns it: no other thread touches it) before closing it. The waiting
//     connection takes the first slot that frees within kEvictWait (100 ms); failing that (the
//     connection asked for spoke meanwhile), the loop looks once more, then refuses it;
//   - no loop has one: refused as before.
// So the limit stays exact, and active clients (calls open, or traffic within the last second)
// are never evicted: when every connection is busy, a new one is refused.
//
// Threads: the loop's thread only, except Wake (any thread).
#ifndef RINGKV_SERVER_H2_H2_LOOP_IO_H_
#define RINGKV_SERVER_H2_H2_LOOP_IO_H_

#include <nghttp2/nghttp2.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_set.h"
#include "server/h2/connection_gate.h"
#include "server/h2/h2_io.h"
#include "server/h2/uring.h"
#include "server/loop_io.h"

namespace ringkv {

class H2LoopIo final : public LoopIo, public H2Io {
 public:
  // `uring`: --io=uring's ring for this loop; null for epoll only.
  H2LoopIo(ConnectionGate& gate, ShardLoop& loop, std::unique_ptr<Uring> uring = nullptr);
  ~H2LoopIo() override;
  H2LoopIo(const H2LoopIo&) = delete;
  H2LoopIo& operator=(const H2LoopIo&) = delete;

  // LoopIo.
  void Start() override;
  size_t Poll() override;
  void EndTurn() override;
  bool Wait(std::chrono::nanoseconds timeout) override;
  void Wake() override;
  void OnDraining() override;
  bool Finished() const override;
  bool HoldsAcks() const override { return !ack_holders_.empty(); }
  void DropAcks() override;

  // H2Io, for connections and calls (server/h2/h2_io.h), loop thread.
  ShardLoop& loop() override { return loop_; }
  ConnectionGate& gate() override { return gate_; }
  const nghttp2_session_callbacks* callbacks() const override { return callbacks_; }
  const nghttp2_option* option() const override { return option_; }
  char* read_buffer() override { return read_buffer_.get(); }
  int64_t TurnNowNs() override {
    if (turn_now_ns_ == 0) turn_now_ns_ = NowNs();
    return turn_now_ns_;
  }
  void MarkDirty(Connection* connection) override;
  void Watch(Connection* connection, uint32_t events) override;
  void Receive(Connection* connection) override;
  void CancelReceive(Connection* connection) override;
  void Send(Connection* connection, std::string_view bytes) override;
  void Send(Connection* connection, const msghdr* message) override;
  void MakeReady(H2Call* call) override;
  void Retire(H2Call* call) override;
  void Retire(Connection* connection) override;
  void AddDeadline(H2Call* call, int64_t at_ns) override { deadlines_.insert({at_ns, call}); }
  void RemoveDeadline(H2Call* call, int64_t at_ns) override { deadlines_.erase({at_ns, call}); }
  void ListAckHolder(Connection* connection) override { ack_holders_.push_back(connection); }
  void CallMade() override { ++live_calls_; }
  void CallGone() override { --live_calls_; }

 private:
  size_t HandleEvents(int timeout_ms);
  // --io=uring: the completions there are, then the epoll set's events if it has any.
  size_t Reap();
  void Complete(const io_uring_cqe& cqe);
  void ReadWake();
  void Accept();
  // Refuses an accepted connection: a GOAWAY that says why, then close.
  void Refuse(int fd, std::string_view why);
  // Says why a connection was refused: a warning at most every 10 s, debug lines between.
  void WarnRefusal(std::string_view why);
  void PauseAccepting();
  void StopAll();
  size_t PumpReady();
  size_t ExpireDeadlines();
  // Closes the connections whose preface is late.
  size_t ExpireGreetings();
  // Makes a Connection of an accepted socket that holds a slot.
  void Admit(int fd, int64_t now);
  std::string TooManyConnections() const;
  // The gate is full as `fd` arrives: evicts an idle connection here or asks another loop to.
  // False if no connection anywhere is idle (then `fd` is the caller's to refuse).
  bool MakeRoomFor(int fd, int64_t now);
  // What is due about idle connections at `now`: evictions asked of this loop, the waiting
  // connection, the sweep.
  size_t TendIdle(int64_t now);
  // Closes what is idle past --idle-timeout or stalled past --send-timeout, and lists what may
  // be evicted; returns the closed.
  size_t Sweep(int64_t now);
  void CloseSwept(std::span<Connection* const> connections, ConnectionGate::CloseReason reason,
                  std::string_view why);
  // This loop's idlest connection that may be evicted (still open and idle), or null; drops
  // what no longer qualifies from evictable_.
  Connection* IdlestEvictable(int64_t now);
  // Closes IdlestEvictable(now), if any; publishes the next idlest either way.
  bool EvictIdlest(int64_t now);
  void PublishIdlest(int64_t now);
  void ListenAgain();

  // Constant after construction.
  ConnectionGate& gate_;
  ShardLoop& loop_;
  const int epoll_fd_;
  const int wake_fd_;
  const uint32_t index_;           // This loop's slot in the gate.
  const int64_t idle_timeout_ns_;  // 0: none.
  const int64_t send_timeout_ns_;  // 0: none.
  const int64_t sweep_every_ns_;
  nghttp2_session_callbacks* callbacks_ = nullptr;
  nghttp2_option* option_ = nullptr;
  std::unique_ptr<char[]> read_buffer_;
  int64_t turn_now_ns_ = 0;       // TurnNowNs's; 0: not read since the last events came.
  std::unique_ptr<Uring> uring_;  // --io=uring; null: epoll only.

  // Loop thread only.
  absl::flat_hash_set<Connection*> connections_;  // Open ones.
  std::vector<Connection*> dirty_;
  // Connections that may hold an answer acknowledging writes (Connection::HoldsAck); EndTurn
  // takes out those that no longer do, before it deletes any connection.
  std::vector<Connection*> ack_holders_;
  std::vector<H2Call*> ready_;
  std::vector<H2Call*> retired_calls_;
  std::vector<Connection*> retired_connections_;
  std::vector<Connection*> draining_;  // Closed, with operations still in the ring.
  uint64_t wake_count_ = 0;            // The ring's read of the eventfd.
  bool epoll_ready_ = false;           // The ring saw the epoll set ready: epoll_wait it.
  bool ring_armed_ = false;            // Start gave the ring its poll and its read.
  absl::btree_set<std::pair<int64_t, H2Call*>> deadlines_;
  // Connections by the time their preface is due, in accept order (so in time order). Entries
  // outlive their connections: one counts only while its connection is open, ungreeted and
  // due by then (a new connection at the same address is due later).
  std::deque<std::pair<int64_t, Connection*>> greetings_;
  size_t live_calls_ = 0;
  // Connections idle long enough to evict at the last sweep, a heap with the idlest in front
  // (its time kept with it: the heap never reads a connection that may be gone). Like greetings_,
  // entries may outlive their connections: one counts only while it is open and still idle.
  std::vector<std::pair<int64_t, Connection*>> evictable_;  // (idle since, connection).
  int64_t next_sweep_ns_ = 0;
  uint32_t quiet_polls_ = 0;  // Polls without events since the clock was last read.
  int waiting_fd_ = -1;       // Accepted, waiting for a slot another loop frees; -1: none.
  int64_t waiting_until_ns_ = 0;
  bool waiting_retried_ = false;  // The waiting connection has been given its second chance.
  int spare_fd_ = -1;             // Kept for the out-of-descriptors refusal; -1 if lost.
  bool listening_ = false;        // The listener is in the epoll set.
  int64_t accept_resume_ns_ = 0;  // While not listening_ for lack of descriptors: when to retry.
  int64_t last_fd_warning_ns_ = 0;
  bool stopped_ = false;  // Saw the transport stop: closed everything.
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_H2_H2_LOOP_IO_H_
