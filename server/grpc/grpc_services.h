// GrpcServices: the grpc++ generated async services that GrpcTransport registers and the call
// adapters (server/grpc/grpc_calls.h) arm calls on, and whether the transport has stopped.
//
// Threads: the services from any loop thread once the transport has started; `stopped` is set
// (release) by GrpcTransport::Stop before the queues shut down, and read (acquire) by the
// adapters, which start no operation on a queue from then on.
#ifndef RINGKV_SERVER_GRPC_GRPC_SERVICES_H_
#define RINGKV_SERVER_GRPC_GRPC_SERVICES_H_

#include <atomic>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "ringkv/v1/kv.grpc.pb.h"

namespace ringkv {

struct GrpcServices {
  bool stopped() const { return stopped_flag.load(std::memory_order_acquire); }

  ringkv::v1::KV::AsyncService kv;
  grpc::health::v1::Health::AsyncService health;
  grpc::reflection::v1alpha::ServerReflection::AsyncService reflection_v1alpha;
  grpc::reflection::v1::ServerReflection::AsyncService reflection_v1;
  std::atomic<bool> stopped_flag{false};
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_GRPC_GRPC_SERVICES_H_
