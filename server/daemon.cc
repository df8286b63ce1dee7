#include "server/daemon.h"

#include <grpc/support/log.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/command_line.h"
#include "base/exit.h"
#include "base/log.h"
#include "persist/log_writer.h"
#include "server/auth/exposure.h"
#include "server/server.h"

// jemalloc's options for the daemon (MALLOC_CONF in the environment overrides them). Without a
// background thread jemalloc purges freed pages only inside allocations, and at its default
// 10 s decay it kept what was freed over the last seconds anyway: an idle server held 41-58
// MiB of freed buffers after 1,000 PUTs of 600 KB (5.6 MiB with these). Redis runs a
// background thread too (jemalloc-bg-thread yes). Not the allocator under the sanitizers.
#ifdef RINGKV_HAVE_JEMALLOC
extern "C" {
const char* malloc_conf = "background_thread:true,dirty_decay_ms:1000";
}
#endif

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "address to listen on, HOST:PORT; loopback unless told otherwise (port 0: any free)");
ABSL_FLAG(std::string, transport, "h2",
          "h2: gRPC over HTTP/2 (ringkv's own, or nghttp2's: --h2), served inside each worker's "
          "own event loop; grpc: "
          "grpc++'s server (the reference implementation)");
ABSL_FLAG(std::string, io, "epoll",
          "how the h2 transport's workers read and write their sockets: epoll (readiness, a "
          "recv or send per socket) or uring (io_uring completions: a turn's sends and "
          "receives in one system call; plaintext connections only, TLS ones stay on epoll). "
          "Where io_uring is unavailable (an old kernel, kernel.io_uring_disabled, a seccomp "
          "profile), uring falls back to epoll and says so at start");
ABSL_FLAG(std::string, h2, "ringkv",
          "whose HTTP/2 the h2 transport's connections run: ringkv (ringkv's own session, made "
          "for gRPC: server/h2/h2_session.h) or nghttp2 (the library, the reference it "
          "replaced: about twice the server's CPU per call at 1 connection x 50 in flight)");
ABSL_FLAG(uint32_t, max_connections, 10000,
          "client connections open at once; past it a new one makes the longest idle "
          "connection go, or, if none has been idle for 1s, is refused at once with a GOAWAY "
          "saying why (h2 only)");
ABSL_FLAG(uint32_t, max_concurrent_streams, 100,
          "calls in flight per connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS)");
// Half the cores by default: every worker also runs gRPC's transport (HTTP/2, the socket
// syscalls), and the kernel's TCP stack and the clients need CPU too. On 2 cores with the client
// on the same machine, 2 workers served 0.7x the unary calls of 1 (BENCHMARKS.md).
ABSL_FLAG(uint32_t, threads, std::max(1u, std::thread::hardware_concurrency() / 2),
          "worker threads, each owning one shard and one completion queue (default: half the "
          "cores, at least 1)");
ABSL_FLAG(std::string, ring, "spsc",
          "ring between workers: spsc (one per pair) or mpsc (one per "
          "worker)");
ABSL_FLAG(std::string, engine, "ring", "ring (shards joined by rings) or lock (the lock baseline)");
ABSL_FLAG(uint64_t, ring_size, 16384, "capacity of each ring, in requests");
ABSL_FLAG(uint64_t, max_key_bytes, 4096, "longest key accepted");
ABSL_FLAG(uint64_t, max_value_bytes, 4 << 20, "largest value accepted");
// DynamoDB's BatchGetItem takes 100 keys, etcd's transactions 128 operations (--max-txn-ops);
// Redis bounds an MGET by its query buffer alone. 10,000 is far past any batch that pays (16 to
// 1,000 keys, BENCHMARKS.md) and keeps a call's work in the engine a few MB.
ABSL_FLAG(uint32_t, max_batch_items, 10000,
          "most keys in a MultiGet, items in a MultiPut, operations in one Stream message; "
          "more is refused whole with INVALID_ARGUMENT (a Stream call ends), nothing run");
ABSL_FLAG(std::string, max_reply_bytes, "",
          "most bytes of values one MultiGet's reply may carry, or one Stream's answers hold "
          "until the client reads them: bytes or with a unit (256MiB, 1GB), at least "
          "--max-value-bytes (default: 64MiB, or --max-value-bytes if larger). A MultiGet past "
          "it is refused whole with RESOURCE_EXHAUSTED, a Stream GET past it is answered so");
// Redis bounds what its clients' output buffers hold together with maxmemory-clients (off by
// default; past it the biggest clients are disconnected). Here the answers' values are what is
// counted, and a GET past the bound is refused rather than a connection closed.
ABSL_FLAG(std::string, max_reply_memory, "",
          "most bytes of values the answers of every call together may hold until they have "
          "left their calls (a client that does not read holds its answers): bytes or with a "
          "unit, at least --max-reply-bytes (default: 1GiB, or --max-reply-bytes if larger). "
          "Values under 1 KiB are not counted. A GET or Stream GET past it is answered "
          "RESOURCE_EXHAUSTED, nothing read, a MultiGet refused whole so");
ABSL_FLAG(int64_t, spin_us, -1,
          "microseconds a worker keeps polling after its last work before it parks, while "
          "its clients wait on each answer and their next call comes within that time; -1: "
          "200 while the workers leave a core free, else 0 (a spinning worker would take the "
          "CPU the others need)");
ABSL_FLAG(bool, poll_mode, false,
          "busy-poll instead of parking idle workers (dedicated machines only: each worker "
          "keeps a core busy)");
ABSL_FLAG(double, handshake_timeout, 10.0,
          "seconds a new connection gets to finish its TLS handshake and send HTTP/2's "
          "connection preface; one that has not by then is closed");
