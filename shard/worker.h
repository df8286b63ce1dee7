// Worker: the loop of one shard-owning thread. It takes requests from its RequestSource (the
// bench's generator, the daemon's front end), runs the ones its own shard owns, sends the rest
// through rings to their owners, runs what other workers send it, and sends those back to their
// origin, which completes them. A request therefore crosses at most two rings, and is completed
// (and freed) by the thread that made it.
//
// One turn (RunOnce):
//   1. unless its outboxes are backed up, Poll a burst from the source; hash each key once;
//      run the burst's own-shard requests (prefetching their slots, then their records),
//      queue the others in the outbox of their owner;
//   2. dequeue a burst from each inbound ring: answers to its own requests are completed,
//      requests from others are run (prefetched as a batch) and queued back to their origin;
//   3. flush each outbox with one EnqueueBurst; what does not fit stays for the next turn;
//   4. with a journal (shard/journal.h; the daemon's --data-dir): commit what this turn
//      recorded, and release the answers whose records are now durable (see below);
//   5. if the shard has keys with a TTL, reclaim those due (Shard::ExpireDue), up to a budget
//      that doubles while it is all used (from kMinExpireBudget to kMaxExpireBudget), so that
//      a write rate of TTL keys is matched without an unbounded stall in any one turn;
//   6. while a snapshot is under way, walk the shard for it for up to kBusySnapshotSlice after
//      a turn that had requests, kSnapshotSlice after one that had none;
//   7. while the shard's table grows (each new key moves a few of its buckets) or its arena
//      is due a compaction, a turn that had nothing else to do moves kIdleGrowBuckets more
//      (and 64 bytes of records each), and counts as work, so that an idle shard finishes the
//      growth and gives back the old array's memory, and the arena's dead bytes.
// Snapshots (StartSnapshot, from any thread): at the start of its next turn the worker makes
// the cut (its journal's Cut(), then Shard::BeginSnapshot), so the snapshot holds the shard as
// it was between two turns, and the journal's records from then on go to the next segment.
// The walk then goes a slice per turn (step 6), while the sink has room; a turn that walked
// counts as work, so the loop does not park until the walk is over. The sink's Finish() is
// called on the worker's thread once every key is handed over.
// With a journal that holds acknowledgements (the daemon's logs, in every --fsync mode), a
// write's answer does not go back (to the source, or through a ring to its origin) when the
// write is run but once the journal says its record is durable (shard/journal.h); the worker keeps
// running turns meanwhile. Once the journal fails, every write is refused unrun (Result::kRefused),
// and the held ones it had not made durable fail (Result::kUnavailable); reads go on. Nothing
// blocks and nothing is dropped: a full ring is back-pressure on the source (step 1 is skipped
// while the outboxes hold more than kMaxBacklog requests), and the worker keeps draining its
// inbound rings meanwhile, so two workers full towards each other cannot deadlock. A write that
// asks for replicas (Request::replicas: --min-replicas, or the call's ringkv-min-replicas) is
// refused unless that many replicas follow the worker, and once the journal lets its answer go, the
// replication port keeps it until they have applied it, or until it has waited too long
// (shard/replication_port.h).
//
// Threads: every method is for the worker's own thread, except counters(), which any thread may
// read. Constructed by RingEngine.
#ifndef RINGKV_SHARD_WORKER_H_
#define RINGKV_SHARD_WORKER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

#include "ring/ring.h"
#include "shard/clock.h"
#include "shard/journal.h"
#include "shard/memory.h"
#include "shard/replication_port.h"
#include "shard/request.h"
#include "shard/router.h"
#include "shard/shard.h"

