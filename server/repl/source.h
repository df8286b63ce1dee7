// ReplSource: a primary's side of one worker's replication flow (issue 22). It is the
// worker's journal (a tee in front of the data directory's log, if any) and its
// ReplicationPort, so everything it keeps is the worker's own: no lock on the data path.
//
// Positions (LSNs). From the first replica's full sync on, every record the worker's shard
// makes (shard/journal.h: a key's state after a change, an expiry as a delete) gets the next
// position. Each turn's records become one chunk at the journal's Commit; the last
// --repl-backlog bytes of chunks are kept, so that a flow reads them at its own pace.
// Positions belong to a history, named "SERVER_ID.N": N counts the times this worker began
// one in this run (a demotion ends one; a promotion begins one), so that a replica resumes
// only into the records its own came from. A promoted replica's history continues the one it
// followed (Continue, server/repl/chunk.h).
//
// A flow (server/handlers/repl_handlers.cc) asks with Op::kReplicate requests on shard
// `target`. Fields: `number` in is the Step; `deadline_ms` in is the flow's id (unique per
// process); `version` in is, for kTail, the position to read from. Answers:
//   kBegin  starts the full sync: the worker's live snapshot (a SnapshotJob that cuts no log),
//           answered once the cut is made: `version` is the cut's position, where the tail
//           starts, `number` the keys the shard held then (the image holds at most these),
//           and `out` the history. Waits while another flow's full sync, or the data
//           directory's snapshot, holds the worker's snapshot.
//   kImage  the next part of the image: `out` holds set records, `number` how many (kOk);
//           once all is handed over, kNotFound with `version` the worker's revision at the
//           cut. Waits until the walk has kImageSendBytes for it, or is done.
//   kTail   the records from `version` on (whole chunks, about 1 MiB at most): `out`,
//           `number` of them, `version` the position after them, `deadline_ms` the head (the
//           position after the last record made), and `tail` when the first was made and
//           where they end and the head are in bytes. Waits up to kHeartbeatMs for a record, then
//           answers with none; while the worker is busy, waits for kBatchBytes or kBatchMs.
//           kUnavailable if the backlog no longer holds `version`: the flow must start over with a
//           full sync.
//   kResume a flow goes on from `version` of history `value` (a partial resync): kOk, with the
//           history in `out`, if that position is this history's (or the one it continued,
//           at or before where it continued: Continue) and the backlog holds it (kTail
//           follows), else kUnavailable (the flow full-syncs: kBegin), with `number` 1 and
//           `version` where this history continued the replica's if the replica stood past it
//           (it holds records this worker never got, which the full sync drops), else 0.
//   kEnd    the flow is over (its image, if one is under way, is dropped).
//   kAck    the replica has applied every record before `version`: answered at once.
// A kTail answer asks the replica to acknowledge what it applies (`replicas` 1) when a write
// waits for replicas to apply records it carries.
// A flow whose image was dropped (kEnd, or not read for kStaleImageMs while its buffer was
// full) gets kUnavailable for kImage.
//
// Writes that wait for replicas (ReplicationPort::Await; --min-replicas). A flow counts as in
// sync from its first kTail on. A waiting write is given back once `replicas` flows have
// acknowledged its position, or after the timeout with Result::kNotReplicated. A linearizable
// read (Request::linearizable) that comes while writes wait is given back, as it is, once the
// writes before it are; and while the records of a write that timed out lack its replicas, it
// waits for them too, as a write would (failing as one: kNotReplicated). So it never answers
// with a write that may not stay.
// With an in-sync set (--acks=isr; server/repl/in_sync_set.h), kBegin and kResume carry the
// replica's server id in `key`, and a write is given back once every member of the set has
// acknowledged its position through a flow of its own, the set having at least `replicas`
// members; `in_sync` counts the members with a flow in sync. The worker takes a new set at
// the start of a turn.
//
// Threads: the owning worker's, except the stats (any thread).
#ifndef RINGKV_SERVER_REPL_SOURCE_H_
#define RINGKV_SERVER_REPL_SOURCE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/repl/chunk.h"
#include "server/repl/fence.h"
#include "server/repl/in_sync_set.h"
#include "shard/journal.h"
#include "shard/replication_port.h"
#include "shard/worker.h"

namespace ringkv::repl {

enum class Step : int64_t { kBegin = 1, kImage = 2, kTail = 3, kEnd = 4, kResume = 5, kAck = 6 };

class ReplSource final : public Journal, public ReplicationPort {
 public:
  static constexpr int64_t kHeartbeatMs = 200;
  static constexpr int64_t kStaleImageMs = 10'000;
  // An image part is handed over once it holds kImageSendBytes (or the walk is done); the
  // walk waits while it holds kImageBytes.
  static constexpr size_t kImageSendBytes = size_t{1} << 20;
  static constexpr size_t kImageBytes = size_t{4} << 20;
  // A kTail answer stops adding chunks past this.
  static constexpr size_t kTailBytes = size_t{1} << 20;
  // While the worker is busy (it published records in this turn), a kTail waits until this
  // much is there, or its oldest record is kBatchMs old: each message costs both sides far more
  // than a record, so a few large ones beat many small ones. A turn without new records sends
  // what is there at once.
  static constexpr size_t kBatchBytes = size_t{64} << 10;
  static constexpr int64_t kBatchMs = 1;

