// ServerContext: what the call side of the daemon (its loops, transports and handlers) may ask
// of the server, and nothing more: the options (limits, clock, connection bounds), token auth
// and TLS, whether a drain has begun, the count of calls being served, the Stats figures, a
// snapshot of the data directory, and the message for writes a failed log refuses. Server
// implements it (server/server.h); a handler test implements it without sockets.
//
// Threads: every method from any loop thread while the server runs (FillStats also from the
// /metrics scrape); RequestSnapshot's `done` runs on the snapshotter's thread.
//
//   if (context.shutting_down()) return Refuse(absl::UnavailableError("draining"));
//   context.CallStarted();
#ifndef RINGKV_SERVER_SERVER_CONTEXT_H_
#define RINGKV_SERVER_SERVER_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "persist/data_dir.h"
#include "server/request_limits.h"
#include "server/server_options.h"

namespace ringkv::repl {
struct ReplicaFlow;
}  // namespace ringkv::repl

namespace ringkv {

namespace v1 {
class StatsResponse;
}  // namespace v1

class Authenticator;
class ServerTls;

class ServerContext {
 public:
  // Constant while the server runs.
  virtual const ServerOptions& options() const = 0;
  const RequestLimits& limits() const { return options().limits; }
  // What the answers of every call together may still hold of values (--max-reply-memory),
  // as Request::reply_memory: the shards take each GET's value of kBudgetedValueBytes or more
  // from it, and it is given back once the call's answer has left the server's buffers (by the
  // handler, Handler::HoldReplyMemory, or on h2 by the connection, Connection::HoldReplyMemory).
  // Relaxed: a count, with nothing published through it.
  virtual std::atomic<int64_t>& reply_memory() = 0;
  // The server's clock (TTL deadlines), wall-clock milliseconds.
  int64_t NowMs() const { return options().clock(); }
  // Token auth; null without --auth-token-file (every call is allowed).
  virtual const Authenticator* auth() const = 0;
  // TLS; null without --tls-cert (plaintext).
  virtual const ServerTls* tls() const = 0;

  // Once true, new calls are refused with UNAVAILABLE (health checks excepted) and health says
  // NOT_SERVING; it never goes back to false.
  virtual bool shutting_down() const = 0;
  // A call is being served (not refused) / has ended; a drain waits for the count to reach 0.
  virtual void CallStarted() = 0;
  virtual void CallEnded() = 0;

  // The Stats RPC's figures, read now.
  virtual void FillStats(ringkv::v1::StatsResponse* stats) const = 0;

  // Takes a snapshot of the data directory; `done` runs, on the snapshotter's thread, once it
  // is durable or has failed. FAILED_PRECONDITION (and `done` never runs) without --data-dir.
  virtual absl::Status RequestSnapshot(persist::DataDir::SnapshotDone done) = 0;

  // The UNAVAILABLE message of a write refused because the data directory's log failed, or is
  // stalled for want of space (Result::kUnavailable).
  virtual const std::string& journal_failure_message() const = 0;
  // The status of a write refused before it ran (Result::kRefused): UNAVAILABLE with
  // journal_failure_message(). A server in a group whose fence is closed adds a Redirect detail
  // naming the primary it last saw elected (empty if none, or itself): a Redirect tells a
  // client that nothing ran, so that any call may be sent again (client/client.h).
  virtual absl::Status write_refusal() const {
    return absl::UnavailableError(journal_failure_message());
  }

  // Replication. Whether the server is a replica (--replica-of, or `ringkv replicate --to`),
  // which refuses writes, and then the status of every write: UNAVAILABLE naming the primary,
  // with a Redirect detail (server/status_details.h); OK on a primary.
  virtual bool read_only() const = 0;
  virtual absl::Status read_only_refusal() const = 0;
  // In a group on etcd: whether this server's fence is closed, so that it may not acknowledge
  // writes now (server/repl/fence.h). False outside a group.
  virtual bool fenced() const { return false; }
  // Whether the fence can ever close: in a group. Outside one, an answer that acknowledges
  // writes needs no following (Handler::MayAcknowledge).
  virtual bool may_fence() const { return false; }
  // `ringkv replicate`: follow the primary `to` (HOST:PORT), or, if empty, stop following and
  // serve writes (a promotion). An error at once if refused (`done` never runs); else `done`
  // runs on another thread once the change is made, with its status, the role then
  // ("primary" or "replica") and the primary followed.
  using RoleDone =
      std::function<void(const absl::Status&, const std::string& role, const std::string& primary)>;
  virtual absl::Status RequestRoleChange(const std::string& to, RoleDone done) = 0;
  // `ringkv failover`: a planned switchover in a group on etcd (Server::HandOver). An error
  // at once if refused (`done` never runs); else `done` runs on another thread once the
  // leadership has moved, or the attempt failed (writes then go on here).
  struct FailoverResult {
    std::string primary;  // The new primary's address.
    uint64_t term = 0;
    double writes_paused_ms = 0;  // From writes refused here to the new primary taking over.
  };
  using FailoverDone = std::function<void(const absl::Status&, const FailoverResult&)>;
  virtual absl::Status RequestFailover(const std::string& /*to*/, FailoverDone /*done*/) {
    return absl::UnimplementedError("no failover here");
  }
  // Random, made at start: a replica sends its own, so that a server never follows itself.
  virtual const std::string& server_id() const = 0;
  // The replicas streaming from this server, for its stats: a Flow call adds its entry once
  // the flow begins and removes it before it goes (server/repl/replica_flows.h).
  virtual void AddReplicaFlow(const repl::ReplicaFlow* /*flow*/) {}
  virtual void RemoveReplicaFlow(const repl::ReplicaFlow* /*flow*/) {}

 protected:
  ~ServerContext() = default;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_SERVER_CONTEXT_H_
