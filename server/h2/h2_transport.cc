#include "server/h2/h2_transport.h"

#include "base/log.h"
#include "server/h2/h2_loop_io.h"
#include "server/h2/uring.h"
#include "server/server_context.h"
#include "server/shard_loop.h"

namespace ringkv {

absl::StatusOr<std::unique_ptr<Transport>> H2Transport::Start(ServerContext& context) {
  absl::StatusOr<std::unique_ptr<Listener>> listener = Listener::Bind(context.options().listen);
  if (!listener.ok()) return listener.status();
  auto transport = std::unique_ptr<H2Transport>(new H2Transport(
      std::move(*listener), context.options().max_connections, context.options().threads));
  if (context.options().io == IoKind::kUring) {
    // One ring made and dropped first, so that a refusal is said once, not per worker.
    const absl::StatusOr<std::unique_ptr<Uring>> probe = Uring::Make();
    if (context.tls() != nullptr) {
      Log(LogLevel::kInfo,
          "--io=uring: with TLS the sockets stay on epoll (OpenSSL reads and "
          "writes them itself)");
    } else if (!probe.ok()) {
      Log(LogLevel::kInfo,
          "--io=uring: io_uring is unavailable here (%s); the sockets go on "
          "epoll",
          probe.status().message());
    } else {
      transport->uring_ = true;
      Log(LogLevel::kInfo, "--io=uring: the workers' sockets go through io_uring");
    }
  }
  return std::unique_ptr<Transport>(std::move(transport));
}

std::unique_ptr<LoopIo> H2Transport::MakeLoopIo(ShardLoop& loop) {
  std::unique_ptr<Uring> uring;
  if (uring_) {
    absl::StatusOr<std::unique_ptr<Uring>> made = Uring::Make();
    if (made.ok()) {
      uring = std::move(*made);
    } else {
      Log(LogLevel::kWarning,
          "--io=uring: a worker's ring could not be made (%s); its sockets "
          "go on epoll",
          made.status().message());
    }
  }
  auto io = std::make_unique<H2LoopIo>(gate_, loop, std::move(uring));
  ios_.push_back(io.get());
  return io;
}

void H2Transport::Stop() {
  gate_.Stop();
  // Every loop, parked or not, must see the flag: the eventfd write ends a wait, and a loop
  // that is running reads the flag at its next turn.
  for (H2LoopIo* io : ios_) io->Wake();
}

}  // namespace ringkv