  // `inner`: the data directory's log for this worker (null: none), which every Journal call
  // reaches as before. `worker`: whose snapshot a full sync takes. `server_id`: this run's
  // (ServerContext::server_id), which names its histories. `replica_timeout_ms`: how
  // long a write waits for its replicas (--min-replicas-timeout). `fence`: in a group on etcd,
  // the primary's fence (server/repl/fence.h), which refuses writes once closed, as a stalled
  // log does (null: none).
  ReplSource(Journal* inner, Worker& worker, std::string server_id, size_t backlog_bytes,
             int64_t replica_timeout_ms, const Fence* fence = nullptr,
             const InSyncSet* in_sync_set = nullptr);

  // Journal.
  void Set(std::string_view key, std::string_view value, uint64_t version,
           int64_t deadline_ms) override;
  void SetDeadline(std::string_view key, int64_t deadline_ms) override;
  void Delete(std::string_view key) override;
  void Expired(std::string_view key) override;
  uint64_t appended() const override { return inner_ ? inner_->appended() : 0; }
  uint64_t durable() const override { return inner_ ? inner_->durable() : 0; }
  bool holds_acks() const override { return inner_ && inner_->holds_acks(); }
  void Commit() override;
  bool failed() const override { return inner_ && inner_->failed(); }
  bool stalled() const override {
    return (inner_ && inner_->stalled()) || (fence_ != nullptr && fence_->closed());
  }
  bool backlogged() const override { return inner_ && inner_->backlogged(); }
  void Cut() override {
    if (inner_ == nullptr) return;
    inner_->Cut();
    if (after_cut_) after_cut_();
  }
  // Called on the worker right after each cut of the log (a replica's sink writes its position
  // there: server/repl/sink.h). Before the worker runs.
  void set_after_cut(std::function<void()> after_cut) { after_cut_ = std::move(after_cut); }

  // ReplicationPort.
  bool Serve(Request& request, Shard& shard, int64_t now_ms) override;
  size_t Turn(Shard& shard, Clock clock, std::vector<Request*>* answered) override;
  bool follows() const override { return false; }
  uint32_t in_sync() const override { return in_sync_; }
  uint64_t position() const override { return next_lsn_ + turn_count_; }
  void Expect(uint64_t repl_seq) override { want_upto_ = std::max(want_upto_, repl_seq); }
  bool Await(Request& request) override;

  // The worker is demoted (server/repl/role_port.h): every kept request is answered
  // (kUnavailable; a waiting write kNotReplicated) into `answered`, the flows are dropped,
  // nothing is encoded until a full sync cuts again, and a new history begins, so that no
  // replica of the one that ends resumes into the data that replaces it. Returns the history
  // that ends, with the position the shard holds and the backlog, if every record had one
  // (a replica had full-synced, or the history continued another): the worker's sink
  // resumes from there on a primary that continued it (ReplSink::Rejoin).
  std::optional<Handover> Reset(std::vector<Request*>* answered);
  // The worker is promoted (server/repl/role_port.h) with its shard at `handover.lsn` of
  // `handover.history`: positions go on from there, under a new history that continues that
  // one, and every record is encoded from now on. The chunks become the backlog, so that a
  // replica of that history at or behind the position resumes (kResume) while they hold it.
  void Continue(Handover handover);

  // Any thread, for stats: flows open, the head position, the oldest one kept, the backlog's
  // bytes, the position the most advanced replica acknowledged, and the writes that waited for
  // replicas in vain. For the in-sync set's keeper: the highest position a write waited for,
  // and the generation of the set taken last, with the head position when it was taken.
  struct Figures {
    uint32_t flows = 0;
    uint64_t lsn = 0;
    uint64_t first_lsn = 0;
    uint64_t backlog_bytes = 0;
    uint64_t acked_lsn = 0;
    uint64_t not_replicated = 0;
    uint64_t wanted_lsn = 0;
    uint64_t set_generation = 0;
    uint64_t set_taken_lsn = 0;
  };
  Figures figures() const;
  size_t backlog_limit() const { return backlog_limit_; }

 private:
  // The live snapshot of a full sync: hands keys to the flow's buffer.
  class Image final : public SnapshotJob {
   public:
    explicit Image(ReplSource& source) : source_(source) {}
    void Add(std::string_view key, std::string_view value, uint64_t version,
             int64_t deadline_ms) override;
    bool backlogged() const override;
    void Finish(uint64_t revision) override;
    void OnCut() override;
    bool cuts_journal() const override { return false; }

