// ringkv.v1.Replication's handler: Flow streams one worker's changes to a replica (issue 22).
// The worker's ReplSource (server/repl/source.h) does the work; this handler walks its steps
// with one Op::kReplicate request at a time, and writes each answer before asking for the
// next, so that HTTP/2 flow control (a replica that reads slowly) holds the primary back
// instead of filling its memory:
//
//   kBegin -> FULL_SYNC, then kImage -> IMAGE ... until IMAGE_DONE, then kTail -> TAIL ...
//   kResume -> PARTIAL_SYNC, then kTail -> TAIL ...    (a replica that followed this
//                                                       worker's history, or the one it
//                                                       continued at a promotion, from its
//                                                       position, if still held)
//
// until the call ends (the replica went away, the server stops, or the replica fell behind by
// more than the backlog: ABORTED, and it starts over with a full sync). kEnd always goes last.
// The replica's messages after its first acknowledge what it has applied: each becomes a kAck
// request of its own (one out at a time; the newest of those that come meanwhile goes next),
// so that an acknowledgement never waits behind a kTail the worker keeps.
#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "ringkv/v1/kv.pb.h"
#include "server/handlers/internal/factories.h"
#include "server/repl/replica_flows.h"
#include "server/repl/source.h"

namespace ringkv::internal {
namespace {

namespace pb = ::ringkv::v1;
using repl::Step;

std::atomic<int64_t> next_flow_id{1};

// Where to list a replica: the address it states (its --listen, HOST:PORT), but with the host
// its connection comes from when it listens on a wildcard (0.0.0.0, [::], no host), which
// names no machine.
std::string ListedAddress(const std::string& stated, const std::string& peer) {
  const size_t colon = stated.rfind(':');
  if (colon == std::string::npos || peer.empty()) return stated;
  const absl::string_view host(stated.data(), colon);
  if (!host.empty() && host != "0.0.0.0" && host != "[::]") return stated;
  const bool v6 = peer.find(':') != std::string::npos;
  return absl::StrCat(v6 ? "[" : "", peer, v6 ? "]" : "", stated.substr(colon));
}

class FlowHandler : public Handler {
 public:
  using Handler::Handler;
  ~FlowHandler() override {
    if (flow_id_ != 0) context_.RemoveReplicaFlow(&listed_);
  }

  google::protobuf::MessageLite* incoming() override { return &request_; }

  void OnStart() override {
    reading_ = true;
    sink_.Read();
  }

  void OnHalfClose() override {
    reading_ = false;  // No more acknowledgements.
    // Closed before its first message: nothing is out for it, and nothing else would end it
    // (on grpc++ a cancel reads as a close; such a call once kept the server from stopping).
    if (!started_) {
      sink_.Finish(absl::InvalidArgumentError(
                       "a Flow's first message says which replica it is: the stream closed "
                       "without one"),
                   nullptr);
    }
  }

  void OnMessage() override {
    reading_ = false;
    if (started_) return TakeAck(request_.applied());
    started_ = true;
    Begin();
  }

  void OnRequestDone(Request* request) override {
    if (request == &ack_op_) {
      ack_out_ = false;
      if (ending_) {
        if (!out_) sink_.Finish(end_, nullptr);  // kEnd is back too.
      } else if (!cancelled_ && ack_next_ > ack_sent_) {
        SendAck(ack_next_);
      }
      return;
    }
    Answered();
  }

  void OnWriteDone(bool ok) override {
    writing_ = false;
    if (!ok || cancelled_) return End(absl::CancelledError("call cancelled"));
    Ask(next_);
  }

  void OnCancel() override {
    cancelled_ = true;
    writing_ = false;  // A Read or Write outstanding is void: no event comes for it.
    reading_ = false;
    if (!out_ && !ending_) End(absl::CancelledError("call cancelled"));
  }

