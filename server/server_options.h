// ServerOptions: everything ringkv-server is told at start, as plain data (server/daemon.cc fills
// it from the flags; tests fill it directly). Server::Start checks the ranges it depends on and
// refuses a start with INVALID_ARGUMENT naming the flag. Constant once the server runs; any
// thread may read it then.
//
//   ServerOptions options{.listen = "127.0.0.1:0", .threads = 2};
#ifndef RINGKV_SERVER_SERVER_OPTIONS_H_
#define RINGKV_SERVER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "persist/log_writer.h"
#include "ring/ring.h"
#include "server/request_limits.h"
#include "server/tls/server_tls.h"
#include "shard/clock.h"
#include "shard/memory.h"

namespace ringkv {

enum class TransportKind { kH2, kGrpc };
// How the h2 transport's workers do their socket I/O: epoll readiness and a recv or send per
// socket, or io_uring completions (server/h2/uring.h).
enum class IoKind { kEpoll, kUring };
// Whose HTTP/2 the h2 transport's connections run: ringkv's own session (server/h2/h2_session.h),
// or nghttp2's, the reference.
enum class H2Kind { kRingkv, kNghttp2 };

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";
  uint32_t threads = 1;
  TransportKind transport = TransportKind::kH2;
  IoKind io = IoKind::kEpoll;
  H2Kind h2 = H2Kind::kRingkv;
  bool lock_engine = false;  // --engine=lock: the lock baseline instead of rings.
  RingKind ring = RingKind::kRteSpsc;
  size_t ring_capacity = 1 << 14;
  RequestLimits limits;
  bool poll_mode = false;  // Busy-poll, never park.
  // How long a worker keeps polling after its last work before it parks (ShardLoop::Run).
  absl::Duration spin = absl::ZeroDuration();
  absl::Duration shutdown_grace = absl::Seconds(4);
  // Client connections open at once; past it a new one is refused at once (h2 only: grpc++
  // has no such bound).
  uint32_t max_connections = 10000;
  // How long a new connection may take over its TLS handshake and HTTP/2 connection preface
  // before it is closed: a client that connects and stays silent holds no slot for longer.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // How long a connection may stay with no call open and no byte received before it is closed
  // (zero: never; h2 only). Independent of it, when --max-connections are open, a new
  // connection makes the longest idle one go (server/h2/h2_loop_io.h).
  absl::Duration idle_timeout = absl::Minutes(5);
  // How long a connection's answers may wait without the client taking a byte of them (its
  // socket full, or its flow-control windows shut) before it is closed, and what they hold
  // freed (zero: never; h2 only).
  absl::Duration send_timeout = absl::Minutes(1);
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
  // The logs' file I/O (persist/env.h); null: the system's. Tests put faults here.
  persist::Env* env = nullptr;
  // --auth-token-file: every call but health checks needs a token from it (empty: no auth).
  std::string auth_token_file;
  // --tls-cert, --tls-key, --tls-client-ca: TLS on the listening port (empty cert: plaintext).
  ServerTls::Files tls;
  // --metrics-listen: HOST:PORT of the /metrics and /healthz endpoint (empty: none).
  std::string metrics_listen;
  // --metrics-token-file: /metrics needs a bearer token from it, in --auth-token-file's format
  // (empty: /metrics is open). It may be the same file as auth_token_file.
  std::string metrics_token_file;
  // Replication (server/repl/). --replica-of: HOST:PORT of the primary this server follows as
  // a read-only replica (empty: it is a primary); --primary-token-file: the token it sends
  // there (first line; empty: none). --repl-backlog: the bytes of changes a primary keeps per
  // worker for replicas that read behind.
  std::string replica_of;
  std::string primary_token_file;
  // --primary-tls, --primary-tls-ca, --primary-tls-cert, --primary-tls-key: how a replica
  // reaches its primary: TLS (on: trusting the system's CAs, or those of `ca` if set), and
  // the client certificate it presents (the primary's --tls-client-ca). Files are PEM.
  // --etcd-ca, --etcd-cert, --etcd-key: TLS to etcd (PEM files; an https:// endpoint turns it
  // on with the system's CAs).
  std::string etcd_ca;
  std::string etcd_cert;
  std::string etcd_key;
  struct PrimaryTls {
    bool on = false;
    std::string ca;
    std::string cert;
    std::string key;
  } primary_tls;
  size_t repl_backlog_bytes = size_t{32} << 20;
  // --full-sync-keeps-data: a replica's full sync loads beside the data it holds and swaps the
  // image in once whole (false: it drops its data when the sync begins).
  bool full_sync_keeps_data = true;
  // --min-replicas: the replicas that must have applied a write before its answer (0: none;
  // a call's ringkv-min-replicas header may ask for more, up to kMaxMinReplicas);
  // --min-replicas-timeout: how long a write waits for them before UNAVAILABLE.
  static constexpr uint32_t kMaxMinReplicas = 16;
  uint32_t min_replicas = 0;
  int64_t min_replicas_timeout_ms = 1000;
  // Groups (issue 23; cluster/). --etcd: the endpoints (HOST:PORT) of the etcd cluster
  // that keeps the group (empty: none); --group: its name; --failover-timeout: the TTL of the
  // lease a server's membership lives under.
  std::vector<std::string> etcd;
  std::string group;
  absl::Duration failover_timeout = absl::Seconds(3);
  // --acks=isr: in a group, writes wait for every member of the in-sync set, kept in etcd,
  // and only its members may take over (server/repl/in_sync_keeper.h). false (--acks=count):
  // any --min-replicas replicas, per worker.
  bool acks_isr = false;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_SERVER_OPTIONS_H_
