// Client: a blocking C++ client of ringkv.v1.KV, shared by the `ringkv` CLI, the tests and the
// benchmarks. gRPC errors come back as absl::Status with the same code; an unreachable server is
// UNAVAILABLE and its message names the address. Every call has the client's timeout as its
// deadline. Thread-safe: one Client may serve many threads (the channel multiplexes them).
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

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
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

class Client {
 public:
  // One key's outcome in a batch: OK with a value (MultiGet), NOT_FOUND, INVALID_ARGUMENT or
  // FAILED_PRECONDITION; the key's version (after a write, or what failed a condition).
  struct Item {
    absl::Status status;
    std::string value;
    uint64_t version = 0;
  };

  // Connects lazily: the first call reports an unreachable server. A write that a replica
  // refuses with a Redirect to its primary (UNAVAILABLE, nothing run) is sent there once, and
  // the client stays with the primary (address() says which server it talks to now). Not for
  // concurrent calls from several threads while that may happen.
  Client(std::string address, absl::Duration timeout, ClientCredentials credentials = {});

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

  // For what the blocking calls do not cover (Stream, the async load generator).
  ringkv::v1::KV::Stub& stub() { return *stub_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  const std::string& address() const { return address_; }
  // A context with the client's deadline and token.
  std::unique_ptr<grpc::ClientContext> NewContext() const;
  // A gRPC status as an absl::Status; connection failures name the address.
  // `status` as the caller sees it, `context` the call's: a connection failure says "cannot
  // reach", the server's own UNAVAILABLE gives its reason.
  absl::Status ToStatus(const grpc::Status& status, const grpc::ClientContext& context) const;

  // Channel arguments every ringkv client uses: values up to the server's limit come back whole.
  static grpc::ChannelArguments ChannelArgs();
  // grpc++'s credentials for `credentials`' TLS settings (the token goes per call).
  static std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
      const ClientCredentials& credentials);

 private:
  // Runs `call` (a write, with the context it is given), and once more on the primary if a
  // replica refused it with a Redirect. `context` ends as the last call's.
  template <typename Call>
  grpc::Status Write(Call call, std::unique_ptr<grpc::ClientContext>* context) {
    *context = NewContext();
    grpc::Status status = call(context->get());
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return status;
    const std::string primary = RedirectOf(status);
    if (primary.empty() || primary == address_) return status;
    Connect(primary);
    *context = NewContext();
    return call(context->get());
  }
  // The primary a replica's refusal names (its Redirect detail), or empty.
  static std::string RedirectOf(const grpc::Status& status);
  // From now on, calls go to `address`.
  void Connect(std::string address);

  // Constant after construction.
  const absl::Duration timeout_;
  const std::string authorization_;  // "Bearer TOKEN", or empty.
  const std::string min_replicas_;   // The ringkv-min-replicas header, or empty.
  const bool linearizable_;          // Sends ringkv-consistency: linearizable.
  const std::shared_ptr<grpc::ChannelCredentials> channel_credentials_;
  // The server's, until a redirect.
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ringkv::v1::KV::Stub> stub_;
  std::unique_ptr<ringkv::v1::Replication::Stub> replication_stub_;
};

}  // namespace ringkv

#endif  // RINGKV_CLIENT_CLIENT_H_
