// ReplSink: a replica's side of one worker's flow (issue 22, step 1). The flow's client thread
// (server/repl/replica_client.h) hands in what the primary sent; the worker applies it in its
// turns, in order, to its shard, with the primary's versions and deadlines (Shard::LoadSet and
// the like: no condition is checked, no memory limit applies, nothing is journaled here). A
// full sync's image goes to a staging shard, swapped in once whole (keep_data, below).
//
// The worker never expires keys of a replica on its own (follows()): reads hide an expired
// key, and the primary's delete removes it. The hand-over is a small queue under a mutex that
// the worker looks at only when an atomic flag says something waits, and takes whole; the
// client thread waits while more than kMaxQueuedBytes are queued, so a slow worker slows the
// stream (and HTTP/2 flow control, the primary's sender) instead of growing memory.
//
// Acknowledgements: the primary marks the messages whose records a write waits for (`ack`);
// once the worker has applied one, it sends the position applied on the flow's call itself
// (the AckSender the flow's thread attached), so that no thread is woken for it. The call's
// connection is the flow thread's, which holds ack_mu() whenever it uses it; if the worker
// cannot take ack_mu() at once (the flow's thread is reading, or waits to Push), it makes
// ack_fd() readable instead (an eventfd, written once until Acknowledge), and the flow's
// thread sends it. Without such a message the flow's thread still sends the position every
// kAckEveryMs if it moved, so that the primary knows how far behind its replicas are.
//
// Promotion (issue 23): the worker keeps the last --repl-backlog bytes of the records it
// applied (server/repl/chunk.h); once promoted, it hands them with its history and position
// to its source (TakeHandover), so that the old primary's other replicas that stand at or
// behind it resume from their positions instead of full-syncing. A client that follows a new
// primary (a re-point) asks to go on from where the last one left the sink (ResumeFrom); a
// primary that continued the sink's history names its own in PARTIAL_SYNC (Item kHistory).
// A demoted primary's worker hands its own history, position and backlog to its sink
// (Rejoin), so that it goes on from its position on a new primary that continued its history
// no further (a planned switchover); one that stood past that point (a deposed primary's
// writes that never reached the new one) full-syncs, and the worker counts and logs the
// records, and the keys they wrote, that the full sync drops (FULL_SYNC's diverged_lsn).
//
// With a data directory (set_durability), the worker's log keeps what the sink applies, so
// that a restart restores it and goes on from its position (a partial resync):
//   - each turn's records go to the log, followed by a position record (persist/format.h):
//     the primary's history and the position applied;
//   - a full sync's image goes to no log: once it is swapped in, nothing more is logged until
//     the worker's next snapshot cut (asked for at once), whose log segment begins with a
//     reset position. A restore replays such a segment only on the snapshot of its own
//     generation (which holds the image); if that never committed, the worker restores the
//     data held before the full sync, at its old position. Every later cut begins with a
//     reset too, until a snapshot past the swap has committed;
//   - a stop's snapshot keeps the positions in its footers (position_at_stop);
//   - while the log is backlogged or stalled the worker applies nothing (the queue fills and
//     the stream waits); once it has failed, the worker applies without logging (the disk
//     keeps an older state, with its position).
//
// Threads: Push, Stop, the Acks calls, Acknowledge and the setters from the flow's (client)
// thread; Serve, Turn, AfterCut, TakeHandover, Promoted and Rejoin from the worker;
// figures() and durable_pending() from any thread; set_durability and Restore before the worker
// runs; position_at_stop after it has stopped; ResumeFrom from the client thread.
#ifndef RINGKV_SERVER_REPL_SINK_H_
#define RINGKV_SERVER_REPL_SINK_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "persist/format.h"
#include "server/repl/chunk.h"
#include "shard/replication_port.h"
#include "shard/shard.h"

namespace ringkv::persist {
class LogWriter;
}  // namespace ringkv::persist

