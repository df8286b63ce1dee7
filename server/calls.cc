#include "server/calls.h"

#include <deque>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "ringkv/v1/kv.grpc.pb.h"
#include "server/server.h"

namespace ringkv {
namespace {

namespace pb = ::ringkv::v1;
namespace health = ::grpc::health::v1;
using Service = pb::KV::AsyncService;
using HealthService = health::Health::AsyncService;

enum EventKind : int { kAccepted, kRead, kWritten, kFinished, kDone };

// The service object whose generated Request<Method> member kArm is.
template <typename Member>
struct ClassOfMember;
template <typename C, typename F>
struct ClassOfMember<F C::*> {
  using type = C;
};
template <auto kArm>
auto& ServiceOf(Server& server) {
  if constexpr (std::is_base_of_v<typename ClassOfMember<decltype(kArm)>::type, Service>) {
    return server.service();
  } else {
    return server.health_service();
  }
}

// Most operations a single Stream keeps in flight; reading pauses at this bound, so a client
// that writes faster than the shards answer is held back by HTTP/2 flow control.
constexpr size_t kMaxStreamInFlight = 4096;
// A Stream reply message stops taking results at about this size; more go in the next one.
constexpr size_t kStreamReplyBytes = size_t{1} << 20;

grpc::Status NotFound() { return grpc::Status(grpc::StatusCode::NOT_FOUND, "key not found"); }

grpc::Status ShuttingDown() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "ringkv-server is shutting down");
}

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

void SetItem(pb::ItemResult* item, const absl::Status& status) {
  item->set_code(static_cast<int>(status.code()));
  item->set_message(std::string(status.message()));
}

// A Request's outcome as a batch item.
void SetItem(pb::ItemResult* item, Request& request) {
  if (request.result == Result::kOk) {
    item->set_code(0);
    if (request.op == Op::kGet) item->set_value(std::move(request.out));
  } else {
    item->set_code(grpc::StatusCode::NOT_FOUND);
    item->set_message(NotFound().error_message());
  }
}

// The parts every unary method shares: accept, reply, delete on the reply's completion. kArm is
// the generated Service::Request<Method>; Derived supplies Begin and OnRequestDone.
template <typename Derived, typename RequestPb, typename ResponsePb, auto kArm>
class UnaryCall : public Call {
 public:
  explicit UnaryCall(ShardLoop& loop) : loop_(loop), responder_(&context_) {}

  void Accept() {
    (ServiceOf<kArm>(loop_.server()).*kArm)(&context_, &request_, &responder_, loop_.cq(),
                                            loop_.cq(), &accepted_);
  }

  ~UnaryCall() override {
    if (counted_) loop_.server().CallEnded();
  }

  void OnEvent(int kind, bool ok) override {
    if (kind == kAccepted) {
      if (!ok) {  // The server is shutting down; no call came.
        delete this;
        return;
      }
      if (loop_.server().shutting_down() && !Derived::kServedWhileDraining) {
        responder_.FinishWithError(ShuttingDown(), &finished_);  // Refused; no successor.
        return;
      }
      counted_ = true;
      loop_.server().CallStarted();
      (new Derived(loop_))->Accept();
      static_cast<Derived*>(this)->Begin();
      return;
    }
    delete this;  // kFinished: the reply is out, or the call is gone.
  }

 protected:
  // Draining refuses new calls, except those of a Derived that says otherwise (health).
  static constexpr bool kServedWhileDraining = false;

  void Reply(const grpc::Status& status) {
    if (status.ok()) {
      responder_.Finish(response_, status, &finished_);
    } else {
      responder_.FinishWithError(status, &finished_);
    }
  }

  void Submit(Request& request) {
    request.tag = static_cast<Call*>(this);
    loop_.Submit(&request);
  }

  ShardLoop& loop_;
  grpc::ServerContext context_;
  RequestPb request_;
  ResponsePb response_;
  grpc::ServerAsyncResponseWriter<ResponsePb> responder_;

