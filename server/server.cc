#include "server/server.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <tuple>

#ifdef RINGKV_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flag_file.h"
#include "base/log.h"
#include "ringkv/v1/kv.pb.h"
#include "server/grpc/grpc_transport.h"
#include "server/h2/h2_transport.h"
#include "server/status_details.h"

namespace ringkv {
namespace {

// jemalloc's own figures, refreshed; zeros where jemalloc is not the allocator (sanitizers).
void ReadMemory(uint64_t* allocated, uint64_t* resident) {
  *allocated = 0;
  *resident = 0;
#ifdef RINGKV_HAVE_JEMALLOC
  uint64_t epoch = 1;
  size_t len = sizeof(epoch);
  mallctl("epoch", &epoch, &len, &epoch, len);
  size_t value = 0;
  len = sizeof(value);
  if (mallctl("stats.allocated", &value, &len, nullptr, 0) == 0) *allocated = value;
  len = sizeof(value);
  if (mallctl("stats.resident", &value, &len, nullptr, 0) == 0) *resident = value;
#endif
}

// The process's resident memory, from /proc (0 if it cannot be read).
uint64_t ProcessResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0;
  unsigned long long resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace

Server::Server(const ServerOptions& options) : options_(options), started_(absl::Now()) {
  // In a group, writes wait for the election (cluster/membership.h).
  if (!options_.etcd.empty()) fence_.Until(0);
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  if (options.threads == 0 || options.threads > RingEngine::kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--threads must be 1 .. ", RingEngine::kMaxWorkers, ", got ", options.threads));
  }
  if (options.limits.max_key_bytes == 0 || options.limits.max_key_bytes > (size_t{1} << 20)) {
    return absl::InvalidArgumentError("--max-key-bytes must be 1 .. 1048576");
  }
  if (options.limits.max_value_bytes > (size_t{1} << 30)) {
    return absl::InvalidArgumentError("--max-value-bytes must be at most 1073741824 (1 GiB)");
  }
  if (options.limits.max_reply_memory < options.limits.max_reply_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-reply-memory must be at least --max-reply-bytes (",
                     options.limits.max_reply_bytes, "), got ", options.limits.max_reply_memory));
  }
  if (!options.etcd.empty() && (options.lock_engine || !options.replica_of.empty())) {
    return absl::InvalidArgumentError(
        "--etcd: a group's election decides who follows whom, so --replica-of does not go "
        "with it, and its servers need --engine=ring");
  }
  std::unique_ptr<Server> server(new Server(options));
  if (!options.auth_token_file.empty()) {
    absl::StatusOr<std::unique_ptr<Authenticator>> auth =
        Authenticator::Load(options.auth_token_file);
    if (!auth.ok()) {
      server->stopped_ = true;  // Nothing listens and no loop runs.
      return auth.status();
    }
    server->auth_ = std::move(*auth);
  }
  if (!options.tls.cert.empty()) {
    absl::StatusOr<std::unique_ptr<ServerTls>> tls = ServerTls::Load(options.tls);
    if (!tls.ok()) {
      server->stopped_ = true;
      return tls.status();
    }
    server->tls_ = std::move(*tls);
  }
  const uint32_t n = options.threads;
  const MemoryLimit share = {options.memory.bytes / n, options.memory.eviction};
  if (options.lock_engine) {
    server->lock_engine_ = std::make_unique<LockEngine>(
        n, /*reserve_per_map=*/0, LockEngine::kDefaultKeyLocks, options.clock, share);
  } else {
    auto engine = RingEngine::Create({.workers = n,
                                      .ring = options.ring,
                                      .ring_capacity = options.ring_capacity,
                                      .waker = server.get(),
                                      .clock = options.clock,
                                      .memory = share});
    if (!engine.ok()) return engine.status();
    server->ring_engine_ = std::move(*engine);
  }
  server->finish_line_ = std::make_unique<FinishLine>(n);
  for (uint32_t i = 0; i < n; ++i) {
    server->loops_.push_back(std::make_unique<ShardLoop>(ShardLoop::Parts{
        .id = static_cast<uint16_t>(i),
        .context = server.get(),
        .finish_line = server->finish_line_.get(),
        .worker = server->ring_engine_ ? &server->ring_engine_->worker(i) : nullptr,
        .lock_engine = server->lock_engine_.get()}));
  }
  if (!options.data_dir.empty()) {
    if (absl::Status s = server->OpenDataDir(); !s.ok()) {
      server->stopped_ = true;  // Nothing listens and no loop runs.
      return s;
    }
  }
  if (absl::Status s = server->SetUpReplication(); !s.ok()) {
    server->stopped_ = true;  // Nothing listens and no loop runs.
    return s;
  }

