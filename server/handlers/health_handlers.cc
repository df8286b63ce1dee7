// grpc.health.v1.Health's handlers. Check answers SERVING for "" and ringkv.v1.KV
// (NOT_SERVING once the server drains, NOT_FOUND for other names). Watch sends the status, then
// each change, and stays open until the client cancels or the server stops.
#include <memory>
#include <string>

#include "grpc/health/v1/health.pb.h"
#include "server/handlers/internal/factories.h"

namespace ringkv::internal {
namespace {

namespace health = ::grpc::health::v1;
constexpr char kKvService[] = "ringkv.v1.KV";

// The status of `service` ("" is the whole server), or SERVICE_UNKNOWN.
health::HealthCheckResponse::ServingStatus ServingStatus(const ServerContext& server,
                                                         const std::string& service) {
  if (!service.empty() && service != kKvService) {
    return health::HealthCheckResponse::SERVICE_UNKNOWN;
  }
  return server.shutting_down() ? health::HealthCheckResponse::NOT_SERVING
                                : health::HealthCheckResponse::SERVING;
}

class CheckHandler : public Handler {
 public:
  using Handler::Handler;

  google::protobuf::MessageLite* incoming() override { return &request_; }

  void OnMessage() override {
    const auto status = ServingStatus(context_, request_.service());
    if (status == health::HealthCheckResponse::SERVICE_UNKNOWN) {
      sink_.Finish(absl::NotFoundError(absl::StrCat("unknown service \"", request_.service(),
                                                    "\"; this server has \"", kKvService, "\"")),
                   nullptr);
      return;
    }
    response_.set_status(status);
    sink_.Finish(absl::OkStatus(), &response_);
  }

  void OnCancel() override { sink_.Finish(absl::CancelledError("call cancelled"), nullptr); }

 private:
  health::HealthCheckRequest request_;
  health::HealthCheckResponse response_;
};

// Watch: writes the status at once and again whenever it changes (its loop tells it,
// OnServingChanged), one Write at a time. It never finishes by itself: it ends when the call
// is cancelled (the client went away, or the server stopped).
class WatchHandler : public Handler {
 public:
  using Handler::Handler;
  ~WatchHandler() override {
    if (watching_) host_.RemoveWatcher(this);
  }

  google::protobuf::MessageLite* incoming() override { return &request_; }

  void OnMessage() override {
    watching_ = true;
    host_.AddWatcher(this);
    OnServingChanged();
  }

  void OnWriteDone(bool ok) override {
    writing_ = false;
    if (ok) {
      OnServingChanged();  // It may have changed again meanwhile.
    } else {
      OnCancel();
    }
  }

  void OnCancel() override {
    if (finished_) return;
    finished_ = true;
    if (watching_) host_.RemoveWatcher(this);
    watching_ = false;
    sink_.Finish(absl::CancelledError("call cancelled"), nullptr);
  }

  void OnServingChanged() override {
    if (writing_ || finished_) return;
    const auto status = ServingStatus(context_, request_.service());
    if (status == sent_) return;
    sent_ = status;
    response_.set_status(status);
    writing_ = true;
    sink_.Write(response_);
  }

 private:
  health::HealthCheckRequest request_;
  health::HealthCheckResponse response_;
  int sent_ = -1;  // What the client was last sent; none yet at first.
  bool watching_ = false;
  bool writing_ = false;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<Handler> MakeHealthCheckHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<CheckHandler>(host, sink);
}
std::unique_ptr<Handler> MakeHealthWatchHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<WatchHandler>(host, sink);
}

}  // namespace ringkv::internal
