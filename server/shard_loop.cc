#include "server/shard_loop.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <thread>
#include <utility>

#include "absl/time/time.h"
#include "ring/ring.h"

namespace ringkv {
namespace {

// A parked loop wakes at least this often even if nobody rings: a bound on the cost of a lost
// wake-up, and cheap enough (a few microseconds) to leave the idle daemon under 1% of a core.
constexpr auto kParkTimeout = std::chrono::milliseconds(100);

}  // namespace

ShardLoop::ShardLoop(const Parts& parts)
    : id_(parts.id),
      spin_(absl::ToChronoNanoseconds(parts.context->options().spin)),
      metrics_on_(!parts.context->options().metrics_listen.empty()),
      poll_mode_(parts.context->options().poll_mode),
      context_(*parts.context),
      finish_line_(*parts.finish_line),
      worker_(parts.worker),
      lock_engine_(parts.lock_engine),
      spin_governor_(spin_) {}

namespace {

// Moves up to `max` Requests from the front of `queue` to `out`; returns how many.
size_t TakeFront(std::deque<Request*>& queue, Request** out, size_t max) {
  if (queue.empty()) return 0;  // The common case of an idle turn: no erase at all.
  const size_t n = std::min(max, queue.size());
  std::copy_n(queue.begin(), n, out);
  queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(n));
  return n;
}

}  // namespace

size_t ShardLoop::Poll(Request** out, size_t max) {
  // While both lanes wait, each gets half of the burst: calls are not queued behind a batch's
  // thousands of items, and a flood of calls does not stall a batch. Either lane takes what the
  // other leaves.
  const size_t calls = batch_pending_.empty() ? max : std::max<size_t>(1, max / 2);
  size_t n = TakeFront(pending_, out, calls);
  n += TakeFront(batch_pending_, out + n, max - n);
  n += TakeFront(pending_, out + n, max - n);
  return n;
}

void ShardLoop::Complete(Request* request) {
  --in_flight_;
  static_cast<Handler*>(request->tag)->OnRequestDone(request);
}

void ShardLoop::CompleteExternal(Request* request) {
  {
    std::lock_guard<std::mutex> lock(external_mu_);
    external_.push_back(request);
  }
  external_ready_.store(true, std::memory_order_release);
  WakeIfParked();
}

size_t ShardLoop::TakeExternal() {
  std::vector<Request*> done;
  {
    std::lock_guard<std::mutex> lock(external_mu_);
    done.swap(external_);
    external_ready_.store(false, std::memory_order_relaxed);
  }
  for (Request* request : done) Complete(request);
  return done.size();
}

size_t ShardLoop::RunEngine() {
  size_t n = RunEngineTurn();
  if (external_ready_.load(std::memory_order_acquire)) n += TakeExternal();
  // A handler in flush_ cannot have been deleted: it has answers to write, so it has not
  // finished, and the transport deletes handlers only outside the engine turn.
  for (Handler* handler : flush_) handler->Flush();
  flush_.clear();
  return n;
}