namespace ringkv {

// Where a worker's own requests come from and where they go back to. Worker thread only.
class RequestSource {
 public:
  virtual ~RequestSource() = default;
  // Hands over up to `max` requests; each stays the source's until Complete() gives it back.
  virtual size_t Poll(Request** out, size_t max) = 0;
  // Called once for every request Poll handed over, after its shard ran it.
  virtual void Complete(Request* request) = 0;
  // True once every request the source will ever make has been completed.
  virtual bool Finished() const { return false; }
};

// Told after a worker put requests on the ring towards worker `to`, so that a `to` that parks
// when idle (the daemon's workers) can be woken. Called on the sending worker's thread, after
// the enqueue; an implementation must order its read of the parked flag after the enqueue (a
// seq_cst fence) to pair with the parking side. The bench, whose workers never park, has none.
class WorkerWaker {
 public:
  virtual ~WorkerWaker() = default;
  virtual void Wake(uint16_t to) = 0;
};

// How RingEngine (shard/engine.h) builds its workers; a Worker takes what concerns it.
struct EngineOptions {
  uint32_t workers = 1;
  RingKind ring = RingKind::kRteSpsc;
  size_t ring_capacity = 1 << 16;
  size_t burst = 32;             // Requests per Poll and per ring dequeue (1 .. 256).
  size_t reserve_per_shard = 0;  // Keys each shard's map is sized for up front.
  // With reserve_per_shard: bytes of key and value together that each of those keys' records is
  // pre-faulted for (Table's record pool; 0: none, records come from malloc as keys arrive).
  size_t reserve_payload = 0;
  bool profile = false;          // RDTSCP cycle accounting in WorkerCounters.
  WorkerWaker* waker = nullptr;  // Wakes parked workers (the daemon); outlives the engine.
  Clock clock = SystemClockMs;   // What TTL deadlines are compared with.
  MemoryLimit memory = {};       // Each shard's.
};

// A snapshot of one shard as its worker takes it: where the keys go (SnapshotSink), whether
// the walk must wait for room, and its end. Worker thread only.
class SnapshotJob : public SnapshotSink {
 public:
  // The sink's buffers are full: the walk waits (the sink wakes the loop when it has room).
  virtual bool backlogged() const = 0;
  // Every key is handed over; `revision` is the shard's at the cut (Shard::revision): every
  // version it had given by then, deleted keys' included, is at most this.
  virtual void Finish(uint64_t revision) = 0;
  // At the cut, on the worker's thread, before the first key is handed over.
  virtual void OnCut() {}
  // Whether the cut also cuts the journal (Journal::Cut): a data directory's snapshot does; a
  // replica's full sync reads no log, and leaves the journal alone.
  virtual bool cuts_journal() const { return true; }
};

// Written by one worker only (a relaxed load and store, no read-modify-write), read by any thread
// for progress and stats: relaxed is enough, readers want a recent figure, not a synchronisation
// point. Each worker's block sits on its own cache lines.
struct alignas(64) WorkerCounters {
  std::atomic<uint64_t> executed{0};    // Requests this shard ran.
  std::atomic<uint64_t> sent{0};        // Pointers enqueued towards other workers.
  std::atomic<uint64_t> received{0};    // Pointers dequeued from other workers.
  std::atomic<uint64_t> full_waits{0};  // Outbox flushes that a full ring cut short.
  std::atomic<uint64_t> keys{0};        // The shard's size and payload after the last batch.
  std::atomic<uint64_t> payload_bytes{0};
  std::atomic<uint64_t> ttl_keys{0};          // Keys with a TTL, after the last batch.
  std::atomic<uint64_t> expired{0};           // Keys reclaimed because their TTL passed.
  std::atomic<uint64_t> memory_bytes{0};      // The shard's data memory (Shard::memory_bytes).
  std::atomic<uint64_t> evicted{0};           // Keys evicted to make room.
  std::atomic<uint64_t> table_bytes{0};       // Of memory_bytes, the table's slots.
  std::atomic<uint64_t> arena_bytes{0};       // The records' arena (Shard::arena_bytes) ...
  std::atomic<uint64_t> arena_dead_bytes{0};  // ... and its dead bytes.
  std::atomic<uint64_t> compacted_bytes{0};   // Bytes the arena's compaction moved.
  // RDTSCP cycle accounting, kept only when EngineOptions::profile is set. Ring polls count as
  // the report counted them: a poll that moves n counts n, an empty poll counts 1.
  std::atomic<uint64_t> hash_cycles{0};
  std::atomic<uint64_t> hash_ops{0};
  std::atomic<uint64_t> map_cycles{0};
  std::atomic<uint64_t> map_ops{0};
  std::atomic<uint64_t> ring_cycles{0};
  std::atomic<uint64_t> ring_ops{0};