  if (!options.metrics_token_file.empty()) {
    absl::StatusOr<std::unique_ptr<Authenticator>> tokens =
        Authenticator::Load(options.metrics_token_file);
    if (!tokens.ok()) {
      server->stopped_ = true;  // Nothing listens and no loop runs.
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics-token-file: ", tokens.status().message()));
    }
    server->metrics_auth_ = std::move(*tokens);
  }
  if (!options.metrics_listen.empty()) {  // Bound before the gRPC port: a failure starts nothing.
    absl::StatusOr<std::unique_ptr<MetricsServer>> metrics =
        MetricsServer::Bind(options.metrics_listen, *server, server->metrics_auth_.get());
    if (!metrics.ok()) {
      server->stopped_ = true;  // Nothing listens and no loop runs.
      return metrics.status();
    }
    server->metrics_server_ = std::move(*metrics);
  }
  absl::StatusOr<std::unique_ptr<Transport>> transport = options.transport == TransportKind::kH2
                                                             ? H2Transport::Start(*server)
                                                             : GrpcTransport::Start(*server);
  if (!transport.ok()) {
    server->stopped_ = true;  // Nothing listens and no loop runs.
    return transport.status();
  }
  server->transport_ = std::move(*transport);
  server->port_ = server->transport_->port();
  for (auto& loop : server->loops_) loop->SetIo(server->transport_->MakeLoopIo(*loop));
  for (auto& loop : server->loops_) {
    server->threads_.emplace_back([loop = loop.get()] { loop->Run(); });
  }
  if (server->metrics_server_ != nullptr) server->metrics_server_->Start();
  if (server->data_dir_ != nullptr) {
    // Once the loops run (a snapshot waits for every worker's cut), and before a replica's
    // client (its full sync asks for one).
    RingEngine* engine = server->ring_engine_.get();
    server->data_dir_->StartSnapshotter(
        [engine](uint32_t i, SnapshotJob* job) { engine->worker(i).StartSnapshot(job); },
        options.snapshot_every);
  }
  {
    // Under the lock a role change takes (a loop thread may already run one).
    std::lock_guard lock(server->role_mu_);
    // Unless a role change already made one (a loop may have run `ringkv replicate`).
    if (!server->primary_.empty() && server->replica_client_ == nullptr) {
      server->replica_client_ = server->MakeReplicaClient(server->primary_);
      server->replica_client_->Start();
    }
  }
  if (!options.etcd.empty()) {
    if (absl::Status s = server->JoinGroup(); !s.ok()) {
      (void)server->Shutdown();
      return s;
    }
  }
  return server;
}

absl::Status Server::JoinGroup() {
  if (options_.acks_isr) {
    std::vector<const repl::ReplSource*> sources;
    for (const auto& source : repl_sources_) sources.push_back(source.get());
    in_sync_keeper_ = std::make_unique<repl::InSyncKeeper>(repl::InSyncKeeper::Options{
        .sources = std::move(sources),
        .flows = &replica_flows_,
        .set = &in_sync_set_,
        .record =
            [this](uint64_t term, const std::vector<std::string>& members) {
              etcd::Membership* membership;
              {
                std::lock_guard lock(role_mu_);
                membership = membership_.get();
              }
              if (membership == nullptr) return absl::UnavailableError("not in the group yet");
              return membership->RecordInSync(term, members);
            },
        .lag_limit_ms = std::max<int64_t>(options_.min_replicas_timeout_ms / 2, 1)});
  }
  absl::StatusOr<etcd::EtcdClient::Tls> tls =
      etcd::EtcdClient::LoadTls(options_.etcd_ca, options_.etcd_cert, options_.etcd_key);
  if (!tls.ok()) return tls.status();
  absl::StatusOr<std::unique_ptr<etcd::Membership>> membership = etcd::Membership::Join(
      {.etcd = {.endpoints = options_.etcd, .tls = *std::move(tls)},
       .group = options_.group,
       .server_id = server_id_,
       .ttl = options_.failover_timeout,
       .describe = [this] { return DescribeMember(); },
       .address = listen_address(),
       .standing = [this] { return GroupStanding(); },
       .lead = [this](uint64_t term) { return Lead(term); },
       .follow = [this](const std::string& address) { return Follow(address); },
       .fence =
           [this](int64_t deadline_ns) {
             fence_.Until(deadline_ns);
             // Not the leader now: a failover's hold (HandOver) has done its work.
             if (deadline_ns == 0) fence_.Hold(false);
             if (deadline_ns == 0 && in_sync_keeper_ != nullptr) in_sync_keeper_->Stop();
           },
       .in_sync = options_.acks_isr});
  if (!membership.ok()) {
    return absl::UnavailableError(absl::StrCat("--etcd: cannot join group ", options_.group, ": ",
                                               membership.status().message()));
  }
  std::lock_guard lock(role_mu_);  // The stats read it.
  membership_ = std::move(*membership);
  return absl::OkStatus();
}

std::optional<etcd::Standing> Server::GroupStanding() const {
  if (read_only()) {
    // A replica may lead with a whole image of its primary's data only.
    uint64_t applied = 0;
    for (const auto& sink : repl_sinks_) {
      if (!sink->whole()) return std::nullopt;
      applied += sink->figures().applied_lsn;
    }
    return etcd::Standing{.tier = 2, .score = applied};
  }
  uint64_t keys = 0;
  for (uint32_t i = 0; i < ring_engine_->workers(); ++i) {
    keys += WorkerCounters::Read(ring_engine_->counters(i).keys);
  }
  return etcd::Standing{.tier = keys > 0 ? 1 : 0, .score = keys};
}

absl::Status Server::Lead(uint64_t term) {
  // Versions live in 56 bits (shard/shard.h): terms up to 2^16 keep term << 40 within them.
  if (term >= (uint64_t{1} << 16)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "term ", term, " is past 65535: its version floor (term << 40) would not fit"));
  }
  const uint64_t floor = term << 40;
  // The workers wait for no replica yet (etcd holds the empty set the win recorded).
  if (in_sync_keeper_ != nullptr) in_sync_keeper_->Lead(term);
  for (uint32_t i = 0; i < role_ports_.size(); ++i) {
    role_ports_[i]->RaiseFloor(floor);
    Wake(static_cast<uint16_t>(i));
  }
  if (absl::Status s = Promote(); !s.ok()) return s;
  for (auto& port : role_ports_) {
    while (port->floored() < floor) {
      if (shutting_down()) return absl::UnavailableError("ringkv-server is shutting down");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return absl::OkStatus();
}

absl::Status Server::ReloadTokens() {
  if (auth_ == nullptr) return absl::FailedPreconditionError("no --auth-token-file to re-read");
  return auth_->Reload();
}

absl::Status Server::ReloadMetricsTokens() {
  if (metrics_auth_ == nullptr) {
    return absl::FailedPreconditionError("no --metrics-token-file to re-read");
  }
  return metrics_auth_->Reload();
}

absl::Status Server::OpenDataDir() {
  if (options_.lock_engine) {
    return absl::InvalidArgumentError(
        "--data-dir works with --engine=ring only (the lock "
        "engine is a baseline for benchmarks)");
  }
  absl::StatusOr<std::unique_ptr<persist::DataDir>> dir = persist::DataDir::Open(
      options_.data_dir,
      {.fsync = options_.fsync, .load_intact = options_.load_intact, .env = options_.env});
  if (!dir.ok()) return dir.status();
  data_dir_ = std::move(*dir);
  std::vector<Shard*> shards;
  for (uint32_t i = 0; i < ring_engine_->workers(); ++i) {
    shards.push_back(&ring_engine_->worker(i).mutable_shard());
  }
  if (absl::Status s = data_dir_->Restore(shards, ring_engine_->router(), options_.clock());
      !s.ok()) {
    return s;
  }
  // `ringkv stats` and /metrics read the workers' counters: the restored shards show at once,
  // not at their first write.
  for (uint32_t i = 0; i < ring_engine_->workers(); ++i) {
    ring_engine_->worker(i).PublishShardCounters();
  }
  const persist::PersistenceStats restored = data_dir_->Stats();
  Log(LogLevel::kInfo, "data directory %s: %d keys restored in %.3f s; --fsync=%s",
      options_.data_dir, restored.restored_keys, restored.restore_seconds, restored.fsync);
  if (absl::Status s =
          data_dir_->OpenLogs(ring_engine_->workers(), [this](uint16_t worker) { Wake(worker); });
      !s.ok()) {
    return s;
  }
  for (uint32_t i = 0; i < ring_engine_->workers(); ++i) {
    ring_engine_->worker(i).set_journal(&data_dir_->log(i));
  }
  journal_failure_ = absl::StrCat(
      "not stored: the log in ", options_.data_dir,
      " could not be written, so writes are refused until the server is restarted (reads go "
      "on; the server's log and `ringkv stats` give the cause)");
  journal_stalled_ = absl::StrCat(
      "not stored: the log in ", options_.data_dir,
      " is out of space, so writes are refused until space is freed; they are taken again by "
      "themselves within seconds of that (reads go on; the server's log and `ringkv stats` give "
      "the cause)");
  return absl::OkStatus();
}

absl::Status Server::SetUpReplication() {
  std::random_device random;
  server_id_ = absl::StrFormat("%08x%08x%08x%08x", random(), random(), random(), random());
  const bool replica = !options_.replica_of.empty();
  if (!replica && !options_.primary_token_file.empty()) {
    return absl::InvalidArgumentError("--primary-token-file needs --replica-of");
  }
  if (ring_engine_ == nullptr) {
    if (!replica) return absl::OkStatus();  // The lock engine: a baseline.
    return absl::InvalidArgumentError("--replica-of works with --engine=ring only");
  }
  if (data_dir_ != nullptr && !options_.full_sync_keeps_data) {
    return absl::InvalidArgumentError(
        "--full-sync-keeps-data=false cannot go with --data-dir: a replica's snapshot taken "
        "during a full sync would hold part of the image (leave it at true: the image loads "
        "beside the data and is swapped in whole)");
  }
  if (!options_.primary_token_file.empty()) {
    std::ifstream in(options_.primary_token_file);
    if (!in || !std::getline(in, primary_token_)) {
      return absl::InvalidArgumentError(absl::StrCat("--primary-token-file: cannot read ",
                                                     options_.primary_token_file, ": ",
                                                     std::strerror(errno)));
    }
    primary_token_ = std::string(absl::StripAsciiWhitespace(primary_token_));
    if (primary_token_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--primary-token-file: the first line of ",
                                                     options_.primary_token_file, " is empty"));
    }
  }
  if (const ServerOptions::PrimaryTls& tls = options_.primary_tls; tls.on) {
    // Read now, so that a replica needs no files later (a re-point, a reconnect).
    ClientTls::Files pems;
    for (auto [flag, path, pem] : {std::tuple{"--primary-tls-ca", &tls.ca, &pems.ca},
                                   std::tuple{"--primary-tls-cert", &tls.cert, &pems.cert},
                                   std::tuple{"--primary-tls-key", &tls.key, &pems.key}}) {
      if (path->empty()) continue;
      if (absl::Status s = ReadFlagFile(flag, *path, pem); !s.ok()) return s;
    }
    absl::StatusOr<std::unique_ptr<ClientTls>> client_tls =
        ClientTls::FromPems(pems, "--primary-tls");
    if (!client_tls.ok()) return client_tls.status();
    primary_tls_ = *std::move(client_tls);
  }
  // Every worker gets both sides; its RolePort picks one (a replica may be promoted).
  for (uint32_t i = 0; i < ring_engine_->workers(); ++i) {
    Worker& worker = ring_engine_->worker(i);
    Journal* log = data_dir_ != nullptr ? &data_dir_->log(i) : nullptr;
    repl_sources_.push_back(std::make_unique<repl::ReplSource>(
        log, worker, server_id_, options_.repl_backlog_bytes, options_.min_replicas_timeout_ms,
        options_.etcd.empty() ? nullptr : &fence_, options_.acks_isr ? &in_sync_set_ : nullptr));
    // A replica keeps as many applied records as a primary's backlog, for its promotion.
    repl_sinks_.push_back(std::make_unique<repl::ReplSink>(options_.full_sync_keeps_data,
                                                           options_.repl_backlog_bytes));
    role_ports_.push_back(
        std::make_unique<repl::RolePort>(*repl_sources_.back(), *repl_sinks_.back(), replica));
    if (data_dir_ != nullptr) {
      // A replica's log keeps what its sink applies, with positions (server/repl/sink.h).
      repl::ReplSink* sink = repl_sinks_.back().get();
      persist::DataDir* dir = data_dir_.get();
      sink->set_durability({.log = &data_dir_->log(i),
                            .committed = [dir] { return dir->committed_generation(); },
                            .request_snapshot =
                                [dir] {
                                  dir->RequestSnapshot(
                                      [](const absl::StatusOr<persist::SnapshotInfo>&) {});
                                }});
      repl_sources_.back()->set_after_cut([sink] { sink->AfterCut(); });
      const persist::Positions& restored = data_dir_->restored_positions();
      if (replica && i < restored.size() && restored[i].has_value()) {
        sink->Restore(*restored[i]);
        Log(LogLevel::kInfo,
            "replica: worker %d: the data directory holds position %d of the primary's run %s; "
            "it asks to go on from there",
            i, restored[i]->lsn, restored[i]->history);
      }
    }
    worker.set_journal(repl_sources_.back().get());
    worker.set_replication(role_ports_.back().get());
  }
  if (replica) SetPrimary(options_.replica_of);  // Its client starts with the loops (Start).
  return absl::OkStatus();
}