size_t ShardLoop::RunEngineTurn() {
  if (worker_ != nullptr) return worker_->RunOnce(*this);
  // Lock engine: this thread runs its own requests under the engine's locks.
  size_t n = 0;
  for (std::deque<Request*>* queue : {&pending_, &batch_pending_}) {
    while (!queue->empty()) {
      Request* request = queue->front();
      queue->pop_front();
      lock_engine_->Execute(*request);
      Complete(request);
      ++n;
    }
  }
  if (++lock_turns_ % kLockExpireEvery == 0) lock_engine_->ExpireDue(id_, kLockExpireBudget);
  if (n > 0)
    lock_ops_.store(lock_ops_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  return n;
}

void ShardLoop::WakeIfParked() {
  // Pairs with the seq_cst store of parked_ in Park(): either that loop's last engine turn sees
  // what we enqueued, or we see parked_ and ring.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!parked_.load(std::memory_order_relaxed)) return;
  if (wake_pending_.exchange(true, std::memory_order_acq_rel)) return;  // Already rung.
  io_->Wake();
}

void ShardLoop::BlockWakeups() {
  while (wake_pending_.exchange(true, std::memory_order_acq_rel)) std::this_thread::yield();
}

bool ShardLoop::Park() {
  // An idle loop reclaims expired keys of its lock-engine map before it sleeps, since its turns
  // (and so its every-kLockExpireEvery-th reclaim) are few while parked.
  if (lock_engine_ != nullptr) lock_engine_->ExpireDue(id_, kLockExpireBudget);
  parked_.store(true, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool woken = RunEngine() > 0;
  if (!woken) woken = io_->Wait(kParkTimeout);
  parked_.store(false, std::memory_order_relaxed);
  return woken;
}

void ShardLoop::NoticeDraining() {
  for (Handler* handler : std::vector<Handler*>(watchers_)) handler->OnServingChanged();
  io_->OnDraining();
  saw_draining_.store(true, std::memory_order_release);
}

void ShardLoop::Run() {
  io_->Start();
  int idle_turns = 0;
  auto last_work = std::chrono::steady_clock::now();
  // Since last_work: the loop came to idle (past kSpinTurns empty turns); and it did so while
  // answers waited for the log.
  bool idle_since_work = false;
  bool held_since_work = false;
  for (;;) {
    if (!saw_draining_.load(std::memory_order_relaxed) && context_.shutting_down()) {
      NoticeDraining();
    }
    const size_t work = io_->Poll() + RunEngine();
    // Answers acknowledging writes were made while the fence was open (Handler::
    // MayAcknowledge), but some have not left: once it has closed (server/repl/fence.h), their
    // connections are dropped. Only those: a replica's flow, or a failover call waiting for its
    // answer, goes on (a planned failover holds the fence while its target applies the last
    // records).
    if (io_->HoldsAcks() && context_.fenced()) io_->DropAcks();
    io_->EndTurn();
    const bool io_finished = io_->Finished();
    if (io_finished && in_flight_ == 0 && (worker_ == nullptr || worker_->Drained())) {
      if (!counted_finished_) {
        counted_finished_ = true;
        finish_line_.Cross();
      }
      if (finish_line_.AllCrossed()) return;
    }
    if (work > 0) {
      idle_turns = 0;
      // A replica's worker applying its stream: no call is due, the next message rings.
      const size_t stream = worker_ != nullptr ? worker_->stream_work() : 0;
      if (spin_.count() > 0 && work > stream) {
        const auto now = std::chrono::steady_clock::now();
        // Answers released by the log's sync are the spell's own work, not a client's call.
        spin_governor_.OnWork(work - stream, idle_since_work && !held_since_work
                                                 ? now - last_work
                                                 : std::chrono::nanoseconds(0));
        idle_since_work = false;
        held_since_work = false;
        last_work = now;
      }
      continue;
    }
    // Keep polling a while: a client's next call often comes within a round trip, and a parked
    // worker pays a thread wake-up for it (one client: 7k -> 14k calls/s with 200 us). Only
    // while that pays (server/spin_governor.h), and not while answers wait for the log: a
    // client with one call in flight sends nothing before it has its answer, and the syncer
    // wakes the loop (spinning there cost 21.6 µs of server CPU per PUT against 16.3 parked,
    // with --fsync=always).
    if (++idle_turns < kSpinTurns) {
      CpuRelax();
      continue;
    }
    // Idle, for the governor, from here: a few empty turns in a burst are not a gap.
    const bool holding = worker_ != nullptr && worker_->HoldsAnswers();
    idle_since_work = true;
    held_since_work = held_since_work || holding;
    if (!holding && spin_governor_.ShouldSpin() &&
        std::chrono::steady_clock::now() - last_work < spin_) {
      CpuRelax();
      continue;
    }
    idle_turns = 0;
    // Answers held for the journal need no polling: its syncer wakes the loop.
    const bool backlogged = worker_ != nullptr && worker_->Backlogged();
    if (poll_mode_ || backlogged) {
      std::this_thread::yield();  // Full rings: let the consumer run.
    } else if (io_finished) {
      // Only the other loops' last Requests can still come; the transport is gone.
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    } else if (!Park()) {
      // Timed out with nothing to do: park again after one turn instead of spinning again.
      idle_turns = kSpinTurns - 1;
    }
  }
}

}  // namespace ringkv
