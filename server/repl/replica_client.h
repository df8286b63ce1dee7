// ReplicaClient: a replica's connection to its primary (--replica-of), one Replication.Flow
// call per worker, each read by a thread of its own while a second thread writes the
// acknowledgements (ReplSink::NextAck) on it. Each flow hands what comes to its worker's
// ReplSink (server/repl/sink.h), and when the call ends (the primary went away, refused, or cut
// the replica off for falling behind) it says why in the sink's last_error, logs it once per
// kind of failure, waits (100 ms, doubling to 2 s) and calls again: from its position (a
// partial resync) if it had a whole image of this primary's history, else with a full sync.
// Its first call goes on from where the sink stands (ReplSink::ResumeFrom): the position the
// data directory restored, or the one an earlier client left (a re-point to a new primary,
// which resumes it if it continued that history and holds the records from there).
//
// Threads: its own; Start and Stop from the control thread.
#ifndef RINGKV_SERVER_REPL_REPLICA_CLIENT_H_
#define RINGKV_SERVER_REPL_REPLICA_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/repl/sink.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace ringkv::repl {

class ReplicaClient {
 public:
  // How to reach the primary: TLS or not, and the PEMs (empty: the system's CAs; no client
  // certificate).
  struct Tls {
    bool on = false;
    std::string ca_pem;
    std::string cert_pem;
    std::string key_pem;
  };
  struct Options {
    std::string primary;  // HOST:PORT.
    std::string token;    // Sent as "authorization: Bearer" (empty: none).
    Tls tls;
    std::string server_id;  // This server's (ServerContext::server_id).
    std::string address;    // Where this server listens (HOST:PORT), told to the primary.
    uint32_t threads = 0;
    // Called after a message is queued for worker w: wakes its loop.
    std::function<void(uint32_t)> wake;
  };
  // `sinks[w]` is worker w's; they outlive the client.
  ReplicaClient(Options options, std::vector<ReplSink*> sinks);
  ~ReplicaClient();
  ReplicaClient(const ReplicaClient&) = delete;
  ReplicaClient& operator=(const ReplicaClient&) = delete;

  void Start();
  // Cancels the calls, stops the sinks (their Push fails) and joins the threads. Once: later
  // calls (the destructor's) do nothing.
  void Stop();

 private:
  void Follow(uint32_t worker);

  const Options options_;
  const std::vector<ReplSink*> sinks_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<grpc::ClientContext*> calls_;  // Guarded by mu_: each flow's call, if any.
};

}  // namespace ringkv::repl

#endif  // RINGKV_SERVER_REPL_REPLICA_CLIENT_H_
