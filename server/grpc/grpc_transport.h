// GrpcTransport: --transport=grpc, the grpc++ async server with one completion queue per loop
// (GrpcLoopIo), serving the method table's handlers through one async service built from the
// table (GrpcServices) and call adapters (server/grpc/grpc_calls.h). The reference implementation
// of the gRPC protocol and the fallback, as --engine=lock is for the engine.
//
// Stop(): gRPC's own Shutdown cancels the calls left and closes the connections; each loop's
// completion queue is then shut down (no wake-up alarm may be set on it after), and the loops
// drain it.
//
// What grpc++ 1.51 cannot do here: bound the connections (--max-connections is h2 only), or go
// on accepting once the process has run out of file descriptors (gRPC logs "Failed accept4: Too
// many open files" and stops accepting for good). Server::Start raises the open-files limit
// for both transports, which makes that rarer; --transport=h2 survives it.
//
// Threads: Start, MakeLoopIo, Stop and the destructor on the control thread.
#ifndef RINGKV_SERVER_GRPC_GRPC_TRANSPORT_H_
#define RINGKV_SERVER_GRPC_GRPC_TRANSPORT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/grpc/grpc_services.h"
#include "server/transport.h"

namespace ringkv {

class GrpcLoopIo;
class ServerContext;

class GrpcTransport : public Transport {
 public:
  // Builds and starts the grpc++ server on the server's --listen address, with a completion
  // queue for each loop.
  static absl::StatusOr<std::unique_ptr<Transport>> Start(ServerContext& context);
  ~GrpcTransport() override;

  int port() const override { return port_; }
  std::unique_ptr<LoopIo> MakeLoopIo(ShardLoop& loop) override;
  void Stop() override;

 private:
  explicit GrpcTransport(ServerContext& context) : context_(context) {}

  // Constant after Start.
  ServerContext& context_;
  int port_ = 0;
  GrpcServices services_;  // And whether Stop has begun, for the call adapters.
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::unique_ptr<grpc::Server> grpc_server_;

  // Control thread only: the LoopIos made, one per queue (owned by their loops).
  std::vector<GrpcLoopIo*> ios_;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_GRPC_GRPC_TRANSPORT_H_
