#include "server/grpc/grpc_calls.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/async_stream.h>
#include <grpcpp/support/async_unary_call.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "server/grpc/grpc_services.h"
#include "server/handlers/methods.h"
#include "server/handlers/parse_request.h"
#include "server/loop_io.h"
#include "server/server_context.h"
#include "server/shard_loop.h"
#include "server/status_details.h"

namespace ringkv {

// A request message as grpc++ reads it for a handler: offered whole to the handler's own parser
// (Handler::ParseCopy) where it has one, as the h2 transport does, so that a batch past
// --max-batch-items is refused on its count before protobuf makes a string of each item; parsed
// by protobuf into the handler's incoming() otherwise, once a message of 4 KiB or more is known
// to hold no more fields than MaxRequestFields (server/handlers/parse_request.h). grpc++ answers
// a unary call whose message is refused here INTERNAL, "Unable to parse request", whatever the
// reason; a bidirectional call's Read fails instead, and BidiAdapter ends the call with the
// refusal (`refused`).
struct IncomingMessage {
  Handler* handler;
  const RequestLimits* limits;
  absl::Status refused;  // Why the last message was not taken.
  // The bytes ParseCopy took, kept until the OnMessage that follows returns, as its contract
  // says (the adapters empty it then).
  grpc::Slice taken;
};

}  // namespace ringkv

template <>
class grpc::SerializationTraits<ringkv::IncomingMessage> {
 public:
  static grpc::Status Status(const absl::Status& status) {
    return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                        std::string(status.message()));
  }
  static grpc::Status Deserialize(grpc::ByteBuffer* buffer, ringkv::IncomingMessage* message) {
    message->refused = Parse(buffer, message);
    return Status(message->refused);
  }

 private:
  static absl::Status Parse(grpc::ByteBuffer* buffer, ringkv::IncomingMessage* message) {
    ringkv::Handler& handler = *message->handler;
    if (buffer != nullptr && handler.ParsesCopies()) {
      grpc::Slice& whole = message->taken;  // The message's one slice, or its slices joined.
      if (buffer->TrySingleSlice(&whole).ok() || buffer->DumpToSingleSlice(&whole).ok()) {
        buffer->Clear();  // Its bytes are in `whole` now, joined or shared.
        const std::string_view bytes(reinterpret_cast<const char*>(whole.begin()), whole.size());
        absl::Status parsed =
            ringkv::ParseRequest(handler, bytes, /*stays=*/false, *message->limits);
        if (!parsed.ok()) whole = grpc::Slice();
        return parsed;
      }
    }
    if (buffer != nullptr && buffer->Length() >= ringkv::kCountFieldsFromBytes) {
      absl::Status counted;
      {  // The stream backs its reader up into the buffer as it goes: gone before the Clear.
        grpc::ProtoBufferReader reader(buffer);
        google::protobuf::io::CodedInputStream in(&reader);
        counted = ringkv::CheckRequestFields(*handler.incoming(), in, *message->limits);
      }
      if (!counted.ok()) {
        buffer->Clear();
        return counted;
      }
    }
    const grpc::Status parsed =
        grpc::GenericDeserialize<grpc::ProtoBufferReader, google::protobuf::MessageLite>(
            buffer, handler.incoming());
    return parsed.ok() ? absl::OkStatus() : ringkv::CannotParse(*handler.incoming());
  }
};

namespace ringkv {
namespace {

enum EventKind : int { kAccepted, kRead, kWritten, kFinished, kDone };

using Message = google::protobuf::MessageLite;

grpc::Status ToGrpc(const absl::Status& status) {
  // grpc++ sends the details as grpc-status-details-bin.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      StatusDetails(status));
}

// What the three adapters share: the handler, the count of grpc++ operations outstanding, and
// the decision to serve or refuse a call that arrives.
class Adapter : public GrpcCall {
 public:
  ~Adapter() override {
    if (start_ns_ != 0) {
      io_.loop().call_metrics()->Record(method_.id, code_, LoopIo::NowNs() - start_ns_);
    }
    if (counted_) context().CallEnded();
    io_.CallGone();
  }