// 5 minutes: Redis's `timeout` defaults to 0 (never), which with a connection bound lets
// forgotten or half-dead clients hold its slots for good; gRPC servers set MAX_CONNECTION_IDLE
// for the same reason. A pooled client that calls a few times a minute keeps its connection, and
// one that comes back later pays a reconnect (a round trip, a TLS handshake). Under pressure
// the idlest connection goes anyway (--max-connections), so this bounds the quiet case.
ABSL_FLAG(
    absl::Duration, idle_timeout, absl::Minutes(5),
    "close a connection that has had no call open and sent nothing for this long (a "
    "GOAWAY saying why, then close; clients reconnect when they next call), a duration: "
    "90s, 5m, 1h. 0: never. Whatever it is, when --max-connections are open a new "
    "connection makes the longest idle one (idle 1s or more) go (that part h2 only: grpc++ has "
    "no connection limit)");
// 1 minute, as nginx's send_timeout: a client that takes no byte of its answers for that long
// is gone or hostile, and meanwhile holds them, and the --max-reply-memory they took, from
// everyone else. Redis bounds the same with client-output-buffer-limit (60 s soft limits).
ABSL_FLAG(absl::Duration, send_timeout, absl::Minutes(1),
          "close a connection whose answers have waited this long without the client taking a "
          "byte of them (it reads nothing, or keeps its HTTP/2 flow-control windows shut): a "
          "GOAWAY saying why, then close, and what they held is freed; a duration: 30s, 5m. "
          "0: never (h2 only: grpc++ has no such bound)");
ABSL_FLAG(double, shutdown_grace, 4.0,
          "seconds the calls in flight get to finish on SIGTERM/SIGINT before they are cancelled");
ABSL_FLAG(std::string, max_memory, "0",
          "most memory the data may take (keys, values, tables, TTL index; the process adds "
          "its base and connection buffers), as bytes or with a unit: 512MiB, 2GB, 1.5G; each "
          "shard gets an equal share. 0: no limit");
ABSL_FLAG(std::string, eviction, "noeviction",
          "what a write that needs memory past --max-memory does: noeviction (it fails with "
          "RESOURCE_EXHAUSTED), allkeys-lru (evict keys not used lately), volatile-ttl (evict "
          "the keys with a TTL that expire soonest), allkeys-random");
ABSL_FLAG(std::string, data_dir, "",
          "directory for the data (created if missing; one server per directory): a log per "
          "worker while serving, a snapshot at a clean stop, restored at start. Empty: the "
          "data lives in memory only and every stop loses it");
ABSL_FLAG(std::string, fsync, "everysec",
          "when a worker's log is synced to disk (with --data-dir): always (a write is "
          "acknowledged once synced: a crash of the machine loses no acknowledged write), "
          "everysec (synced at most a second after each write: a machine crash loses about the "
          "last second, a crash of the process nothing), no (the kernel decides)");
ABSL_FLAG(bool, load_intact, false,
          "start even if data files are damaged or missing (or the MANIFEST is), from what is "
          "intact (each damaged file up to the damage; without a MANIFEST, the newest whole "
          "snapshot and the logs after it); it writes that as a new snapshot and moves the "
          "files it replaces to DATA_DIR/set-aside-<ms>/, deleting nothing. Without it, such a "
          "start is refused, naming the file");
ABSL_FLAG(bool, no_snapshot_on_exit, false,
          "with --data-dir, skip the snapshot at a clean stop (the logs keep the data, and the "
          "next start replays them)");
ABSL_FLAG(std::string, snapshot_every, "0",
          "with --data-dir, also take a snapshot this long after the last one ended (a duration: "
          "30m, 1h, 90s); it lets the logs restart, so restarts replay less. 0: only on the "
          "Snapshot RPC (`ringkv snapshot`) and at a clean stop");
ABSL_FLAG(std::string, auth_token_file, "",
          "require a bearer token on every call but health checks: a file of `TOKEN ROLE` lines "
          "(role read, write or admin; '#' starts a comment), re-read on SIGHUP. Clients send "
          "`authorization: Bearer TOKEN`. Empty: no auth (anyone who reaches the port may do "
          "anything)");
ABSL_FLAG(std::string, tls_cert, "",
          "serve TLS (HTTP/2 negotiated by ALPN h2) with this PEM certificate chain; needs "
          "--tls-key. Empty: plaintext (h2c)");
ABSL_FLAG(std::string, tls_key, "", "the PEM private key of --tls-cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "with --tls-cert, require every client to present a certificate signed by a CA in "
          "this PEM file (mutual TLS)");
ABSL_FLAG(bool, insecure, false,
          "serve a non-loopback --listen address with neither TLS nor --auth-token-file "
          "(refused otherwise: anyone who reaches the port could read and overwrite every key)");
ABSL_FLAG(std::string, metrics_listen, "",
          "serve Prometheus metrics at http://HOST:PORT/metrics, and /healthz (200 while "
          "serving, 503 once a stop has begun), on a thread of their own, over plain HTTP. "
          "Empty: off. Give a loopback address unless the scraper is elsewhere, and then "
          "--metrics-token-file (a warning says so otherwise)");
ABSL_FLAG(std::string, metrics_token_file, "",
          "require a bearer token for /metrics: a file of `TOKEN ROLE` lines as for "
          "--auth-token-file (it may be the same file; any role may read the metrics), re-read "
          "on SIGHUP. Scrapers send `Authorization: Bearer TOKEN`; /healthz stays open for load "
          "balancers. Empty: /metrics is open to anyone who reaches --metrics-listen");
