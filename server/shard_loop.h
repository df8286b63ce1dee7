// ShardLoop: one daemon worker thread. It owns a gRPC server completion queue and a shard
// engine worker (or, with --engine=lock, runs requests on the shared LockEngine), so one thread
// is both front end and shard owner.
//
// Request path: gRPC hands a call to some worker's completion queue; the call (server/calls.h)
// checks its input, fills in engine Requests and Submit()s them here. The engine turn polls them
// (this is the engine's RequestSource), runs those its own shard owns and sends the others
// through an rte_ring to their owner, which runs them and sends them back; Complete() then hands
// each finished Request to its call, which answers the client once all of its Requests are back.
// A call and its Requests live and die on this thread; only Request pointers cross rings.
//
// Idle: after kSpinTurns empty turns, and once `ServerOptions::spin` has passed since its last
// work, the loop parks in the completion queue's AsyncNext. Before
// parking it sets `parked_` and runs one more engine turn; a worker that put something on a ring
// towards this one reads `parked_` after its enqueue (WakeIfParked, seq_cst on both sides) and
// sets an alarm on this completion queue, which ends the wait. --poll-mode never parks.
//
// Shutdown (driven by Server): the server's Shutdown finishes or cancels the calls, then the
// completion queue is shut down; once it is drained and none of this loop's Requests is out,
// the loop counts itself finished, and keeps answering other workers' Requests until every
// loop has finished, so nobody exits while a Request might still come its way.
//
// Threads: Run() on the loop's own thread, and so everything else, except WakeIfParked (any
// thread) and counters (any thread, relaxed reads).
#ifndef RINGKV_SERVER_SHARD_LOOP_H_
#define RINGKV_SERVER_SHARD_LOOP_H_

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

#include "server/request_limits.h"
#include "shard/lock_engine.h"
#include "shard/request.h"
#include "shard/worker.h"

namespace ringkv {

class Call;
class Server;

// What every completion-queue tag points at: a call and which of its operations completed.
// A null call is the loop's wake-up alarm.
struct CallEvent {
  Call* call;
  int kind;
};

class ShardLoop : public RequestSource {
 public:
  // Empty turns before parking. Few: an empty non-blocking AsyncNext is not cheap (it takes
  // gRPC's poller lock and polls epoll), and the blocking wait polls the sockets itself. With 64
  // turns, two workers served 29k unary calls/s here; with 4, 52k (BENCHMARKS.md).
  static constexpr int kSpinTurns = 4;

  // Exactly one of `worker` (ring engine) and `lock_engine` is set.
  ShardLoop(uint16_t id, Server& server, grpc::ServerCompletionQueue* cq, Worker* worker,
            LockEngine* lock_engine);
  ShardLoop(const ShardLoop&) = delete;
  ShardLoop& operator=(const ShardLoop&) = delete;

  // The thread body: starts accepting calls and runs until shutdown is complete.
  void Run();

  // Loop thread only: a call hands in a Request; the call's pointer goes in Request::tag.
  void Submit(Request* request) {
    pending_.push_back(request);
    ++in_flight_;
  }

  // Loop thread only: `call` is flushed once the current engine turn is over, so the answers
  // that turn completes go out together (one Write for a Stream, not one per answer).
  void RequestFlush(Call* call) { flush_.push_back(call); }

  // Loop thread only: a health Watch stream, told (Call::OnServingChanged) when the server
  // starts draining; removed before it is deleted.
  void AddWatcher(Call* call) { watchers_.push_back(call); }
  void RemoveWatcher(Call* call) { std::erase(watchers_, call); }
  // Any thread: this loop has seen the server start draining and told its watchers.
  bool saw_draining() const { return saw_draining_.load(std::memory_order_acquire); }

  // Any thread, after putting work on a ring towards this loop.
  void WakeIfParked();
  // Control thread, before the completion queue is shut down: no alarm may be set on it after.
  // Waits out an alarm already set (the running loop takes it), then holds wake_pending_.
  void BlockWakeups();

  uint16_t id() const { return id_; }
  Server& server() { return server_; }
  grpc::ServerCompletionQueue* cq() { return cq_; }
  // Requests this loop ran itself (lock engine only; the ring engine counts in WorkerCounters).
  uint64_t lock_ops() const { return lock_ops_.load(std::memory_order_relaxed); }

  // RequestSource, for the engine worker.
  size_t Poll(Request** out, size_t max) override;
  void Complete(Request* request) override;

 private:
  // Handles one completion-queue event.
  void Dispatch(void* tag, bool ok);
  // Drains up to a burst of ready completion-queue events without waiting.
  size_t PollQueue();
  // One engine turn, then the flushes it asked for.
  size_t RunEngine();
  size_t RunEngineTurn();
  // Waits for work; true if something arrived (false: the wait timed out).
  bool Park();
  // Once the server is draining: tells the watchers, then sets saw_draining_.
  void NoticeDraining();

  // Constant after construction.
  const uint16_t id_;
  const std::chrono::nanoseconds spin_;
  Server& server_;
  grpc::ServerCompletionQueue* const cq_;
  Worker* const worker_;
  LockEngine* const lock_engine_;

  // Loop thread only.
  std::deque<Request*> pending_;  // Submitted, not yet polled by the engine.
  std::vector<Call*> flush_;      // Calls to flush after this engine turn.
  std::vector<Call*> watchers_;   // Health Watch streams open on this loop.
  uint64_t in_flight_ = 0;        // Submitted, not yet completed.
  bool queue_drained_ = false;    // AsyncNext said SHUTDOWN.
  bool counted_finished_ = false;
  CallEvent wake_event_{nullptr, 0};
  grpc::Alarm wake_alarm_;        // Set by WakeIfParked (one at a time, see wake_pending_).

  // Shared. parked_: stored seq_cst by this loop before its last engine turn, read after a
  // seq_cst fence by senders (the store-buffer pattern: one side must see the other's write).
  // wake_pending_: set by the sender that arms the alarm, cleared by this loop once the alarm's
  // event is taken, so the alarm is never set twice before it fires.
  alignas(64) std::atomic<bool> parked_{false};
  std::atomic<bool> wake_pending_{false};
  std::atomic<uint64_t> lock_ops_{0};  // Written by this loop only.
  std::atomic<bool> saw_draining_{false};  // Written by this loop only.
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_SHARD_LOOP_H_
