// GrpcServices: the one grpc::Service that GrpcTransport registers. It holds every method of the
// method table (server/handlers/methods.h), each async, at the index of its MethodId, so grpc++
// routes a call by its path to the adapters armed for that index (server/grpc/grpc_calls.h), as
// the generated AsyncServices do; the table is all grpc++ needs to know of a method. Messages
// travel as google::protobuf::MessageLite: the handler's incoming() and its responses.
//
// Threads: arming from any loop thread once the transport has started; `stopped` is set
// (release) by GrpcTransport::Stop before the queues shut down, and read (acquire) by the
// adapters, which start no operation on a queue from then on.
#ifndef RINGKV_SERVER_GRPC_GRPC_SERVICES_H_
#define RINGKV_SERVER_GRPC_GRPC_SERVICES_H_

#include <grpcpp/impl/service_type.h>

#include <atomic>

namespace ringkv {

class GrpcServices final : public grpc::Service {
 public:
  GrpcServices();

  bool stopped() const { return stopped_flag.load(std::memory_order_acquire); }

  // Arm a call of method `index` (its MethodId) on a completion queue.
  using grpc::Service::RequestAsyncBidiStreaming;
  using grpc::Service::RequestAsyncServerStreaming;
  using grpc::Service::RequestAsyncUnary;

  std::atomic<bool> stopped_flag{false};
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_GRPC_GRPC_SERVICES_H_
