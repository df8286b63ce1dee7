#include "server/grpc/grpc_calls.h"

#include <memory>
#include <type_traits>

#include "absl/base/internal/raw_logging.h"
#include "server/grpc/grpc_services.h"
#include "server/handlers/methods.h"
#include "server/loop_io.h"
#include "server/server_context.h"
#include "server/shard_loop.h"

namespace ringkv {
namespace {

enum EventKind : int { kAccepted, kRead, kWritten, kFinished, kDone };

// The message types and service of a generated AsyncService::Request<Method> member.
template <typename Member>
struct ArmTraits;
template <typename S, typename Req, typename Resp>
struct ArmTraits<void (S::*)(grpc::ServerContext*, Req*, grpc::ServerAsyncResponseWriter<Resp>*,
                             grpc::CompletionQueue*, grpc::ServerCompletionQueue*, void*)> {
  using Service = S;
  using RequestPb = Req;
  using ResponsePb = Resp;
};
template <typename S, typename Req, typename Resp>
struct ArmTraits<void (S::*)(grpc::ServerContext*, Req*, grpc::ServerAsyncWriter<Resp>*,
                             grpc::CompletionQueue*, grpc::ServerCompletionQueue*, void*)> {
  using Service = S;
  using RequestPb = Req;
  using ResponsePb = Resp;
};
template <typename S, typename Req, typename Resp>
struct ArmTraits<void (S::*)(grpc::ServerContext*, grpc::ServerAsyncReaderWriter<Resp, Req>*,
                             grpc::CompletionQueue*, grpc::ServerCompletionQueue*, void*)> {
  using Service = S;
  using RequestPb = Req;
  using ResponsePb = Resp;
};

// The transport's service object that the generated member belongs to.
template <typename S>
auto& ServiceOf(GrpcServices& services) {
  if constexpr (std::is_base_of_v<S, ringkv::v1::KV::AsyncService>) {
    return services.kv;
  } else if constexpr (std::is_base_of_v<S, grpc::health::v1::Health::AsyncService>) {
    return services.health;
  } else if constexpr (std::is_base_of_v<
                           S, grpc::reflection::v1alpha::ServerReflection::AsyncService>) {
    return services.reflection_v1alpha;
  } else {
    static_assert(std::is_base_of_v<S, grpc::reflection::v1::ServerReflection::AsyncService>);
    return services.reflection_v1;
  }
}

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
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

 protected:
  Adapter(GrpcLoopIo& io, const Method& method)
      : io_(io), method_(method), handler_(method.make(io.loop(), *this)) {
    io_.CallMade();
  }