ABSL_FLAG(std::string, replica_of, "",
          "follow the primary at HOST:PORT as a read-only replica: one stream per worker, each "
          "a full sync (the primary's live snapshot) then every change as it is made. Writes "
          "are refused with UNAVAILABLE naming the primary; reads are served and may lag it "
          "(`ringkv stats` gives the lag). Needs the primary's --threads. With --data-dir it "
          "logs what it applies and, restarted, goes on from its position (a partial resync). "
          "Empty: this server is a primary");
ABSL_FLAG(std::string, etcd, "",
          "HOST:PORT[,HOST:PORT...]: the etcd v3 cluster (Debian's etcd-server) that keeps "
          "this server's group (--group). The server joins it at start, under a lease of "
          "--failover-timeout renewed about three times a lease, with its address, role and "
          "positions (`ringkv cluster status` lists the members); at start an etcd that cannot "
          "be reached refuses the start. The group elects its primary: the server holding the "
          "leader key serves writes while its lease lasts and stops before it could run out; "
          "the others follow it; when its lease expires, the replica with the most data takes "
          "over. Empty: no group");
ABSL_FLAG(std::string, group, "", "with --etcd: the name of this server's group");
ABSL_FLAG(std::string, etcd_ca, "",
          "with --etcd: talk to etcd over TLS, trusting the CAs in this PEM file (etcd's "
          "--trusted-ca-file signs its --cert-file); an https:// endpoint alone uses the "
          "system's CAs");
ABSL_FLAG(std::string, etcd_cert, "",
          "with --etcd: the PEM client certificate to present to etcd (its --client-cert-auth)");
ABSL_FLAG(std::string, etcd_key, "", "the PEM private key of --etcd-cert");
ABSL_FLAG(absl::Duration, failover_timeout, absl::Seconds(3),
          "with --etcd: the TTL of the lease a server's membership and leadership live under "
          "(whole seconds, at least 2s: etcd's minimum lease); a server that dies drops out of "
          "its group this long after its last renewal, and if it led, another takes over then. "
          "A primary stops acknowledging writes max(0.5s, a tenth of it) before its lease "
          "could run out");
ABSL_FLAG(std::string, primary_token_file, "",
          "with --replica-of: a file whose first line is the token to present to the primary "
          "(it needs the replication role there, or a higher one, under --auth-token-file)");
ABSL_FLAG(bool, primary_tls, false,
          "with --replica-of: connect to the primary with TLS, trusting the system's CAs (or "
          "--primary-tls-ca's); the primary runs --tls-cert");
ABSL_FLAG(std::string, primary_tls_ca, "",
          "with --replica-of: connect to the primary with TLS, trusting the CAs in this PEM file");
ABSL_FLAG(std::string, primary_tls_cert, "",
          "with --replica-of and TLS: present this PEM client certificate to the primary (for "
          "its --tls-client-ca); needs --primary-tls-key");
ABSL_FLAG(std::string, primary_tls_key, "", "the PEM private key of --primary-tls-cert");
ABSL_FLAG(bool, full_sync_keeps_data, true,
          "a replica's full sync loads the primary's image beside the data it holds and swaps "
          "it in once whole: until then reads get the old data, and a sync cut short (the "
          "primary lost, a promotion) leaves it; both are in memory meanwhile. false: the data "
          "is dropped when the sync begins (half the memory; reads miss keys until the image "
          "is in)");
ABSL_FLAG(std::string, repl_backlog, "32MiB",
          "a primary keeps this many bytes of each worker's latest changes for replicas that "
          "read behind; a replica that falls further behind is cut off and full-syncs again");
ABSL_FLAG(uint32_t, min_replicas, 0,
          "a write's answer waits until this many replicas have applied it, so that an "
          "acknowledged write survives the loss of this server (0: answers do not wait; a call "
          "may ask for more with the `ringkv-min-replicas` header). A write is refused with "
          "UNAVAILABLE, and not run, while fewer replicas follow; one that waits longer than "
          "--min-replicas-timeout gets UNAVAILABLE too, yet it was run here and may still reach "
          "the replicas");
ABSL_FLAG(absl::Duration, min_replicas_timeout, absl::Seconds(1),
          "how long a write waits for its replicas (--min-replicas) before UNAVAILABLE");
ABSL_FLAG(std::string, acks, "count",
          "how the replicas a write waits for are chosen. count: any --min-replicas replicas "
          "(per worker: with more replicas than that, no one replica need hold every "
          "acknowledged write, so a failover may lose some). isr (with --etcd and "
          "--min-replicas of 1 or more): the group's primary keeps an in-sync set of replicas in "
          "etcd; every write waits for all of its members (at least --min-replicas of them), a "
          "replica that lags for half of --min-replicas-timeout leaves it, one that catches up "
          "joins it, and only the primary and the members may take over, so a failover loses no "
          "acknowledged write");
ABSL_FLAG(std::string, log_level, "info", "error, warning, info or debug");

namespace ringkv {
namespace {

// The smallest share of --max-memory a shard may have: room for a table of 16k slots.
constexpr uint64_t kMinMemoryPerShard = uint64_t{1} << 20;

bool ParseLogLevel(std::string_view text, LogLevel* level) {
  if (text == "error")
    *level = LogLevel::kError;
  else if (text == "warning")
    *level = LogLevel::kWarning;
  else if (text == "info")
    *level = LogLevel::kInfo;
  else if (text == "debug")
    *level = LogLevel::kDebug;
  else
    return false;
  return true;
}

// gRPC's own log lines are shown at --log-level=debug only: its messages are for debugging
// gRPC, and a failed start is reported in one line of ours.
void GrpcLog(gpr_log_func_args* args) {
  if (LogEnabled(LogLevel::kDebug)) Log(LogLevel::kDebug, "grpc: %s", args->message);
}

// Raises the soft open-files limit to the hard one: every connection is a descriptor, and a
// service's soft default (often 1024) runs out long before the memory does. Returns the limit
// now in force.
uint64_t RaiseOpenFilesLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    const rlim_t before = limit.rlim_cur;
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) == 0) {
      Log(LogLevel::kDebug, "open-files limit raised from %d to %d", static_cast<uint64_t>(before),
          static_cast<uint64_t>(limit.rlim_cur));
    } else {
      limit.rlim_cur = before;
    }
  }
  return limit.rlim_cur;
}

