// RolePort: a worker's ReplicationPort, which is its ReplSink while the server follows a
// primary and its ReplSource once it does not (issue 22: `ringkv replicate --stop` promotes a
// replica at run time). The worker's journal is the ReplSource either way: a replica's shard
// journals nothing (what it applies goes through Shard::Load*, and it takes no writes).
//
// Promote (any thread, once the replica's client has stopped, so that nothing more reaches
// the sink): the worker applies what its sink still holds, then serves as a primary from its
// next turn on; follows_now() says when. Nothing is lost: what the old primary's replicas
// acknowledged was applied before the acknowledgement, and what was queued is applied first.
// If the sink held a whole image, its history, position and kept records go to the source
// (server/repl/chunk.h), so that the old primary's other replicas resume from their
// positions; otherwise the first replica of the new primary full-syncs.
//
// Demote (any thread, once writes are refused): at its next turn the worker gives back what
// its source keeps (ReplSource::Reset: the flows end, writes waiting for replicas get
// kNotReplicated) and follows from then on; its shard keeps its data until the new primary's
// full sync replaces it, or goes on from its position if the new primary continued its
// history no further than that (a planned switchover: ReplSink::Rejoin).
//
// RaiseFloor (any thread; issue 23): a term won in a group on etcd puts the versions the worker
// gives from its next turn on above `floor` (term << 40), so that a write lost in the failover
// can never come back as a version that a compare-and-set would take; floored() says when.
//
// Threads: the owning worker's, except Promote, Demote, RaiseFloor, follows_now and floored
// (any thread).
#ifndef RINGKV_SERVER_REPL_ROLE_PORT_H_
#define RINGKV_SERVER_REPL_ROLE_PORT_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <utility>

#include "server/repl/sink.h"
#include "server/repl/source.h"

namespace ringkv::repl {

class RolePort final : public ReplicationPort {
 public:
  RolePort(ReplSource& source, ReplSink& sink, bool following)
      : source_(source),
        sink_(sink),
        following_(following),
        follows_(following),
        want_follow_(following) {}

  void Promote() { want_follow_.store(false, std::memory_order_release); }
  void Demote() { want_follow_.store(true, std::memory_order_release); }
  void RaiseFloor(uint64_t floor) { floor_.store(floor, std::memory_order_release); }
  uint64_t floored() const { return floored_.load(std::memory_order_acquire); }
  // Whether the worker serves as a replica (after Demote) or a primary (after Promote) yet.
  bool follows_now() const { return follows_.load(std::memory_order_acquire); }
  // Whether the last promotion continued the sink's history (valid once follows_now() is false).
  bool continued() const { return continued_.load(std::memory_order_relaxed); }

  bool Serve(Request& request, Shard& shard, int64_t now_ms) override {
    return following_ ? sink_.Serve(request, shard, now_ms) : source_.Serve(request, shard, now_ms);
  }
  size_t Turn(Shard& shard, Clock clock, std::vector<Request*>* answered) override {
    if (const uint64_t floor = floor_.load(std::memory_order_acquire); floor > floor_done_) {
      shard.RaiseRevision(floor);
      floor_done_ = floor;
      floored_.store(floor, std::memory_order_release);
    }
    const bool want = want_follow_.load(std::memory_order_acquire);
    if (!following_) {
      if (!want) return source_.Turn(shard, clock, answered);
      // Demoted: the flows, their requests and the writes waiting for replicas are given back.
      if (std::optional<Handover> ended = source_.Reset(answered)) {
        sink_.Rejoin(std::move(*ended));
      }
      continued_.store(false, std::memory_order_relaxed);
      following_ = true;
      follows_.store(true, std::memory_order_release);
      return 1;
    }
    const size_t work = sink_.Turn(shard, clock, answered);
    if (!want && sink_.drained()) {
      if (std::optional<Handover> handover = sink_.TakeHandover()) {
        source_.Continue(std::move(*handover));
        continued_.store(true, std::memory_order_relaxed);
      }
      sink_.Promoted();  // A full sync cut short: the data held before stays.
      following_ = false;
      follows_.store(false, std::memory_order_release);
      return work + 1;
    }
    return work;
  }
  bool follows() const override { return following_; }
  uint32_t in_sync() const override { return following_ ? 0 : source_.in_sync(); }
  uint64_t position() const override { return source_.position(); }
  void Expect(uint64_t repl_seq) override { source_.Expect(repl_seq); }
  bool Await(Request& request) override {
    if (!following_) return source_.Await(request);
    // A write run as the primary, whose journal let its answer go only after the demotion:
    // no replica acknowledged it, and none will.
    if (request.repl_seq != 0) {
      request.result = Result::kNotReplicated;
      request.acked_replicas = 0;
      request.repl_seq = 0;
    }
    return false;
  }

 private:
  ReplSource& source_;
  ReplSink& sink_;
  bool following_;  // The worker's own copy of follows_.
  std::atomic<bool> follows_;
  std::atomic<bool> want_follow_;  // What Promote or Demote asked for.
  std::atomic<bool> continued_{false};
  std::atomic<uint64_t> floor_{0};    // What RaiseFloor asked for.
  uint64_t floor_done_ = 0;           // The worker's: the floor its shard has.
  std::atomic<uint64_t> floored_{0};  // floor_done_, for other threads.
};

}  // namespace ringkv::repl

#endif  // RINGKV_SERVER_REPL_ROLE_PORT_H_