  void Read() override { ABSL_RAW_LOG(FATAL, "Read on a call that takes one message"); }
  void Write(const google::protobuf::MessageLite&) override {
    ABSL_RAW_LOG(FATAL, "Write on a unary call");
  }
  // grpc++ names the peer as a URI, "ipv4:127.0.0.1:5000" or "ipv6:%5B::1%5D:5000".
  std::string PeerHost() const override {
    std::string peer = context_.peer();
    std::string host;
    absl::string_view rest(peer);
    if (!absl::ConsumePrefix(&rest, "ipv4:") && !absl::ConsumePrefix(&rest, "ipv6:")) return "";
    for (size_t i = 0; i < rest.size(); ++i) {  // Undo the URI's %XX escapes.
      int code = 0;
      if (rest[i] == '%' && i + 2 < rest.size() &&
          absl::SimpleHexAtoi(rest.substr(i + 1, 2), &code)) {
        host.push_back(static_cast<char>(code));
        i += 2;
      } else {
        host.push_back(rest[i]);
      }
    }
    const size_t colon = host.rfind(':');  // Before the port.
    if (colon == std::string::npos) return "";
    host.resize(colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    return host;
  }

 protected:
  Adapter(GrpcLoopIo& io, const Method& method)
      : io_(io),
        method_(method),
        handler_(method.make(io.loop(), *this)),
        incoming_{handler_.get(), &context().limits(), {}, {}} {
    io_.CallMade();
  }

  ServerContext& context() { return io_.loop().context(); }
  // The method's index in GrpcServices.
  int Index() const { return static_cast<int>(method_.id); }

  // A call arrived: refused (and false) without a token that grants its method's role
  // (UNAUTHENTICATED, PERMISSION_DENIED), or with UNAVAILABLE if the server drains and the
  // method is not served then; else counted, if its method is.
  bool Admit() {
    if (io_.loop().call_metrics() != nullptr) start_ns_ = LoopIo::NowNs();
    Role caller = Role::kAdmin;
    if (const Authenticator* auth = context().auth()) {
      const auto& metadata = context_.client_metadata();
      const auto header = metadata.find("authorization");
      const bool sent_token = header != metadata.end();
      caller = sent_token ? io_.role_cache().RoleOf(*auth, std::string_view(header->second.data(),
                                                                            header->second.size()))
                          : Role::kNone;
      if (absl::Status allowed = Authorize(method_, caller, sent_token); !allowed.ok()) {
        Finish(allowed, nullptr);
        return false;
      }
    }
    handler_->set_caller(caller);
    const auto& metadata = context_.client_metadata();
    if (const auto header = metadata.find(std::string(kMinReplicasHeader));
        header != metadata.end()) {
      absl::StatusOr<uint32_t> n =
          ParseMinReplicas(std::string_view(header->second.data(), header->second.size()));
      if (!n.ok()) {
        Finish(n.status(), nullptr);
        return false;
      }
      handler_->set_min_replicas(*n);
    }
    if (const auto header = metadata.find(std::string(kConsistencyHeader));
        header != metadata.end()) {
      absl::StatusOr<bool> linearizable =
          ParseConsistency(std::string_view(header->second.data(), header->second.size()));
      if (!linearizable.ok()) {
        Finish(linearizable.status(), nullptr);
        return false;
      }
      handler_->set_linearizable(*linearizable);
    }
    if (context().shutting_down() && !method_.served_while_draining) {
      Finish(RefusalUnrun("ringkv-server is shutting down", ""), nullptr);
      return false;
    }
    if (method_.needs == Role::kWrite && context().read_only()) {
      Finish(context().read_only_refusal(), nullptr);
      return false;
    }
    if (method_.counted) {
      counted_ = true;
      context().CallStarted();
    }
    return true;
  }

  // No call came (the server is shutting down), so no other event will either.
  void NotAccepted() {
    handler_done_ = true;
    io_.Retire(this);
  }

  // Retires the adapter once its handler is done and no operation is outstanding.
  void MaybeRetire() {
    if (handler_done_ && pending_ == 0 && !retired_) {
      retired_ = true;
      io_.Retire(this);
    }
  }

  // Whether an event is still for the handler: not after it finished, or was told of a cancel.
  bool ForHandler() const { return !handler_done_ && !cancelled_; }

  GrpcLoopIo& io_;
  const Method& method_;
  std::unique_ptr<Handler> handler_;
  IncomingMessage incoming_;  // Where grpc++ reads each request message: handler_'s.
  grpc::ServerContext context_;
  int pending_ = 0;            // grpc++ operations outstanding (and the done notice, if asked).
  bool handler_done_ = false;  // The handler called Finish, or never ran (refused).
  bool cancelled_ = false;     // The handler was told OnCancel.
  // For /metrics: the call's status, as Finish gave it (a call never finished was cancelled).
  absl::StatusCode code_ = absl::StatusCode::kCancelled;

 private:
  bool counted_ = false;  // In the server's count of calls being served.
  bool retired_ = false;
  int64_t start_ns_ = 0;  // When the call arrived; 0: not timed (no --metrics-listen).
};

class UnaryAdapter final : public Adapter {
 public:
  UnaryAdapter(GrpcLoopIo& io, const Method& method) : Adapter(io, method), responder_(&context_) {}