// Whether a flag was given a value other than its default.
template <typename T>
bool Changed(const absl::Flag<T>& flag) {
  const absl::CommandLineFlag& handle = absl::GetFlagReflectionHandle(flag);
  return handle.CurrentValue() != handle.DefaultValue();
}

void SetUsage() {
  // Debian's Abseil is built with Mutex deadlock detection on, and gRPC locks absl::Mutexes on
  // every call: the bookkeeping was 12% of the daemon's instructions per unary call (callgrind).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(
      "the ringkv daemon: a sharded in-memory key-value store served over gRPC.\n"
      "  ringkv-server [--listen=127.0.0.1:50051] [--transport=h2|grpc] [--io=epoll|uring] "
      "[--h2=ringkv|nghttp2] "
      "[--threads=N] "
      "[--ring=spsc|mpsc] [--engine=ring|lock]\n"
      "Flags may be written with - or _ (--max-key-bytes). Stops cleanly on SIGTERM/SIGINT; "
      "SIGHUP re-reads --auth-token-file and --metrics-token-file.\n"
      "Exit status: 0 after a clean stop, 2 on a usage error or an address it cannot listen "
      "on, 1 on any other failure (a damaged or busy data directory, a failed snapshot at "
      "exit).");
}

void SetUpLogging(const char* argv0) {
  LogLevel level;
  if (!ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    ExitUsageError(argv0, "--log-level must be error, warning, info or debug");
  }
  SetLogLevel(level);
  gpr_set_log_function(GrpcLog);
  gpr_set_log_verbosity(level == LogLevel::kDebug ? GPR_LOG_SEVERITY_DEBUG
                                                  : GPR_LOG_SEVERITY_ERROR);
}

// --listen, --threads, --transport, --max-connections, --max-concurrent-streams,
// --handshake-timeout, --idle-timeout, --send-timeout, --shutdown-grace.
void ParseNetworkFlags(const char* argv0, ServerOptions* options) {
  options->listen = absl::GetFlag(FLAGS_listen);
  options->threads = absl::GetFlag(FLAGS_threads);
  const std::string transport = absl::GetFlag(FLAGS_transport);
  if (transport == "h2") {
    options->transport = TransportKind::kH2;
  } else if (transport == "grpc") {
    options->transport = TransportKind::kGrpc;
  } else {
    ExitUsageError(argv0, "--transport must be h2 or grpc, got '" + transport + "'");
  }
  const std::string io = absl::GetFlag(FLAGS_io);
  if (io == "epoll") {
    options->io = IoKind::kEpoll;
  } else if (io == "uring") {
    options->io = IoKind::kUring;
  } else {
    ExitUsageError(argv0, "--io must be epoll or uring, got '" + io + "'");
  }
  const std::string h2 = absl::GetFlag(FLAGS_h2);
  if (h2 == "nghttp2") {
    options->h2 = H2Kind::kNghttp2;
  } else if (h2 == "ringkv") {
    options->h2 = H2Kind::kRingkv;
  } else {
    ExitUsageError(argv0, "--h2 must be ringkv or nghttp2, got '" + h2 + "'");
  }
  if (options->transport == TransportKind::kGrpc && Changed(FLAGS_h2)) {
    ExitUsageError(argv0, "--h2 needs --transport=h2 (grpc++ has its own HTTP/2)");
  }
  if (options->transport == TransportKind::kGrpc && options->io == IoKind::kUring) {
    ExitUsageError(argv0, "--io=uring needs --transport=h2 (grpc++ polls its sockets itself)");
  }
  options->max_connections = absl::GetFlag(FLAGS_max_connections);
  if (options->max_connections == 0) ExitUsageError(argv0, "--max-connections must be >= 1");
  if (options->transport == TransportKind::kGrpc && Changed(FLAGS_max_connections)) {
    ExitUsageError(argv0,
                   "--max-connections is enforced by --transport=h2 only; grpc++ "
                   "has no bound on connections");
  }
  options->max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  if (options->max_concurrent_streams == 0 || options->max_concurrent_streams > 65536) {
    ExitUsageError(argv0, "--max-concurrent-streams must be 1 .. 65536");
  }
  const double handshake = absl::GetFlag(FLAGS_handshake_timeout);
  if (!(handshake >= 0.1 && handshake <= 3600)) {
    ExitUsageError(argv0, "--handshake-timeout must be 0.1 .. 3600 seconds");
  }
  options->handshake_timeout = absl::Seconds(handshake);
  options->idle_timeout = absl::GetFlag(FLAGS_idle_timeout);
  if (options->idle_timeout != absl::ZeroDuration() &&
      (options->idle_timeout < absl::Seconds(1) ||
       options->idle_timeout == absl::InfiniteDuration())) {
    ExitUsageError(argv0,
                   "--idle-timeout must be 0 (never) or a duration of at least 1s (90s, "
                   "5m, 1h), got '" +
                       absl::FormatDuration(options->idle_timeout) + "'");
  }
  options->send_timeout = absl::GetFlag(FLAGS_send_timeout);
  if (options->send_timeout != absl::ZeroDuration() &&
      (options->send_timeout < absl::Seconds(1) ||
       options->send_timeout == absl::InfiniteDuration())) {
    ExitUsageError(argv0,
                   "--send-timeout must be 0 (never) or a duration of at least 1s (30s, 5m), "
                   "got '" +
                       absl::FormatDuration(options->send_timeout) + "'");
  }
  // 0 (never) is what grpc++ does anyway.
  if (options->transport == TransportKind::kGrpc && Changed(FLAGS_send_timeout) &&
      options->send_timeout != absl::ZeroDuration()) {
    ExitUsageError(argv0,
                   "--send-timeout is enforced by --transport=h2 only; grpc++ has no bound "
                   "on how long an answer waits for its client");
  }
  const double grace = absl::GetFlag(FLAGS_shutdown_grace);
  if (!(grace >= 0 && grace <= 3600)) {
    ExitUsageError(argv0, "--shutdown-grace must be 0 .. 3600 seconds");
  }
  options->shutdown_grace = absl::Seconds(grace);
}