void Server::SetPrimary(const std::string& primary) {
  std::lock_guard lock(role_mu_);
  primary_ = primary;
  read_only_.store(!primary.empty(), std::memory_order_release);
}

absl::Status Server::read_only_refusal() const {
  std::lock_guard lock(role_mu_);
  if (primary_.empty()) return absl::OkStatus();
  return RefusalUnrun(absl::StrCat("this server is a read-only replica of ", primary_,
                                   ": send writes to the primary"),
                      primary_);
}

std::unique_ptr<repl::ReplicaClient> Server::MakeReplicaClient(const std::string& primary) {
  std::vector<repl::ReplSink*> sinks;
  for (auto& sink : repl_sinks_) {
    sink->Restart();
    sinks.push_back(sink.get());
  }
  return std::make_unique<repl::ReplicaClient>(
      repl::ReplicaClient::Options{
          .primary = primary,
          .token = primary_token_,
          .tls = primary_tls_,
          .server_id = server_id_,
          .address = listen_address(),
          .threads = ring_engine_->workers(),
          .wake = [this](uint32_t worker) { Wake(static_cast<uint16_t>(worker)); }},
      std::move(sinks));
}

absl::Status Server::RequestRoleChange(const std::string& to, RoleDone done) {
  if (ring_engine_ == nullptr) {
    return absl::FailedPreconditionError("replication works with --engine=ring only");
  }
  if (!options_.etcd.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this server is in group ", options_.group,
        " on etcd (--etcd): the group's election decides its role, so `ringkv replicate` "
        "cannot change it"));
  }
  return OnRoleThread("another role change is under way; try again", [this, to, done] {
    const absl::Status status = to.empty() ? Promote() : Follow(to);
    std::string primary;
    {
      std::lock_guard lock(role_mu_);
      primary = primary_;
    }
    return
        [status, primary, done] { done(status, primary.empty() ? "primary" : "replica", primary); };
  });
}