  static void Add(std::atomic<uint64_t>& counter, uint64_t n) {
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  static uint64_t Read(const std::atomic<uint64_t>& counter) {
    return counter.load(std::memory_order_relaxed);
  }
};
static_assert(sizeof(WorkerCounters) % 64 == 0 && alignof(WorkerCounters) == 64);

class Worker {
 public:
  static constexpr size_t kMaxBurst = 256;
  static constexpr size_t kMaxBacklog = 4096;
  // Execute starts a request's record fetch this many requests before it runs.
  static constexpr size_t kRecordsAhead = 8;
  static constexpr size_t kMinExpireBudget = 64;
  static constexpr size_t kMaxExpireBudget = 4096;
  // A turn walks a snapshot for about this long, kSnapshotBuckets home buckets at a time: the
  // busy slice after a turn that had requests (serving comes first), the idle one otherwise.
  static constexpr std::chrono::microseconds kSnapshotSlice{200};
  static constexpr std::chrono::microseconds kBusySnapshotSlice{10};
  static constexpr size_t kSnapshotBuckets = 16;
  // Old buckets an idle turn moves while the table grows: about 800 entries, 50-100 us, so a
  // request that arrives meanwhile waits no longer than that; and 64 KiB of arena records
  // walked while a compaction is due.
  static constexpr size_t kIdleGrowBuckets = 1024;

  // The rings and counters the engine made for one worker. `outbound[d]` carries requests and
  // answers to worker d (null for this worker); `inbound` are the rings this worker consumes.
  struct Links {
    std::vector<Ring*> outbound;
    std::vector<Ring*> inbound;
    WorkerCounters* counters = nullptr;
  };
  // From `options`: burst, reserve_per_shard and reserve_payload, profile, waker (may be null),
  // clock and memory.
  // Rings, router, counters and waker outlive the worker.
  Worker(uint16_t id, const EngineOptions& options, const Router& router, Links links);
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // One turn of the loop; returns how many requests it admitted, ran or completed (0: idle).
  size_t RunOnce(RequestSource& source);

  // Runs turns until `source` is Finished, then keeps serving the others until all
  // `total_workers` have done the same; `finished_workers` is shared by them.
  void RunToCompletion(RequestSource& source, std::atomic<uint32_t>& finished_workers,
                       uint32_t total_workers);

  // Nothing waits in this worker's outboxes, nor for its journal, and no snapshot is under way.
  bool Drained() const {
    return backlog_ == 0 && held_.empty() && snapshot_ == nullptr &&
           next_snapshot_.load(std::memory_order_acquire) == nullptr;
  }
  // Requests wait in the outboxes for room in a ring.
  bool Backlogged() const { return backlog_ > 0; }
  // Answers wait for the journal's sync (which wakes the loop when it is done).
  bool HoldsAnswers() const { return !held_.empty(); }
  // Of the last RunOnce's work, what the replication port did on its own: a replica applying
  // its primary's stream. No call is due after it (the stream's next message wakes the loop),
  // so a loop does not keep polling for it.
  size_t stream_work() const { return stream_work_; }

  // Every change to the shard is recorded in `journal` from now on. Before the worker runs.
  void set_journal(Journal* journal) {
    journal_ = journal;
    shard_.set_journal(journal);
  }
  // The shard, to restore it before the worker runs.
  Shard& mutable_shard() { return shard_; }
  // Copies the shard's figures (keys, bytes, ...) to the counters others read. The worker does
  // it after each batch; the control thread once a restore has filled the shard, before the
  // worker runs.
  void PublishShardCounters();