// --ring, --engine, --ring-size, --max-key-bytes, --max-value-bytes, --max-batch-items,
// --max-reply-bytes, --max-reply-memory, --poll-mode, --spin-us.
void ParseEngineFlags(const char* argv0, ServerOptions* options) {
  const std::string ring = absl::GetFlag(FLAGS_ring);
  if (ring == "spsc") {
    options->ring = RingKind::kRteSpsc;
  } else if (ring == "mpsc") {
    options->ring = RingKind::kRteMpscRts;  // The daemon shares its cores with gRPC's threads.
  } else {
    ExitUsageError(argv0, "--ring must be spsc or mpsc, got '" + ring + "'");
  }
  const std::string engine = absl::GetFlag(FLAGS_engine);
  if (engine != "ring" && engine != "lock") {
    ExitUsageError(argv0, "--engine must be ring or lock, got '" + engine + "'");
  }
  options->lock_engine = engine == "lock";
  options->ring_capacity = absl::GetFlag(FLAGS_ring_size);
  options->limits.max_key_bytes = absl::GetFlag(FLAGS_max_key_bytes);
  options->limits.max_value_bytes = absl::GetFlag(FLAGS_max_value_bytes);
  const uint32_t batch_items = absl::GetFlag(FLAGS_max_batch_items);
  if (batch_items < 1 || batch_items > 1'000'000) {
    ExitUsageError(argv0,
                   absl::StrCat("--max-batch-items must be 1 .. 1000000, got ", batch_items));
  }
  options->limits.max_batch_items = batch_items;
  const std::string reply = absl::GetFlag(FLAGS_max_reply_bytes);
  const std::optional<uint64_t> reply_bytes =
      reply.empty() ? std::max<uint64_t>(uint64_t{64} << 20, options->limits.max_value_bytes)
                    : ParseByteSize(reply);
  if (!reply_bytes || *reply_bytes < options->limits.max_value_bytes) {
    ExitUsageError(argv0, absl::StrCat("--max-reply-bytes must be bytes or a size with a unit "
                                       "(64MiB, 1GB), at least --max-value-bytes (",
                                       options->limits.max_value_bytes, "), got '", reply, "'"));
  }
  options->limits.max_reply_bytes = *reply_bytes;
  const std::string memory = absl::GetFlag(FLAGS_max_reply_memory);
  const std::optional<uint64_t> memory_bytes =
      memory.empty() ? std::max<uint64_t>(uint64_t{1} << 30, *reply_bytes) : ParseByteSize(memory);
  if (!memory_bytes || *memory_bytes < *reply_bytes) {
    ExitUsageError(argv0, absl::StrCat("--max-reply-memory must be bytes or a size with a unit "
                                       "(1GiB, 512MB), at least --max-reply-bytes (",
                                       *reply_bytes, "), got '", memory, "'"));
  }
  options->limits.max_reply_memory = *memory_bytes;
  options->poll_mode = absl::GetFlag(FLAGS_poll_mode);
  int64_t spin_us = absl::GetFlag(FLAGS_spin_us);
  if (spin_us < -1 || spin_us > 1'000'000) {
    ExitUsageError(argv0, "--spin-us must be -1 (auto) or 0 .. 1000000");
  }
  if (spin_us == -1) spin_us = options->threads < std::thread::hardware_concurrency() ? 200 : 0;
  options->spin = absl::Microseconds(spin_us);
}

// --max-memory, --eviction.
void ParseMemoryFlags(const char* argv0, ServerOptions* options) {
  const std::string max_memory = absl::GetFlag(FLAGS_max_memory);
  const std::optional<uint64_t> memory_bytes = ParseByteSize(max_memory);
  if (!memory_bytes) {
    ExitUsageError(argv0,
                   "--max-memory must be bytes or a size with a unit (512MiB, 2GB), "
                   "got '" +
                       max_memory + "'");
  }
  if (*memory_bytes != 0 && *memory_bytes < kMinMemoryPerShard * options->threads) {
    ExitUsageError(argv0, absl::StrCat("--max-memory must be 0 (no limit) or at least 1MiB "
                                       "per worker (--threads=",
                                       options->threads, "), got '", max_memory, "'"));
  }
  options->memory.bytes = *memory_bytes;
  const std::string eviction = absl::GetFlag(FLAGS_eviction);
  const std::optional<Eviction> policy = ParseEviction(eviction);
  if (!policy) {
    ExitUsageError(argv0,
                   "--eviction must be noeviction, allkeys-lru, volatile-ttl or "
                   "allkeys-random, got '" +
                       eviction + "'");
  }
  options->memory.eviction = *policy;
}

