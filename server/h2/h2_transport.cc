#include "server/h2/h2_transport.h"

#include "server/h2/h2_loop_io.h"
#include "server/server_context.h"
#include "server/shard_loop.h"

namespace ringkv {

absl::StatusOr<std::unique_ptr<Transport>> H2Transport::Start(ServerContext& context) {
  absl::StatusOr<std::unique_ptr<Listener>> listener = Listener::Bind(context.options().listen);
  if (!listener.ok()) return listener.status();
  return std::unique_ptr<Transport>(new H2Transport(
      std::move(*listener), context.options().max_connections, context.options().threads));
}

std::unique_ptr<LoopIo> H2Transport::MakeLoopIo(ShardLoop& loop) {
  auto io = std::make_unique<H2LoopIo>(gate_, loop);
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