absl::Status Server::RequestFailover(const std::string& to, FailoverDone done) {
  if (options_.etcd.empty()) {
    return absl::FailedPreconditionError(
        "this server is in no group on etcd (--etcd, --group), so there is no leadership to "
        "hand over; to move a primary by hand: `ringkv replicate --to=R` on it, then "
        "`ringkv replicate --stop` on R");
  }
  return OnRoleThread("another failover is under way; try again", [this, to, done] {
    FailoverResult result;
    const absl::Status status = HandOver(to, &result);
    return [status, result, done] { done(status, result); };
  });
}

absl::Status Server::OnRoleThread(const char* busy, std::function<std::function<void()>()> job) {
  std::lock_guard lock(role_mu_);
  if (shutting_down()) return absl::UnavailableError("ringkv-server is shutting down");
  if (role_changing_) return absl::FailedPreconditionError(busy);
  if (role_thread_.joinable()) role_thread_.join();  // The last one's, done.
  role_changing_ = true;
  role_thread_ = std::thread([this, job = std::move(job)] {
    const std::function<void()> tell = job();
    {
      std::lock_guard lock(role_mu_);
      role_changing_ = false;
    }
    tell();
  });
  return absl::OkStatus();
}

namespace {

// A replica as the primary's flows show it: where it listens, and per worker whether it takes
// the tail and what it acknowledged.
struct Follower {
  std::string address;
  std::vector<bool> streaming;
  std::vector<uint64_t> acked;
};

}  // namespace

