#include "server/repl/sink.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/container/flat_hash_set.h"
#include "base/log.h"
#include "persist/format.h"
#include "persist/log_writer.h"
#include "shard/clock.h"
#include "shard/router.h"
#include "shard/shard.h"

namespace ringkv::repl {

ReplSink::ReplSink(bool keep_data, size_t backlog_bytes)
    : keep_data_(keep_data),
      backlog_limit_(backlog_bytes),
      ack_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  ABSL_RAW_CHECK(ack_fd_ >= 0, "cannot make a replica flow's eventfd");
}

ReplSink::~ReplSink() { close(ack_fd_); }

bool ReplSink::Push(Item item) {
  std::unique_lock lock(mu_);
  room_.wait(lock, [&] { return stopped_ || queued_bytes_ < kMaxQueuedBytes; });
  if (stopped_) return false;
  switch (item.kind) {
    case Item::Kind::kFullSync:
      pushed_ = {item.history, item.lsn};
      pushed_whole_ = false;
      break;
    case Item::Kind::kImageDone:
      pushed_whole_ = true;
      break;
    case Item::Kind::kTail:
      pushed_.lsn = item.lsn + item.count;
      break;
    case Item::Kind::kHistory:
      pushed_.history = item.history;
      break;
    case Item::Kind::kImage:
      break;
  }
  queued_bytes_ += item.records.size();
  queue_.push_back(std::move(item));
  waiting_.store(true, std::memory_order_release);
  return true;
}

void ReplSink::Stop() {
  std::lock_guard lock(mu_);
  stopped_ = true;
  room_.notify_all();
}

void ReplSink::Restart() {
  std::lock_guard lock(mu_);
  stopped_ = false;
}

void ReplSink::set_last_error(std::string error) {
  std::lock_guard lock(mu_);
  last_error_ = std::move(error);
}

ReplSink::Figures ReplSink::figures() const {
  Figures f;
  f.state = !connected_.load(std::memory_order_relaxed) ? "connecting"
            : synced_.load(std::memory_order_relaxed)   ? "stable"
                                                        : "full_sync";
  f.applied_lsn = applied_lsn_.load(std::memory_order_relaxed);
  f.primary_lsn = primary_lsn_.load(std::memory_order_relaxed);
  f.applied_bytes = applied_bytes_.load(std::memory_order_relaxed);
  f.primary_bytes = primary_bytes_.load(std::memory_order_relaxed);
  f.last_delay_us = last_delay_us_.load(std::memory_order_relaxed);
  for (size_t b = 0; b < kDelayBuckets; ++b)
    f.delays[b] = delays_[b].load(std::memory_order_relaxed);
  f.delay_sum_us = delay_sum_us_.load(std::memory_order_relaxed);
  f.full_syncs = full_syncs_.load(std::memory_order_relaxed);
  f.partial_syncs = partial_syncs_.load(std::memory_order_relaxed);
  f.dropped_records = dropped_records_.load(std::memory_order_relaxed);
  f.dropped_keys = dropped_keys_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  f.last_error = last_error_;
  return f;
}

void ReplSink::AttachAcks(AckSender* sender) {
  ack_sender_ = sender;
  ack_sent_ = 0;
}

void ReplSink::Acknowledge() {
  // Drained before the flag is cleared: a signal that comes between the two leaves the eventfd
  // readable (a spare wake-up), never a cleared one with the flag still set (a lost one). The
  // clear is an exchange: when the worker's exchange saw the flag still set (and wrote
  // nothing), this one reads its write, and with it the position it applied before.
  uint64_t count;
  while (read(ack_fd_, &count, sizeof count) < 0 && errno == EINTR) {
  }
  ack_due_.exchange(false, std::memory_order_acq_rel);
  SendAckLocked();
}

