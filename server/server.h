// Server: the ringkv daemon in one object, and the only place that assembles it. It builds the
// shard engine (ring or lock), one ShardLoop thread per worker, and the transport that feeds
// them calls (server/transport.h: gRPC over HTTP/2 in each loop, or grpc++). server/shard_loop.h
// tells the request path. The loops, transports and handlers see the Server only as a ServerContext
// (server/server_context.h), and the /metrics endpoint as a MetricsSource; only the program's
// steps (server/daemon.cc) include this header.
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
// The /metrics endpoint has an Authenticator of its own (metrics_token_file), which
// ReloadMetricsTokens swaps; the two files may be one.
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
// Threads: Start, Shutdown, ReloadTokens, ReloadMetricsTokens and the destructor from one control
// thread (not a loop's); ServerContext's and MetricsSource's methods from any thread while the
// server runs.
//
//   auto server = Server::Start({.listen = "127.0.0.1:0", .threads = 2}).value();
//   std::printf("port %d\n", server->port());
//   server->Shutdown();
#ifndef RINGKV_SERVER_SERVER_H_
#define RINGKV_SERVER_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/membership.h"
#include "persist/data_dir.h"
#include "server/auth/authenticator.h"
#include "server/metrics/metrics_server.h"
#include "server/metrics/metrics_source.h"
#include "server/repl/fence.h"
#include "server/repl/in_sync_keeper.h"
#include "server/repl/in_sync_set.h"
#include "server/repl/replica_client.h"
#include "server/repl/replica_flows.h"
#include "server/repl/role_port.h"
#include "server/repl/sink.h"
#include "server/repl/source.h"
#include "server/server_context.h"
#include "server/server_options.h"
#include "server/shard_loop.h"
#include "server/tls/server_tls.h"
#include "server/transport.h"
#include "shard/engine.h"
#include "shard/lock_engine.h"

namespace ringkv {

class Server final : public ServerContext, public MetricsSource, public WorkerWaker {
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
  // Re-reads --auth-token-file (SIGHUP); on failure the tokens in force stay, and the error
  // says why. FAILED_PRECONDITION without the flag. Control thread.
  absl::Status ReloadTokens();
  // The same for --metrics-token-file. Control thread.
  absl::Status ReloadMetricsTokens();
  // --metrics-token-file's tokens (null: none).
  const Authenticator* metrics_auth() const { return metrics_auth_.get(); }

  // ServerContext, for the loops, transports and handlers.
  const ServerOptions& options() const override { return options_; }
  const Authenticator* auth() const override { return auth_.get(); }
  const ServerTls* tls() const override { return tls_.get(); }
  bool shutting_down() const override { return shutting_down_.load(std::memory_order_acquire); }
  void CallStarted() override { active_calls_.fetch_add(1, std::memory_order_relaxed); }
  void CallEnded() override { active_calls_.fetch_sub(1, std::memory_order_release); }
  std::atomic<int64_t>& reply_memory() override { return reply_memory_; }
  void FillStats(ringkv::v1::StatsResponse* stats) const override;
  absl::Status RequestSnapshot(persist::DataDir::SnapshotDone done) override;
  const std::string& journal_failure_message() const override;
  bool read_only() const override { return read_only_.load(std::memory_order_acquire); }
  absl::Status read_only_refusal() const override;
  bool fenced() const override { return fence_.closed(); }
  bool may_fence() const override { return !options().etcd.empty(); }
  absl::Status write_refusal() const override;
  absl::Status RequestRoleChange(const std::string& to, RoleDone done) override;
  absl::Status RequestFailover(const std::string& to, FailoverDone done) override;
  const std::string& server_id() const override { return server_id_; }
  void AddReplicaFlow(const repl::ReplicaFlow* flow) override { replica_flows_.Add(flow); }
  void RemoveReplicaFlow(const repl::ReplicaFlow* flow) override { replica_flows_.Remove(flow); }

  // MetricsSource, for the /metrics scrape.
  const ServerContext& context() const override { return *this; }
  std::vector<const CallMetrics*> call_metrics() const override;
  Transport::Connections connections() const override { return transport_->connections(); }

  // WorkerWaker: a worker just sent work to loop `to`.
  void Wake(uint16_t to) override { loops_[to]->WakeIfParked(); }

