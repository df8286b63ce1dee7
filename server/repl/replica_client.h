// ReplicaClient: a replica's connection to its primary (--replica-of), one Replication.Flow
// call per worker, each on a connection (net/h2_channel.h) and a thread of its own. The
// thread polls the connection, its sink's acknowledgement signal (ReplSink::ack_fd) and the
// client's stop: it hands what comes to its worker's ReplSink (server/repl/sink.h) and sends the
// acknowledgements on the same call. When the call ends (the primary went away, refused, or
// cut the replica off for falling behind) it says why in the sink's last_error, logs it once
// per kind of failure, waits (100 ms, doubling to 2 s) and calls again: from its position (a
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
#include <string>
#include <thread>
#include <vector>

#include "net/client_tls.h"
#include "net/h2_channel.h"
#include "server/repl/sink.h"

namespace ringkv::repl {

class ReplicaClient {
 public:
  // How long a connection and its TLS handshake may take.
  static constexpr int kConnectTimeoutMs = 5000;

  struct Options {
    std::string primary;                   // HOST:PORT.
    std::string token;                     // Sent as "authorization: Bearer" (empty: none).
    std::shared_ptr<const ClientTls> tls;  // Null: plaintext (h2c).
    std::string server_id;                 // This server's (ServerContext::server_id).
    std::string address;  // Where this server listens (HOST:PORT), told to the primary.
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
  // Ends the calls and the connections under way, stops the sinks (their Push fails) and joins
  // the threads. Once: later calls (the destructor's) do nothing.
  void Stop();

 private:
  struct Position;

  // Worker w's thread: calls, and calls again, until Stop.
  void Follow(uint32_t worker);
  // One call on `channel`, until it ends or Stop; why it ended (empty: Stop). `synced`: it
  // got as far as a whole image or an accepted partial resync.
  std::string RunFlow(uint32_t worker, std::unique_ptr<H2Channel> channel, Position& at,
                      bool* synced);

  const Options options_;
  const std::vector<ReplSink*> sinks_;
  const int stop_fd_;  // An eventfd, readable once Stop began.
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
};

}  // namespace ringkv::repl

#endif  // RINGKV_SERVER_REPL_REPLICA_CLIENT_H_
