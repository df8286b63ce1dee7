// ringkv.v1.KV's handlers. Unary methods (Get, Put, Delete, MultiGet, MultiPut, Stats) check
// their input, submit one Request per key, and Finish once all are back. Stream keeps up to
// kMaxStreamInFlight operations in flight and coalesces the results that pile up while a Write
// is outstanding into the next message (BidiHandler does the reading and writing).
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ringkv/v1/kv.pb.h"
#include "server/handlers/internal/bidi_handler.h"
#include "server/handlers/internal/factories.h"
#include "server/server.h"
#include "server/shard_loop.h"

namespace ringkv::internal {
namespace {

namespace pb = ::ringkv::v1;

// Most operations a single Stream keeps in flight; reading pauses at this bound.
constexpr size_t kMaxStreamInFlight = 4096;
// A Stream reply message stops taking results at about this size; more go in the next one.
constexpr size_t kStreamReplyBytes = size_t{1} << 20;

absl::Status NotFound() { return absl::NotFoundError("key not found"); }
absl::Status Cancelled() { return absl::CancelledError("call cancelled"); }

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
    SetItem(item, NotFound());
  }
}

const RequestLimits& LimitsOf(ShardLoop& loop) { return loop.server().options().limits; }

// The parts every unary method shares: its messages, the count of Requests out, and one reply
// once the last is back (or at once, with no Request out). Derived supplies Start (the request
// is in request_), Take (a Request is back) and, optionally, Result (the status to reply with).
template <typename RequestPb, typename ResponsePb>
class UnaryHandler : public Handler {
 public:
  using Handler::Handler;

  google::protobuf::MessageLite* incoming() override { return &request_; }

  void OnMessage() override { Start(); }

  void OnCancel() override {
    cancelled_ = true;
    if (outstanding_ == 0) sink_.Finish(Cancelled(), nullptr);
  }

  void OnRequestDone(Request* request) final {
    if (!cancelled_) Take(*request);
    if (--outstanding_ == 0) Reply(cancelled_ ? Cancelled() : Result());
  }

 protected:
  virtual void Start() = 0;
  virtual void Take(Request& request) = 0;
  virtual absl::Status Result() { return absl::OkStatus(); }

  // Every Submit is counted before the first can come back: completions come only from a later
  // engine turn.
  void SubmitCounted(Request& request) {
    ++outstanding_;
    Submit(request);
  }
  // Ends the call; only with no Request out.
  void Reply(const absl::Status& status) {
    sink_.Finish(status, status.ok() ? &response_ : nullptr);
  }

  RequestPb request_;
  ResponsePb response_;

 private:
  size_t outstanding_ = 0;
  bool cancelled_ = false;
};

// Get, Put and Delete: one key, one Request.
template <typename RequestPb, typename ResponsePb>
class SingleKeyHandler : public UnaryHandler<RequestPb, ResponsePb> {
 public:
  using UnaryHandler<RequestPb, ResponsePb>::UnaryHandler;

 protected:
  // Checks the limits (a PUT's value too) and submits, or replies INVALID_ARGUMENT.
  void StartOp(Op op, const std::string& key, const std::string* value = nullptr) {
    const RequestLimits& limits = LimitsOf(this->loop_);
    absl::Status status = value == nullptr ? limits.CheckKey(key) : limits.CheckPut(key, *value);
    if (!status.ok()) {
      this->Reply(status);
      return;
    }
    op_.op = op;
    op_.key = key;
    if (value != nullptr) op_.value = *value;
    this->SubmitCounted(op_);
  }

  absl::Status Result() override {
    return op_.result == Result::kOk ? absl::OkStatus() : NotFound();
  }

  Request op_;
};

class GetHandler : public SingleKeyHandler<pb::GetRequest, pb::GetResponse> {
 public:
  using SingleKeyHandler::SingleKeyHandler;
  void Start() override { StartOp(Op::kGet, request_.key()); }
  void Take(Request& request) override {
    if (request.result == Result::kOk) response_.set_value(std::move(request.out));
  }
};

class PutHandler : public SingleKeyHandler<pb::PutRequest, pb::PutResponse> {
 public:
  using SingleKeyHandler::SingleKeyHandler;
  void Start() override { StartOp(Op::kPut, request_.key(), &request_.value()); }
  void Take(Request&) override {}
};

