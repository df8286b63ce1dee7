#include "server/repl/replica_client.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "persist/format.h"
#include "ringkv/v1/kv.pb.h"

namespace ringkv::repl {
namespace {

namespace pb = ::ringkv::v1;

constexpr char kFlowPath[] = "/ringkv.v1.Replication/Flow";

// A Flow call's messages and end, as the channel delivers them (inside OnReadable).
class FlowObserver final : public CallObserver {
 public:
  explicit FlowObserver(std::function<void(std::string_view)> on_message)
      : on_message_(std::move(on_message)) {}
  void OnMessage(std::string_view bytes) override { on_message_(bytes); }
  void OnFinish(const absl::Status& status) override {
    finished_ = true;
    status_ = status;
  }
  bool finished() const { return finished_; }
  const absl::Status& status() const { return status_; }

 private:
  const std::function<void(std::string_view)> on_message_;
  bool finished_ = false;
  absl::Status status_;
};

// The worker's way to acknowledge on the flow's call (ReplSink::AckSender), under ack_mu.
class FlowAcks final : public ReplSink::AckSender {
 public:
  FlowAcks(H2Channel& channel, H2Channel::Call* call, const FlowObserver& observer)
      : channel_(channel), call_(call), observer_(observer) {}

  bool SendAck(uint64_t applied) override {
    if (observer_.finished()) return false;  // The call is gone: the flow's thread ends it.
    pb::FlowRequest ack;
    ack.set_applied(applied);
    channel_.Send(call_, ack, /*end=*/false);
    channel_.Flush();
    return !observer_.finished() && !channel_.WantsWrite();
  }

 private:
  H2Channel& channel_;
  H2Channel::Call* const call_;
  const FlowObserver& observer_;
};

// The records in `records`, or -1 if they do not parse.
int64_t CountRecords(std::string_view records) {
  persist::RecordReader reader(records);
  persist::Record r;
  int64_t n = 0;
  while (reader.Next(&r)) {
    if (r.kind == persist::RecordKind::kPosition) return -1;  // A log's, not a stream's.
    ++n;
  }
  return reader.malformed() ? -1 : n;
}

}  // namespace

// Where a flow stands, for a partial resync: the primary's history, the position after the
// last record handed to the worker (applied in order, so what the worker will hold), and
// whether the image was whole (a break in the middle of one needs a full sync).
struct ReplicaClient::Position {
  std::string history;
  uint64_t lsn = 0;
  bool resumable = false;
};

ReplicaClient::ReplicaClient(Options options, std::vector<ReplSink*> sinks)
    : options_(std::move(options)),
      sinks_(std::move(sinks)),
      stop_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  ABSL_RAW_CHECK(stop_fd_ >= 0, "cannot make the replica client's eventfd");
}

ReplicaClient::~ReplicaClient() {
  Stop();
  close(stop_fd_);
}

void ReplicaClient::Start() {
  for (uint32_t w = 0; w < sinks_.size(); ++w) threads_.emplace_back([this, w] { Follow(w); });
}