  void Arm() {
    io_.services().RequestAsyncUnary(Index(), &context_, &incoming_, &responder_, io_.cq(),
                                     io_.cq(), &accepted_);
  }

  void OnEvent(int kind, bool ok) override {
    if (kind == kAccepted) {
      if (!ok) return NotAccepted();
      (new UnaryAdapter(io_, method_))->Arm();
      if (!Admit()) return;
      handler_->OnStart();
      handler_->OnMessage();
      incoming_.taken = grpc::Slice();  // The handler holds its own copy of what it keeps.
      return;
    }
    --pending_;  // kFinished: the reply is out, or the call is gone.
    MaybeRetire();
  }

  void Finish(const absl::Status& status, const google::protobuf::MessageLite* response) override {
    handler_done_ = true;
    code_ = status.code();
    if (io_.services().stopped()) {  // The queue may be shut down: no more operations.
      MaybeRetire();
      return;
    }
    ++pending_;
    if (status.ok()) {
      responder_.Finish(*response, grpc::Status::OK, &finished_);
    } else {
      responder_.FinishWithError(ToGrpc(status), &finished_);
    }
  }

 private:
  grpc::ServerAsyncResponseWriter<Message> responder_;
  GrpcCallEvent accepted_{this, kAccepted};
  GrpcCallEvent finished_{this, kFinished};
};

// Server streaming (health Watch). grpc++ tells of a cancel only through AsyncNotifyWhenDone,
// whose event comes once the call is over, cancelled or not.
class ServerStreamAdapter final : public Adapter {
 public:
  ServerStreamAdapter(GrpcLoopIo& io, const Method& method)
      : Adapter(io, method), writer_(&context_) {}

  void Arm() {
    context_.AsyncNotifyWhenDone(&done_);  // Before the call starts, as gRPC requires.
    ++pending_;
    io_.services().RequestAsyncServerStreaming(Index(), &context_, &incoming_, &writer_, io_.cq(),
                                               io_.cq(), &accepted_);
  }

  void OnEvent(int kind, bool ok) override {
    switch (kind) {
      case kAccepted:
        if (!ok) return NotAccepted();
        (new ServerStreamAdapter(io_, method_))->Arm();
        if (!Admit()) return;
        handler_->OnStart();
        handler_->OnMessage();
        return;
      case kWritten:
        --pending_;
        if (ForHandler()) handler_->OnWriteDone(ok);
        break;
      case kDone:
        --pending_;
        if (ForHandler()) {
          cancelled_ = true;
          handler_->OnCancel();
        }
        break;
      case kFinished:
        --pending_;
        break;
    }
    MaybeRetire();
  }

  void Write(const google::protobuf::MessageLite& message) override {
    ++pending_;
    if (io_.services().stopped()) return io_.FailLater(&written_);
    writer_.Write(message, &written_);
  }

