// Server: the ringkv daemon in one object. It builds the shard engine (ring or lock), one
// ShardLoop thread per worker, and the transport that feeds them calls (server/transport.h:
// HTTP/2 on nghttp2, or grpc++). server/shard_loop.h tells the request path.
//
// Persistence (ServerOptions::data_dir, persist/data_dir.h): Start restores the data before it
// listens, so the server never reports SERVING over a partial data set, gives each worker its
// log, and starts the snapshotter (the Snapshot RPC, snapshot_every) once the loops run;
// Shutdown stops the snapshotter (letting a snapshot under way finish) before it stops the
// transport, and once the loops have stopped closes the logs and takes a snapshot (unless
// snapshot_on_exit is false).
//
// Auth (ServerOptions::auth_token_file, server/auth/): both transports ask auth() which role
// a call's token grants and refuse it before its handler runs; ReloadTokens swaps the set.
//
// Shutdown order (Shutdown()): health goes NOT_SERVING (each loop tells its Watch streams and
// its transport) and calls that arrive from then on are refused with UNAVAILABLE, health
// checks excepted; the calls in flight get up to `shutdown_grace` to finish; then the transport
// stops (ending what is left and closing the connections); the loops answer each other's last
// Requests and exit; then the loops, the transport and the engine are destroyed, in that order.
// (The daemon's main() exits after Shutdown() without running the destructor: grpc++'s library
// teardown can block for seconds on one of its executor threads, and nothing is left to flush.)
// (ringkv counts its calls itself: gRPC's Shutdown(deadline) also waits for idle client
// connections to go away, so a connected but idle client would hold a stop for the whole grace
// period.)
//
// Threads: Start, Shutdown and the destructor from one control thread (not a loop's); the
// accessors the handlers use from any loop thread.
//
//   auto server = Server::Start({.listen = "127.0.0.1:0", .threads = 2}).value();
//   std::printf("port %d\n", server->port());
//   server->Shutdown();
#ifndef RINGKV_SERVER_SERVER_H_
#define RINGKV_SERVER_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ring/ring.h"
#include "ringkv/v1/kv.pb.h"
#include "persist/data_dir.h"
#include "persist/log_writer.h"
#include "server/auth/authenticator.h"
#include "server/metrics/metrics_server.h"
#include "server/tls/server_tls.h"
#include "server/request_limits.h"
#include "server/shard_loop.h"
#include "server/transport.h"
#include "shard/clock.h"
#include "shard/engine.h"
#include "shard/lock_engine.h"
#include "shard/memory.h"

namespace ringkv {

enum class TransportKind { kH2, kGrpc };

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";
  uint32_t threads = 1;
  TransportKind transport = TransportKind::kH2;
  bool lock_engine = false;          // --engine=lock: the lock baseline instead of rings.
  RingKind ring = RingKind::kRteSpsc;
  size_t ring_capacity = 1 << 14;
  RequestLimits limits;
  bool poll_mode = false;            // Busy-poll, never park.
  // How long a worker keeps polling after its last work before it parks (ShardLoop::Run).
  absl::Duration spin = absl::ZeroDuration();
  absl::Duration shutdown_grace = absl::Seconds(4);
  // Client connections open at once; past it a new one is refused at once (h2 only: grpc++
  // has no such bound).
  uint32_t max_connections = 10000;
  // How long a new connection may take over its TLS handshake and HTTP/2 connection preface
  // before it is closed: a client that connects and stays silent holds no slot for longer.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // Calls in flight per connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS).
  uint32_t max_concurrent_streams = 100;
  // --max-memory (0: none) and --eviction; each shard gets an equal share of the bytes.
  MemoryLimit memory;
  // What TTL deadlines are compared with (wall-clock ms); tests may set a clock of their own.
  Clock clock = SystemClockMs;
  // --data-dir (empty: in memory only), --fsync, --load-intact, --no-snapshot-on-exit,
  // --snapshot-every (zero: none).
  std::string data_dir;
  persist::SyncMode fsync = persist::SyncMode::kEverySec;
  bool load_intact = false;
  bool snapshot_on_exit = true;
  absl::Duration snapshot_every = absl::ZeroDuration();
  // --auth-token-file: every call but health checks needs a token from it (empty: no auth).
  std::string auth_token_file;
  // --tls-cert, --tls-key, --tls-client-ca: TLS on the listening port (empty cert: plaintext).
  ServerTls::Files tls;
  // --metrics-listen: HOST:PORT of the /metrics and /healthz endpoint (empty: none).
  std::string metrics_listen;
};

class Server : public WorkerWaker {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);
  ~Server() override;
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The port bound (useful with a listen address ending in ":0").
  int port() const { return port_; }
  // The --metrics-listen port bound (0: none).
  int metrics_port() const { return metrics_server_ ? metrics_server_->port() : 0; }
  // Drains and stops; returns once every loop thread has exited and the data directory (if any)
  // is closed, with what went wrong there. Idempotent (later calls return OK).
  absl::Status Shutdown();

  // For the loops and handlers, any loop thread.
  const ServerOptions& options() const { return options_; }
  bool shutting_down() const { return shutting_down_.load(std::memory_order_acquire); }
  void FillStats(ringkv::v1::StatsResponse* stats) const;
  // The data directory (null without --data-dir).
  persist::DataDir* data_dir() const { return data_dir_.get(); }
  // Token auth (null without --auth-token-file: every call is allowed).
  const Authenticator* auth() const { return auth_.get(); }
  // TLS (null without --tls-cert: plaintext).
  const ServerTls* tls() const { return tls_.get(); }
  // For the /metrics scrape (any thread, while the server runs).
  const std::vector<std::unique_ptr<ShardLoop>>& loops() const { return loops_; }
  const Transport& transport() const { return *transport_; }

  // Re-reads --auth-token-file (SIGHUP); on failure the tokens in force stay, and the error
  // says why. FAILED_PRECONDITION without the flag. Control thread.
  absl::Status ReloadTokens();

  // For the transports: a call is being served (not refused) / has ended. Any loop thread.
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
  // Opens and locks the data directory, restores the shards and gives each worker its log.
  absl::Status OpenDataDir();

  // Constant after Start.
  const ServerOptions options_;
  const absl::Time started_;
  int port_ = 0;
  std::unique_ptr<RingEngine> ring_engine_;
  std::unique_ptr<LockEngine> lock_engine_;
  std::vector<std::unique_ptr<ShardLoop>> loops_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<persist::DataDir> data_dir_;
  std::unique_ptr<Authenticator> auth_;  // Its own lock guards the tokens it swaps.
  std::unique_ptr<ServerTls> tls_;
  std::unique_ptr<MetricsServer> metrics_server_;  // Its thread only reads through ServerMetrics.

  // Control thread only.
  std::vector<std::thread> threads_;
  bool stopped_ = false;

  // Shared. shutting_down_: set (release) by Shutdown before the transport stops, read
  // (acquire) by the transports, which refuse new calls from then on; finished_loops_: see
  // AllLoopsFinished.
  // active_calls_: calls being served; Shutdown's acquire load pairs with CallEnded's release.
  std::atomic<bool> shutting_down_{false};
  std::atomic<size_t> finished_loops_{0};
  std::atomic<int64_t> active_calls_{0};
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_SERVER_H_