absl::Status Server::HandOver(const std::string& to, FailoverResult* result) {
  etcd::Membership* membership;
  {
    std::lock_guard lock(role_mu_);
    membership = membership_.get();
  }
  if (membership == nullptr || !membership->view().leading || fence_.closed()) {
    const std::string leader = membership == nullptr ? "" : membership->view().leader_address;
    return absl::FailedPreconditionError(absl::StrCat(
        "this server is not group ", options_.group, "'s primary now",
        leader.empty() || leader == listen_address() ? "" : absl::StrCat(" (", leader, " is)"),
        "; `ringkv failover --etcd=... --group=", options_.group, "` finds the primary"));
  }
  const size_t workers = repl_sources_.size();
  auto followers = [&] {
    std::map<std::string, Follower> by_id;
    replica_flows_.ForEach([&](const repl::ReplicaFlow& flow) {
      Follower& f = by_id[flow.replica_id];
      f.address = flow.address;
      f.streaming.resize(workers, false);
      f.acked.resize(workers, 0);
      if (flow.worker < workers) {
        f.streaming[flow.worker] = flow.streaming.load(std::memory_order_acquire);
        f.acked[flow.worker] = flow.acked.load(std::memory_order_acquire);
      }
    });
    return by_id;
  };
  // The target: a replica that takes the tail of every worker (an in-sync member with
  // --acks=isr, so that it holds every acknowledged write), `to` or the most advanced.
  uint64_t generation;
  const std::vector<std::string> in_sync = in_sync_set_.members(&generation);
  std::string target_id;
  std::string candidates;
  uint64_t best = 0;
  for (const auto& [id, f] : followers()) {
    if (std::count(f.streaming.begin(), f.streaming.end(), true) != static_cast<long>(workers))
      continue;
    if (options_.acks_isr && std::find(in_sync.begin(), in_sync.end(), id) == in_sync.end())
      continue;
    absl::StrAppend(&candidates, candidates.empty() ? "" : ", ", f.address);
    uint64_t applied = 0;
    for (uint64_t a : f.acked) applied += a;
    if (to.empty() ? (target_id.empty() || applied > best) : f.address == to) {
      target_id = id;
      best = applied;
    }
  }
  if (target_id.empty()) {
    const std::string what = options_.acks_isr ? "in the in-sync set with a flow on every worker"
                                               : "following every worker of this server";
    return absl::FailedPreconditionError(
        to.empty() ? absl::StrCat("no replica is ", what, ": nobody to hand over to")
                   : absl::StrCat(to, " is no replica ", what,
                                  "; those that are: ", candidates.empty() ? "none" : candidates));
  }
  // Writes stop here; the target applies the rest.
  const auto paused = std::chrono::steady_clock::now();
  fence_.Hold(true);
  auto resume = [this](absl::Status why) {
    fence_.Hold(false);
    Log(LogLevel::kWarning, "failover: %s; writes go on here", why.message());
    return why;
  };
  Log(LogLevel::kInfo, "failover: writes are refused while %s applies what it lacks",
      followers()[target_id].address);
  const auto caught_up = [&] {
    const Follower f = followers()[target_id];
    for (size_t w = 0; w < workers; ++w) {
      if (f.acked.size() != workers || f.acked[w] < repl_sources_[w]->figures().lsn) return false;
    }
    return true;
  };
  // Twice, 5 ms apart: a write whose turn began before the hold may still have run.
  const auto deadline = paused + std::chrono::seconds(5);
  int seen = 0;
  while (seen < 2) {
    if (std::chrono::steady_clock::now() > deadline) {
      return resume(absl::DeadlineExceededError(
          "the replica did not apply every record within 5 s; nothing was handed over"));
    }
    seen = caught_up() ? seen + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(seen == 1 ? 5 : 1));
  }
  absl::StatusOr<uint64_t> term = membership->HandOver(target_id);
  if (!term.ok()) {
    return resume(
        absl::Status(term.status().code(),
                     absl::StrCat("cannot hand the leader key over: ", term.status().message())));
  }
  result->term = *term;
  result->primary = followers()[target_id].address;
  // The key is the target's: this server's membership sees it go, closes the fence for good
  // and only then lets the hold go (the fence hook), so that no renewal before that can open
  // it; the target's takes over and says so in its entry.
  const absl::Status serving = membership->AwaitPrimary(target_id, *term, absl::Seconds(5));
  // Seen (the view changes after the fence closes): the hook let the hold go, or will.
  if (!membership->view().leading) fence_.Hold(false);
  result->writes_paused_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - paused).count();
  if (!serving.ok()) return serving;
  Log(LogLevel::kInfo, "failover: %s is the primary in term %d; writes paused %.0f ms",
      result->primary, *term, result->writes_paused_ms);
  return absl::OkStatus();
}

absl::Status Server::Promote() {
  std::unique_ptr<repl::ReplicaClient> client;
  std::string was;
  {
    std::lock_guard lock(role_mu_);
    if (primary_.empty()) return absl::OkStatus();  // A primary already.
    client = std::move(replica_client_);
    was = primary_;
  }
  // Nothing more reaches the sinks; the workers apply what they hold, then serve as primaries.
  if (client != nullptr) client->Stop();
  for (auto& port : role_ports_) port->Promote();
  if (absl::Status s = AwaitPorts(false); !s.ok()) return s;
  if (absl::Status s = AwaitDurableImages(); !s.ok()) return s;
  SetPrimary("");
  const size_t continued = static_cast<size_t>(std::count_if(
      role_ports_.begin(), role_ports_.end(), [](const auto& port) { return port->continued(); }));
  Log(LogLevel::kInfo,
      "promoted: no longer a replica of %s; writes are served; %d of %d workers go on from "
      "their positions (the other replicas of %s resume there where they are not ahead), the "
      "rest start afresh (their replicas full-sync)",
      was, continued, role_ports_.size(), was);
  return absl::OkStatus();
}