 private:
  void Begin() {
    const uint32_t threads = context_.options().threads;
    if (request_.server_id() == context_.server_id()) {
      return sink_.Finish(absl::FailedPreconditionError("--replica-of names this server itself"),
                          nullptr);
    }
    if (context_.read_only()) {
      return sink_.Finish(
          absl::FailedPreconditionError(absl::StrCat("--replica-of names a replica (",
                                                     context_.read_only_refusal().message(),
                                                     "); replicas of replicas are not supported")),
          nullptr);
    }
    if (context_.fenced()) {
      // In a group, only the elected primary may be followed: a server that restarted on a
      // dead primary's address must not full-sync its replicas with what it holds.
      return sink_.Finish(absl::UnavailableError(context_.journal_failure_message()), nullptr);
    }
    if (request_.threads() != threads) {
      return sink_.Finish(absl::FailedPreconditionError(absl::StrCat(
                              "the primary runs --threads=", threads, " and the replica --threads=",
                              request_.threads(), ": they must be equal")),
                          nullptr);
    }
    if (request_.worker() >= threads) {
      return sink_.Finish(absl::InvalidArgumentError(absl::StrCat(
                              "worker ", request_.worker(), " of ", threads, " does not exist")),
                          nullptr);
    }
    op_.op = Op::kReplicate;
    op_.target = static_cast<uint16_t>(request_.worker());
    flow_id_ = next_flow_id.fetch_add(1, std::memory_order_relaxed);
    listed_.replica_id = request_.server_id();
    listed_.address = ListedAddress(request_.address(), sink_.PeerHost());
    listed_.worker = request_.worker();
    context_.AddReplicaFlow(&listed_);
    // A replica that stands somewhere in a history asks to go on from its position; the
    // worker says whether it can (server/repl/source.h), else it full-syncs.
    if (!request_.history().empty()) {
      asked_history_ = request_.history();  // request_ is reused for acknowledgements.
      tail_from_ = request_.lsn();
      Ask(Step::kResume);
    } else {
      Ask(Step::kBegin);
    }
    ReadNext();
  }

  void ReadNext() {
    if (reading_ || cancelled_ || ending_) return;
    reading_ = true;
    sink_.Read();
  }

  void TakeAck(uint64_t applied) {
    if (op_.op == Op::kReplicate && applied > ack_next_) {
      ack_next_ = applied;
      listed_.acked.store(applied, std::memory_order_relaxed);
      if (!ack_out_ && !ending_ && !cancelled_) SendAck(applied);
    }
    ReadNext();
  }

  void SendAck(uint64_t applied) {
    ack_sent_ = applied;
    ack_op_.op = Op::kReplicate;
    ack_op_.target = op_.target;
    ack_op_.number = static_cast<int64_t>(Step::kAck);
    ack_op_.deadline_ms = flow_id_;
    ack_op_.version = applied;
    ack_out_ = true;
    Submit(ack_op_);
  }

