// ShardLoop: one daemon worker thread. It owns a shard engine Worker (or, with --engine=lock,
// runs requests on the shared LockEngine) and its transport's LoopIo, so one thread is both
// network front end and shard owner, with no hand-off between them.
//
// Request path: the LoopIo takes a call's bytes off the network and drives its Handler
// (server/handlers/handler.h), which checks the input, fills in engine Requests and Submit()s
// them here (the loop is the handlers' HandlerHost), in one of two lanes (Lane: a call's one
// Request, or a batch's items) that share each poll. The engine turn polls them (this is the
// engine's RequestSource), runs those its own shard owns and sends the others through an rte_ring
// to their owner, which runs them and sends them back; Complete() then hands each finished Request
// to its handler, which answers through its CallSink once all of its Requests are back; the LoopIo
// sends the answers at the end of the turn. A call, its handler and its Requests live and die on
// this thread; only Request pointers cross rings.
//
// One turn: io.Poll(), an engine turn, the handlers' flushes, io.EndTurn(). With the lock
// engine, every kLockExpireEvery-th turn, and every park, also reclaims a few expired keys of
// map `id` (the ring engine's Worker does that in its own turn).
//
// Idle: after kSpinTurns empty turns, and once `ServerOptions::spin` has passed since its last
// work (at once when its SpinGovernor says that a spin would not pay), the loop parks in
// io.Wait(). Before parking it sets `parked_` and runs one more engine turn; a worker that put
// something on a ring towards this one reads `parked_` after its enqueue (WakeIfParked, seq_cst
// on both sides) and calls io.Wake(), which ends the wait.
// --poll-mode never parks.
//
// Shutdown (driven by Server): once the transport has stopped, the LoopIo reports Finished when
// none of this loop's calls is left; once also none of its Requests is out, the loop crosses
// the FinishLine it shares with the other loops, and keeps answering other workers' Requests
// until every loop has crossed it, so nobody exits while a Request might still come its way.
//
// Threads: Run() on the loop's own thread, and so everything else, except WakeIfParked,
// BlockWakeups (any thread) and the counters (any thread, relaxed reads).
#ifndef RINGKV_SERVER_SHARD_LOOP_H_
#define RINGKV_SERVER_SHARD_LOOP_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "server/handlers/handler.h"
#include "server/handlers/handler_host.h"
#include "server/loop_io.h"
#include "server/metrics/call_metrics.h"
#include "server/server_context.h"
#include "server/spin_governor.h"
#include "shard/lock_engine.h"
#include "shard/request.h"
#include "shard/worker.h"

namespace ringkv {

// The loops of one server that will make no more Requests. Any thread.
class FinishLine {
 public:
  explicit FinishLine(size_t loops) : loops_(loops) {}
  // A loop will make no more Requests.
  void Cross() { crossed_.fetch_add(1, std::memory_order_release); }
  // Every loop has crossed. Pairs with the release in Cross: a loop that sees the total also
  // sees that every other loop has no Request out, so no more ring traffic can come its way.
  bool AllCrossed() const { return crossed_.load(std::memory_order_acquire) == loops_; }

 private:
  const size_t loops_;
  std::atomic<size_t> crossed_{0};
};

class ShardLoop final : public RequestSource, public HandlerHost {
 public:
  // Empty turns before parking. Few: with grpc++ an empty non-blocking poll takes gRPC's
  // poller lock, and the blocking wait polls the sockets itself. With 64 turns, two workers
  // served 29k unary calls/s here; with 4, 52k (BENCHMARKS.md).
  static constexpr int kSpinTurns = 4;
  static constexpr uint32_t kLockExpireEvery = 64;
  static constexpr size_t kLockExpireBudget = 256;

  struct Parts {
    uint16_t id = 0;
    ServerContext* context = nullptr;
    FinishLine* finish_line = nullptr;  // Shared by the server's loops.
    // Exactly one is set: the ring engine's worker, or the lock engine.
    Worker* worker = nullptr;
    LockEngine* lock_engine = nullptr;
  };
  explicit ShardLoop(const Parts& parts);
  ShardLoop(const ShardLoop&) = delete;
  ShardLoop& operator=(const ShardLoop&) = delete;

  // Control thread, before Run.
  void SetIo(std::unique_ptr<LoopIo> io) { io_ = std::move(io); }

  // The thread body: starts taking calls and runs until shutdown is complete.
  void Run();