bool ReplSink::SendAckLocked() {
  if (ack_sender_ == nullptr) return true;
  // Before the image is whole, what is applied is no position the primary can count on.
  if (!synced_.load(std::memory_order_acquire)) return true;
  const uint64_t applied = applied_lsn_.load(std::memory_order_acquire);
  if (applied <= ack_sent_) return true;
  ack_sent_ = applied;
  return ack_sender_->SendAck(applied);
}

void ReplSink::SignalAck() {
  if (ack_due_.exchange(true, std::memory_order_acq_rel)) return;
  const uint64_t one = 1;
  while (write(ack_fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void ReplSink::CountDelay(int64_t delay_us) {
  size_t b = 0;
  while (b < kDelayBoundsUs.size() && delay_us > kDelayBoundsUs[b]) ++b;
  delays_[b].store(delays_[b].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  delay_sum_us_.store(delay_sum_us_.load(std::memory_order_relaxed) + delay_us,
                      std::memory_order_relaxed);
  last_delay_us_.store(delay_us, std::memory_order_relaxed);
}

bool ReplSink::Serve(Request& request, Shard& /*shard*/, int64_t /*now_ms*/) {
  request.result = Result::kUnavailable;  // A replica streams to no one (no chains yet).
  return true;
}

void ReplSink::Restore(const persist::ReplPosition& position) {
  history_ = position.history;
  applied_lsn_.store(position.lsn, std::memory_order_relaxed);
  synced_.store(true, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  pushed_ = position;
  pushed_whole_ = true;
}

std::optional<persist::ReplPosition> ReplSink::ResumeFrom() const {
  std::lock_guard lock(mu_);
  if (!pushed_whole_ || pushed_.history.empty()) return std::nullopt;
  return pushed_;
}

std::optional<Handover> ReplSink::TakeHandover() {
  if (history_.empty() || syncing_ || !synced_.load(std::memory_order_relaxed)) {
    return std::nullopt;  // No whole image of one history: the positions start afresh.
  }
  Handover handover{.history = history_,
                    .lsn = applied_lsn_.load(std::memory_order_relaxed),
                    .bytes = applied_bytes_.load(std::memory_order_relaxed),
                    .chunks = std::move(backlog_)};
  backlog_.clear();
  backlog_bytes_ = 0;
  return handover;
}

void ReplSink::Promoted() {
  staging_.reset();  // A full sync cut short: the data held before stays.
  syncing_ = false;
  history_.clear();
  backlog_.clear();
  backlog_bytes_ = 0;
  std::lock_guard lock(mu_);
  pushed_whole_ = false;  // The shard takes writes of its own from now on.
}

void ReplSink::Keep(Item&& item) {
  if (backlog_limit_ == 0) return;
  backlog_bytes_ += item.records.size();
  backlog_.push_back({.first = item.lsn,
                      .count = item.count,
                      .records = std::move(item.records),
                      .end_bytes = item.end_bytes,
                      .made_ms = 0,
                      .made_us = item.made_us});
  TrimChunks(&backlog_, &backlog_bytes_, backlog_limit_);
}

void ReplSink::Rejoin(Handover ended) {
  staging_.reset();
  syncing_ = false;
  history_ = std::move(ended.history);
  applied_lsn_.store(ended.lsn, std::memory_order_relaxed);
  applied_bytes_.store(ended.bytes, std::memory_order_relaxed);
  backlog_ = std::move(ended.chunks);
  backlog_bytes_ = ChunkBytes(backlog_);
  TrimChunks(&backlog_, &backlog_bytes_, backlog_limit_);
  // Not whole for an election: it may hold writes no other server got, and lack the new
  // primary's. A partial resync makes it whole (CountPartialSync); a full sync replaces it.
  synced_.store(false, std::memory_order_release);
  std::lock_guard lock(mu_);
  pushed_ = {history_, ended.lsn};
  pushed_whole_ = true;
}

void ReplSink::CountDropped(uint64_t from) {
  const uint64_t at = applied_lsn_.load(std::memory_order_relaxed);
  if (from >= at) return;
  // The distinct keys of the dropped records still kept (views into the chunks).
  absl::flat_hash_set<std::string_view> keys;
  for (const Chunk& c : backlog_) {
    if (c.first + c.count <= from) continue;
    persist::RecordReader reader(c.records);
    persist::Record r;
    for (uint64_t lsn = c.first; reader.Next(&r); ++lsn) {
      if (lsn >= from) keys.insert(r.key);
    }
  }
  const bool all_kept = !backlog_.empty() && backlog_.front().first <= from;
  dropped_records_.fetch_add(at - from, std::memory_order_relaxed);
  dropped_keys_.fetch_add(keys.size(), std::memory_order_relaxed);
  Log(LogLevel::kWarning,
      "replica: the new primary's history continues this server's %s at position %d, where "
      "this worker stood at %d: the full sync drops %d records of writes it took that never "
      "reached the new primary, on %s%d keys",
      history_, from, at, at - from, all_kept ? "" : "at least ", keys.size());
}

void ReplSink::AfterCut() {
  persist::LogWriter* log = durability_.log;
  if (log == nullptr) return;
  const uint64_t generation = log->generation();
  bool reset = false;
  if (unlogged_.load(std::memory_order_relaxed)) {
    // The first cut after a swap: this segment begins the records on the new image.
    reset = true;
    reset_generation_.store(generation, std::memory_order_relaxed);
    unlogged_.store(false, std::memory_order_release);
  } else if (const uint64_t g = reset_generation_.load(std::memory_order_relaxed); g != 0) {
    if (durability_.committed() >= g) {
      reset_generation_.store(0, std::memory_order_release);
    } else {
      reset = true;  // That snapshot failed: this one must hold the image too.
    }
  }
  // During a full sync the shard still holds the old data, of the old history: no position.
  const std::string_view history = syncing_ ? std::string_view() : history_;
  if (reset || !history.empty()) {
    log->Position(history, applied_lsn_.load(std::memory_order_relaxed), reset);
  }
}

bool ReplSink::durable_pending() const {
  if (unlogged_.load(std::memory_order_acquire)) return true;
  const uint64_t g = reset_generation_.load(std::memory_order_acquire);
  return g != 0 && durability_.committed() < g;
}

std::optional<persist::ReplPosition> ReplSink::position_at_stop() const {
  if (history_.empty() || syncing_) return std::nullopt;
  return persist::ReplPosition{history_, applied_lsn_.load(std::memory_order_relaxed)};
}

size_t ReplSink::Turn(Shard& shard, Clock /*clock*/, std::vector<Request*>* /*answered*/) {
  if (persist::LogWriter* log = durability_.log;
      log != nullptr && !log->failed() && (log->backlogged() || log->stalled())) {
    return 0;  // The log's progress wakes the worker.
  }
  if (taken_.empty()) {
    if (!waiting_.load(std::memory_order_acquire)) return 0;
    std::lock_guard lock(mu_);
    taken_.swap(queue_);
    queued_bytes_ = 0;
    waiting_.store(false, std::memory_order_relaxed);
    room_.notify_all();
  }
  size_t bytes = 0;
  size_t applied = 0;
  bool ack = false;
  while (!taken_.empty() && bytes < kTurnBytes) {
    bytes += taken_.front().records.size();
    applied += Apply(shard, taken_.front()) + 1;
    ack |= taken_.front().ack;
    if (taken_.front().kind == Item::Kind::kTail) Keep(std::move(taken_.front()));
    taken_.pop_front();
  }
  if (logged_) {
    logged_ = false;
    durability_.log->Position(history_, applied_lsn_.load(std::memory_order_relaxed), false);
  }
  if (ack) {
    // Sent from here unless the flow's thread is using the connection (then it sends it).
    std::unique_lock lock(ack_mu_, std::try_to_lock);
    if (!lock.owns_lock() || !SendAckLocked()) SignalAck();
  }
  return applied;
}

size_t ReplSink::Apply(Shard& shard, const Item& item) {
  switch (item.kind) {
    case Item::Kind::kFullSync:
      if (item.diverged.has_value() && !syncing_) CountDropped(*item.diverged);
      synced_.store(false, std::memory_order_relaxed);
      syncing_ = true;
      history_ = item.history;
      backlog_.clear();  // Records of the data it replaces.
      backlog_bytes_ = 0;
      if (keep_data_) {
        staging_ = std::make_unique<Shard>(item.keys);  // An earlier, unfinished one goes.
      } else {
        shard.Clear(item.keys);
      }
      applied_lsn_.store(item.lsn, std::memory_order_relaxed);
      return 0;
    case Item::Kind::kImageDone:
      if (staging_ != nullptr) {
        shard.RaiseRevision(staging_->revision());
        shard.SwapData(*staging_);
        staging_.reset();  // The data held before.
      }
      if (syncing_ && durability_.log != nullptr) {
        // The log holds the data replaced: nothing more goes to it until a snapshot's cut.
        unlogged_.store(true, std::memory_order_release);
        durability_.request_snapshot();
      }
      syncing_ = false;
      shard.RaiseRevision(item.revision);
      // Unless a later full sync has begun meanwhile (its FULL_SYNC is still queued).
      if (item.sync == full_syncs_.load(std::memory_order_relaxed)) {
        synced_.store(true, std::memory_order_release);
      }
      return 0;
    case Item::Kind::kHistory:
      // The same data, positions and kept records, under the name the new primary gave them.
      history_ = item.history;
      logged_ |= durability_.log != nullptr && !durability_.log->failed() &&
                 !unlogged_.load(std::memory_order_relaxed) && !syncing_;
      return 0;
    case Item::Kind::kImage:
    case Item::Kind::kTail:
      break;
  }
  // A burst at a time, as the worker runs requests: every slot's DRAM fetch starts before the
  // first record is applied, then every likely record's.
  constexpr size_t kBurst = 32;
  // An image goes to the full sync's own shard, if it has one.
  Shard& target = item.kind == Item::Kind::kImage && staging_ != nullptr ? *staging_ : shard;
  persist::LogWriter* log = durability_.log;
  if (item.kind != Item::Kind::kTail || log == nullptr || log->failed() ||
      unlogged_.load(std::memory_order_relaxed)) {
    log = nullptr;
  }
  persist::RecordReader reader(item.records);
  persist::Record records[kBurst];
  HashedKey keys[kBurst];
  size_t n = 0;
  for (;;) {
    size_t got = 0;
    while (got < kBurst && reader.Next(&records[got])) {
      keys[got] = {records[got].key, Router::Hash(records[got].key)};
      target.Prefetch(keys[got]);
      ++got;
    }
    if (got == 0) break;
    for (size_t i = 0; i < got; ++i) target.PrefetchRecord(keys[i]);
    for (size_t i = 0; i < got; ++i) {
      const persist::Record& r = records[i];
      switch (r.kind) {
        case persist::RecordKind::kSet:
          target.LoadSet(keys[i], r.value, r.version, r.deadline_ms);
          if (log != nullptr) log->Set(r.key, r.value, r.version, r.deadline_ms);
          break;
        case persist::RecordKind::kDeadline:
          target.LoadDeadline(keys[i], r.deadline_ms);
          if (log != nullptr) log->SetDeadline(r.key, r.deadline_ms);
          break;
        case persist::RecordKind::kDelete:
          target.LoadDelete(keys[i]);
          if (log != nullptr) log->Delete(r.key);
          break;
        case persist::RecordKind::kPosition:  // The client lets none through.
          break;
      }
    }
    n += got;
  }
  if (item.kind == Item::Kind::kTail) {
    applied_lsn_.store(item.lsn + item.count, std::memory_order_release);
    logged_ |= log != nullptr;
    applied_bytes_.store(item.end_bytes, std::memory_order_relaxed);
    if (item.made_us > 0) CountDelay(std::max<int64_t>(0, SystemClockUs() - item.made_us));
  }
  return n;
}

}  // namespace ringkv::repl