absl::Status Server::AwaitDurableImages() {
  // A full sync's image that no snapshot holds yet: the writes this server is about to take
  // would be logged after it, and lost with it if a crash came before that snapshot.
  const auto pending = [this] {
    return std::any_of(repl_sinks_.begin(), repl_sinks_.end(),
                       [](const auto& sink) { return sink->durable_pending(); });
  };
  for (int attempt = 0; attempt < 3 && pending(); ++attempt) {
    std::promise<absl::Status> taken;
    data_dir_->RequestSnapshot([&taken](const absl::StatusOr<persist::SnapshotInfo>& info) {
      taken.set_value(info.status());
    });
    if (absl::Status s = taken.get_future().get(); !s.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "not promoted: the last full sync's data is in no snapshot yet, and the snapshot that "
          "would hold it failed (",
          s.message(), "); writes stay refused; try again once it can be written"));
    }
  }
  if (pending()) {
    return absl::UnavailableError(
        "not promoted: the last full sync's data is in no snapshot yet after three snapshots; "
        "writes stay refused; try again");
  }
  return absl::OkStatus();
}

absl::Status Server::AwaitPorts(bool follow) {
  for (auto& port : role_ports_) {
    while (port->follows_now() != follow) {
      if (shutting_down()) return absl::UnavailableError("ringkv-server is shutting down");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return absl::OkStatus();
}

absl::Status Server::Follow(const std::string& to) {
  std::unique_ptr<repl::ReplicaClient> old;
  std::string was;
  {
    std::lock_guard lock(role_mu_);
    old = std::move(replica_client_);
    was = primary_;
  }
  old.reset();  // Stops it.
  SetPrimary(to);
  if (was.empty()) {
    // A primary steps down: writes are refused from now on; each worker gives back what its
    // flows and waiting writes hold, then follows.
    for (auto& port : role_ports_) port->Demote();
    if (absl::Status s = AwaitPorts(true); !s.ok()) return s;
    Log(LogLevel::kInfo, "no longer a primary: writes are refused; following %s", to);
  }
  std::unique_ptr<repl::ReplicaClient> client = MakeReplicaClient(to);
  client->Start();
  {
    std::lock_guard lock(role_mu_);
    replica_client_ = std::move(client);
  }
  Log(LogLevel::kInfo,
      "replica: now following %s (from its positions where that server holds them, else a "
      "full sync)",
      to);
  return absl::OkStatus();
}

std::string Server::listen_address() const {
  return absl::StrCat(options_.listen.substr(0, options_.listen.rfind(':')), ":", port_);
}

std::string Server::DescribeMember() const {
  std::string primary;
  {
    std::lock_guard lock(role_mu_);
    primary = primary_;
  }
  // A server that neither follows nor may take writes (not elected, or its lease lapsed) is a
  // candidate.
  const char* role = !primary.empty() ? "replica" : fence_.closed() ? "candidate" : "primary";
  std::string out = absl::StrCat("address=", listen_address(), " role=", role, " primary=", primary,
                                 " positions=");
  for (size_t i = 0; i < repl_sources_.size(); ++i) {
    const uint64_t lsn =
        primary.empty() ? repl_sources_[i]->figures().lsn : repl_sinks_[i]->figures().applied_lsn;
    absl::StrAppend(&out, i == 0 ? "" : ",", lsn);
  }
  return out;
}

void Server::FillReplicationStats(ringkv::v1::StatsResponse* stats) const {
  ringkv::v1::ReplicationStats* out = stats->mutable_replication();
  std::string primary;
  const etcd::Membership* membership;
  {
    std::lock_guard lock(role_mu_);
    primary = primary_;
    membership = membership_.get();
  }
  out->set_role(primary.empty() ? "primary" : "replica");
  out->set_primary(primary);
  if (membership != nullptr) {
    const etcd::Membership::View view = membership->view();
    ringkv::v1::GroupStats* group = out->mutable_group();
    group->set_name(options_.group);
    group->set_term(view.term);
    group->set_leading(view.leading);
    group->set_leader(view.leader_address);
    const int64_t left = fence_.left_ns();
    group->set_fence_left_ms(left == repl::Fence::kOpen ? 0 : left / 1'000'000);
  }
  if (repl_sources_.empty()) return;
  if (primary.empty()) {
    out->set_backlog_limit_bytes(options_.repl_backlog_bytes);
    for (size_t i = 0; i < repl_sources_.size(); ++i) {
      const repl::ReplSource::Figures f = repl_sources_[i]->figures();
      ringkv::v1::FlowStats* flow = out->add_flows();
      flow->set_worker(static_cast<uint32_t>(i));
      flow->set_replicas(f.flows);
      flow->set_lsn(f.lsn);
      flow->set_backlog_first_lsn(f.first_lsn);
      flow->set_backlog_bytes(f.backlog_bytes);
      flow->set_acked_lsn(f.acked_lsn);
      flow->set_not_replicated(f.not_replicated);
    }
    replica_flows_.ForEach([&](const repl::ReplicaFlow& flow) {
      ringkv::v1::ReplicaFlowStats* r = out->add_replicas();
      r->set_address(flow.address);
      r->set_replica_id(flow.replica_id);
      r->set_worker(flow.worker);
      r->set_state(flow.streaming.load(std::memory_order_relaxed) ? "streaming" : "full_sync");
      const uint64_t acked = flow.acked.load(std::memory_order_relaxed);
      r->set_acked_lsn(acked);
      if (static_cast<int>(flow.worker) < out->flows_size()) {
        const uint64_t head = out->flows(static_cast<int>(flow.worker)).lsn();
        r->set_lag_records(head > acked ? head - acked : 0);
      }
    });
    return;
  }
  for (int64_t bound : repl::ReplSink::kDelayBoundsUs) {
    out->add_delay_bounds_ms(static_cast<double>(bound) / 1e3);
  }
  for (size_t i = 0; i < repl_sinks_.size(); ++i) {
    const repl::ReplSink::Figures f = repl_sinks_[i]->figures();
    ringkv::v1::FlowStats* flow = out->add_flows();
    flow->set_worker(static_cast<uint32_t>(i));
    flow->set_state(f.state);
    flow->set_applied_lsn(f.applied_lsn);
    flow->set_primary_lsn(f.primary_lsn);
    const uint64_t lag = f.primary_lsn > f.applied_lsn ? f.primary_lsn - f.applied_lsn : 0;
    flow->set_lag_records(lag);
    // Once nothing lags, neither do bytes nor time (the last message's delay is history).
    if (lag > 0) {
      flow->set_lag_bytes(f.primary_bytes > f.applied_bytes ? f.primary_bytes - f.applied_bytes
                                                            : 0);
      flow->set_lag_ms(static_cast<double>(f.last_delay_us) / 1e3);
    }
    for (uint64_t count : f.delays) flow->add_delay_buckets(count);
    flow->set_delay_sum_ms(static_cast<double>(f.delay_sum_us) / 1e3);
    flow->set_full_syncs(f.full_syncs);
    flow->set_partial_syncs(f.partial_syncs);
    flow->set_dropped_records(f.dropped_records);
    flow->set_dropped_keys(f.dropped_keys);
    flow->set_last_error(f.last_error);
  }
}

const std::string& Server::journal_failure_message() const {
  static const std::string kFenced =
      "not the group's primary now: this server does not hold the group's leader key in etcd "
      "(not elected yet, deposed, or its lease could have run out while etcd was out of "
      "reach), so it acknowledges no write; `ringkv cluster status` names the primary";
  if (fence_.closed()) return kFenced;
  if (data_dir_ != nullptr && !data_dir_->logs_failed()) return journal_stalled_;
  return journal_failure_;
}

absl::Status Server::write_refusal() const {
  if (!fence_.closed()) return absl::UnavailableError(journal_failure_message());
  std::string leader;
  {
    std::lock_guard lock(role_mu_);
    if (membership_ != nullptr) leader = membership_->view().leader_address;
  }
  if (leader == listen_address()) leader.clear();  // Deposed, or this run's previous key.
  return RefusalUnrun(journal_failure_message(), leader);
}

absl::Status Server::Shutdown() {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  if (membership_ != nullptr) membership_->Leave();  // The group sees it go at once.
  shutting_down_.store(true, std::memory_order_release);
  // New calls are refused from now on (by the transports) and health says NOT_SERVING; the
  // calls in flight get the grace period. Each loop is woken to tell its Watch streams and its
  // transport.
  for (auto& loop : loops_) loop->WakeIfParked();
  const absl::Time deadline = absl::Now() + options_.shutdown_grace;
  auto loops_told = [this] {
    for (auto& loop : loops_) {
      if (!loop->saw_draining()) return false;
    }
    return true;
  };
  while ((active_calls_.load(std::memory_order_acquire) > 0 || !loops_told()) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  // A snapshot under way needs the workers: it ends before they stop. A log stalled for want of
  // space has had the grace period to recover; answers it still holds fail now, or the loops
  // would never drain.
  if (data_dir_ != nullptr) {
    data_dir_->StopSnapshotter();
    data_dir_->StopRetrying();
  }
  // A role change under way ends first (it sees shutting_down_); then a replica stops
  // following before its loops stop applying.
  std::thread role_thread;
  {
    std::lock_guard lock(role_mu_);
    role_thread = std::move(role_thread_);
  }
  if (role_thread.joinable()) role_thread.join();
  if (replica_client_ != nullptr) replica_client_->Stop();
  Log(LogLevel::kDebug, "%d calls still in flight; stopping the transport",
      active_calls_.load(std::memory_order_acquire));
  // Ends whatever is left and closes the connections.
  transport_->Stop();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  Log(LogLevel::kDebug, "every loop has stopped");
  // It answered 503 on /healthz all through the drain; nothing is served from here on.
  if (metrics_server_ != nullptr) metrics_server_->Stop();
  if (data_dir_ == nullptr) return absl::OkStatus();
  // The loops are stopped: the shards may be read from here.
  absl::Status status;
  if (options_.snapshot_on_exit) {
    std::vector<const Shard*> shards;
    for (uint32_t i = 0; i < ring_engine_->workers(); ++i) {
      shards.push_back(&ring_engine_->worker(i).shard());
    }
    // A replica's positions go in the footers, so that a restart goes on from them.
    persist::Positions positions;
    for (const auto& sink : repl_sinks_) positions.push_back(sink->position_at_stop());
    status = data_dir_->CloseAndSnapshot(shards, options_.clock(), positions);
    if (status.ok()) {
      const persist::PersistenceStats stats = data_dir_->Stats();
      Log(LogLevel::kInfo, "snapshot of %d keys (%d bytes) written to %s", stats.snapshot_keys,
          stats.snapshot_bytes, options_.data_dir);
    }
  } else {
    status = data_dir_->CloseLogs();
  }
  if (!status.ok()) Log(LogLevel::kError, "%s", status.message());
  return status;
}

Server::~Server() {
  (void)Shutdown();
  // The loops are stopped; their LoopIos go before the transport they belong to, and the
  // engine (rings, shards) last.
  loops_.clear();
  transport_.reset();
}

absl::Status Server::RequestSnapshot(persist::DataDir::SnapshotDone done) {
  if (data_dir_ == nullptr) {
    return absl::FailedPreconditionError(
        "this server runs without --data-dir: it keeps nothing on disk to snapshot");
  }
  data_dir_->RequestSnapshot(std::move(done));
  return absl::OkStatus();
}

std::vector<const CallMetrics*> Server::call_metrics() const {
  std::vector<const CallMetrics*> out;
  for (const auto& loop : loops_) out.push_back(&loop->call_counts());
  return out;
}

void Server::FillStats(ringkv::v1::StatsResponse* stats) const {
  const uint32_t n = static_cast<uint32_t>(loops_.size());
  uint64_t sent = 0;
  uint64_t received = 0;
  for (uint32_t i = 0; i < n; ++i) {
    ringkv::v1::ShardStats* shard = stats->add_shards();
    shard->set_shard(i);
    shard->set_memory_limit_bytes(options_.memory.bytes / n);
    if (ring_engine_) {
      const WorkerCounters& c = ring_engine_->counters(i);
      shard->set_keys(WorkerCounters::Read(c.keys));
      shard->set_payload_bytes(WorkerCounters::Read(c.payload_bytes));
      shard->set_ops(WorkerCounters::Read(c.executed));
      shard->set_ring_sent(WorkerCounters::Read(c.sent));
      shard->set_ring_received(WorkerCounters::Read(c.received));
      shard->set_ring_full_waits(WorkerCounters::Read(c.full_waits));
      shard->set_ttl_keys(WorkerCounters::Read(c.ttl_keys));
      shard->set_expired(WorkerCounters::Read(c.expired));
      shard->set_memory_bytes(WorkerCounters::Read(c.memory_bytes));
      shard->set_evicted(WorkerCounters::Read(c.evicted));
      shard->set_table_bytes(WorkerCounters::Read(c.table_bytes));
      shard->set_arena_bytes(WorkerCounters::Read(c.arena_bytes));
      shard->set_arena_dead_bytes(WorkerCounters::Read(c.arena_dead_bytes));
      shard->set_compacted_bytes(WorkerCounters::Read(c.compacted_bytes));
      sent += shard->ring_sent();
      received += shard->ring_received();
    } else {
      const LockEngine::MapStats map = lock_engine_->Stats(i);
      shard->set_keys(map.keys);
      shard->set_payload_bytes(map.payload_bytes);
      shard->set_ttl_keys(map.ttl_keys);
      shard->set_expired(map.expired);
      shard->set_memory_bytes(map.memory_bytes);
      shard->set_evicted(map.evicted);
      shard->set_table_bytes(map.table_bytes);
      shard->set_arena_bytes(map.arena_bytes);
      shard->set_arena_dead_bytes(map.arena_dead_bytes);
      shard->set_compacted_bytes(map.compacted_bytes);
      shard->set_ops(loops_[i]->lock_ops());
    }
  }
  // Counters are read one after another, not as one snapshot: a received count read later can
  // pass a sent count read earlier, so the difference is clamped.
  stats->set_ring_in_flight(sent > received ? sent - received : 0);
  uint64_t allocated;
  uint64_t resident;
  ReadMemory(&allocated, &resident);
  stats->set_memory_allocated_bytes(allocated);
  stats->set_memory_resident_bytes(resident);
  stats->set_process_resident_bytes(ProcessResidentBytes());
  uint64_t data = 0;
  for (const auto& shard : stats->shards()) data += shard.memory_bytes();
  stats->set_data_memory_bytes(data);
  stats->set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - started_));
  stats->set_engine(options_.lock_engine ? "lock" : "ring");
  stats->set_ring(options_.lock_engine ? "" : (IsMultiProducer(options_.ring) ? "mpsc" : "spsc"));
  stats->set_max_memory_bytes(options_.memory.bytes);
  const int64_t reply_memory = options_.limits.reply_memory_budget();
  stats->set_reply_memory_bytes(static_cast<uint64_t>(
      std::max<int64_t>(0, reply_memory - reply_memory_.load(std::memory_order_relaxed))));
  stats->set_max_reply_memory_bytes(options_.limits.max_reply_memory);
  stats->set_eviction(std::string(EvictionName(options_.memory.eviction)));
  FillReplicationStats(stats);
  if (data_dir_ != nullptr) {
    const persist::PersistenceStats p = data_dir_->Stats();
    ringkv::v1::PersistenceStats* out = stats->mutable_persistence();
    out->set_data_dir(p.data_dir);
    out->set_fsync(p.fsync);
    out->set_log_bytes(p.log_bytes);
    out->set_log_syncs(p.log_syncs);
    out->set_snapshot_unix_ms(p.snapshot_ms);
    out->set_snapshot_bytes(p.snapshot_bytes);
    out->set_snapshot_keys(p.snapshot_keys);
    out->set_restored_keys(p.restored_keys);
    out->set_restore_seconds(p.restore_seconds);
    out->set_error(p.error);
  }
}

}  // namespace ringkv
