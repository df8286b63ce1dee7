#include "server/grpc/grpc_transport.h"

#include <grpc/grpc.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "server/grpc/grpc_calls.h"
#include "server/grpc/grpc_loop_io.h"
#include "server/server_context.h"
#include "server/shard_loop.h"

namespace ringkv {

absl::StatusOr<std::unique_ptr<Transport>> GrpcTransport::Start(ServerContext& context) {
  const ServerOptions& options = context.options();
  std::unique_ptr<GrpcTransport> transport(new GrpcTransport(context));
  // grpc.health.v1.Health is served by the loops like KV, not by gRPC's default health
  // service: that one runs on the callback API, whose two polling threads on this Debian build
  // take the sockets' I/O away from the loops and cost a thread hand-off per call
  // (BENCHMARKS.md: unary GET 39k -> 70k calls/s with one worker once they were gone).
  // Reflection is the loops' too (server/handlers/), so gRPC's reflection plugin is not used.
  grpc::EnableDefaultHealthCheckService(false);
  grpc::ServerBuilder builder;
  // Without this, gRPC binds with SO_REUSEPORT and a second daemon on the same port would
  // silently share it instead of failing.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // grpc++ closes a connection whose handshake, or the client's first SETTINGS, is not in by
  // then.
  builder.AddChannelArgument(
      GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
      static_cast<int>(absl::ToInt64Milliseconds(options.handshake_timeout)));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(options.max_concurrent_streams));
  // --idle-timeout: grpc++ sends a GOAWAY to a connection that has had no call open for that
  // long (its max_idle, checked about as often). It cannot evict at a connection limit, which it
  // does not have.
  if (options.idle_timeout > absl::ZeroDuration()) {
    builder.AddChannelArgument(
        GRPC_ARG_MAX_CONNECTION_IDLE_MS,
        static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(options.idle_timeout),
                                           std::numeric_limits<int>::max())));
  }
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (const ServerTls* tls = context.tls()) {
    grpc::SslServerCredentialsOptions ssl(
        tls->mutual() ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                      : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    ssl.pem_root_certs = tls->client_ca_pem();
    ssl.pem_key_cert_pairs.push_back({tls->key_pem(), tls->cert_pem()});
    credentials = grpc::SslServerCredentials(ssl);
  }
  builder.AddListeningPort(options.listen, credentials, &transport->port_);
  builder.RegisterService(&transport->services_);
  // A bigger message is refused by gRPC itself (RESOURCE_EXHAUSTED) before it is read.
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.limits.max_message_bytes()));
  for (uint32_t i = 0; i < options.threads; ++i) {
    transport->queues_.push_back(builder.AddCompletionQueue());
  }
  transport->grpc_server_ = builder.BuildAndStart();
  if (transport->grpc_server_ == nullptr || transport->port_ == 0) {
    // Nothing listens and no loop runs; drain the queues gRPC handed out so they can go.
    for (auto& queue : transport->queues_) {
      queue->Shutdown();
      void* tag;
      bool ok;
      while (queue->Next(&tag, &ok)) {
      }
    }
    transport->grpc_server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen,
                     ": the port is in use, or the address is not one of this machine's"));
  }
  return transport;
}

GrpcTransport::~GrpcTransport() {
  // The loops and their LoopIos are gone; the gRPC server goes before the queues it posted to.
  grpc_server_.reset();
  queues_.clear();
}

std::unique_ptr<LoopIo> GrpcTransport::MakeLoopIo(ShardLoop& loop) {
  auto io = std::make_unique<GrpcLoopIo>(services_, loop, queues_[loop.id()].get(), &ArmGrpcCalls);
  ios_.push_back(io.get());
  return io;
}

void GrpcTransport::Stop() {
  // From here on the call adapters start no operation (a loop may still be in the middle of
  // starting one; gRPC's Shutdown below waits at least until every call is over or 100 ms have
  // passed before the queues shut down).
  services_.stopped_flag.store(true, std::memory_order_release);
  // Cancels whatever is left and closes the connections.
  grpc_server_->Shutdown(
      gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(100, GPR_TIMESPAN)));
  for (size_t i = 0; i < ios_.size(); ++i) {
    ios_[i]->loop().BlockWakeups();
    queues_[i]->Shutdown();
  }
}

}  // namespace ringkv