 private:
  bool counted_ = false;  // In the server's count of calls being served.
  CallEvent accepted_{this, kAccepted};
  CallEvent finished_{this, kFinished};
};

const RequestLimits& LimitsOf(ShardLoop& loop) { return loop.server().options().limits; }

// Get, Put and Delete: one key, one Request.
template <typename Derived, typename RequestPb, typename ResponsePb, auto kArm>
class SingleKeyCall : public UnaryCall<Derived, RequestPb, ResponsePb, kArm> {
 public:
  using UnaryCall<Derived, RequestPb, ResponsePb, kArm>::UnaryCall;

 protected:
  // Checks the limits (a PUT's value too) and submits, or replies INVALID_ARGUMENT.
  void Start(Op op, const std::string& key, const std::string* value = nullptr) {
    const RequestLimits& limits = LimitsOf(this->loop_);
    absl::Status status = value == nullptr ? limits.CheckKey(key) : limits.CheckPut(key, *value);
    if (!status.ok()) {
      this->Reply(ToGrpc(status));
      return;
    }
    op_.op = op;
    op_.key = key;
    if (value != nullptr) op_.value = *value;
    this->Submit(op_);
  }

 private:
  Request op_;
};

class GetCall
    : public SingleKeyCall<GetCall, pb::GetRequest, pb::GetResponse, &Service::RequestGet> {
 public:
  using SingleKeyCall::SingleKeyCall;
  void Begin() { Start(Op::kGet, request_.key()); }
  void OnRequestDone(Request* request) override {
    if (request->result != Result::kOk) {
      Reply(NotFound());
      return;
    }
    response_.set_value(std::move(request->out));
    Reply(grpc::Status::OK);
  }
};

class PutCall
    : public SingleKeyCall<PutCall, pb::PutRequest, pb::PutResponse, &Service::RequestPut> {
 public:
  using SingleKeyCall::SingleKeyCall;
  void Begin() { Start(Op::kPut, request_.key(), &request_.value()); }
  void OnRequestDone(Request*) override { Reply(grpc::Status::OK); }
};

class DeleteCall : public SingleKeyCall<DeleteCall, pb::DeleteRequest, pb::DeleteResponse,
                                        &Service::RequestDelete> {
 public:
  using SingleKeyCall::SingleKeyCall;
  void Begin() { Start(Op::kDelete, request_.key()); }
  void OnRequestDone(Request* request) override {
    Reply(request->result == Result::kOk ? grpc::Status::OK : NotFound());
  }
};

// MultiGet and MultiPut: one Request per item, answered per item; a bad item is answered at
// once and the others still run.
template <typename Derived, typename RequestPb, typename ResponsePb, auto kArm>
class BatchCall : public UnaryCall<Derived, RequestPb, ResponsePb, kArm> {
 public:
  using UnaryCall<Derived, RequestPb, ResponsePb, kArm>::UnaryCall;

  void OnRequestDone(Request* request) override {
    SetItem(this->response_.mutable_results(static_cast<int>(request - ops_.data())), *request);
    if (--remaining_ == 0) this->Reply(grpc::Status::OK);
  }

 protected:
  // Sizes the results; then each item is either Reject()ed or Add()ed, then Run().
  void Prepare(int items) {
    ops_.resize(static_cast<size_t>(items));
    for (int i = 0; i < items; ++i) this->response_.add_results();
  }
  void Reject(int i, const absl::Status& status) {
    SetItem(this->response_.mutable_results(i), status);
  }
  void Add(int i, Op op, std::string_view key, std::string_view value = {}) {
    Request& request = ops_[static_cast<size_t>(i)];
    request.op = op;
    request.key = key;
    request.value = value;
    ++remaining_;
  }
  void Run() {
    if (remaining_ == 0) {
      this->Reply(grpc::Status::OK);
      return;
    }
    // Every Add must be counted before the first Submit: completions come only from a later
    // engine turn, but the count is what tells the last one.
    for (Request& request : ops_) {
      if (request.key.data() != nullptr) this->Submit(request);  // Rejected items have no key.
    }
  }

