#include "server/grpc/grpc_services.h"

#include <grpcpp/impl/rpc_service_method.h>

#include "server/handlers/methods.h"

namespace ringkv {
namespace {

grpc::internal::RpcMethod::RpcType TypeOf(MethodKind kind) {
  switch (kind) {
    case MethodKind::kUnary:
      return grpc::internal::RpcMethod::NORMAL_RPC;
    case MethodKind::kServerStreaming:
      return grpc::internal::RpcMethod::SERVER_STREAMING;
    case MethodKind::kBidiStreaming:
      break;
  }
  return grpc::internal::RpcMethod::BIDI_STREAMING;
}

}  // namespace

GrpcServices::GrpcServices() {
  for (int i = 0; i < kMethodCount; ++i) {
    const Method& method = MethodOf(static_cast<MethodId>(i));
    // The table's paths are string literals, so their data is NUL-terminated.
    AddMethod(new grpc::internal::RpcServiceMethod(method.path.data(), TypeOf(method.kind),
                                                   /*handler=*/nullptr));
    MarkMethodAsync(i);
  }
}

}  // namespace ringkv