  void Answered() {
    out_ = false;
    if (ending_) return ack_out_ ? void() : sink_.Finish(end_, nullptr);
    if (cancelled_) return End(absl::CancelledError("call cancelled"));
    if (step_ == Step::kResume && op_.result == Result::kUnavailable) {
      // Not this history's, or no longer in the backlog, or past where this history
      // continued the replica's (diverged: the replica counts what the full sync drops).
      if (op_.number == 1) diverged_ = op_.version;
      return Ask(Step::kBegin);
    }
    if (op_.result == Result::kUnavailable) {
      // A worker that steps down (ReplSource::Reset) ends its flows this way too.
      if (context_.read_only()) {
        return End(absl::UnavailableError(
            absl::StrCat("this server stepped down: ", context_.read_only_refusal().message())));
      }
      return End(absl::AbortedError(
          step_ == Step::kTail
              ? "the replica fell behind by more than --repl-backlog; it must full-sync"
              : "the full sync was dropped (the replica stopped reading); it must start over"));
    }
    message_.Clear();
    switch (step_) {
      case Step::kResume:
        message_.set_kind(pb::FlowMessage::PARTIAL_SYNC);
        message_.set_lsn(tail_from_);
        message_.set_history(op_.out);  // Its own, or the one that continues the replica's.
        next_ = Step::kTail;
        break;
      case Step::kBegin:
        message_.set_kind(pb::FlowMessage::FULL_SYNC);
        message_.set_history(op_.out);
        message_.set_lsn(op_.version);
        if (diverged_.has_value()) message_.set_diverged_lsn(*diverged_);
        message_.set_keys(static_cast<uint64_t>(op_.number));
        tail_from_ = op_.version;
        next_ = Step::kImage;
        break;
      case Step::kImage:
        if (op_.result == Result::kNotFound) {
          message_.set_kind(pb::FlowMessage::IMAGE_DONE);
          message_.set_revision(op_.version);
          next_ = Step::kTail;
        } else {
          message_.set_kind(pb::FlowMessage::IMAGE);
          message_.mutable_records()->swap(op_.out);
          message_.set_count(static_cast<uint32_t>(op_.number));
        }
        break;
      case Step::kTail:
        message_.set_kind(pb::FlowMessage::TAIL);
        message_.set_lsn(tail_from_);
        message_.mutable_records()->swap(op_.out);
        message_.set_count(static_cast<uint32_t>(op_.number));
        message_.set_head_lsn(static_cast<uint64_t>(op_.deadline_ms));
        message_.set_ack(op_.replicas != 0);
        message_.set_made_unix_us(op_.tail.made_us);
        message_.set_end_bytes(op_.tail.end_bytes);
        message_.set_head_bytes(op_.tail.head_bytes);
        tail_from_ = op_.version;
        next_ = Step::kTail;
        break;
      case Step::kEnd:
      case Step::kAck:  // Never in op_.
        return;
    }
    writing_ = true;
    sink_.Write(message_);
  }

  void Ask(Step step) {
    if (step == Step::kTail) listed_.streaming.store(true, std::memory_order_relaxed);
    step_ = step;
    op_.number = static_cast<int64_t>(step);
    op_.deadline_ms = flow_id_;
    if (step == Step::kTail || step == Step::kResume) op_.version = tail_from_;
    // Which replica the flow serves (an in-sync set counts its members' acknowledgements).
    op_.key = {};
    if (step == Step::kBegin || step == Step::kResume) op_.key = listed_.replica_id;
    op_.value = step == Step::kResume ? std::string_view(asked_history_) : std::string_view();
    op_.out.clear();
    out_ = true;
    Submit(op_);
  }

  // Tells the worker the flow is over, then finishes with `status` (once the acknowledgement
  // out, if any, is back).
  void End(absl::Status status) {
    if (op_.op != Op::kReplicate) return sink_.Finish(status, nullptr);  // Nothing asked yet.
    ending_ = true;
    end_ = std::move(status);
    step_ = Step::kEnd;
    op_.number = static_cast<int64_t>(Step::kEnd);
    op_.deadline_ms = flow_id_;
    out_ = true;
    Submit(op_);
  }

  pb::FlowRequest request_;
  pb::FlowMessage message_;
  repl::ReplicaFlow listed_;  // In the server's list from Begin on (flow_id_ set).
  Request op_;
  Request ack_op_;
  uint64_t ack_sent_ = 0;  // The last position acknowledged to the worker ...
  uint64_t ack_next_ = 0;  // ... and the newest the replica sent.
  bool ack_out_ = false;   // ack_op_ is with the worker.
  bool started_ = false;   // The first message came.
  bool reading_ = false;
  int64_t flow_id_ = 0;
  Step step_ = Step::kBegin;
  Step next_ = Step::kBegin;
  uint64_t tail_from_ = 0;
  std::string asked_history_;  // kResume's.
  std::optional<uint64_t> diverged_;
  bool out_ = false;      // op_ is with the worker.
  bool writing_ = false;  // message_ is being written.
  bool cancelled_ = false;
  bool ending_ = false;  // kEnd is out; then Finish(end_).
  absl::Status end_;
};

// A call the server answers from a thread of its own (a role change, a failover): its
// Request is a placeholder that comes back through CompleteExternal once the work is done.
template <typename In, typename Out>
class OffLoopHandler : public Handler {
 public:
  using Handler::Handler;