void ReplicaClient::Stop() {
  // Once: the sinks may have a new client by the time this one is destroyed.
  if (stopping_.exchange(true, std::memory_order_acq_rel)) return;
  const uint64_t one = 1;
  while (write(stop_fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
  for (ReplSink* sink : sinks_) sink->Stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void ReplicaClient::Follow(uint32_t worker) {
  ReplSink& sink = *sinks_[worker];
  H2ChannelOptions channel_options;
  channel_options.timeout_ms = kConnectTimeoutMs;
  channel_options.cancel_fd = stop_fd_;
  channel_options.tls = options_.tls.get();
  channel_options.token = options_.token;
  auto backoff = std::chrono::milliseconds(100);
  std::string logged;  // The last failure logged: each kind once, not every retry.
  Position at;
  if (std::optional<persist::ReplPosition> from = sink.ResumeFrom()) {
    // The sink holds a whole image at that position of that history: the data directory's
    // restore, or an earlier client's flow (this server followed another primary, which this
    // one may have continued: server/repl/chunk.h).
    at = {from->history, from->lsn, true};
  }
  while (!stopping_.load(std::memory_order_acquire)) {
    bool synced = false;
    std::string error;
    absl::StatusOr<std::unique_ptr<H2Channel>> channel =
        H2Channel::Connect(options_.primary, channel_options);
    if (!channel.ok()) {
      // "cannot reach ringkv-server at HOST:PORT: ...": it names the primary.
      error = absl::StrCat("worker ", worker, ": ", channel.status().message());
    } else {
      error = absl::StrCat("worker ", worker, ": ", options_.primary, ": ",
                           RunFlow(worker, *std::move(channel), at, &synced));
    }
    sink.set_connected(false);
    if (stopping_.load(std::memory_order_acquire)) break;
    if (synced) backoff = std::chrono::milliseconds(100);
    sink.set_last_error(error);
    if (error != logged) {
      Log(synced ? LogLevel::kInfo : LogLevel::kWarning, "replica: %s; retrying", error);
      logged = error;
    }
    pollfd stop{stop_fd_, POLLIN, 0};
    while (poll(&stop, 1, static_cast<int>(backoff.count())) < 0 && errno == EINTR) {
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

std::string ReplicaClient::RunFlow(uint32_t worker, std::unique_ptr<H2Channel> channel,
                                   Position& at, bool* synced) {
  ReplSink& sink = *sinks_[worker];
  std::string error;
  bool stopped = false;  // A Push failed: Stop began.
  // Each message of the primary, in order; after an error or a stop the rest are dropped.
  auto on_message = [&](std::string_view bytes) {
    if (!error.empty() || stopped) return;
    pb::FlowMessage message;
    if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      error = "the primary sent a message that does not parse";
      return;
    }
    sink.set_primary_lsn(message.head_lsn());
    if (message.kind() == pb::FlowMessage::TAIL) sink.set_primary_bytes(message.head_bytes());
    ReplSink::Item item;
    item.count = message.count();
    item.lsn = message.lsn();
    switch (message.kind()) {
      case pb::FlowMessage::FULL_SYNC:
        item.kind = ReplSink::Item::Kind::kFullSync;
        item.keys = message.keys();
        if (at.resumable && message.has_diverged_lsn()) item.diverged = message.diverged_lsn();
        at = {message.history(), message.lsn(), false};
        item.history = at.history;
        sink.set_connected(true);
        sink.CountFullSync();
        Log(LogLevel::kInfo, "replica: worker %d: full sync from %s", worker, options_.primary);
        break;
      case pb::FlowMessage::PARTIAL_SYNC:
        if (!at.resumable || message.lsn() != at.lsn) {
          error = absl::StrCat("the primary went on from position ", message.lsn(),
                               " where this replica is at ", at.lsn);
          return;
        }
        sink.set_connected(true);
        sink.CountPartialSync();
        *synced = true;
        Log(LogLevel::kInfo, "replica: worker %d: partial resync from %s at position %d", worker,
            options_.primary, at.lsn);
        if (message.history().empty() || message.history() == at.history) return;
        // A promoted replica's history, which continues this one's: the same positions.
        at.history = message.history();
        item.kind = ReplSink::Item::Kind::kHistory;
        item.history = at.history;
        break;
      case pb::FlowMessage::IMAGE:
        item.kind = ReplSink::Item::Kind::kImage;
        break;
      case pb::FlowMessage::IMAGE_DONE:
        item.kind = ReplSink::Item::Kind::kImageDone;
        item.revision = message.revision();
        item.sync = sink.full_syncs();
        *synced = true;
        at.resumable = true;
        break;
      case pb::FlowMessage::TAIL:
        item.kind = ReplSink::Item::Kind::kTail;
        item.ack = message.ack();
        item.made_us = message.made_unix_us();
        item.end_bytes = message.end_bytes();
        if (message.count() == 0) return;  // A heartbeat: its head is all it says.
        if (message.lsn() != at.lsn) {
          error = absl::StrCat("the primary sent position ", message.lsn(), " where ", at.lsn,
                               " was next");
          return;
        }
        break;
      default:
        error = absl::StrCat("the primary sent a message of unknown kind ",
                             static_cast<int>(message.kind()));
        return;
    }
    if (!message.records().empty() || item.count > 0) {
      if (CountRecords(message.records()) != item.count) {
        error = "the primary sent records that do not parse";
        return;
      }
      item.records = std::move(*message.mutable_records());
    }
    const bool tail = item.kind == ReplSink::Item::Kind::kTail;
    if (!sink.Push(std::move(item))) {
      stopped = true;
      return;
    }
    if (tail) at.lsn += message.count();
    if (options_.wake) options_.wake(worker);
  };
  // Declared before the channel's own variable, so that it outlives the channel, whose
  // destructor finishes the call.
  FlowObserver observer(on_message);
  std::unique_ptr<H2Channel> owned = std::move(channel);
  // The connection is used under the sink's ack_mu, which the worker takes to acknowledge on
  // it (ReplSink::AckSender); the lock is let go only while the thread waits in poll.
  std::unique_lock lock(sink.ack_mu());
  H2Channel::Call* call = owned->StartCall(kFlowPath, &observer);
  if (call == nullptr) return "the connection closed before the call began";
  pb::FlowRequest request;
  request.set_worker(worker);
  request.set_threads(options_.threads);
  request.set_server_id(options_.server_id);
  request.set_address(options_.address);
  if (at.resumable) {
    request.set_history(at.history);
    request.set_lsn(at.lsn);
  }
  owned->Send(call, request, /*end=*/false);
  owned->Flush();
  FlowAcks acks(*owned, call, observer);
  sink.AttachAcks(&acks);
  // Acknowledgements from this thread: at once (a partial resync says where this replica
  // stands), when the worker leaves one to it, and every kAckEveryMs if the position moved.
  bool ack_due = true;
  const auto every = std::chrono::milliseconds(ReplSink::kAckEveryMs);
  auto next_ack = std::chrono::steady_clock::now() + every;
  while (!stopping_.load(std::memory_order_acquire) && !stopped && error.empty() &&
         !observer.finished()) {
    auto now = std::chrono::steady_clock::now();
    if (ack_due || now >= next_ack) {
      ack_due = false;
      next_ack = now + every;
      sink.Acknowledge();
      continue;  // The call may have failed on the send.
    }
    pollfd fds[3] = {
        {owned->fd(), static_cast<short>(POLLIN | (owned->WantsWrite() ? POLLOUT : 0)), 0},
        {sink.ack_fd(), POLLIN, 0},
        {stop_fd_, POLLIN, 0}};
    const auto wait =
        std::chrono::duration_cast<std::chrono::milliseconds>(next_ack - now).count() + 1;
    lock.unlock();
    const int ready = poll(fds, 3, static_cast<int>(wait));
    lock.lock();
    if (ready <= 0) continue;  // The timer, or EINTR.
    if (fds[0].revents & (POLLIN | POLLERR | POLLHUP)) owned->OnReadable();
    if ((fds[0].revents & POLLOUT) && !observer.finished()) owned->Flush();
    if (fds[1].revents & POLLIN) ack_due = true;
  }
  sink.DetachAcks();
  if (!error.empty()) {
    if (!observer.finished()) {  // Else the call is gone already.
      owned->Cancel(call);
      owned->Flush();
    }
    return error;
  }
  if (stopping_.load(std::memory_order_acquire) || stopped) return "";
  const absl::Status& status = observer.status();
  if (status.ok()) return "the primary ended the flow";
  return absl::StrCat(status.message(), " (", static_cast<int>(status.code()), ")");
}

}  // namespace ringkv::repl