   private:
    ReplSource& source_;
  };
  struct FullSync {
    int64_t flow = 0;
    bool started = false;  // The snapshot is asked for.
    bool cut = false;      // ... and cut: cut_lsn holds.
    bool done = false;     // Every key handed over: revision holds.
    uint64_t cut_lsn = 0;
    uint64_t keys = 0;  // At the cut.
    uint64_t revision = 0;
    std::string part;    // Set records not handed to the flow yet ...
    uint32_t count = 0;  // ... and how many.
    int64_t last_read_ms = 0;
  };
  struct Kept {
    Request* request;
    int64_t until_ms;  // kTail: answered empty from then on; a write: refused from then on.
  };
  struct Flow {
    int64_t id;
    bool tailing;            // It has asked for kTail: it can acknowledge writes.
    uint64_t acked;          // Every record before this one is applied there.
    std::string replica_id;  // With an in-sync set only.
  };

  // A chunk of the records recorded since the last one.
  void Publish();
  // Begins a history: the next "SERVER_ID.N".
  void NewHistory();
  // The kept chunk that holds position `from` (front().first <= from; end() from next_lsn_
  // on): a flow resumed from another history's position may stand inside one.
  std::deque<Chunk>::const_iterator ChunkAt(uint64_t from) const;
  // Answers `request` if it can be; false if it must wait.
  bool TryAnswer(Request& request, int64_t now_ms);
  bool AnswerBegin(Request& request, int64_t now_ms);
  bool AnswerImage(Request& request, int64_t now_ms);
  bool AnswerTail(Request& request, int64_t now_ms, bool waited_enough);
  // Whether what a flow at `from` has to read is worth a message now (kBatchBytes, kBatchMs).
  bool WorthSending(uint64_t from, int64_t now_ms, bool busy) const;
  void PublishFigures();
  Flow* FindFlow(int64_t id);
  // The flows (with an in-sync set, its members) that have applied every record before
  // `position`.
  uint32_t Acked(uint64_t position) const;
  // Whether `request`, a write that waits, has its acknowledgements.
  bool Acknowledged(const Request& request) const;
  // With an in-sync set: takes it if it changed, and counts its members' flows.
  void TakeMembers();
  void CountMembers();
  // The most a member has acknowledged through its flows in sync (nullopt: it has none).
  std::optional<uint64_t> MemberAcked(const std::string& member) const;
  // Gives back the waiting writes that are acknowledged, or have waited enough.
  void ReleaseWaiters(int64_t now_ms, std::vector<Request*>* answered);

  Journal* const inner_;
  const Fence* const fence_;
  std::function<void()> after_cut_;
  Worker& worker_;
  const size_t backlog_limit_;
  const int64_t replica_timeout_ms_;
  const std::string server_id_;

  uint64_t histories_ = 0;  // Begun in this run.
  std::string history_;     // The positions' (NewHistory).
  // The history this one continued (empty: none), up to where: a replica of it at or behind
  // that position resumes here.
  std::string previous_history_;
  uint64_t continued_at_ = 0;

  bool active_ = false;  // A full sync has cut: every record gets a position.
  std::string turn_;     // This turn's records, encoded.
  uint32_t turn_count_ = 0;
  std::deque<Chunk> backlog_;
  size_t backlog_bytes_ = 0;
  uint64_t next_lsn_ = 0;  // The position the next record gets.
  uint64_t published_bytes_ = 0;
  int64_t now_ms_ = 0;  // The worker's clock at the last Serve or Turn.
  // Records were published in this turn (Commit comes before Turn), and in the last one (what
  // Serve, which comes before Commit, goes by).
  bool busy_ = false;
  bool was_busy_ = false;
  bool in_turn_ = false;
  std::optional<FullSync> sync_;
  // The worker may still be walking for a dropped full sync: no new one until it finishes.
  bool walking_ = false;
  Image image_{*this};
  std::vector<Kept> kept_;
  std::vector<Flow> flow_list_;
  uint32_t in_sync_ = 0;
  std::deque<Kept> waiters_;  // Writes waiting for replicas (and reads behind them), in order.
  // The last position of the writes that timed out (kNotReplicated) and the replicas they
  // needed, until those acknowledge it (0: none): a linearizable read waits for it.
  uint64_t unsettled_lsn_ = 0;
  uint8_t unsettled_replicas_ = 0;
  uint64_t want_upto_ = 0;  // The highest position a write waits for.
  uint64_t not_replicated_ = 0;
  const InSyncSet* const in_sync_set_;
  std::vector<std::string> members_;  // The in-sync set as taken ...
  uint64_t members_generation_ = 0;   // ... its generation ...
  uint64_t members_taken_lsn_ = 0;    // ... and the head position then.
  // The lowest position every member has acknowledged (0 while one has no flow in sync).
  uint64_t members_floor_ = 0;

  std::atomic<uint32_t> flows_figure_{0};
  std::atomic<uint64_t> lsn_figure_{0};
  std::atomic<uint64_t> first_lsn_figure_{0};
  std::atomic<uint64_t> bytes_figure_{0};
  std::atomic<uint64_t> acked_figure_{0};
  std::atomic<uint64_t> not_replicated_figure_{0};
  std::atomic<uint64_t> wanted_figure_{0};
  std::atomic<uint64_t> set_generation_figure_{0};
  std::atomic<uint64_t> set_taken_figure_{0};
};

}  // namespace ringkv::repl

#endif  // RINGKV_SERVER_REPL_SOURCE_H_