  google::protobuf::MessageLite* incoming() override { return &request_; }

  void OnRequestDone(Request* /*request*/) override {
    out_ = false;
    if (cancelled_) return sink_.Finish(absl::CancelledError("call cancelled"), nullptr);
    sink_.Finish(status_, status_.ok() ? &response_ : nullptr);
  }

  void OnCancel() override {
    cancelled_ = true;  // The work goes on; only its answer is lost.
    if (!out_) sink_.Finish(absl::CancelledError("call cancelled"), nullptr);
  }

 protected:
  // Hands the work to `start`, which refuses it at once, or makes `done` run (on its thread,
  // once response_ is filled) with the outcome. The loop touches nothing of this until the
  // placeholder is back (CompleteExternal hands it over under a mutex).
  template <typename Start>
  void Launch(Start start) {
    out_ = true;
    host_.SubmitExternal(this, &placeholder_);
    const absl::Status requested = start([this](const absl::Status& status) {
      status_ = status;
      host_.CompleteExternal(&placeholder_);
    });
    if (!requested.ok()) {
      status_ = requested;
      host_.CompleteExternal(&placeholder_);
    }
  }

  In request_;
  Out response_;

 private:
  Request placeholder_;
  absl::Status status_;
  bool out_ = false;
  bool cancelled_ = false;
};

// Replicate: the server changes its role (ServerContext::RequestRoleChange).
class ReplicateHandler : public OffLoopHandler<pb::ReplicateRequest, pb::ReplicateResponse> {
 public:
  using OffLoopHandler::OffLoopHandler;

  void OnMessage() override {
    const std::string& to = request_.to();
    if (to.empty() == !request_.stop()) {
      return sink_.Finish(
          absl::InvalidArgumentError("give either the primary to follow (to) or stop, not both"),
          nullptr);
    }
    if (!to.empty() && (to.rfind(':') == std::string::npos || to.back() == ':')) {
      return sink_.Finish(
          absl::InvalidArgumentError(absl::StrCat("the primary must be HOST:PORT, got '", to, "'")),
          nullptr);
    }
    Launch([&](auto done) {
      return context_.RequestRoleChange(
          to, [this, done](const absl::Status& status, const std::string& role,
                           const std::string& primary) {
            response_.set_role(role);
            response_.set_primary(primary);
            done(status);
          });
    });
  }
};

// Failover: a planned switchover in a group (ServerContext::RequestFailover).
class FailoverHandler : public OffLoopHandler<pb::FailoverRequest, pb::FailoverResponse> {
 public:
  using OffLoopHandler::OffLoopHandler;

  void OnMessage() override {
    const std::string& to = request_.to();
    if (!to.empty() && (to.rfind(':') == std::string::npos || to.back() == ':')) {
      return sink_.Finish(
          absl::InvalidArgumentError(absl::StrCat("the target must be HOST:PORT, got '", to, "'")),
          nullptr);
    }
    Launch([&](auto done) {
      return context_.RequestFailover(
          to, [this, done](const absl::Status& status, const ServerContext::FailoverResult& r) {
            response_.set_primary(r.primary);
            response_.set_term(r.term);
            response_.set_writes_paused_ms(r.writes_paused_ms);
            done(status);
          });
    });
  }
};

}  // namespace

std::unique_ptr<Handler> MakeFlowHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<FlowHandler>(host, sink);
}

std::unique_ptr<Handler> MakeReplicateHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<ReplicateHandler>(host, sink);
}

std::unique_ptr<Handler> MakeFailoverHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<FailoverHandler>(host, sink);
}

}  // namespace ringkv::internal