  void Finish(const absl::Status& status, const google::protobuf::MessageLite*) override {
    handler_done_ = true;
    code_ = status.code();
    if (cancelled_ || io_.services().stopped()) {
      MaybeRetire();
      return;
    }
    ++pending_;
    writer_.Finish(ToGrpc(status), &finished_);
  }

 private:
  grpc::ServerAsyncWriter<Message> writer_;
  GrpcCallEvent accepted_{this, kAccepted};
  GrpcCallEvent written_{this, kWritten};
  GrpcCallEvent finished_{this, kFinished};
  GrpcCallEvent done_{this, kDone};
};

// Bidirectional streaming (Stream, reflection). A failed Read means the client closed its side
// or the call is gone; a failed Write, that the call is gone.
class BidiAdapter final : public Adapter {
 public:
  BidiAdapter(GrpcLoopIo& io, const Method& method) : Adapter(io, method), stream_(&context_) {}

  void Arm() {
    io_.services().RequestAsyncBidiStreaming(Index(), &context_, &stream_, io_.cq(), io_.cq(),
                                             &accepted_);
  }

  void OnEvent(int kind, bool ok) override {
    switch (kind) {
      case kAccepted:
        if (!ok) return NotAccepted();
        (new BidiAdapter(io_, method_))->Arm();
        if (!Admit()) return;
        handler_->OnStart();
        return;
      case kRead:
        --pending_;
        if (ForHandler()) {
          if (ok) {
            handler_->OnMessage();
            incoming_.taken = grpc::Slice();
          } else {
            // A message not taken (IncomingMessage) fails the Read as the client's close
            // would: the handler ends as at a close, what it has in flight answered first,
            // and the call with the refusal.
            refusal_ = std::exchange(incoming_.refused, absl::OkStatus());
            handler_->OnHalfClose();
          }
        }
        break;
      case kWritten:
        --pending_;
        if (ForHandler()) handler_->OnWriteDone(ok);
        break;
      case kFinished:
        --pending_;
        break;
    }
    MaybeRetire();
  }

  void Read() override {
    ++pending_;
    if (io_.services().stopped()) return io_.FailLater(&read_);
    stream_.Read(&incoming_, &read_);
  }

  void Write(const google::protobuf::MessageLite& message) override {
    ++pending_;
    if (io_.services().stopped()) return io_.FailLater(&written_);
    stream_.Write(message, &written_);
  }

  void Finish(const absl::Status& ended, const google::protobuf::MessageLite*) override {
    const absl::Status& status = ended.ok() ? refusal_ : ended;
    handler_done_ = true;
    code_ = status.code();
    if (io_.services().stopped()) {
      MaybeRetire();
      return;
    }
    ++pending_;
    stream_.Finish(ToGrpc(status), &finished_);
  }

 private:
  grpc::ServerAsyncReaderWriter<Message, IncomingMessage> stream_;
  absl::Status refusal_;  // The message that failed a Read, if one did: the call's status.
  GrpcCallEvent accepted_{this, kAccepted};
  GrpcCallEvent read_{this, kRead};
  GrpcCallEvent written_{this, kWritten};
  GrpcCallEvent finished_{this, kFinished};
};

template <typename AdapterT>
void Arm(GrpcLoopIo& io, const Method& method, int count) {
  for (int i = 0; i < count; ++i) (new AdapterT(io, method))->Arm();
}

}  // namespace

void ArmGrpcCalls(GrpcLoopIo& io, int per_method) {
  for (int i = 0; i < kMethodCount; ++i) {
    const Method& method = MethodOf(static_cast<MethodId>(i));
    switch (method.kind) {
      case MethodKind::kUnary:
        Arm<UnaryAdapter>(io, method, per_method);
        break;
      case MethodKind::kServerStreaming:
        Arm<ServerStreamAdapter>(io, method, per_method);
        break;
      case MethodKind::kBidiStreaming:
        // Reflection streams are rare (a tool's session): one armed is enough.
        Arm<BidiAdapter>(io, method, method.counted ? per_method : 1);
        break;
    }
  }
}

}  // namespace ringkv