 private:
  std::vector<Request> ops_;
  size_t remaining_ = 0;
};

class MultiGetCall : public BatchCall<MultiGetCall, pb::MultiGetRequest, pb::MultiGetResponse,
                                      &Service::RequestMultiGet> {
 public:
  using BatchCall::BatchCall;
  void Begin() {
    Prepare(request_.keys_size());
    for (int i = 0; i < request_.keys_size(); ++i) {
      const std::string& key = request_.keys(i);
      if (absl::Status s = LimitsOf(loop_).CheckKey(key); !s.ok()) {
        Reject(i, s);
      } else {
        Add(i, Op::kGet, key);
      }
    }
    Run();
  }
};

class MultiPutCall : public BatchCall<MultiPutCall, pb::MultiPutRequest, pb::MultiPutResponse,
                                      &Service::RequestMultiPut> {
 public:
  using BatchCall::BatchCall;
  void Begin() {
    Prepare(request_.items_size());
    for (int i = 0; i < request_.items_size(); ++i) {
      const pb::KeyValue& item = request_.items(i);
      if (absl::Status s = LimitsOf(loop_).CheckPut(item.key(), item.value()); !s.ok()) {
        Reject(i, s);
      } else {
        Add(i, Op::kPut, item.key(), item.value());
      }
    }
    Run();
  }
};

class StatsCall
    : public UnaryCall<StatsCall, pb::StatsRequest, pb::StatsResponse, &Service::RequestStats> {
 public:
  using UnaryCall::UnaryCall;
  void Begin() {
    loop_.server().FillStats(&response_);
    Reply(grpc::Status::OK);
  }
  void OnRequestDone(Request*) override {}
};

// Stream: reads ops while fewer than kMaxStreamInFlight are out, one Read at a time; answers
// pile up in `replies_` and go out one Write at a time, so answers that finish while a Write is
// out share the next message. Finishes once the client has closed its side (or the call is
// gone), every op is back and every reply is written. Deleted when Finish completes.
class StreamCall : public Call {
 public:
  explicit StreamCall(ShardLoop& loop) : loop_(loop), stream_(&context_) {}
  ~StreamCall() override {
    if (counted_) loop_.server().CallEnded();
  }

  void Accept() {
    loop_.server().service().RequestStream(&context_, &stream_, loop_.cq(), loop_.cq(),
                                           &accepted_);
  }

  void OnEvent(int kind, bool ok) override {
    switch (kind) {
      case kAccepted:
        if (!ok) {
          delete this;
          return;
        }
        if (loop_.server().shutting_down()) {
          finishing_ = true;
          stream_.Finish(ShuttingDown(), &finished_);
          return;
        }
        counted_ = true;
        loop_.server().CallStarted();
        (new StreamCall(loop_))->Accept();
        ReadNext();
        return;
      case kRead:
        reading_ = false;
        if (ok) {
          TakeOps();
          ReadNext();
        } else {
          reads_done_ = true;  // The client closed its side, or the call is gone.
        }
        break;
      case kWritten:
        writing_ = false;
        replies_.pop_front();
        if (!ok) broken_ = true;
        break;
      case kFinished:
        delete this;
        return;
    }
    Progress();
  }

  void OnRequestDone(Request* request) override {
    InFlight& op = *static_cast<InFlight*>(request);
    SetItem(AddResult(op.id, request->out.size()), *request);
    op.key_bytes.clear();
    op.value_bytes.clear();
    free_.push_back(&op);
    --in_flight_;
    ReadNext();
    if (!flush_requested_) {  // Write once this engine turn is over, with whatever it answered.
      flush_requested_ = true;
      loop_.RequestFlush(this);
    }
  }

  void Flush() override {
    flush_requested_ = false;
    Progress();
  }

 private:
  // A Request with the storage for its key and value (swapped out of the message it came in).
  struct InFlight : Request {
    std::string key_bytes;
    std::string value_bytes;
    uint64_t id = 0;
  };