  ServerContext& context() { return io_.loop().context(); }

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
    if (context().shutting_down() && !method_.served_while_draining) {
      Finish(absl::UnavailableError("ringkv-server is shutting down"), nullptr);
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

template <auto kArm>
class UnaryAdapter final : public Adapter {
  using T = ArmTraits<decltype(kArm)>;

 public:
  UnaryAdapter(GrpcLoopIo& io, const Method& method) : Adapter(io, method), responder_(&context_) {}

  void Arm() {
    (ServiceOf<typename T::Service>(io_.services()).*kArm)(
        &context_, static_cast<typename T::RequestPb*>(handler_->incoming()), &responder_, io_.cq(),
        io_.cq(), &accepted_);
  }

  void OnEvent(int kind, bool ok) override {
    if (kind == kAccepted) {
      if (!ok) return NotAccepted();
      (new UnaryAdapter(io_, method_))->Arm();
      if (!Admit()) return;
      handler_->OnStart();
      handler_->OnMessage();
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
      responder_.Finish(*static_cast<const typename T::ResponsePb*>(response), grpc::Status::OK,
                        &finished_);
    } else {
      responder_.FinishWithError(ToGrpc(status), &finished_);
    }
  }

 private:
  grpc::ServerAsyncResponseWriter<typename T::ResponsePb> responder_;
  GrpcCallEvent accepted_{this, kAccepted};
  GrpcCallEvent finished_{this, kFinished};
};

// Server streaming (health Watch). grpc++ tells of a cancel only through AsyncNotifyWhenDone,
// whose event comes once the call is over, cancelled or not.
template <auto kArm>
class ServerStreamAdapter final : public Adapter {
  using T = ArmTraits<decltype(kArm)>;

 public:
  ServerStreamAdapter(GrpcLoopIo& io, const Method& method)
      : Adapter(io, method), writer_(&context_) {}

  void Arm() {
    context_.AsyncNotifyWhenDone(&done_);  // Before the call starts, as gRPC requires.
    ++pending_;
    (ServiceOf<typename T::Service>(io_.services()).*kArm)(
        &context_, static_cast<typename T::RequestPb*>(handler_->incoming()), &writer_, io_.cq(),
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
    writer_.Write(static_cast<const typename T::ResponsePb&>(message), &written_);
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
  grpc::ServerAsyncWriter<typename T::ResponsePb> writer_;
  GrpcCallEvent accepted_{this, kAccepted};
  GrpcCallEvent written_{this, kWritten};
  GrpcCallEvent finished_{this, kFinished};
  GrpcCallEvent done_{this, kDone};
};

// Bidirectional streaming (Stream, reflection). A failed Read means the client closed its side
// or the call is gone; a failed Write, that the call is gone.
template <auto kArm>
class BidiAdapter final : public Adapter {
  using T = ArmTraits<decltype(kArm)>;

 public:
  BidiAdapter(GrpcLoopIo& io, const Method& method) : Adapter(io, method), stream_(&context_) {}

  void Arm() {
    (ServiceOf<typename T::Service>(io_.services()).*kArm)(&context_, &stream_, io_.cq(), io_.cq(),
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
          } else {
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
    stream_.Read(static_cast<typename T::RequestPb*>(handler_->incoming()), &read_);
  }

  void Write(const google::protobuf::MessageLite& message) override {
    ++pending_;
    if (io_.services().stopped()) return io_.FailLater(&written_);
    stream_.Write(static_cast<const typename T::ResponsePb&>(message), &written_);
  }

  void Finish(const absl::Status& status, const google::protobuf::MessageLite*) override {
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
  grpc::ServerAsyncReaderWriter<typename T::ResponsePb, typename T::RequestPb> stream_;
  GrpcCallEvent accepted_{this, kAccepted};
  GrpcCallEvent read_{this, kRead};
  GrpcCallEvent written_{this, kWritten};
  GrpcCallEvent finished_{this, kFinished};
};

template <template <auto> class AdapterT, auto kArm>
void Arm(GrpcLoopIo& io, MethodId id, int count) {
  for (int i = 0; i < count; ++i) (new AdapterT<kArm>(io, MethodOf(id)))->Arm();
}

}  // namespace

void ArmGrpcCalls(GrpcLoopIo& io, int per_method) {
  using Kv = ringkv::v1::KV::AsyncService;
  using Health = grpc::health::v1::Health::AsyncService;
  using ReflectionV1alpha = grpc::reflection::v1alpha::ServerReflection::AsyncService;
  using ReflectionV1 = grpc::reflection::v1::ServerReflection::AsyncService;
  const int n = per_method;
  Arm<UnaryAdapter, &Kv::RequestGet>(io, MethodId::kGet, n);
  Arm<UnaryAdapter, &Kv::RequestPut>(io, MethodId::kPut, n);
  Arm<UnaryAdapter, &Kv::RequestDelete>(io, MethodId::kDelete, n);
  Arm<UnaryAdapter, &Kv::RequestMultiGet>(io, MethodId::kMultiGet, n);
  Arm<UnaryAdapter, &Kv::RequestMultiPut>(io, MethodId::kMultiPut, n);
  Arm<BidiAdapter, &Kv::RequestStream>(io, MethodId::kStream, n);
  Arm<UnaryAdapter, &Kv::RequestStats>(io, MethodId::kStats, n);
  Arm<UnaryAdapter, &Kv::RequestExpire>(io, MethodId::kExpire, n);
  Arm<UnaryAdapter, &Kv::RequestPersist>(io, MethodId::kPersist, n);
  Arm<UnaryAdapter, &Kv::RequestIncrement>(io, MethodId::kIncrement, n);
  Arm<UnaryAdapter, &Kv::RequestScan>(io, MethodId::kScan, n);
  Arm<UnaryAdapter, &Kv::RequestSnapshot>(io, MethodId::kSnapshot, n);
  Arm<UnaryAdapter, &Health::RequestCheck>(io, MethodId::kHealthCheck, n);
  Arm<ServerStreamAdapter, &Health::RequestWatch>(io, MethodId::kHealthWatch, n);
  Arm<BidiAdapter, &ReflectionV1alpha::RequestServerReflectionInfo>(
      io, MethodId::kReflectionV1alpha, 1);
  Arm<BidiAdapter, &ReflectionV1::RequestServerReflectionInfo>(io, MethodId::kReflectionV1, 1);
}

}  // namespace ringkv
