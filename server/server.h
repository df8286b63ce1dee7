// Server: the ringkv daemon in one object. It builds the shard engine (ring or lock), the gRPC
// server with one completion queue per worker, the health and reflection services, and one
// ShardLoop thread per worker (server/shard_loop.h tells the request path).
//
// Shutdown order (Shutdown()): health goes NOT_SERVING (each loop tells its Watch streams) and
// calls that arrive from then on are refused with UNAVAILABLE, health checks excepted; the calls
// in flight get up to `shutdown_grace` to finish; then the
// gRPC server shuts down (cancelling what is left and closing the connections); each completion
// queue is shut down; the loops drain them, answer each other's last Requests and exit; then the
// gRPC server, the queues and the engine are destroyed, in that order. (The daemon's main()
// exits after Shutdown() without running the destructor: gRPC's library teardown can block for
// seconds on one of its executor threads, and nothing is left to flush.) (ringkv counts its calls
// itself: gRPC's Shutdown(deadline) also waits for idle client connections to go away, so a
// connected but idle client would hold a stop for the whole grace period.)
//
// Threads: Start, Shutdown and the destructor from one control thread (not a loop's); the
// accessors the calls use from any loop thread.
//
//   auto server = Server::Start({.listen = "127.0.0.1:0", .threads = 2}).value();
//   std::printf("port %d\n", server->port());
//   server->Shutdown();
#ifndef RINGKV_SERVER_SERVER_H_
#define RINGKV_SERVER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "ring/ring.h"
#include "ringkv/v1/kv.grpc.pb.h"
#include "server/request_limits.h"
#include "server/shard_loop.h"
#include "shard/engine.h"
#include "shard/lock_engine.h"

namespace ringkv {

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";
  uint32_t threads = 1;
  bool lock_engine = false;          // --engine=lock: the lock baseline instead of rings.
  RingKind ring = RingKind::kRteSpsc;
  size_t ring_capacity = 1 << 14;
  RequestLimits limits;
  bool poll_mode = false;            // Busy-poll, never park.
  // How long a worker keeps polling after its last work before it parks (ShardLoop::Run).
  absl::Duration spin = absl::ZeroDuration();
  absl::Duration shutdown_grace = absl::Seconds(4);
};

class Server : public WorkerWaker {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);
  ~Server() override;
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The port bound (useful with a listen address ending in ":0").
  int port() const { return port_; }
  // Drains and stops; returns once every loop thread has exited. Idempotent.
  void Shutdown();

  // For the calls, any loop thread.
  ringkv::v1::KV::AsyncService& service() { return service_; }
  grpc::health::v1::Health::AsyncService& health_service() { return health_service_; }
  const ServerOptions& options() const { return options_; }
  bool shutting_down() const { return shutting_down_.load(std::memory_order_acquire); }
  void FillStats(ringkv::v1::StatsResponse* stats) const;

  // For the calls: one is being served (not refused) / has ended. Any loop thread.
  void CallStarted() { active_calls_.fetch_add(1, std::memory_order_relaxed); }
  void CallEnded() { active_calls_.fetch_sub(1, std::memory_order_release); }

  // For the loops: counts a loop that will make no more Requests; true once all have.
  void MarkLoopFinished() { finished_loops_.fetch_add(1, std::memory_order_release); }
  bool AllLoopsFinished() const {
    // Pairs with the release above: a loop that sees the total also sees that every other loop
    // has no Request out, so no more ring traffic can come its way.
    return finished_loops_.load(std::memory_order_acquire) == loops_.size();
  }

  // WorkerWaker: a worker just sent work to loop `to`.
  void Wake(uint16_t to) override { loops_[to]->WakeIfParked(); }

 private:
  explicit Server(const ServerOptions& options);

  // Constant after Start.
  const ServerOptions options_;
  const absl::Time started_;
  int port_ = 0;
  std::unique_ptr<RingEngine> ring_engine_;
  std::unique_ptr<LockEngine> lock_engine_;
  ringkv::v1::KV::AsyncService service_;
  grpc::health::v1::Health::AsyncService health_service_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::vector<std::unique_ptr<ShardLoop>> loops_;

  // Control thread only.
  std::vector<std::thread> threads_;
  bool stopped_ = false;

  // Shared. shutting_down_: set (release) by Shutdown before the gRPC server stops, read
  // (acquire) by calls so they stop re-arming; finished_loops_: see AllLoopsFinished.
  // active_calls_: calls being served; Shutdown's acquire load pairs with CallEnded's release.
  std::atomic<bool> shutting_down_{false};
  std::atomic<size_t> finished_loops_{0};
  std::atomic<int64_t> active_calls_{0};
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_SERVER_H_