  void ReadNext() {
    if (reading_ || reads_done_ || in_flight_ >= kMaxStreamInFlight) return;
    reading_ = true;
    stream_.Read(&incoming_, &read_);
  }

  void TakeOps() {
    const RequestLimits& limits = LimitsOf(loop_);
    for (pb::StreamOp& in : *incoming_.mutable_ops()) {
      absl::Status status;
      Op kind = Op::kGet;
      switch (in.type()) {
        case pb::OP_TYPE_GET:
          status = limits.CheckKey(in.key());
          break;
        case pb::OP_TYPE_PUT:
          kind = Op::kPut;
          status = limits.CheckPut(in.key(), in.value());
          break;
        case pb::OP_TYPE_DELETE:
          kind = Op::kDelete;
          status = limits.CheckKey(in.key());
          break;
        default:
          status = absl::InvalidArgumentError("op type is unset; use GET, PUT or DELETE");
      }
      if (!status.ok()) {
        SetItem(AddResult(in.id(), status.message().size()), status);
        continue;
      }
      InFlight& op = NewOp();
      op.id = in.id();
      op.key_bytes.swap(*in.mutable_key());
      op.value_bytes.swap(*in.mutable_value());
      op.op = kind;
      op.key = op.key_bytes;
      op.value = op.value_bytes;
      op.tag = static_cast<Call*>(this);
      ++in_flight_;
      loop_.Submit(&op);
    }
    incoming_.Clear();
  }

  InFlight& NewOp() {
    if (free_.empty()) {
      ops_.push_back(std::make_unique<InFlight>());
      return *ops_.back();
    }
    InFlight* op = free_.back();
    free_.pop_back();
    return *op;
  }

  // A new result in the reply being gathered; `bytes` is about what it will add.
  pb::ItemResult* AddResult(uint64_t id, size_t bytes) {
    // The front message may be on the wire; results go to the back one, or a new one.
    if (replies_.size() <= (writing_ ? 1u : 0u) || back_bytes_ > kStreamReplyBytes) {
      replies_.emplace_back();
      back_bytes_ = 0;
    }
    back_bytes_ += bytes + 16;
    pb::StreamResult* result = replies_.back().add_results();
    result->set_id(id);
    return result->mutable_result();
  }

  void Progress() {
    if (!writing_ && !finishing_) {
      if (broken_) {
        replies_.clear();
      } else if (!replies_.empty()) {
        writing_ = true;
        stream_.Write(replies_.front(), &written_);
        return;
      }
    }
    if (reads_done_ && !reading_ && in_flight_ == 0 && !writing_ && replies_.empty() &&
        !finishing_) {
      finishing_ = true;
      stream_.Finish(grpc::Status::OK, &finished_);
    }
  }

  ShardLoop& loop_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<pb::StreamResponse, pb::StreamRequest> stream_;
  pb::StreamRequest incoming_;
  std::deque<pb::StreamResponse> replies_;  // Front is on the wire while writing_.
  size_t back_bytes_ = 0;                   // About the size of replies_.back().
  std::vector<std::unique_ptr<InFlight>> ops_;  // Every one made; free_ lists the idle ones.
  std::vector<InFlight*> free_;
  size_t in_flight_ = 0;
  bool reading_ = false;
  bool reads_done_ = false;
  bool writing_ = false;
  bool broken_ = false;  // A Write failed: the client is gone; answers are dropped.
  bool finishing_ = false;
  bool counted_ = false;  // In the server's count of calls being served.
  bool flush_requested_ = false;
  CallEvent accepted_{this, kAccepted};
  CallEvent read_{this, kRead};
  CallEvent written_{this, kWritten};
  CallEvent finished_{this, kFinished};
};