// --data-dir, --fsync, --load-intact, --no-snapshot-on-exit, --snapshot-every.
void ParsePersistenceFlags(const char* argv0, ServerOptions* options) {
  options->data_dir = absl::GetFlag(FLAGS_data_dir);
  const std::string fsync = absl::GetFlag(FLAGS_fsync);
  const std::optional<persist::SyncMode> sync_mode = persist::ParseSyncMode(fsync);
  if (!sync_mode) {
    ExitUsageError(argv0, "--fsync must be always, everysec or no, got '" + fsync + "'");
  }
  options->fsync = *sync_mode;
  options->load_intact = absl::GetFlag(FLAGS_load_intact);
  options->snapshot_on_exit = !absl::GetFlag(FLAGS_no_snapshot_on_exit);
  if (options->data_dir.empty() && options->load_intact) {
    ExitUsageError(argv0, "--load-intact needs --data-dir");
  }
  if (options->data_dir.empty() && Changed(FLAGS_fsync)) {
    ExitUsageError(argv0, "--fsync needs --data-dir (without it nothing is written to disk)");
  }
  const std::string every = absl::GetFlag(FLAGS_snapshot_every);
  if (every != "0" && (!absl::ParseDuration(every, &options->snapshot_every) ||
                       options->snapshot_every < absl::Seconds(1))) {
    ExitUsageError(argv0,
                   "--snapshot-every must be 0 (none) or a duration of at least 1s "
                   "(90s, 30m, 1h), got '" +
                       every + "'");
  }
  if (every != "0" && options->data_dir.empty()) {
    ExitUsageError(argv0, "--snapshot-every needs --data-dir");
  }
}

// --replica-of, --primary-token-file, --primary-tls*, --repl-backlog, --min-replicas*.
void ParseReplicationFlags(const char* argv0, ServerOptions* options) {
  options->replica_of = absl::GetFlag(FLAGS_replica_of);
  if (!options->replica_of.empty() && options->replica_of.rfind(':') == std::string::npos) {
    ExitUsageError(argv0, "--replica-of must be HOST:PORT, got '" + options->replica_of + "'");
  }
  options->primary_token_file = absl::GetFlag(FLAGS_primary_token_file);
  options->full_sync_keeps_data = absl::GetFlag(FLAGS_full_sync_keeps_data);
  ServerOptions::PrimaryTls& tls = options->primary_tls;
  tls.ca = absl::GetFlag(FLAGS_primary_tls_ca);
  tls.cert = absl::GetFlag(FLAGS_primary_tls_cert);
  tls.key = absl::GetFlag(FLAGS_primary_tls_key);
  tls.on = absl::GetFlag(FLAGS_primary_tls) || !tls.ca.empty() || !tls.cert.empty();
  if (tls.cert.empty() != tls.key.empty()) {
    ExitUsageError(argv0, "--primary-tls-cert and --primary-tls-key go together");
  }
  if (tls.on && options->replica_of.empty() && absl::GetFlag(FLAGS_etcd).empty()) {
    ExitUsageError(argv0,
                   "--primary-tls, --primary-tls-ca and --primary-tls-cert need --replica-of "
                   "or --etcd");
  }
  const std::string backlog = absl::GetFlag(FLAGS_repl_backlog);
  const std::optional<uint64_t> bytes = ParseByteSize(backlog);
  if (!bytes || *bytes < 4096) {
    ExitUsageError(argv0, "--repl-backlog must be a size of at least 4KiB (32MiB, 1GB), got '" +
                              backlog + "'");
  }
  options->repl_backlog_bytes = *bytes;
  options->min_replicas = absl::GetFlag(FLAGS_min_replicas);
  if (options->min_replicas > ServerOptions::kMaxMinReplicas) {
    ExitUsageError(argv0, absl::StrCat("--min-replicas is at most ", ServerOptions::kMaxMinReplicas,
                                       ", got ", options->min_replicas));
  }
  if (options->min_replicas > 0 && !options->replica_of.empty()) {
    ExitUsageError(argv0, "--min-replicas is for a primary; a replica takes no writes");
  }
  const absl::Duration timeout = absl::GetFlag(FLAGS_min_replicas_timeout);
  if (timeout < absl::Milliseconds(1) || timeout > absl::Hours(1)) {
    ExitUsageError(argv0, "--min-replicas-timeout must be between 1ms and 1h, got '" +
                              absl::FormatDuration(timeout) + "'");
  }
  options->min_replicas_timeout_ms = absl::ToInt64Milliseconds(timeout);
  options->etcd = absl::StrSplit(absl::GetFlag(FLAGS_etcd), ',', absl::SkipEmpty());
  options->group = absl::GetFlag(FLAGS_group);
  if (options->etcd.empty() != options->group.empty()) {
    ExitUsageError(argv0, "--etcd and --group go together");
  }
  for (const std::string& endpoint : options->etcd) {
    if (endpoint.rfind(':') == std::string::npos) {
      ExitUsageError(argv0, "--etcd takes HOST:PORT endpoints, got '" + endpoint + "'");
    }
  }
  options->etcd_ca = absl::GetFlag(FLAGS_etcd_ca);
  options->etcd_cert = absl::GetFlag(FLAGS_etcd_cert);
  options->etcd_key = absl::GetFlag(FLAGS_etcd_key);
  if (options->etcd_cert.empty() != options->etcd_key.empty()) {
    ExitUsageError(argv0, "--etcd-cert and --etcd-key go together");
  }
  if (options->etcd.empty() && !(options->etcd_ca.empty() && options->etcd_cert.empty())) {
    ExitUsageError(argv0, "--etcd-ca, --etcd-cert and --etcd-key need --etcd");
  }
  if (!options->etcd.empty() && !options->replica_of.empty()) {
    ExitUsageError(argv0,
                   "--replica-of does not go with --etcd: the group's election decides which "
                   "server is the primary and the others follow it");
  }
  if (options->group.find_first_of("/ ") != std::string::npos) {
    ExitUsageError(argv0, "--group must not hold '/' or spaces, got '" + options->group + "'");
  }
  const absl::Duration failover = absl::GetFlag(FLAGS_failover_timeout);
  if (failover < absl::Seconds(2) || failover > absl::Minutes(10) ||
      failover != absl::Floor(failover, absl::Seconds(1))) {
    ExitUsageError(argv0, "--failover-timeout must be whole seconds from 2s to 10m, got '" +
                              absl::FormatDuration(failover) + "'");
  }
  options->failover_timeout = failover;
  const std::string acks = absl::GetFlag(FLAGS_acks);
  if (acks != "count" && acks != "isr") {
    ExitUsageError(argv0, "--acks is count or isr, got '" + acks + "'");
  }
  options->acks_isr = acks == "isr";
  if (options->acks_isr && (options->etcd.empty() || options->min_replicas == 0)) {
    ExitUsageError(argv0,
                   "--acks=isr needs --etcd (the in-sync set lives there) and --min-replicas of 1 "
                   "or more (the members a write waits for at least)");
  }
}