class DeleteHandler : public SingleKeyHandler<pb::DeleteRequest, pb::DeleteResponse> {
 public:
  using SingleKeyHandler::SingleKeyHandler;
  void Start() override { StartOp(Op::kDelete, request_.key()); }
  void Take(Request&) override {}
};

// MultiGet and MultiPut: one Request per item, answered per item; a bad item is answered at
// once and the others still run.
template <typename RequestPb, typename ResponsePb>
class BatchHandler : public UnaryHandler<RequestPb, ResponsePb> {
 public:
  using UnaryHandler<RequestPb, ResponsePb>::UnaryHandler;

 protected:
  void Take(Request& request) override {
    SetItem(this->response_.mutable_results(static_cast<int>(&request - ops_.data())), request);
  }

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
  }
  void Run() {
    bool any = false;
    for (Request& request : ops_) {
      if (request.key.data() == nullptr) continue;  // Rejected items have no key.
      this->SubmitCounted(request);
      any = true;
    }
    if (!any) this->Reply(absl::OkStatus());
  }

 private:
  std::vector<Request> ops_;
};

class MultiGetHandler : public BatchHandler<pb::MultiGetRequest, pb::MultiGetResponse> {
 public:
  using BatchHandler::BatchHandler;
  void Start() override {
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

class MultiPutHandler : public BatchHandler<pb::MultiPutRequest, pb::MultiPutResponse> {
 public:
  using BatchHandler::BatchHandler;
  void Start() override {
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

class StatsHandler : public UnaryHandler<pb::StatsRequest, pb::StatsResponse> {
 public:
  using UnaryHandler::UnaryHandler;
  void Start() override {
    loop_.server().FillStats(&response_);
    Reply(absl::OkStatus());
  }
  void Take(Request&) override {}
};

// Stream: up to kMaxStreamInFlight operations in flight; the answers that one engine turn
// completes, or that pile up while a Write is out, share the next reply message.
class StreamHandler : public BidiHandler<pb::StreamResponse> {
 public:
  using BidiHandler::BidiHandler;

  google::protobuf::MessageLite* incoming() override { return &incoming_; }

  void OnRequestDone(Request* request) override {
    InFlight& op = *static_cast<InFlight*>(request);
    if (!cancelled()) SetItem(AddResult(op.id, request->out.size()), *request);
    op.key_bytes.clear();
    op.value_bytes.clear();
    op.out.clear();
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

  bool Busy() const override { return in_flight_ > 0; }
  bool RoomForMore() const override { return in_flight_ < kMaxStreamInFlight; }

  void TakeMessage() override {
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
      ++in_flight_;
      Submit(op);
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
    pb::StreamResult* result = Gathering(bytes + 16, kStreamReplyBytes).add_results();
    result->set_id(id);
    return result->mutable_result();
  }

  pb::StreamRequest incoming_;
  std::vector<std::unique_ptr<InFlight>> ops_;  // Every one made; free_ lists the idle ones.
  std::vector<InFlight*> free_;
  size_t in_flight_ = 0;
  bool flush_requested_ = false;
};

}  // namespace

std::unique_ptr<Handler> MakeGetHandler(ShardLoop& loop, CallSink& sink) {
  return std::make_unique<GetHandler>(loop, sink);
}
std::unique_ptr<Handler> MakePutHandler(ShardLoop& loop, CallSink& sink) {
  return std::make_unique<PutHandler>(loop, sink);
}
std::unique_ptr<Handler> MakeDeleteHandler(ShardLoop& loop, CallSink& sink) {
  return std::make_unique<DeleteHandler>(loop, sink);
}
std::unique_ptr<Handler> MakeMultiGetHandler(ShardLoop& loop, CallSink& sink) {
  return std::make_unique<MultiGetHandler>(loop, sink);
}
std::unique_ptr<Handler> MakeMultiPutHandler(ShardLoop& loop, CallSink& sink) {
  return std::make_unique<MultiPutHandler>(loop, sink);
}
std::unique_ptr<Handler> MakeStreamHandler(ShardLoop& loop, CallSink& sink) {
  return std::make_unique<StreamHandler>(loop, sink);
}
std::unique_ptr<Handler> MakeStatsHandler(ShardLoop& loop, CallSink& sink) {
  return std::make_unique<StatsHandler>(loop, sink);
}

}  // namespace ringkv::internal