 private:
  explicit Server(const ServerOptions& options);
  // Opens and locks the data directory, restores the shards and gives each worker its log.
  absl::Status OpenDataDir();
  // Gives each worker its replication port: a RolePort over a ReplSource in front of its log
  // and a ReplSink (a replica's client, which fills the sinks, is made and started with the
  // loops, in Start).
  absl::Status SetUpReplication();
  void FillReplicationStats(ringkv::v1::StatsResponse* stats) const;
  // The primary followed (empty: none, a primary), and what goes with it.
  void SetPrimary(const std::string& primary);
  // A client that follows `primary` into the sinks (not started).
  std::unique_ptr<repl::ReplicaClient> MakeReplicaClient(const std::string& primary);
  // Runs `job` on role_thread_, unless a role change or failover is under way (refused with
  // `busy`) or the server shuts down; role_changing_ is cleared once `job` returns, and then
  // what it returned runs (it tells the caller).
  absl::Status OnRoleThread(const char* busy, std::function<std::function<void()>()> job);
  // Role changes (RequestRoleChange), on role_thread_: stop following and serve writes, or
  // follow another primary (a primary steps down first).
  absl::Status Promote();
  absl::Status Follow(const std::string& to);
  // Waits until every worker's port serves as a replica (follow) or a primary; UNAVAILABLE if
  // the server shuts down meanwhile.
  absl::Status AwaitPorts(bool follow);
  // A promotion, with a data directory: once no full sync's image waits for a snapshot to hold
  // it (server/repl/sink.h), taking one if needed.
  absl::Status AwaitDurableImages();
  // A planned failover (RequestFailover), on role_thread_: picks the replica (`to`, or the one
  // that applied the most; a member of the in-sync set with --acks=isr) that follows every
  // worker, refuses writes (fence_.Hold), waits until it has applied every record, hands it
  // the leader key (Membership::HandOver), and waits until it has taken over and this server
  // follows it. Writes resume here if any step fails.
  absl::Status HandOver(const std::string& to, FailoverResult* result);
  // --etcd: what this server's member entry says (cluster/membership.h).
  std::string DescribeMember() const;
  // --etcd: the group's election (cluster/membership.h). Whether this server may lead now,
  // and how well; and the take-over once it has won `term`: the version floor (term << 40),
  // then the promotion.
  std::optional<etcd::Standing> GroupStanding() const;
  absl::Status Lead(uint64_t term);
  // Joins the group (--etcd): the last step of Start.
  absl::Status JoinGroup();
  // --listen's host with the port bound (the port --listen named, or the one the kernel chose).
  std::string listen_address() const;

  // Constant after Start.
  const ServerOptions options_;
  const absl::Time started_;
  int port_ = 0;
  // The engines before the loops, so that the loops (and their connections, which may hold
  // values a shard lent: Request::lent) go first, on the thread that joined the workers.
  std::unique_ptr<RingEngine> ring_engine_;
  std::unique_ptr<LockEngine> lock_engine_;
  std::vector<std::unique_ptr<ShardLoop>> loops_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<persist::DataDir> data_dir_;
  std::unique_ptr<Authenticator> auth_;  // Its own lock guards the tokens it swaps.
  std::unique_ptr<ServerTls> tls_;
  // Declared before metrics_server_, so it outlives the thread that reads it.
  std::unique_ptr<Authenticator> metrics_auth_;    // Its own lock guards the tokens it swaps.
  std::unique_ptr<MetricsServer> metrics_server_;  // Its thread only reads through ServerMetrics.
  // Set before the loops start (OpenDataDir).
  std::string journal_failure_ = "the write could not be made durable; writes are refused";
  std::string journal_stalled_ = journal_failure_;  // While no log has failed for good.
  std::unique_ptr<FinishLine> finish_line_;
  std::string server_id_;
  repl::ReplicaFlows replica_flows_;              // The replicas streaming from this server.
  std::string primary_token_;                     // --primary-token-file's.
  std::shared_ptr<const ClientTls> primary_tls_;  // --primary-tls*; null: plaintext.
  repl::InSyncSet in_sync_set_;                   // --acks=isr: the replicas every write waits for.
  // Per worker (the ring engine): both sides of replication, and the port that picks one.
  std::vector<std::unique_ptr<repl::ReplSource>> repl_sources_;
  std::vector<std::unique_ptr<repl::ReplSink>> repl_sinks_;
  std::vector<std::unique_ptr<repl::RolePort>> role_ports_;

  // The role. read_only_ mirrors whether primary_ is set, for the transports' every call.
  mutable std::mutex role_mu_;
  std::string primary_;  // Guarded by role_mu_.
  // --etcd: this server's entry in its group. Set under role_mu_ (the stats read it) at the
  // end of Start; kept until the destructor.
  std::unique_ptr<etcd::Membership> membership_;
  std::unique_ptr<repl::ReplicaClient> replica_client_;  // Guarded by role_mu_ (Shutdown
                                                         // uses it once role_thread_ is done).
  std::thread role_thread_;                              // Guarded by role_mu_.
  bool role_changing_ = false;                           // Guarded by role_mu_.
  std::atomic<bool> read_only_{false};
  // --etcd: closed until this server leads its group (server/repl/fence.h); open without.
  repl::Fence fence_;
  // --acks=isr: the keeper of in_sync_set_ (made in Start, after the sources; destroyed
  // before membership_, which it records through).
  std::unique_ptr<repl::InSyncKeeper> in_sync_keeper_;

  // Control thread only.
  std::vector<std::thread> threads_;
  bool stopped_ = false;

  // Shared. shutting_down_: set (release) by Shutdown before the transport stops, read
  // (acquire) by the transports, which refuse new calls from then on.
  // active_calls_: calls being served; Shutdown's acquire load pairs with CallEnded's release.
  std::atomic<bool> shutting_down_{false};
  std::atomic<int64_t> active_calls_{0};
  // reply_memory_: ServerContext::reply_memory, on a line of its own (the shards of large GETs
  // take from it, their loops give back).
  alignas(64) std::atomic<int64_t> reply_memory_{options_.limits.reply_memory_budget()};
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_SERVER_H_
