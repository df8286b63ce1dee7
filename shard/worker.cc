#include "shard/worker.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "shard/internal/tsc.h"

namespace ringkv {

using internal::Rdtscp;

Worker::Worker(uint16_t id, const EngineOptions& options, const Router& router, Links links)
    : id_(id),
      router_(router),
      burst_(options.burst),
      profile_(options.profile),
      outbound_(std::move(links.outbound)),
      inbound_(std::move(links.inbound)),
      counters_(*links.counters),
      waker_(options.waker),
      clock_(options.clock),
      shard_(options.reserve_per_shard, options.memory, options.reserve_payload),
      outboxes_(outbound_.size()) {
  ABSL_RAW_CHECK(burst_ >= 1 && burst_ <= kMaxBurst, "burst out of range");
  ABSL_RAW_CHECK(outbound_.size() == router_.shards(), "one outbound ring per worker");
}

size_t Worker::RunOnce(RequestSource& source) {
  size_t handled = 0;
  if (next_snapshot_.load(std::memory_order_relaxed) != nullptr) CutSnapshot();
  if (backlog_ < kMaxBacklog && (journal_ == nullptr || !journal_->backlogged())) {
    Request* batch[kMaxBurst];
    const size_t n = source.Poll(batch, burst_);
    if (n > 0) {
      Admit(batch, n, source);
      handled += n;
    }
  }
  handled += DrainInbound(source);
  if (journal_ != nullptr) handled += CommitJournal(source);
  if (replication_ != nullptr) handled += ReplicationTurn(source);
  if (backlog_ > 0) Flush();
  // A replica's keys expire when its primary says (reads hide them meanwhile).
  if (shard_.has_ttls() && (replication_ == nullptr || !replication_->follows())) {
    handled += ExpireDue();
  }
  if (snapshot_ != nullptr) {
    handled += WalkSnapshot(handled > 0 ? kBusySnapshotSlice : kSnapshotSlice);
  }
  // Moving buckets changes none of the shard's counters.
  if (handled == 0 && shard_.has_upkeep()) handled += shard_.Upkeep(kIdleGrowBuckets);
  return handled;
}

void Worker::StartSnapshot(SnapshotJob* job) {
  while (!TryStartSnapshot(job)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void Worker::CutSnapshot() {
  SnapshotJob* job = next_snapshot_.exchange(nullptr, std::memory_order_acquire);
  job->OnCut();
  if (journal_ != nullptr && job->cuts_journal()) journal_->Cut();
  shard_.BeginSnapshot(job, clock_());
  snapshot_ = job;
}

size_t Worker::WalkSnapshot(std::chrono::microseconds slice) {
  const auto deadline = std::chrono::steady_clock::now() + slice;
  size_t slices = 0;
  while (!snapshot_->backlogged()) {
    ++slices;
    if (shard_.SnapshotStep(kSnapshotBuckets)) {
      snapshot_->Finish(shard_.snapshot_revision());
      snapshot_ = nullptr;
      snapshot_claimed_.store(false, std::memory_order_release);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
  }
  return slices;
}

size_t Worker::ExpireDue() {
  const size_t reclaimed = shard_.ExpireDue(clock_(), expire_budget_);
  expire_budget_ = reclaimed == expire_budget_ ? std::min(expire_budget_ * 2, kMaxExpireBudget)
                                               : kMinExpireBudget;
  if (reclaimed > 0) PublishShardCounters();
  return reclaimed;
}

void Worker::PublishShardCounters() {
  counters_.keys.store(shard_.size(), std::memory_order_relaxed);
  counters_.payload_bytes.store(shard_.payload_bytes(), std::memory_order_relaxed);
  counters_.ttl_keys.store(shard_.ttl_keys(), std::memory_order_relaxed);
  counters_.expired.store(shard_.expired(), std::memory_order_relaxed);
  counters_.memory_bytes.store(shard_.memory_bytes(), std::memory_order_relaxed);
  counters_.evicted.store(shard_.evicted(), std::memory_order_relaxed);
  counters_.table_bytes.store(shard_.table_bytes(), std::memory_order_relaxed);
  counters_.arena_bytes.store(shard_.arena_bytes(), std::memory_order_relaxed);
  counters_.arena_dead_bytes.store(shard_.arena_dead_bytes(), std::memory_order_relaxed);
  counters_.compacted_bytes.store(shard_.compacted_bytes(), std::memory_order_relaxed);
}

namespace {
// Spins with the pause hint; after a long idle stretch gives the core away, so that with more
// workers than cores the one that has work gets to run.
void Idle(size_t& idle_turns) {
  CpuRelax();
  if (++idle_turns % 256 == 0) std::this_thread::yield();
}
}  // namespace

void Worker::RunToCompletion(RequestSource& source, std::atomic<uint32_t>& finished_workers,
                             uint32_t total_workers) {
  size_t idle_turns = 0;
  while (!source.Finished()) {
    if (RunOnce(source) == 0) Idle(idle_turns);
  }
  // Release pairs with the acquire below in the other workers: whoever sees the count reach the
  // total also sees that every worker's requests were completed, so no more traffic can come.
  finished_workers.fetch_add(1, std::memory_order_release);
  while (finished_workers.load(std::memory_order_acquire) < total_workers) {
    if (RunOnce(source) == 0) Idle(idle_turns);
  }
}

void Worker::Admit(Request** batch, size_t n, RequestSource& source) {
  const uint64_t t0 = profile_ ? Rdtscp() : 0;
  for (size_t i = 0; i < n; ++i) {
    Request* r = batch[i];
    r->hash = Router::Hash(r->key);
    r->owner = r->op == Op::kScan || r->op == Op::kReplicate
                   ? r->target
                   : static_cast<uint16_t>(router_.ShardOf(r->hash));
    r->origin = id_;
    r->result = Result::kPending;
    // A loan is returned where its holder lets go: only this thread may take one.
    if (r->owner != id_) r->lend = false;
  }
  if (profile_) {
    WorkerCounters::Add(counters_.hash_cycles, Rdtscp() - t0);
    WorkerCounters::Add(counters_.hash_ops, n);
  }
  size_t local = 0;
  for (size_t i = 0; i < n; ++i) {
    if (batch[i]->owner == id_) {
      batch[local++] = batch[i];
    } else {
      Push(batch[i]->owner, batch[i]);
    }
  }
  Execute(batch, local);
  for (size_t i = 0; i < local; ++i) Answer(batch[i], source, true);
}

void Worker::Answer(Request* request, RequestSource& source, bool hold_if_needed) {
  // Kept by the replication port, which gives it back in a later turn.
  if (request->result == Result::kPending && request->op == Op::kReplicate) return;
  // Without a journal log_seq is never read: it sits on the request's second cache line.
  if (hold_if_needed && journal_ != nullptr && request->log_seq != 0) {
    held_.push_back(request);
  } else if (((request->repl_seq != 0 && request->result == Result::kOk) ||
              (request->linearizable && replication_ != nullptr)) &&
             replication_->Await(*request)) [[unlikely]] {
    return;  // Given back by a later ReplicationTurn.
  } else {
    Deliver(request, source);
  }
}

void Worker::Deliver(Request* request, RequestSource& source) {
  if (request->origin == id_) {
    source.Complete(request);
  } else {
    Push(request->origin, request);
  }
}

size_t Worker::CommitJournal(RequestSource& source) {
  journal_->Commit();
  if (held_.empty()) return 0;
  const bool failed = journal_->failed();
  const uint64_t durable = journal_->durable();
  size_t released = 0;
  while (!held_.empty() && (failed || held_.front()->log_seq <= durable)) {
    Request* request = held_.front();
    held_.pop_front();
    // Run, but never made durable: not acknowledged.
    if (request->log_seq > durable) request->result = Result::kUnavailable;
    Answer(request, source, false);
    ++released;
  }
  return released;
}

size_t Worker::DrainInbound(RequestSource& source) {
  size_t handled = 0;
  Request* batch[kMaxBurst];
  Request* answers[kMaxBurst];
  for (Ring* ring : inbound_) {
    const uint64_t t0 = profile_ ? Rdtscp() : 0;
    const size_t n = ring->DequeueBurst(reinterpret_cast<void**>(batch), burst_);
    if (profile_) {
      WorkerCounters::Add(counters_.ring_cycles, Rdtscp() - t0);
      WorkerCounters::Add(counters_.ring_ops, std::max<size_t>(n, 1));
    }
    if (n == 0) continue;
    WorkerCounters::Add(counters_.received, n);
    // A request that comes back to its origin is an answer; any other is work for this shard.
    size_t work = 0;
    size_t done = 0;
    for (size_t i = 0; i < n; ++i) {
      if (batch[i]->origin == id_) {
        answers[done++] = batch[i];
      } else {
        batch[work++] = batch[i];
      }
    }
    Execute(batch, work);
    for (size_t i = 0; i < work; ++i) Answer(batch[i], source, true);
    for (size_t i = 0; i < done; ++i) source.Complete(answers[i]);
    handled += n;
  }
  return handled;
}

void Worker::Execute(Request** batch, size_t n) {
  if (n == 0) return;
  const uint64_t t0 = profile_ ? Rdtscp() : 0;
  // Start every slot's DRAM fetch before touching any; each record's (which needs its slot in)
  // kRecordsAhead requests before that one runs. A burst's misses then overlap instead of
  // queueing one behind another, and reading a slot for its record waits less than it would
  // right after the slots' pass.
  for (size_t i = 0; i < n; ++i) shard_.Prefetch({batch[i]->key, batch[i]->hash});
  for (size_t i = 0; i < std::min(n, kRecordsAhead); ++i) PrefetchRecord(*batch[i]);
  // The clock only matters to keys with a TTL; a shard without any never reads it.
  const int64_t now_ms = shard_.has_ttls() ? clock_() : 0;
  if (journal_ == nullptr) {
    for (size_t i = 0; i < n; ++i) {
      if (i + kRecordsAhead < n) PrefetchRecord(*batch[i + kRecordsAhead]);
      if (batch[i]->op == Op::kReplicate) [[unlikely]] {
        ServeReplication(*batch[i], clock_());
        continue;
      }
      shard_.Execute(*batch[i], now_ms);
    }
  } else {
    ExecuteJournaled(batch, n, now_ms);
  }
  if (profile_) {
    WorkerCounters::Add(counters_.map_cycles, Rdtscp() - t0);
    WorkerCounters::Add(counters_.map_ops, n);
  }
  WorkerCounters::Add(counters_.executed, n);
  PublishShardCounters();
}

void Worker::ExecuteJournaled(Request** batch, size_t n, int64_t now_ms) {
  const bool refuse_writes = journal_->failed() || journal_->stalled();
  const bool hold = journal_->holds_acks();
  for (size_t i = 0; i < n; ++i) {
    if (i + kRecordsAhead < n) PrefetchRecord(*batch[i + kRecordsAhead]);
    Request& r = *batch[i];
    r.log_seq = 0;
    r.repl_seq = 0;
    if (r.op == Op::kReplicate) [[unlikely]] {
      ServeReplication(r, clock_());
      continue;
    }
    if (refuse_writes && r.op != Op::kGet && r.op != Op::kScan) {
      r.result = Result::kRefused;
      continue;
    }
    if (r.replicas > 0) [[unlikely]] {
      ExecuteReplicated(r, now_ms, hold);
      continue;
    }
    if (r.linearizable) [[unlikely]] {
      // Held behind the writes still held, and the records not yet durable, that it may have
      // seen: released in order, it then waits behind them for replicas (Answer).
      const bool waiting = !held_.empty() || journal_->appended() > journal_->durable();
      shard_.Execute(r, now_ms);
      if (hold && waiting) r.log_seq = journal_->appended();
      continue;
    }
    const uint64_t before = journal_->appended();
    shard_.Execute(r, now_ms);
    if (hold && journal_->appended() != before) r.log_seq = journal_->appended();
  }
}

void Worker::ExecuteReplicated(Request& r, int64_t now_ms, bool hold) {
  const uint32_t in_sync = replication_ != nullptr ? replication_->in_sync() : 0;
  if (in_sync < r.replicas) {
    r.result = Result::kTooFewReplicas;
    r.acked_replicas = static_cast<uint8_t>(in_sync);
    return;
  }
  const uint64_t before = journal_->appended();
  const uint64_t position = replication_->position();
  shard_.Execute(r, now_ms);
  if (hold && journal_->appended() != before) r.log_seq = journal_->appended();
  if (replication_->position() != position) {
    r.repl_seq = replication_->position();
    replication_->Expect(r.repl_seq);
  }
}

void Worker::ServeReplication(Request& request, int64_t now_ms) {
  if (replication_ == nullptr) {
    request.result = Result::kUnavailable;
    return;
  }
  request.result = Result::kOk;
  if (!replication_->Serve(request, shard_, now_ms)) request.result = Result::kPending;
}

size_t Worker::ReplicationTurn(RequestSource& source) {
  replicated_.clear();
  const size_t work = replication_->Turn(shard_, clock_, &replicated_);
  stream_work_ = work;
  // Never Answer: a linearizable read given back would wait again, behind later writes.
  for (Request* request : replicated_) Deliver(request, source);
  if (work > 0) PublishShardCounters();
  return work + replicated_.size();
}

void Worker::Push(uint16_t to, Request* request) {
  outboxes_[to].items.push_back(request);
  ++backlog_;
}

void Worker::Flush() {
  for (size_t to = 0; to < outboxes_.size(); ++to) {
    Outbox& box = outboxes_[to];
    const size_t pending = box.items.size() - box.head;
    if (pending == 0) continue;
    const uint64_t t0 = profile_ ? Rdtscp() : 0;
    const size_t sent = outbound_[to]->EnqueueBurst(
        reinterpret_cast<void* const*>(box.items.data() + box.head), pending);
    if (profile_) {
      WorkerCounters::Add(counters_.ring_cycles, Rdtscp() - t0);
      WorkerCounters::Add(counters_.ring_ops, std::max<size_t>(sent, 1));
    }
    WorkerCounters::Add(counters_.sent, sent);
    backlog_ -= sent;
    if (sent > 0 && waker_ != nullptr) waker_->Wake(static_cast<uint16_t>(to));
    if (sent == pending) {
      box.items.clear();
      box.head = 0;
    } else {
      box.head += sent;
      WorkerCounters::Add(counters_.full_waits, 1);
      // Under lasting back-pressure, drop the sent prefix now and then so the vector stays the
      // size of what is actually waiting.
      if (box.head >= 1024 && box.head * 2 >= box.items.size()) {
        box.items.erase(box.items.begin(), box.items.begin() + static_cast<ptrdiff_t>(box.head));
        box.head = 0;
      }
    }
  }
}

}  // namespace ringkv
