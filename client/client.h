// Client: a blocking C++ client of ringkv.v1.KV, shared by the `ringkv` CLI, the tests and the
// benchmarks. gRPC errors come back as absl::Status with the same code; an unreachable server is
// UNAVAILABLE and its message names the address. Every attempt of a call has the client's
// timeout as its deadline. Thread-safe: one Client may serve many threads (the channel
// multiplexes them).
//
// Finding the primary (issue 23). A client given one address talks to that server, and sends a
// write that a replica refused once more, to the primary its Redirect names. A client given
// several addresses, or a group on etcd (Discovery), finds the primary on its own: it reads the
// group's leader key and watches it, or tries the addresses in turn, and follows Redirects. A
// call that failed because the primary moved (a failover, a switchover) is sent again once a
// primary is known, for up to Discovery::patience, by this rule:
//   - a call that certainly did not run is sent again, whatever it is: the server refused it
//     with a Redirect detail (a replica, a group member whose fence is closed, a write short of
//     replicas, a server shutting down: they run nothing), or no connection could be made;
//   - a read (Get, MultiGet, Scan, Stats) is sent again after any failure of the connection or
//     the server (UNAVAILABLE, DEADLINE_EXCEEDED): it changes nothing;
//   - a write whose fate is unknown (the connection broke after it was sent, no answer in time,
//     or the server ran it without the replicas it needed) is not sent again: its error says it
//     may have been applied. So nothing is ever applied twice, an Increment included (etcd's
//     clientv3 retries mutations on the same rule).
//
// A write whose condition fails is FAILED_PRECONDITION, its message giving the key's version.
//
//   ringkv::Client client("127.0.0.1:50051", absl::Seconds(5));
//   absl::StatusOr<uint64_t> version = client.Put("user:42", "alice");
//   absl::StatusOr<std::string> v = client.Get("user:42");
//   // Compare-and-set: replace the value only if nobody wrote it since.
//   client.Put("user:42", "bob", {.condition = WriteCondition::Version(*version)});
#ifndef RINGKV_CLIENT_CLIENT_H_
#define RINGKV_CLIENT_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/etcd_client.h"
#include "ringkv/v1/kv.grpc.pb.h"

namespace ringkv {

// What must hold for a write to happen (ringkv.v1.Condition).
class WriteCondition {
 public:
  enum class Kind { kNone, kAbsent, kPresent, kVersion };

  WriteCondition() = default;  // None: always.
  static WriteCondition Absent() { return WriteCondition(Kind::kAbsent, 0); }
  static WriteCondition Present() { return WriteCondition(Kind::kPresent, 0); }
  // The key's version must be `version`; 0: the key must not exist.
  static WriteCondition Version(uint64_t version) {
    return WriteCondition(Kind::kVersion, version);
  }

  Kind kind() const { return kind_; }
  // Sets `out` unless kind() is kNone.
  void ToProto(ringkv::v1::Condition* out) const;

 private:
  WriteCondition(Kind kind, uint64_t version) : kind_(kind), version_(version) {}

  Kind kind_ = Kind::kNone;
  uint64_t version_ = 0;
};

struct PutOptions {
  int64_t ttl_ms = 0;  // > 0: the key expires this long after the write; 0: no TTL.
  WriteCondition condition = WriteCondition();
};

// How a client reaches the server: TLS or plaintext, and what it shows: a bearer token (the
// server's --auth-token-file), a client certificate (--tls-client-ca).
struct ClientCredentials {
  std::string token;     // Sent as `authorization: Bearer TOKEN` with every call; empty: none.
  bool tls = false;      // TLS; the server's certificate is checked against ca_pem.
  std::string ca_pem;    // PEM CAs to trust; empty: the system's.
  std::string cert_pem;  // PEM client certificate chain and its key, for mTLS; empty: none.
  std::string key_pem;
  // Sent as `ringkv-min-replicas` with every call (0: not sent): the server's answer to a write
  // waits until this many replicas have applied it (or the server's --min-replicas, if more).
  uint32_t min_replicas = 0;
  // Sent as `ringkv-consistency: linearizable` with every call when set: reads are answered
  // only by the primary, within its lease in a group (a replica refuses, naming its primary).
  bool linearizable = false;
};

// Where a program's credentials come from: its --token-file, --tls, --tls-ca, --tls-cert and
// --tls-key flags.
struct CredentialFiles {
  std::string token_file;  // Empty: $RINGKV_TOKEN, if set.
  bool tls = false;        // TLS even without a file (the system's CAs).
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
};

// Reads the files: the token is the first field of the first line that is not blank or a '#'
// comment (a line of the server's --auth-token-file works); TLS is on if asked or if a CA or
// certificate is given. INVALID_ARGUMENT naming the flag and file if one cannot be read.
absl::StatusOr<ClientCredentials> LoadCredentials(const CredentialFiles& files);

// Where a client looks for the primary beyond the addresses it is given (issue 23).
struct Discovery {
  // The group's etcd endpoints (HOST:PORT each) and its name (the servers' --etcd and
  // --group): the client reads the group's leader key, and watches it. Empty: no etcd.
  std::vector<std::string> etcd;
  std::string group;
  etcd::EtcdClient::Tls etcd_tls = {};  // TLS to etcd (EtcdClient::LoadTls).
  // How long one call may go on looking for a primary and being sent again, with etcd or
  // several addresses (a failover takes the servers' --failover-timeout and an election).
  absl::Duration patience = absl::Seconds(10);
};

class Client {
 public:
  // One key's outcome in a batch: OK with a value (MultiGet), NOT_FOUND, INVALID_ARGUMENT or
  // FAILED_PRECONDITION; the key's version (after a write, or what failed a condition).
  struct Item {
    absl::Status status;
    std::string value;
    uint64_t version = 0;
  };

