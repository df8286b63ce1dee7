// EtcdClient: ringkv's client of etcd's v3 API over gRPC (proto/etcd/etcdserverpb/rpc.proto, a
// trimmed copy of etcd's), the ground the automatic failover of issue 23 stands on: leases,
// keys, and an election whose every win gets a term from a counter kept beside the leader key,
// bumped by the same transaction that elects (../shared/research/scale-out.md: Patroni's
// leader key with a TTL, etcd's election API).
//
// Calls are synchronous, each with a deadline (Options::timeout). The endpoints are tried in
// turn, starting from the last that answered, until one does; an error names every endpoint
// tried and why it failed.
//
// The election (Campaign), for a group whose keys live under PREFIX:
//   PREFIX/term    the last term handed out (a decimal number; absent: 0)
//   PREFIX/leader  "TERM VALUE", put under the winner's lease: it goes when the lease does
// One transaction compares that the leader key does not exist and that the term key is as it
// was read, and then puts both: two candidates can never both win, and each win's term is
// above every term before it, even when a leader's key expired meanwhile.
//
// Threads: any; calls may run concurrently (the gRPC channel is shared). A Watch's callback
// runs on the watch's thread.
#ifndef RINGKV_SERVER_ETCD_ETCD_CLIENT_H_
#define RINGKV_SERVER_ETCD_ETCD_CLIENT_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace ringkv::etcd {

class EtcdClient {
 public:
  // TLS to etcd (its --cert-file; with --client-cert-auth, a client certificate).
  struct Tls {
    bool on = false;       // Also on for an endpoint written https://HOST:PORT.
    std::string ca_pem;    // CAs to trust; empty: the system's.
    std::string cert_pem;  // A client certificate chain and its key; empty: none.
    std::string key_pem;
  };
  struct Options {
    // HOST:PORT each (a leading http:// is dropped; https:// turns TLS on).
    std::vector<std::string> endpoints;
    absl::Duration timeout = absl::Seconds(2);
    Tls tls = {};
  };
  // TLS from the files of the --etcd-ca, --etcd-cert and --etcd-key flags (each may be
  // empty); on if any is given. INVALID_ARGUMENT naming the flag and file if one cannot be
  // read, or if a certificate comes without its key.
  static absl::StatusOr<Tls> LoadTls(const std::string& ca, const std::string& cert,
                                     const std::string& key);
  // A client whose endpoints answered a read; UNAVAILABLE naming them otherwise.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Connect(Options options);
  ~EtcdClient();

  // A lease of `ttl_seconds` (etcd may grant more: its minimum is about its election
  // timeout); its id.
  absl::StatusOr<int64_t> Grant(int64_t ttl_seconds);
  // Renews `lease` once; the seconds it has left (0: it had expired, or was revoked).
  absl::StatusOr<int64_t> KeepAlive(int64_t lease);
  absl::Status Revoke(int64_t lease);

  struct Entry {
    std::string value;
    int64_t create_revision = 0;
    int64_t mod_revision = 0;
    int64_t lease = 0;
  };
  absl::StatusOr<std::optional<Entry>> Get(const std::string& key);
  absl::Status Put(const std::string& key, const std::string& value, int64_t lease = 0);
  // Every key that begins with `prefix`, in key order, with its entry.
  absl::StatusOr<std::vector<std::pair<std::string, Entry>>> List(const std::string& prefix);

  struct Leader {
    uint64_t term = 0;
    std::string value;
    int64_t lease = 0;
  };
  // Takes PREFIX/leader for `value` under `lease` if nobody holds it: the term won. If someone
  // does, nullopt, and *holder (if not null) says who.
  // With `guard`, the transaction also compares that the key guard->first was last changed
  // at revision guard->second (0: it does not exist); FAILED_PRECONDITION if it was not.
  absl::StatusOr<std::optional<uint64_t>> Campaign(
      const std::string& prefix, const std::string& value, int64_t lease, Leader* holder = nullptr,
      const std::pair<std::string, int64_t>* guard = nullptr);
  // A planned hand-over: while PREFIX/leader still holds `leader` and the term counter its
  // term, one transaction gives the key to `value` under `lease` (the new leader's) in the next
  // term, and bumps the counter; the term. FAILED_PRECONDITION if either changed.
  absl::StatusOr<uint64_t> HandOver(const std::string& prefix, const Leader& leader,
                                    const std::string& value, int64_t lease);
  // Puts `key` = `value` (without a lease: it outlives the leader) only while PREFIX/leader
  // holds `leader` ("TERM VALUE" as Campaign wrote it); FAILED_PRECONDITION if it does not.
  absl::Status PutAsLeader(const std::string& prefix, const std::string& leader,
                           const std::string& key, const std::string& value);
  // Deletes `key` on the same condition.
  absl::Status DeleteAsLeader(const std::string& prefix, const std::string& leader,
                              const std::string& key);
  // Who holds PREFIX/leader (nullopt: nobody).
  absl::StatusOr<std::optional<Leader>> CurrentLeader(const std::string& prefix);

  // A watch of one key (etcd's Watch stream), on a thread of its own: `changed` runs there
  // at each put or delete of the key, and each time the watch is (re)established, since
  // changes may have been missed while it was not. A stream that breaks is made again on the
  // next endpoint, after 100 ms doubling to 1 s. Destroying the Watch ends it.
  class Watch {
   public:
    ~Watch();
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;

   private:
    friend class EtcdClient;
    Watch(EtcdClient& client, std::string key, std::function<void()> changed);
    void Run();

    EtcdClient& client_;
    const std::string key_;
    const std::function<void()> changed_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;                    // Guarded by mu_.
    grpc::ClientContext* call_ = nullptr;  // Guarded by mu_: the stream's, if any.
    std::thread thread_;
  };
  std::unique_ptr<Watch> WatchKey(const std::string& key, std::function<void()> changed);

 private:
  explicit EtcdClient(Options options);
  // Runs `call(channel)` on each endpoint in turn until one answers; the last error naming
  // each endpoint tried otherwise.
  template <typename Call>
  absl::Status OnSomeEndpoint(Call call);
  // PutAsLeader (`value` set) and DeleteAsLeader.
  absl::Status AsLeader(const std::string& prefix, const std::string& leader,
                        const std::string& key, const std::optional<std::string>& value);

  const Options options_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::atomic<size_t> preferred_{0};  // The endpoint that answered last.
};

// PREFIX/leader, the key Campaign takes.
std::string LeaderKey(const std::string& prefix);

// "TERM VALUE" (PREFIX/leader's value) as a Leader; nullopt if it is not one.
std::optional<EtcdClient::Leader> ParseLeader(const std::string& text);

}  // namespace ringkv::etcd

#endif  // RINGKV_SERVER_ETCD_ETCD_CLIENT_H_