// --metrics-listen, --metrics-token-file, --auth-token-file, --tls-cert, --tls-key,
// --tls-client-ca.
void ParseSecurityFlags(const char* argv0, ServerOptions* options) {
  options->metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options->metrics_token_file = absl::GetFlag(FLAGS_metrics_token_file);
  if (!options->metrics_token_file.empty() && options->metrics_listen.empty()) {
    ExitUsageError(argv0, "--metrics-token-file needs --metrics-listen");
  }
  options->auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options->tls = {.cert = absl::GetFlag(FLAGS_tls_cert),
                  .key = absl::GetFlag(FLAGS_tls_key),
                  .client_ca = absl::GetFlag(FLAGS_tls_client_ca)};
  if (options->tls.cert.empty() != options->tls.key.empty()) {
    ExitUsageError(argv0, "--tls-cert and --tls-key go together");
  }
  if (!options->tls.client_ca.empty() && options->tls.cert.empty()) {
    ExitUsageError(argv0, "--tls-client-ca needs --tls-cert and --tls-key");
  }
}

// Refuses (false, with the reason on stderr) an address others can reach with neither TLS nor
// tokens, unless --insecure; warns of the half-protected ones.
bool CheckExposureOf(const ServerOptions& options) {
  if (absl::Status exposed =
          CheckExposure(options.listen, {.tls = !options.tls.cert.empty(),
                                         .tokens = !options.auth_token_file.empty(),
                                         .insecure = absl::GetFlag(FLAGS_insecure)});
      !exposed.ok()) {
    std::fprintf(stderr, "ringkv-server: %s\n", std::string(exposed.message()).c_str());
    return false;
  }
  if (IsLoopbackListen(options.listen)) return true;
  if (options.tls.cert.empty() && !options.auth_token_file.empty()) {
    Log(LogLevel::kWarning,
        "tokens go in the clear without TLS: anyone who can read the "
        "traffic to %s can take them (--tls-cert, --tls-key)",
        options.listen);
  } else if (!options.tls.cert.empty() && options.tls.client_ca.empty() &&
             options.auth_token_file.empty()) {
    Log(LogLevel::kWarning,
        "TLS without tokens or client certificates: anyone who can reach "
        "%s may read and write every key (--auth-token-file, "
        "--tls-client-ca)",
        options.listen);
  }
  return true;
}

// Raises the open-files limit and warns if --max-connections cannot fit in it.
void CheckOpenFiles(const ServerOptions& options) {
  const uint64_t open_files = RaiseOpenFilesLimit();
  // Each loop needs a few descriptors of its own (epoll, eventfd, a spare), and the process
  // some more; past that, connections are refused for lack of descriptors, not by the limit.
  if (options.transport == TransportKind::kH2 && open_files > 0 &&
      options.max_connections + 64 + 4 * uint64_t{options.threads} > open_files) {
    Log(LogLevel::kWarning,
        "--max-connections=%d is more than the open-files limit (%d) allows; connections "
        "past about %d will be refused for lack of descriptors",
        options.max_connections, open_files,
        open_files > 64 + 4 * uint64_t{options.threads} ? open_files - 64 - 4 * options.threads
                                                        : 0);
  }
}

// How many tokens `tokens` holds (`what`: "auth" or "metrics"), and a warning if others may
// read its file.
void LogTokenFile(const char* what, const Authenticator& tokens) {
  Log(LogLevel::kInfo, "%s: %d token%s from %s; SIGHUP re-reads it", what, tokens.tokens(),
      tokens.tokens() == 1 ? "" : "s", tokens.path());
  struct stat file {};
  if (stat(tokens.path().c_str(), &file) == 0 && (file.st_mode & 077) != 0) {
    Log(LogLevel::kWarning, "token file %s can be read by other users (mode %o); chmod 600 it",
        tokens.path(), file.st_mode & 0777);
  }
}