  // `addresses`: HOST:PORT[,HOST:PORT...]; empty with a Discovery on etcd (the leader key
  // names the primary). Connects lazily: the first call reports an unreachable server or
  // etcd. The client stays with the server that answered last (address() says which).
  Client(std::string addresses, absl::Duration timeout, ClientCredentials credentials = {},
         Discovery discovery = {});
  ~Client();

  // A key's value with its version and the milliseconds it has left (-1: no TTL).
  struct Entry {
    std::string value;
    uint64_t version = 0;
    int64_t ttl_ms = -1;
  };

  absl::StatusOr<std::string> Get(std::string_view key);
  absl::StatusOr<Entry> GetEntry(std::string_view key);
  // Returns the key's version after the write.
  absl::StatusOr<uint64_t> Put(std::string_view key, std::string_view value,
                               const PutOptions& options = {});
  // `condition`: kNone or kVersion.
  absl::Status Delete(std::string_view key, const WriteCondition& condition = {});
  absl::Status Expire(std::string_view key, int64_t ttl_ms);
  absl::Status Persist(std::string_view key);
  // Returns the sum now stored.
  absl::StatusOr<int64_t> Increment(std::string_view key, int64_t delta);
  // One page of a scan (ringkv.v1.KV/Scan): the keys, and the cursor of the next page (0: the
  // scan is done). `limit` 0: the server's default.
  struct ScanPage {
    std::vector<std::string> keys;
    uint64_t cursor = 0;
  };
  absl::StatusOr<ScanPage> Scan(uint64_t cursor, std::string_view prefix, uint32_t limit);
  absl::StatusOr<std::vector<Item>> MultiGet(const std::vector<std::string>& keys);
  // `options` apply to every item.
  absl::StatusOr<std::vector<Item>> MultiPut(
      const std::vector<std::pair<std::string, std::string>>& items,
      const PutOptions& options = {});
  absl::StatusOr<ringkv::v1::StatsResponse> Stats();
  absl::StatusOr<ringkv::v1::SnapshotResponse> Snapshot();
  // Replication.Replicate: follow the primary `to` (HOST:PORT), or, if empty, stop following.
  absl::StatusOr<ringkv::v1::ReplicateResponse> Replicate(const std::string& to);
  // Replication.Failover, to the primary: hand the group's leadership to `to` (HOST:PORT), or,
  // if empty, to the most advanced replica.
  absl::StatusOr<ringkv::v1::FailoverResponse> Failover(const std::string& to);

  // For what the blocking calls do not cover (Stream): the stub of the server the client
  // talks to now, valid until it moves to another.
  ringkv::v1::KV::Stub& stub() { return *Current()->kv; }
  // The server the client talks to now (empty before a call found one through etcd).
  std::string address() const;
  // A context with the client's deadline and token.
  std::unique_ptr<grpc::ClientContext> NewContext() const;

  // Channel arguments every ringkv client uses: values up to the server's limit come back whole.
  static grpc::ChannelArguments ChannelArgs();
  // grpc++'s credentials for `credentials`' TLS settings (the token goes per call).
  static std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
      const ClientCredentials& credentials);

 private:
  // A server the client may talk to: its channel and stubs.
  struct Route {
    std::string address;  // Empty: none known yet (etcd names none).
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<ringkv::v1::KV::Stub> kv;
    std::unique_ptr<ringkv::v1::Replication::Stub> replication;
  };
  // A call on a route, with its context.
  using Call = std::function<grpc::Status(const Route&, grpc::ClientContext*)>;
  // What a call may be sent again after (the rule at the top of this file).
  enum class Safety { kRead, kWrite };
  // Runs `call`, and again on the primary as the rule allows; its status as the caller sees
  // it.
  absl::Status Run(Safety safety, const Call& call);
  // The route to use now (a new one if the leader key changed).
  std::shared_ptr<const Route> Current();
  // After a call to `failed` found no primary there: the next route to try.
  void FindPrimary(const std::string& failed);
  // The primary the group's leader key names (empty: none, or etcd cannot say); `error` gets
  // why etcd could not be read.
  std::string LeaderFromEtcd(std::string* error);
  void MoveTo(const std::string& address);
  // A gRPC status as an absl::Status; connection failures name `address`: a connection
  // failure says "cannot reach", the server's own UNAVAILABLE gives its reason.
  absl::Status ToStatus(const grpc::Status& status, const grpc::ClientContext& context,
                        const std::string& address) const;

  // Constant after construction.
  const absl::Duration timeout_;
  const std::string authorization_;  // "Bearer TOKEN", or empty.
  const std::string min_replicas_;   // The ringkv-min-replicas header, or empty.
  const bool linearizable_;          // Sends ringkv-consistency: linearizable.
  const std::shared_ptr<grpc::ChannelCredentials> channel_credentials_;
  const std::vector<std::string> addresses_;
  const Discovery discovery_;
  const bool finds_primary_;  // etcd, or several addresses: calls are sent again by the rule.

  // Guarded by mu_ (FindPrimary, LeaderFromEtcd and MoveTo hold it).
  mutable std::mutex mu_;
  std::shared_ptr<const Route> route_;
  size_t next_ = 0;                         // The address to try after the current one.
  std::unique_ptr<etcd::EtcdClient> etcd_;  // Connected at first use.
  std::atomic<bool> leader_moved_{false};   // The watch saw the leader key change.
  // Last: it ends first, while what its callback touches still exists.
  std::unique_ptr<etcd::EtcdClient::Watch> watch_;
};

}  // namespace ringkv

#endif  // RINGKV_CLIENT_CLIENT_H_
