#include "server/repl/source.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "persist/format.h"
#include "shard/clock.h"

namespace ringkv::repl {

ReplSource::ReplSource(Journal* inner, Worker& worker, std::string server_id, size_t backlog_bytes,
                       int64_t replica_timeout_ms, const Fence* fence, const InSyncSet* in_sync_set)
    : inner_(inner),
      fence_(fence),
      worker_(worker),
      backlog_limit_(backlog_bytes),
      replica_timeout_ms_(replica_timeout_ms),
      server_id_(std::move(server_id)),
      in_sync_set_(in_sync_set) {
  NewHistory();
}

void ReplSource::NewHistory() { history_ = server_id_ + "." + std::to_string(++histories_); }

void ReplSource::Set(std::string_view key, std::string_view value, uint64_t version,
                     int64_t deadline_ms) {
  if (inner_) inner_->Set(key, value, version, deadline_ms);
  if (!active_) return;
  persist::AppendSet(&turn_, key, value, version, deadline_ms);
  ++turn_count_;
}

void ReplSource::SetDeadline(std::string_view key, int64_t deadline_ms) {
  if (inner_) inner_->SetDeadline(key, deadline_ms);
  if (!active_) return;
  persist::AppendDeadline(&turn_, key, deadline_ms);
  ++turn_count_;
}

void ReplSource::Delete(std::string_view key) {
  if (inner_) inner_->Delete(key);
  if (!active_) return;
  persist::AppendDelete(&turn_, key);
  ++turn_count_;
}

void ReplSource::Expired(std::string_view key) {
  if (inner_) inner_->Expired(key);
  if (!active_) return;
  persist::AppendDelete(&turn_, key);
  ++turn_count_;
}

void ReplSource::Commit() {
  if (inner_) inner_->Commit();
  if (turn_count_ > 0) Publish();
}

void ReplSource::Publish() {
  published_bytes_ += turn_.size();
  backlog_bytes_ += turn_.size();
  backlog_.push_back(
      {next_lsn_, turn_count_, std::move(turn_), published_bytes_, now_ms_, SystemClockUs()});
  busy_ = true;
  next_lsn_ += turn_count_;
  turn_ = {};
  turn_count_ = 0;
  TrimChunks(&backlog_, &backlog_bytes_, backlog_limit_);
  PublishFigures();
}

void ReplSource::Continue(Handover handover) {
  NewHistory();
  previous_history_ = std::move(handover.history);
  continued_at_ = handover.lsn;
  next_lsn_ = handover.lsn;
  published_bytes_ = handover.bytes;
  backlog_ = std::move(handover.chunks);
  backlog_bytes_ = ChunkBytes(backlog_);
  TrimChunks(&backlog_, &backlog_bytes_, backlog_limit_);
  active_ = true;  // Its first replica may be one that resumes: no full sync turns it on.
  PublishFigures();
}

std::deque<Chunk>::const_iterator ReplSource::ChunkAt(uint64_t from) const {
  if (from >= next_lsn_) return backlog_.end();
  auto it = std::upper_bound(backlog_.begin(), backlog_.end(), from,
                             [](uint64_t lsn, const Chunk& c) { return lsn < c.first; });
  return it == backlog_.begin() ? it : std::prev(it);
}

void ReplSource::PublishFigures() {
  flows_figure_.store(static_cast<uint32_t>(flow_list_.size()), std::memory_order_relaxed);
  lsn_figure_.store(next_lsn_, std::memory_order_relaxed);
  first_lsn_figure_.store(backlog_.empty() ? next_lsn_ : backlog_.front().first,
                          std::memory_order_relaxed);
  bytes_figure_.store(backlog_bytes_, std::memory_order_relaxed);
  uint64_t acked = 0;
  for (const Flow& f : flow_list_) acked = std::max(acked, f.acked);
  acked_figure_.store(acked, std::memory_order_relaxed);
  not_replicated_figure_.store(not_replicated_, std::memory_order_relaxed);
  wanted_figure_.store(want_upto_, std::memory_order_relaxed);
  set_taken_figure_.store(members_taken_lsn_, std::memory_order_relaxed);
  set_generation_figure_.store(members_generation_, std::memory_order_release);
}

ReplSource::Flow* ReplSource::FindFlow(int64_t id) {
  for (Flow& f : flow_list_) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

uint32_t ReplSource::Acked(uint64_t position) const {
  uint32_t n = 0;
  if (in_sync_set_ != nullptr) {
    for (const std::string& member : members_) {
      const std::optional<uint64_t> acked = MemberAcked(member);
      n += acked.has_value() && *acked >= position ? 1 : 0;
    }
    return n;
  }
  for (const Flow& f : flow_list_) n += f.tailing && f.acked >= position ? 1 : 0;
  return n;
}

bool ReplSource::Acknowledged(const Request& request) const {
  if (in_sync_set_ == nullptr) return Acked(request.repl_seq) >= request.replicas;
  return members_.size() >= request.replicas && members_floor_ >= request.repl_seq;
}

std::optional<uint64_t> ReplSource::MemberAcked(const std::string& member) const {
  std::optional<uint64_t> most;
  for (const Flow& f : flow_list_) {
    if (f.tailing && f.replica_id == member) most = std::max(most.value_or(0), f.acked);
  }
  return most;
}

void ReplSource::TakeMembers() {
  members_ = in_sync_set_->members(&members_generation_);
  members_taken_lsn_ = next_lsn_ + turn_count_;
  CountMembers();
  PublishFigures();
}

void ReplSource::CountMembers() {
  if (in_sync_set_ == nullptr) return;
  uint32_t present = 0;
  uint64_t floor = UINT64_MAX;
  for (const std::string& member : members_) {
    const std::optional<uint64_t> acked = MemberAcked(member);
    present += acked.has_value() ? 1 : 0;
    floor = std::min(floor, acked.value_or(0));
  }
  in_sync_ = present;
  members_floor_ = floor;
}

bool ReplSource::Await(Request& request) {
  if (request.linearizable) {
    // It waits behind the writes that wait, and for the records of those that timed out.
    if (unsettled_lsn_ != 0) {
      request.repl_seq = unsettled_lsn_;
      request.replicas = unsettled_replicas_;
      if (Acknowledged(request)) {
        unsettled_lsn_ = 0;
        unsettled_replicas_ = 0;
        request.repl_seq = 0;
      }
    }
    if (waiters_.empty() && request.repl_seq == 0) return false;
    waiters_.push_back({&request, 0});
    return true;
  }
  if (Acknowledged(request)) {
    request.repl_seq = 0;
    return false;
  }
  waiters_.push_back({&request, 0});  // Its clock starts at the next Turn.
  return true;
}

void ReplSource::ReleaseWaiters(int64_t now_ms, std::vector<Request*>* answered) {
  bool changed = false;
  while (!waiters_.empty()) {
    Kept& w = waiters_.front();
    Request& r = *w.request;
    if (r.linearizable && r.repl_seq < unsettled_lsn_) {
      // A write before it timed out: it waits for that write's records, as a new read would.
      r.repl_seq = unsettled_lsn_;
      r.replicas = unsettled_replicas_;
    }
    if (!Acknowledged(r)) {  // A read that waits only for the writes before it is.
      if (w.until_ms == 0) {
        // Every later one started as late as this one, or later.
        for (Kept& k : waiters_) {
          if (k.until_ms == 0) k.until_ms = now_ms + replica_timeout_ms_;
        }
      }
      if (now_ms < w.until_ms) break;
      r.result = Result::kNotReplicated;
      r.acked_replicas = static_cast<uint8_t>(Acked(r.repl_seq));
      if (!r.linearizable) {
        // Its records stay here, and may yet reach the replicas, or be lost in a failover:
        // linearizable reads wait for them.
        unsettled_lsn_ = std::max(unsettled_lsn_, r.repl_seq);
        unsettled_replicas_ = std::max(unsettled_replicas_, r.replicas);
        ++not_replicated_;
      }
      changed = true;
    }
    r.repl_seq = 0;
    answered->push_back(&r);
    waiters_.pop_front();
  }
  if (changed) PublishFigures();
}

std::optional<Handover> ReplSource::Reset(std::vector<Request*>* answered) {
  for (Kept& k : kept_) {
    k.request->result = Result::kUnavailable;
    answered->push_back(k.request);
  }
  kept_.clear();
  for (Kept& w : waiters_) {
    // A read behind them fails too: what it read may not stay.
    w.request->result = Result::kNotReplicated;
    w.request->acked_replicas = 0;
    w.request->repl_seq = 0;
    answered->push_back(w.request);
    if (!w.request->linearizable) ++not_replicated_;
  }
  waiters_.clear();
  unsettled_lsn_ = 0;
  unsettled_replicas_ = 0;
  want_upto_ = 0;
  flow_list_.clear();
  in_sync_ = 0;
  sync_.reset();  // A walk under way runs on to its end, for nothing (walking_).
  std::optional<Handover> ended;
  if (active_ && turn_count_ == 0) {
    ended = Handover{.history = history_,
                     .lsn = next_lsn_,
                     .bytes = published_bytes_,
                     .chunks = std::move(backlog_)};
  }
  backlog_.clear();
  backlog_bytes_ = 0;
  turn_.clear();
  turn_count_ = 0;
  active_ = false;
  NewHistory();  // No replica of the one that ends resumes into the data that replaces it.
  previous_history_.clear();
  continued_at_ = 0;
  CountMembers();
  PublishFigures();
  return ended;
}

ReplSource::Figures ReplSource::figures() const {
  return {flows_figure_.load(std::memory_order_relaxed),
          lsn_figure_.load(std::memory_order_relaxed),
          first_lsn_figure_.load(std::memory_order_relaxed),
          bytes_figure_.load(std::memory_order_relaxed),
          acked_figure_.load(std::memory_order_relaxed),
          not_replicated_figure_.load(std::memory_order_relaxed),
          wanted_figure_.load(std::memory_order_relaxed),
          set_generation_figure_.load(std::memory_order_acquire),
          set_taken_figure_.load(std::memory_order_relaxed)};
}

void ReplSource::Image::Add(std::string_view key, std::string_view value, uint64_t version,
                            int64_t deadline_ms) {
  if (!source_.sync_.has_value()) return;  // Dropped: the walk runs on to its end, for nothing.
  persist::AppendSet(&source_.sync_->part, key, value, version, deadline_ms);
  ++source_.sync_->count;
}

bool ReplSource::Image::backlogged() const {
  return source_.sync_.has_value() && source_.sync_->part.size() >= kImageBytes;
}

void ReplSource::Image::Finish(uint64_t revision) {
  source_.walking_ = false;
  if (!source_.sync_.has_value()) return;
  source_.sync_->done = true;
  source_.sync_->revision = revision;
}

void ReplSource::Image::OnCut() {
  // Records made before the cut are in the image: they end the chunk before it, so the tail
  // starts exactly at the cut.
  if (source_.turn_count_ > 0) source_.Publish();
  source_.active_ = true;
  if (source_.sync_.has_value()) {
    source_.sync_->cut = true;
    source_.sync_->cut_lsn = source_.next_lsn_;
    source_.sync_->keys = source_.worker_.shard().size();
  }
  source_.PublishFigures();
}

bool ReplSource::Serve(Request& request, Shard& /*shard*/, int64_t now_ms) {
  now_ms_ = now_ms;
  const Step step = static_cast<Step>(request.number);
  if (step == Step::kAck) {
    if (Flow* flow = FindFlow(request.deadline_ms)) {
      flow->acked = std::max(flow->acked, request.version);
    }
    CountMembers();
    PublishFigures();
    request.result = Result::kOk;
    return true;
  }
  if (step == Step::kEnd) {
    if (sync_.has_value() && sync_->flow == request.deadline_ms) sync_.reset();
    for (size_t i = 0; i < flow_list_.size(); ++i) {
      if (flow_list_[i].id != request.deadline_ms) continue;
      if (flow_list_[i].tailing) --in_sync_;
      flow_list_.erase(flow_list_.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
    CountMembers();
    PublishFigures();
    request.result = Result::kOk;
    return true;
  }
  if (step == Step::kResume) {
    const uint64_t first = backlog_.empty() ? next_lsn_ : backlog_.front().first;
    const uint64_t from = request.version;
    // The replica's data is a prefix of this history up to `from`: it followed this one, or
    // the one this one continued, no further than where it continued.
    const bool ours =
        request.value == history_ ||
        (!previous_history_.empty() && request.value == previous_history_ && from <= continued_at_);
    request.result =
        active_ && ours && from >= first && from <= next_lsn_ ? Result::kOk : Result::kUnavailable;
    // A replica past where this history continued its own holds records this worker never
    // got (a deposed primary's writes): the full sync drops them, and the replica counts them.
    const bool diverged =
        !previous_history_.empty() && request.value == previous_history_ && from > continued_at_;
    request.number = diverged ? 1 : 0;
    if (diverged) request.version = continued_at_;
    if (request.result == Result::kOk) {
      request.out = history_;
      if (FindFlow(request.deadline_ms) == nullptr) {
        flow_list_.push_back({request.deadline_ms, false, 0, std::string(request.key)});
      }
    }
    PublishFigures();
    return true;
  }
  if (step == Step::kBegin && FindFlow(request.deadline_ms) == nullptr) {
    flow_list_.push_back({request.deadline_ms, false, 0, std::string(request.key)});
    PublishFigures();
  }
  if (step == Step::kTail) {
    if (Flow* flow = FindFlow(request.deadline_ms); flow != nullptr && !flow->tailing) {
      flow->tailing = true;  // Its acknowledgements say what it has applied.
      ++in_sync_;
      CountMembers();
    }
  }
  if (TryAnswer(request, now_ms)) return true;
  kept_.push_back({&request, now_ms + kHeartbeatMs});
  return false;
}

bool ReplSource::TryAnswer(Request& request, int64_t now_ms) {
  switch (static_cast<Step>(request.number)) {
    case Step::kBegin:
      return AnswerBegin(request, now_ms);
    case Step::kImage:
      return AnswerImage(request, now_ms);
    case Step::kTail:
      return AnswerTail(request, now_ms, false);
    case Step::kEnd:
    case Step::kResume:
    case Step::kAck:
      break;
  }
  request.result = Result::kUnavailable;
  return true;
}

bool ReplSource::AnswerBegin(Request& request, int64_t now_ms) {
  if (sync_.has_value() && sync_->flow != request.deadline_ms) return false;  // Another's.
  if (!sync_.has_value()) {
    if (walking_) return false;  // A dropped full sync's walk is still running.
    sync_ = FullSync{};  // Not emplace(): clang reads FullSync as not default-constructible.
    sync_->flow = request.deadline_ms;
  }
  if (!sync_->started) {
    if (!worker_.TryStartSnapshot(&image_)) return false;  // The data directory's snapshot.
    sync_->started = true;
    walking_ = true;
    sync_->last_read_ms = now_ms;
  }
  if (!sync_->cut) return false;
  request.version = sync_->cut_lsn;
  request.number = static_cast<int64_t>(sync_->keys);
  request.out = history_;
  request.result = Result::kOk;
  return true;
}

bool ReplSource::AnswerImage(Request& request, int64_t now_ms) {
  if (!sync_.has_value() || sync_->flow != request.deadline_ms) {
    request.result = Result::kUnavailable;  // Dropped.
    return true;
  }
  FullSync& sync = *sync_;
  sync.last_read_ms = now_ms;
  if (sync.count > 0 && (sync.part.size() >= kImageSendBytes || sync.done)) {
    request.out.clear();
    request.out.swap(sync.part);
    request.number = sync.count;
    sync.count = 0;
    request.result = Result::kOk;
    return true;
  }
  if (!sync.done) return false;
  request.version = sync.revision;
  request.result = Result::kNotFound;
  sync_.reset();
  return true;
}

bool ReplSource::WorthSending(uint64_t from, int64_t now_ms, bool busy) const {
  if (from == next_lsn_) return false;
  if (!busy || want_upto_ > from) return true;  // A write waits for what it would carry.
  const auto it = ChunkAt(from);
  const uint64_t before = it->end_bytes - it->records.size();
  return published_bytes_ - before >= kBatchBytes || now_ms - it->made_ms >= kBatchMs;
}

bool ReplSource::AnswerTail(Request& request, int64_t now_ms, bool waited_enough) {
  const uint64_t from = request.version;
  const uint64_t first = backlog_.empty() ? next_lsn_ : backlog_.front().first;
  if (!active_ || from < first || from > next_lsn_) {
    request.result = Result::kUnavailable;
    return true;
  }
  // In Serve (during the turn's requests) the last turn says whether the worker is busy; in
  // Turn (after the commit), this one.
  if (!waited_enough && !WorthSending(from, now_ms, in_turn_ ? busy_ : was_busy_)) return false;
  request.out.clear();
  uint32_t count = 0;
  auto it = ChunkAt(from);
  request.tail = {0, published_bytes_, published_bytes_};
  if (it != backlog_.end()) request.tail.made_us = it->made_us;
  if (it != backlog_.end() && it->first < from) {
    // A flow resumed from another history's position (Continue) may stand inside a chunk:
    // what it holds of that chunk is skipped.
    persist::RecordReader reader(it->records);
    persist::Record skipped;
    for (uint64_t n = it->first; n < from; ++n) reader.Next(&skipped);
    request.out.append(reader.rest());
    request.tail.end_bytes = it->end_bytes;
    count = static_cast<uint32_t>(it->first + it->count - from);
    ++it;
  }
  for (; it != backlog_.end() && (count == 0 || request.out.size() < kTailBytes); ++it) {
    request.out.append(it->records);
    request.tail.end_bytes = it->end_bytes;
    count += it->count;
  }
  request.number = count;
  request.version = from + count;
  request.deadline_ms = static_cast<int64_t>(next_lsn_);
  request.replicas = want_upto_ > from ? 1 : 0;
  request.result = Result::kOk;
  return true;
}

size_t ReplSource::Turn(Shard& /*shard*/, Clock clock, std::vector<Request*>* answered) {
  if (in_sync_set_ != nullptr && in_sync_set_->generation() != members_generation_) {
    TakeMembers();
  }
  if (kept_.empty() && !sync_.has_value() && waiters_.empty()) {
    was_busy_ = busy_;
    busy_ = false;
    return 0;
  }
  const int64_t now_ms = clock();
  now_ms_ = now_ms;
  if (sync_.has_value() && sync_->started && now_ms - sync_->last_read_ms > kStaleImageMs &&
      image_.backlogged()) {
    sync_.reset();  // Its flow stopped reading: the walk runs on without it, and it starts over.
  }
  in_turn_ = true;
  size_t kept = 0;
  for (Kept& k : kept_) {
    Request& r = *k.request;
    const bool heartbeat = static_cast<Step>(r.number) == Step::kTail && now_ms >= k.until_ms;
    const bool done = heartbeat ? AnswerTail(r, now_ms, true) : TryAnswer(r, now_ms);
    if (done) {
      answered->push_back(&r);
    } else {
      kept_[kept++] = k;
    }
  }
  kept_.resize(kept);
  if (!waiters_.empty()) ReleaseWaiters(now_ms, answered);
  in_turn_ = false;
  was_busy_ = busy_;
  busy_ = false;
  return 0;
}

}  // namespace ringkv::repl