// The start-up lines: what listens where, and the token files' state.
void LogStarted(const Server& server, const ServerOptions& options) {
  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  const int64_t spin_us = absl::ToInt64Microseconds(options.spin);
  Log(LogLevel::kInfo, "listening on %s:%d (%s transport, %u worker%s, %s engine%s, %s, %s, %s)",
      host, server.port(), options.transport == TransportKind::kH2 ? "h2" : "grpc", options.threads,
      options.threads == 1 ? "" : "s", options.lock_engine ? "lock" : "ring",
      options.lock_engine
          ? ""
          : absl::StrCat(", ", IsMultiProducer(options.ring) ? "mpsc" : "spsc", " rings"),
      options.poll_mode ? "poll mode" : absl::StrCat("spin ", spin_us, " us, then park"),
      options.memory.bytes == 0 ? std::string("no memory limit")
                                : absl::StrCat("--max-memory=", options.memory.bytes, " bytes, ",
                                               std::string(EvictionName(options.memory.eviction))),
      options.data_dir.empty() ? std::string("in memory only (no --data-dir)")
                               : absl::StrCat("data in ", options.data_dir));
  if (server.metrics_port() != 0) {
    const std::string metrics_host =
        options.metrics_listen.substr(0, options.metrics_listen.rfind(':'));
    Log(LogLevel::kInfo, "metrics on http://%s:%d/metrics (and /healthz)", metrics_host,
        server.metrics_port());
    // A warning, not a refusal as for --listen: the metrics hold no keys or values, and a scraper
    // on another host is the usual set-up.
    if (server.metrics_auth() == nullptr && !IsLoopbackListen(options.metrics_listen)) {
      Log(LogLevel::kWarning,
          "metrics on %s, which is not a loopback address, with no token: anyone who can reach "
          "it can read /metrics (give --metrics-token-file, or listen on 127.0.0.1)",
          options.metrics_listen);
    }
  }
  if (const Authenticator* auth = server.auth()) {
    LogTokenFile("auth", *auth);
  }
  if (const Authenticator* metrics_auth = server.metrics_auth()) {
    LogTokenFile("metrics", *metrics_auth);
  }
}

// Reports a SIGHUP's re-read of one token file (`what`: "" for --auth-token-file, "metrics "
// for --metrics-token-file).
void LogReload(const char* what, const absl::Status& reloaded, const Authenticator& tokens) {
  if (reloaded.ok()) {
    Log(LogLevel::kInfo, "SIGHUP: %d %stoken%s in force from %s", tokens.tokens(), what,
        tokens.tokens() == 1 ? "" : "s", tokens.path());
  } else {
    Log(LogLevel::kWarning, "SIGHUP: %s; the %stokens in force stay", reloaded.message(), what);
  }
}

// Serves until SIGTERM or SIGINT, re-reading the token files on SIGHUP; SIGUSR1 (when blocked in
// `signals`) calls hooks.on_sigusr1. Returns the signal that ends the service.
int WaitForStop(Server& server, const sigset_t& signals, const DaemonHooks& hooks) {
  int signal = 0;
  while (sigwait(&signals, &signal) == 0) {
    if (signal == SIGUSR1) {
      hooks.on_sigusr1();
      continue;
    }
    if (signal != SIGHUP) break;
    if (server.auth() == nullptr && server.metrics_auth() == nullptr) {
      Log(LogLevel::kInfo,
          "SIGHUP: nothing to re-read (no --auth-token-file or --metrics-token-file)");
      continue;
    }
    // Each file on its own: a bad one keeps its tokens and does not hold the other back.
    if (server.auth() != nullptr) LogReload("", server.ReloadTokens(), *server.auth());
    if (server.metrics_auth() != nullptr) {
      LogReload("metrics ", server.ReloadMetricsTokens(), *server.metrics_auth());
    }
  }
  return signal;
}

}  // namespace

ServerOptions ParseServerFlags(int argc, char** argv) {
  SetUsage();
  std::vector<char*> rest = ParseCommandLineOrExit(argc, argv);
  if (rest.size() > 1) {
    ExitUsageError(argv[0], absl::StrCat("unexpected argument '", rest[1], "'"));
  }
  SetUpLogging(argv[0]);
  ServerOptions options;
  ParseNetworkFlags(argv[0], &options);
  ParseEngineFlags(argv[0], &options);
  ParseMemoryFlags(argv[0], &options);
  ParsePersistenceFlags(argv[0], &options);
  ParseSecurityFlags(argv[0], &options);
  ParseReplicationFlags(argv[0], &options);
  return options;
}

int RunDaemon(ServerOptions options, const DaemonHooks& hooks) {
  if (!CheckExposureOf(options)) return 2;
  // Every thread, gRPC's included, inherits this mask, so the signals reach sigwait only.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // Re-reads --auth-token-file and --metrics-token-file.
  if (hooks.on_sigusr1) sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  CheckOpenFiles(options);

  if (hooks.env != nullptr) options.env = hooks.env;
  auto server = Server::Start(options);
  if (!server.ok()) {
    const bool usage = server.status().code() == absl::StatusCode::kInvalidArgument ||
                       server.status().code() == absl::StatusCode::kUnavailable;
    std::fprintf(stderr, "ringkv-server: %s\n", std::string(server.status().message()).c_str());
    return usage ? 2 : 1;
  }
  LogStarted(**server, options);
  const int signal = WaitForStop(**server, signals, hooks);
  Log(LogLevel::kInfo, "%s: draining", signal == SIGINT ? "SIGINT" : "SIGTERM");
  const absl::Status stopped = (*server)->Shutdown();
  Log(LogLevel::kInfo, "%s", stopped.ok() ? "stopped" : "stopped, but the data directory failed");
  // Every call is finished, every connection closed and every loop joined; nothing is left to
  // flush. Tearing down gRPC's library state from here can block for up to 10 s on one of its
  // executor threads (seen in grpc_shutdown's Executor::ShutdownAll, waiting out an epoll
  // timeout), so the daemon exits without it. Sanitizer builds still get their leak check.
  ExitWithoutTeardown(stopped.ok() ? 0 : 1);
}

}  // namespace ringkv