  // Any thread: the worker takes a snapshot of its shard into `job`, which outlives it, making
  // the cut at the start of its next turn (the caller wakes its loop). One at a time: false,
  // and nothing started, while another job (a replica's full sync, or the data directory's
  // snapshot) has not had its Finish() yet.
  bool TryStartSnapshot(SnapshotJob* job) {
    bool idle = false;
    if (!snapshot_claimed_.compare_exchange_strong(idle, true, std::memory_order_acq_rel)) {
      return false;
    }
    next_snapshot_.store(job, std::memory_order_release);
    return true;
  }
  // As TryStartSnapshot, waiting (sleeping a millisecond at a time) for the other job to finish.
  void StartSnapshot(SnapshotJob* job);

  // Replication (repl/): Op::kReplicate requests go to `port`, and it takes a part of every
  // turn. Before the worker runs; not owned.
  void set_replication(ReplicationPort* port) { replication_ = port; }

  uint16_t id() const { return id_; }
  // The shard, for its owning thread, or for anyone once the workers have stopped.
  const Shard& shard() const { return shard_; }
  const WorkerCounters& counters() const { return counters_; }

 private:
  struct Outbox {
    std::vector<Request*> items;
    size_t head = 0;  // items[head..] are still to be sent.
  };

  void Admit(Request** batch, size_t n, RequestSource& source);
  size_t DrainInbound(RequestSource& source);
  void Execute(Request** batch, size_t n);
  void PrefetchRecord(const Request& r) const { shard_.PrefetchRecord({r.key, r.hash}); }
  void ExecuteJournaled(Request** batch, size_t n, int64_t now_ms);
  // A write that waits for `r.replicas` replicas (ReplicationPort::Await).
  void ExecuteReplicated(Request& r, int64_t now_ms, bool hold);
  // Sends the answer to a request this shard ran: completes it (this worker's own) or queues it
  // back to its origin; or holds it while its journal record is not durable.
  void Answer(Request* request, RequestSource& source, bool hold_if_needed);
  // Sends an answer that waits for nothing more (the replication port gave it back): completes
  // it or queues it back to its origin.
  void Deliver(Request* request, RequestSource& source);
  // Step 4 of the turn; returns how many answers it released.
  size_t CommitJournal(RequestSource& source);
  // Step 5 of the turn; returns how many keys it reclaimed.
  size_t ExpireDue();
  // The snapshot's cut, at the start of a turn.
  void CutSnapshot();
  // An Op::kReplicate request, for the replication port (kept: result kPending).
  void ServeReplication(Request& request, int64_t now_ms);
  // The port's part of the turn; returns its work done.
  size_t ReplicationTurn(RequestSource& source);
  // Step 6 of the turn, for `slice`; returns how many steps it walked.
  size_t WalkSnapshot(std::chrono::microseconds slice);
  void Push(uint16_t to, Request* request);
  void Flush();

  // Constant after construction.
  const uint16_t id_;
  const Router& router_;
  const size_t burst_;
  const bool profile_;
  const std::vector<Ring*> outbound_;
  const std::vector<Ring*> inbound_;
  WorkerCounters& counters_;
  WorkerWaker* const waker_;
  const Clock clock_;

  // Worker thread only.
  Shard shard_;
  std::vector<Outbox> outboxes_;
  size_t backlog_ = 0;  // Requests waiting in outboxes_, all destinations.
  size_t expire_budget_ = kMinExpireBudget;
  Journal* journal_ = nullptr;
  std::deque<Request*> held_;        // Answers waiting for the journal, in log_seq order.
  SnapshotJob* snapshot_ = nullptr;  // Under way.
  ReplicationPort* replication_ = nullptr;
  std::vector<Request*> replicated_;  // Answers the port gave back this turn.
  size_t stream_work_ = 0;            // The port's own work in the last turn.

  // Shared: set by StartSnapshot, taken (exchanged for null) at the cut; and whether a job
  // holds the worker's one snapshot (from StartSnapshot to just after its Finish).
  std::atomic<SnapshotJob*> next_snapshot_{nullptr};
  std::atomic<bool> snapshot_claimed_{false};
};

}  // namespace ringkv

#endif  // RINGKV_SHARD_WORKER_H_