  // HandlerHost (server/handlers/handler_host.h), loop thread only but CompleteExternal. An
  // external Request is counted as in flight like a submitted one, so the loop does not finish
  // before it is back; a flush makes the answers of one engine turn go out together (one Write
  // for a Stream, not one per answer).
  ServerContext& context() override { return context_; }
  void Submit(Request* request, Lane lane) override {
    (lane == Lane::kBatch ? batch_pending_ : pending_).push_back(request);
    ++in_flight_;
  }
  void SubmitExternal(Handler* handler, Request* request) override {
    request->tag = handler;
    ++in_flight_;
  }
  void CompleteExternal(Request* request) override;
  void RequestFlush(Handler* handler) override { flush_.push_back(handler); }
  void AddWatcher(Handler* handler) override { watchers_.push_back(handler); }
  void RemoveWatcher(Handler* handler) override { std::erase(watchers_, handler); }
  // Any thread: this loop has seen the server start draining and told its watchers.
  bool saw_draining() const { return saw_draining_.load(std::memory_order_acquire); }

  // Any thread, after putting work on a ring towards this loop.
  void WakeIfParked();
  // Loop thread: the LoopIo took the event a Wake() caused; the next Wake may ring again.
  void OnWakeEvent() { wake_pending_.store(false, std::memory_order_release); }
  // Control thread: no Wake() may be called on the LoopIo from now on (the grpc++ transport
  // calls this before it shuts the completion queue down). Waits out a wake-up already rung.
  void BlockWakeups();

  uint16_t id() const { return id_; }
  // Requests this loop ran itself (lock engine only; the ring engine counts in WorkerCounters).
  uint64_t lock_ops() const { return lock_ops_.load(std::memory_order_relaxed); }
  // Where the transports count the calls this loop served (loop thread); null without
  // --metrics-listen, so that nothing is timed or counted then.
  CallMetrics* call_metrics() { return metrics_on_ ? &call_metrics_ : nullptr; }
  // For the /metrics scrape, any thread.
  const CallMetrics& call_counts() const { return call_metrics_; }

  // RequestSource, for the engine worker.
  size_t Poll(Request** out, size_t max) override;
  void Complete(Request* request) override;

 private:
  // One engine turn, then the flushes it asked for.
  size_t RunEngine();
  size_t RunEngineTurn();
  // Waits for work; true if something arrived (false: the wait timed out).
  bool Park();
  // Completes the Requests given back by CompleteExternal; how many.
  size_t TakeExternal();
  // Once the server is draining: tells the watchers and the LoopIo, then sets saw_draining_.
  void NoticeDraining();

  // Constant after construction (io_: after SetIo).
  const uint16_t id_;
  const std::chrono::nanoseconds spin_;
  const bool metrics_on_;
  const bool poll_mode_;
  ServerContext& context_;
  FinishLine& finish_line_;
  Worker* const worker_;
  LockEngine* const lock_engine_;
  std::unique_ptr<LoopIo> io_;

  // Loop thread only.
  std::deque<Request*> pending_;        // Submitted (Lane::kCall), not yet polled by the engine.
  std::deque<Request*> batch_pending_;  // The same, Lane::kBatch.
  std::vector<Handler*> flush_;         // Handlers to flush after this engine turn.
  std::vector<Handler*> watchers_;      // Health Watch handlers open on this loop.
  uint64_t in_flight_ = 0;              // Submitted, not yet completed.
  uint32_t lock_turns_ = 0;             // Engine turns, lock engine only.
  SpinGovernor spin_governor_;          // Whether an idle turn spins (with spin_ > 0).
  bool counted_finished_ = false;
  // Shared. parked_: stored seq_cst by this loop before its last engine turn, read after a
  // seq_cst fence by senders (the store-buffer pattern: one side must see the other's write).
  // wake_pending_: set by the sender that rings, cleared by this loop once the LoopIo took the
  // wake-up event, so that at most one wake-up is in flight.
  alignas(64) std::atomic<bool> parked_{false};
  std::atomic<bool> wake_pending_{false};
  std::atomic<uint64_t> lock_ops_{0};      // Written by this loop only.
  std::atomic<bool> saw_draining_{false};  // Written by this loop only.
  // Requests given back by CompleteExternal; external_ready_ says there are some.
  std::mutex external_mu_;
  std::vector<Request*> external_;  // Guarded by external_mu_.
  std::atomic<bool> external_ready_{false};
  // Written by this loop (relaxed stores), read by the /metrics scrape.
  alignas(64) CallMetrics call_metrics_;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_SHARD_LOOP_H_