namespace ringkv::repl {

class ReplSink final : public ReplicationPort {
 public:
  // keep_data (--full-sync-keeps-data): a full sync loads the image into a shard of its own,
  // swapped in (Shard::SwapData) once whole, so that until then reads get the data held
  // before, and a sync cut short leaves it; both are in memory meanwhile. Otherwise the shard
  // is cleared when the sync begins. backlog_bytes (--repl-backlog): the applied records kept
  // for a promotion (0: none).
  explicit ReplSink(bool keep_data = true, size_t backlog_bytes = 0);
  ~ReplSink() override;
  ReplSink(const ReplSink&) = delete;
  ReplSink& operator=(const ReplSink&) = delete;

  static constexpr size_t kMaxQueuedBytes = size_t{16} << 20;
  // What the worker applies in one turn, at most (one item more if the first is bigger), so
  // that reads keep being served during a full sync.
  static constexpr size_t kTurnBytes = size_t{256} << 10;
  static constexpr int64_t kAckEveryMs = 100;

  struct Item {
    // kHistory: a partial resync to a primary whose history continues this one's; the
    // positions from here on are of `history`.
    enum class Kind { kFullSync, kImage, kImageDone, kTail, kHistory } kind;
    std::string records;
    uint32_t count = 0;
    uint64_t lsn = 0;       // kFullSync: the cut; kTail: its first record's position.
    std::string history;    // kFullSync, kHistory: the primary's.
    uint64_t revision = 0;  // kImageDone.
    uint64_t keys = 0;      // kFullSync: the image's keys, at most.
    // kFullSync: where the primary's history continued this sink's, which stood past it: the
    // records from there on are dropped.
    std::optional<uint64_t> diverged;
    bool ack = false;        // kTail: the primary waits for an acknowledgement of it.
    uint64_t sync = 0;       // kImageDone: the full sync it ends (full_syncs() then).
    int64_t made_us = 0;     // kTail: when its first record was made (SystemClockUs).
    uint64_t end_bytes = 0;  // kTail: the primary's bytes of records up to its end.
  };
  // The delays counted (messages, by how long their first record took from the primary's
  // commit to its apply here): upper bounds in microseconds; the last bucket has none.
  static constexpr std::array<int64_t, 13> kDelayBoundsUs = {
      100,    250,    500,    1'000,   2'000,   3'000,    5'000,
      10'000, 25'000, 50'000, 100'000, 250'000, 1'000'000};
  static constexpr size_t kDelayBuckets = kDelayBoundsUs.size() + 1;

  // Client thread: queues `item` for the worker; waits while the queue is full. False (nothing
  // queued) once Stop was called.
  bool Push(Item item);
  // Any thread: Push returns false from now on, at once; Restart undoes it (a new client).
  void Stop();
  void Restart();
  // Worker: nothing waits to be applied (after Stop, nothing will).
  bool drained() const { return taken_.empty() && !waiting_.load(std::memory_order_acquire); }

  // Client thread: whether the flow is connected, the primary's position as last heard, a
  // full sync began, and the connection's last error (empty: none).
  void set_connected(bool connected) { connected_.store(connected, std::memory_order_relaxed); }
  void set_primary_lsn(uint64_t lsn) { primary_lsn_.store(lsn, std::memory_order_relaxed); }
  void set_primary_bytes(uint64_t bytes) { primary_bytes_.store(bytes, std::memory_order_relaxed); }
  // A full sync begins: the state is "full_sync" until the worker has applied its image.
  void CountFullSync() {
    synced_.store(false, std::memory_order_release);
    full_syncs_.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t full_syncs() const { return full_syncs_.load(std::memory_order_relaxed); }
  // Any thread: the last full sync's image is applied (it stays so while the client
  // reconnects to a primary that went away; a group's election counts on it).
  bool whole() const { return synced_.load(std::memory_order_acquire); }
  // A partial resync was accepted: the data is a prefix of the primary's history, so whole
  // (after a Rejoin it was not yet).
  void CountPartialSync() {
    partial_syncs_.fetch_add(1, std::memory_order_relaxed);
    synced_.store(true, std::memory_order_release);
  }
  void set_last_error(std::string error);

  // What sends an acknowledgement on the flow's call (the flow's connection), with ack_mu()
  // held: true if it went, false if the flow's thread must look (the connection failed, or
  // part of the frame waits for the socket).
  class AckSender {
   public:
    virtual ~AckSender() = default;
    virtual bool SendAck(uint64_t applied) = 0;
  };
  // Held by the flow's thread while it uses its connection, and by the worker while it sends
  // an acknowledgement on it.
  std::mutex& ack_mu() { return ack_mu_; }
  // The flow's thread, ack_mu() held: a call begins (nothing acknowledged on it yet) or ends.
  void AttachAcks(AckSender* sender);
  void DetachAcks() { ack_sender_ = nullptr; }
  // Readable (an eventfd) when the worker left an acknowledgement to the flow's thread; it
  // then calls Acknowledge.
  int ack_fd() const { return ack_fd_; }
  // The flow's thread, ack_mu() held: clears ack_fd()'s signal and sends the position applied
  // if it moved since the call's last acknowledgement (at the call's start: if there is one).
  void Acknowledge();

  // ReplicationPort.
  bool Serve(Request& request, Shard& shard, int64_t now_ms) override;
  size_t Turn(Shard& shard, Clock clock, std::vector<Request*>* answered) override;
  bool follows() const override { return true; }
  // Worker: the worker stops following (a promotion): the image of an unfinished full sync
  // goes, and no position is kept from now on.
  void Promoted();

  // The worker's log, where it has a data directory (outlives the sink); `committed` gives the
  // generation of the data directory's committed snapshot; `request_snapshot` asks for a
  // snapshot (any thread).
  struct Durability {
    persist::LogWriter* log = nullptr;
    std::function<uint64_t()> committed;
    std::function<void()> request_snapshot;
  };
  void set_durability(Durability durability) { durability_ = std::move(durability); }
  // The data directory's restore left this worker at `position`: the data is whole there.
  void Restore(const persist::ReplPosition& position);
  // Client thread: where a new flow asks to go on from: the position after the last item
  // queued (or restored), if the last full sync's image was whole by then (nullopt: it must
  // full-sync). Nothing once promoted, until a demotion's Rejoin.
  std::optional<persist::ReplPosition> ResumeFrom() const;
  // Worker, at the promotion, once drained (server/repl/role_port.h): the history, position
  // and kept records, if the shard holds a whole image of that history at that position.
  std::optional<Handover> TakeHandover();
  // Worker, at a demotion: the source's history that ends, as ReplSource::Reset gives it. The
  // next client asks to go on from there; the image counts as whole (for an election) only
  // once a primary has accepted that.
  void Rejoin(Handover ended);
  // Worker, right after its log's cut (ReplSource's after_cut): the new segment's first record.
  void AfterCut();
  // Any thread: a full sync is in memory that the log cannot restore yet (see above).
  bool durable_pending() const;
  // After the worker has stopped: where the shard stands, for the stop's snapshot.
  std::optional<persist::ReplPosition> position_at_stop() const;

  struct Figures {
    const char* state;  // "connecting", "full_sync" or "stable".
    uint64_t applied_lsn;
    uint64_t primary_lsn;
    uint64_t applied_bytes;  // The primary's bytes of records up to the last message applied.
    uint64_t primary_bytes;
    int64_t last_delay_us;  // The last message applied (see FlowStats.lag_ms).
    std::array<uint64_t, kDelayBuckets> delays;
    int64_t delay_sum_us;
    uint64_t full_syncs;
    uint64_t partial_syncs;
    // Records this worker held past where its new primary continued its history, dropped by
    // full syncs, and the distinct keys they wrote (of those still kept: at least).
    uint64_t dropped_records;
    uint64_t dropped_keys;
    std::string last_error;
  };
  Figures figures() const;

 private:
  const bool keep_data_;
  const size_t backlog_limit_;

  // Worker: applies one item; returns the records it applied.
  size_t Apply(Shard& shard, const Item& item);
  // Worker: keeps an applied kTail item's records for a promotion.
  void Keep(Item&& item);
  // Worker, at a full sync that diverged at `from`: counts and logs the records dropped.
  void CountDropped(uint64_t from);
  // Worker: a message applied `delay_us` after its first record's commit on the primary.
  void CountDelay(int64_t delay_us);

  mutable std::mutex mu_;
  std::condition_variable room_;
  std::deque<Item> queue_;   // Guarded by mu_.
  size_t queued_bytes_ = 0;  // Guarded by mu_.
  bool stopped_ = false;     // Guarded by mu_.
  std::string last_error_;   // Guarded by mu_.
  // Where the items queued so far leave the shard (ResumeFrom) ...
  persist::ReplPosition pushed_;      // Guarded by mu_.
  bool pushed_whole_ = false;         // Guarded by mu_: ... if the image was whole by then.
  std::atomic<bool> waiting_{false};  // queue_ is not empty.

  // Worker only.
  std::deque<Item> taken_;          // Taken from queue_, not applied yet.
  std::unique_ptr<Shard> staging_;  // keep_data_: the image of the full sync under way.
  std::string history_;             // The primary's (empty: no position to keep).
  bool syncing_ = false;            // Between FULL_SYNC and IMAGE_DONE.
  bool logged_ = false;             // This turn logged records: a position follows them.
  std::deque<Chunk> backlog_;       // The last records applied (TakeHandover) ...
  size_t backlog_bytes_ = 0;        // ... and their bytes.

  Durability durability_;
  // Written by the worker: the image swapped in is in no log yet (until the next cut) ...
  std::atomic<bool> unlogged_{false};
  // ... and the generation whose segment began with a reset, until a snapshot of it commits.
  std::atomic<uint64_t> reset_generation_{0};

  // Any thread, ack_mu_ held: sends the position applied if it moved; false if the flow's
  // thread must look (see AckSender).
  bool SendAckLocked();
  // Worker: wakes the flow's thread to send an acknowledgement (once until Acknowledge).
  void SignalAck();

  std::mutex ack_mu_;
  AckSender* ack_sender_ = nullptr;   // Guarded by ack_mu_: the flow's call, if any.
  uint64_t ack_sent_ = 0;             // Guarded by ack_mu_: acknowledged on that call.
  const int ack_fd_;                  // An eventfd: see ack_fd().
  std::atomic<bool> ack_due_{false};  // ack_fd_ was written and Acknowledge has not run since.

  std::atomic<bool> connected_{false};
  std::atomic<bool> synced_{false};  // The last full sync's image is applied.
  std::atomic<uint64_t> applied_lsn_{0};
  std::atomic<uint64_t> primary_lsn_{0};
  std::atomic<uint64_t> applied_bytes_{0};
  std::atomic<uint64_t> primary_bytes_{0};
  // Written by the worker only (a relaxed load and store, no read-modify-write).
  std::atomic<int64_t> last_delay_us_{0};
  std::array<std::atomic<uint64_t>, kDelayBuckets> delays_{};
  std::atomic<int64_t> delay_sum_us_{0};
  std::atomic<uint64_t> full_syncs_{0};
  std::atomic<uint64_t> partial_syncs_{0};
  std::atomic<uint64_t> dropped_records_{0};
  std::atomic<uint64_t> dropped_keys_{0};
};

}  // namespace ringkv::repl

#endif  // RINGKV_SERVER_REPL_SINK_H_
