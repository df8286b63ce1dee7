// Client: a blocking C++ client of ringkv.v1.KV, shared by the `ringkv` CLI, the tests and the
// benchmarks. gRPC errors come back as absl::Status with the same code; an unreachable server is
// UNAVAILABLE and its message names the address. Every call has the client's timeout as its
// deadline. Thread-safe: one Client may serve many threads (the channel multiplexes them).
//
//   ringkv::Client client("127.0.0.1:50051", absl::Seconds(5));
//   absl::Status s = client.Put("user:42", "alice");
//   absl::StatusOr<std::string> v = client.Get("user:42");
#ifndef RINGKV_CLIENT_CLIENT_H_
#define RINGKV_CLIENT_CLIENT_H_

#include <grpcpp/grpcpp.h>

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

class Client {
 public:
  // One key's outcome in a batch: OK with a value (MultiGet), NOT_FOUND, or INVALID_ARGUMENT.
  struct Item {
    absl::Status status;
    std::string value;
  };

  // Connects lazily: the first call reports an unreachable server.
  Client(std::string address, absl::Duration timeout);

  absl::StatusOr<std::string> Get(std::string_view key);
  absl::Status Put(std::string_view key, std::string_view value);
  absl::Status Delete(std::string_view key);
  absl::StatusOr<std::vector<Item>> MultiGet(const std::vector<std::string>& keys);
  absl::StatusOr<std::vector<Item>> MultiPut(
      const std::vector<std::pair<std::string, std::string>>& items);
  absl::StatusOr<ringkv::v1::StatsResponse> Stats();

  // For what the blocking calls do not cover (Stream, the async load generator).
  ringkv::v1::KV::Stub& stub() { return *stub_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  const std::string& address() const { return address_; }
  // A context with the client's deadline.
  std::unique_ptr<grpc::ClientContext> NewContext() const;
  // A gRPC status as an absl::Status; connection failures name the address.
  absl::Status ToStatus(const grpc::Status& status) const;

  // Channel arguments every ringkv client uses: values up to the server's limit come back whole.
  static grpc::ChannelArguments ChannelArgs();

 private:
  // Constant after construction.
  const std::string address_;
  const absl::Duration timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ringkv::v1::KV::Stub> stub_;
};

}  // namespace ringkv

#endif  // RINGKV_CLIENT_CLIENT_H_