// Health: the status of `service` ("" is the whole server), or SERVICE_UNKNOWN.
health::HealthCheckResponse::ServingStatus ServingStatus(Server& server,
                                                         const std::string& service) {
  if (!service.empty() && service != pb::KV::service_full_name()) {
    return health::HealthCheckResponse::SERVICE_UNKNOWN;
  }
  return server.shutting_down() ? health::HealthCheckResponse::NOT_SERVING
                                : health::HealthCheckResponse::SERVING;
}

class HealthCheckCall
    : public UnaryCall<HealthCheckCall, health::HealthCheckRequest, health::HealthCheckResponse,
                       &HealthService::RequestCheck> {
 public:
  using UnaryCall::UnaryCall;
  static constexpr bool kServedWhileDraining = true;  // It is how a balancer learns of it.

  void Begin() {
    const auto status = ServingStatus(loop_.server(), request_.service());
    if (status == health::HealthCheckResponse::SERVICE_UNKNOWN) {
      Reply(grpc::Status(grpc::StatusCode::NOT_FOUND,
                         "unknown service \"" + request_.service() + "\"; this server has \"" +
                             pb::KV::service_full_name() + "\""));
      return;
    }
    response_.set_status(status);
    Reply(grpc::Status::OK);
  }
  void OnRequestDone(Request*) override {}
};

// Health Watch: writes the status at once and again whenever it changes (the loop tells it,
// OnServingChanged), one Write at a time. It never finishes by itself: it ends when the call is
// cancelled (the client went away, or the server stopped), which AsyncNotifyWhenDone reports;
// it is deleted once that has come and no Write is out. Not in the server's count of calls, so
// an open Watch does not hold up a drain.
class WatchCall : public Call {
 public:
  explicit WatchCall(ShardLoop& loop) : loop_(loop), writer_(&context_) {}

  void Accept() {
    context_.AsyncNotifyWhenDone(&done_);  // Before the call starts, as gRPC requires.
    loop_.server().health_service().RequestWatch(&context_, &request_, &writer_, loop_.cq(),
                                                 loop_.cq(), &accepted_);
  }

  void OnEvent(int kind, bool ok) override {
    switch (kind) {
      case kAccepted:
        if (!ok) {  // Shutting down and no call came: no done event will either.
          delete this;
          return;
        }
        (new WatchCall(loop_))->Accept();
        loop_.AddWatcher(this);
        break;
      case kWritten:
        writing_ = false;
        break;
      case kDone:
        cancelled_ = true;
        break;
    }
    if (cancelled_) {
      if (!writing_) {
        loop_.RemoveWatcher(this);
        delete this;
      }
      return;
    }
    OnServingChanged();
  }

  void OnRequestDone(Request*) override {}

  void OnServingChanged() override {
    if (writing_ || cancelled_) return;
    const auto status = ServingStatus(loop_.server(), request_.service());
    if (status == sent_) return;
    sent_ = status;
    response_.set_status(status);
    writing_ = true;
    writer_.Write(response_, &written_);
  }

 private:
  ShardLoop& loop_;
  grpc::ServerContext context_;
  health::HealthCheckRequest request_;
  health::HealthCheckResponse response_;
  grpc::ServerAsyncWriter<health::HealthCheckResponse> writer_;
  // What the client was last sent; none yet (-1) at first.
  int sent_ = -1;
  bool writing_ = false;
  bool cancelled_ = false;
  CallEvent accepted_{this, kAccepted};
  CallEvent written_{this, kWritten};
  CallEvent done_{this, kDone};
};

}  // namespace

void Call::AcceptAll(ShardLoop& loop, int per_method) {
  for (int i = 0; i < per_method; ++i) {
    (new GetCall(loop))->Accept();
    (new PutCall(loop))->Accept();
    (new DeleteCall(loop))->Accept();
    (new MultiGetCall(loop))->Accept();
    (new MultiPutCall(loop))->Accept();
    (new StreamCall(loop))->Accept();
    (new StatsCall(loop))->Accept();
    (new HealthCheckCall(loop))->Accept();
    (new WatchCall(loop))->Accept();
  }
}

}  // namespace ringkv
