#include "client/client.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/flag_file.h"
#include "cluster/membership.h"

namespace ringkv {

namespace pb = ::ringkv::v1;

absl::StatusOr<ClientCredentials> LoadCredentials(const CredentialFiles& files) {
  ClientCredentials credentials;
  if (files.token_file.empty()) {
    const char* env = std::getenv("RINGKV_TOKEN");
    if (env != nullptr) credentials.token = std::string(absl::StripAsciiWhitespace(env));
  } else {
    std::string text;
    if (absl::Status s = ReadFlagFile("--token-file", files.token_file, &text); !s.ok()) return s;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (line.empty() || line.front() == '#') continue;
      credentials.token = std::string(line.substr(0, line.find_first_of(" \t")));
      break;
    }
    if (credentials.token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token-file: no token in ", files.token_file));
    }
  }
  if (files.tls_cert.empty() != files.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  credentials.tls = files.tls || !files.tls_ca.empty() || !files.tls_cert.empty();
  if (!files.tls_ca.empty()) {
    if (absl::Status s = ReadFlagFile("--tls-ca", files.tls_ca, &credentials.ca_pem); !s.ok()) {
      return s;
    }
  }
  if (!files.tls_cert.empty()) {
    if (absl::Status s = ReadFlagFile("--tls-cert", files.tls_cert, &credentials.cert_pem);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ReadFlagFile("--tls-key", files.tls_key, &credentials.key_pem); !s.ok()) {
      return s;
    }
  }
  return credentials;
}

grpc::ChannelArguments Client::ChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return args;
}

std::shared_ptr<grpc::ChannelCredentials> Client::ChannelCredentials(
    const ClientCredentials& credentials) {
  if (!credentials.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = credentials.ca_pem;
  ssl.pem_private_key = credentials.key_pem;
  ssl.pem_cert_chain = credentials.cert_pem;
  return grpc::SslCredentials(ssl);
}

Client::Client(std::string addresses, absl::Duration timeout, ClientCredentials credentials,
               Discovery discovery)
    : timeout_(timeout),
      authorization_(credentials.token.empty() ? "" : "Bearer " + credentials.token),
      min_replicas_(credentials.min_replicas == 0 ? "" : std::to_string(credentials.min_replicas)),
      linearizable_(credentials.linearizable),
      channel_credentials_(ChannelCredentials(credentials)),
      addresses_(absl::StrSplit(addresses, ',', absl::SkipWhitespace())),
      discovery_(std::move(discovery)),
      finds_primary_(!discovery_.etcd.empty() || addresses_.size() > 1) {}

Client::~Client() = default;

std::string Client::address() const {
  std::lock_guard lock(mu_);
  return route_ == nullptr ? "" : route_->address;
}

void Client::MoveTo(const std::string& address) {
  if (route_ != nullptr && route_->address == address) return;
  auto route = std::make_shared<Route>();
  route->address = address;
  if (!address.empty()) {
    route->channel = grpc::CreateCustomChannel(address, channel_credentials_, ChannelArgs());
    route->kv = pb::KV::NewStub(route->channel);
    route->replication = pb::Replication::NewStub(route->channel);
  }
  route_ = std::move(route);
}

std::string Client::LeaderFromEtcd(std::string* error) {
  const std::string where =
      absl::StrCat("group ", discovery_.group, " on etcd ", absl::StrJoin(discovery_.etcd, ","));
  if (etcd_ == nullptr) {
    absl::StatusOr<std::unique_ptr<etcd::EtcdClient>> client =
        etcd::EtcdClient::Connect({.endpoints = discovery_.etcd,
                                   .timeout = std::min(timeout_, absl::Seconds(2)),
                                   .tls = discovery_.etcd_tls});
    if (!client.ok()) {
      *error = absl::StrCat(where, ": ", client.status().message());
      return {};
    }
    etcd_ = *std::move(client);
    // Each change of the leader key makes the next call look again (Current). The watch's
    // first call, as it is established, is not one: the key is read just below.
    watch_ = etcd_->WatchKey(etcd::LeaderKey(etcd::GroupPrefix(discovery_.group)),
                             [this, first = true]() mutable {
                               if (!std::exchange(first, false)) {
                                 leader_moved_.store(true, std::memory_order_release);
                               }
                             });
  }
  absl::StatusOr<std::optional<etcd::EtcdClient::Leader>> leader =
      etcd_->CurrentLeader(etcd::GroupPrefix(discovery_.group));
  if (!leader.ok()) {
    *error = absl::StrCat(where, ": ", leader.status().message());
    return {};
  }
  if (!leader->has_value()) {
    *error = absl::StrCat(where, " has no primary now (nobody holds its leader key)");
    return {};
  }
  std::optional<etcd::LeaderValue> who = etcd::ParseLeaderValue((*leader)->value);
  if (!who.has_value()) {
    *error = absl::StrCat(where, ": its leader key holds \"", (*leader)->value,
                          "\", not SERVER_ID ADDRESS");
    return {};
  }
  return who->address;
}

void Client::FindPrimary(const std::string& failed) {
  std::string error;
  if (!discovery_.etcd.empty()) {
    const std::string leader = LeaderFromEtcd(&error);
    if (!leader.empty() || addresses_.empty()) {
      MoveTo(leader);
      return;
    }
  }
  if (addresses_.empty()) return;
  std::string next = addresses_[next_++ % addresses_.size()];
  if (next == failed && addresses_.size() > 1) next = addresses_[next_++ % addresses_.size()];
  MoveTo(next);
}

std::shared_ptr<const Client::Route> Client::Current() {
  std::lock_guard lock(mu_);
  if (route_ == nullptr || leader_moved_.exchange(false, std::memory_order_acq_rel)) {
    FindPrimary(route_ == nullptr ? "" : route_->address);
    if (route_ == nullptr) MoveTo("");
  }
  return route_;
}

namespace {

// The primary a refusal's Redirect detail names (empty: unknown), if it has one: the call did
// not run.
std::optional<std::string> RedirectOf(const grpc::Status& status) {
  pb::RpcStatus details;
  if (status.error_details().empty() || !details.ParseFromString(status.error_details())) {
    return std::nullopt;
  }
  for (const pb::AnyDetail& detail : details.details()) {
    pb::Redirect redirect;
    if (detail.type_url() == "type.googleapis.com/ringkv.v1.Redirect" &&
        redirect.ParseFromString(detail.value())) {
      return redirect.primary();
    }
  }
  return std::nullopt;
}

// Whether grpc-core failed the call for want of a connection, so that nothing was sent.
bool NotConnected(const grpc::Status& status, const grpc::ClientContext& context) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE &&
         !absl::StrContains(context.debug_error_string(), "received from peer") &&
         absl::StrContains(status.error_message(), "failed to connect to all addresses");
}

absl::Status Annotated(const absl::Status& status, const std::string& note) {
  return absl::Status(status.code(), absl::StrCat(status.message(), note));
}

}  // namespace

absl::Status Client::Run(Safety safety, const Call& call) {
  const absl::Time give_up = absl::Now() + discovery_.patience;
  absl::Duration pause = absl::Milliseconds(50);
  bool followed = false;  // A Redirect was followed since the last pause.
  for (;;) {
    const std::shared_ptr<const Route> route = Current();
    absl::Status failure;
    std::optional<std::string> redirect;
    bool unknown = false;  // The call may have run.
    if (route->address.empty()) {
      std::string error = "no server address given";
      if (!discovery_.etcd.empty()) {
        std::lock_guard lock(mu_);
        LeaderFromEtcd(&error);
      }
      failure = absl::UnavailableError(error);
    } else {
      std::unique_ptr<grpc::ClientContext> context = NewContext();
      const grpc::Status status = call(*route, context.get());
      if (status.ok()) return absl::OkStatus();
      failure = ToStatus(status, *context, route->address);
      redirect = RedirectOf(status);
      if (!redirect.has_value() && !NotConnected(status, *context)) {
        unknown = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                  status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
        if (!unknown) return failure;  // The server's answer.
      }
    }
    const bool elsewhere =
        redirect.has_value() && !redirect->empty() && *redirect != route->address;
    if (!finds_primary_) {  // One server known: a replica's Redirect is followed once.
      if (!elsewhere || followed) return failure;
      followed = true;
      std::lock_guard lock(mu_);
      MoveTo(*redirect);
      continue;
    }
    if (unknown && safety == Safety::kWrite) {
      return Annotated(failure, "; the write may have been applied, so it was not sent again");
    }
    if (elsewhere && !followed) {
      followed = true;
      std::lock_guard lock(mu_);
      MoveTo(*redirect);
      continue;
    }
    if (absl::Now() + pause > give_up) {
      return Annotated(failure, absl::StrCat("; no primary took the call within ",
                                             absl::FormatDuration(discovery_.patience)));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(500));
    followed = false;
    std::lock_guard lock(mu_);
    FindPrimary(route->address);
  }
}

std::unique_ptr<grpc::ClientContext> Client::NewContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::microseconds(absl::ToInt64Microseconds(timeout_)));
  if (!authorization_.empty()) context->AddMetadata("authorization", authorization_);
  if (!min_replicas_.empty()) context->AddMetadata("ringkv-min-replicas", min_replicas_);
  if (linearizable_) context->AddMetadata("ringkv-consistency", "linearizable");
  return context;
}

absl::Status Client::ToStatus(const grpc::Status& status, const grpc::ClientContext& context,
                              const std::string& address) const {
  if (status.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  // An UNAVAILABLE the server itself sent (a failed log, a stop) carries its reason; grpc-core
  // marks such a status "received from peer", and not one it made up for a failed connection.
  if (code == absl::StatusCode::kUnavailable &&
      absl::StrContains(context.debug_error_string(), "received from peer")) {
    return absl::UnavailableError(
        absl::StrCat("ringkv-server at ", address, ": ", status.error_message()));
  }
  if (code == absl::StatusCode::kUnavailable) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach ringkv-server at ", address, ": ", status.error_message()));
  }
  if (code == absl::StatusCode::kDeadlineExceeded) {
    return absl::DeadlineExceededError(
        absl::StrCat("no answer from ", address, " within ", absl::FormatDuration(timeout_)));
  }
  return absl::Status(code, status.error_message());
}

void WriteCondition::ToProto(pb::Condition* out) const {
  switch (kind_) {
    case Kind::kNone:
      break;
    case Kind::kAbsent:
      out->set_absent(true);
      break;
    case Kind::kPresent:
      out->set_present(true);
      break;
    case Kind::kVersion:
      out->set_version(version_);
      break;
  }
}

absl::StatusOr<std::string> Client::Get(std::string_view key) {
  absl::StatusOr<Entry> entry = GetEntry(key);
  if (!entry.ok()) return entry.status();
  return std::move(entry->value);
}

absl::StatusOr<Client::Entry> Client::GetEntry(std::string_view key) {
  pb::GetRequest request;
  request.set_key(std::string(key));
  pb::GetResponse response;
  absl::Status status = Run(Safety::kRead, [&](const Route& route, grpc::ClientContext* c) {
    return route.kv->Get(c, request, &response);
  });
  if (!status.ok()) return status;
  return Entry{std::move(*response.mutable_value()), response.version(), response.ttl_ms()};
}

absl::StatusOr<uint64_t> Client::Put(std::string_view key, std::string_view value,
                                     const PutOptions& options) {
  pb::PutRequest request;
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  request.set_ttl_ms(options.ttl_ms);
  if (options.condition.kind() != WriteCondition::Kind::kNone) {
    options.condition.ToProto(request.mutable_condition());
  }
  pb::PutResponse response;
  absl::Status status = Run(Safety::kWrite, [&](const Route& route, grpc::ClientContext* c) {
    return route.kv->Put(c, request, &response);
  });
  if (!status.ok()) return status;
  return response.version();
}

absl::Status Client::Delete(std::string_view key, const WriteCondition& condition) {
  pb::DeleteRequest request;
  request.set_key(std::string(key));
  if (condition.kind() != WriteCondition::Kind::kNone)
    condition.ToProto(request.mutable_condition());
  pb::DeleteResponse response;
  return Run(Safety::kWrite, [&](const Route& route, grpc::ClientContext* c) {
    return route.kv->Delete(c, request, &response);
  });
}

absl::Status Client::Expire(std::string_view key, int64_t ttl_ms) {
  pb::ExpireRequest request;
  request.set_key(std::string(key));
  request.set_ttl_ms(ttl_ms);
  pb::ExpireResponse response;
  return Run(Safety::kWrite, [&](const Route& route, grpc::ClientContext* c) {
    return route.kv->Expire(c, request, &response);
  });
}

absl::Status Client::Persist(std::string_view key) {
  pb::PersistRequest request;
  request.set_key(std::string(key));
  pb::PersistResponse response;
  return Run(Safety::kWrite, [&](const Route& route, grpc::ClientContext* c) {
    return route.kv->Persist(c, request, &response);
  });
}

absl::StatusOr<int64_t> Client::Increment(std::string_view key, int64_t delta) {
  pb::IncrementRequest request;
  request.set_key(std::string(key));
  request.set_delta(delta);
  pb::IncrementResponse response;
  absl::Status status = Run(Safety::kWrite, [&](const Route& route, grpc::ClientContext* c) {
    return route.kv->Increment(c, request, &response);
  });
  if (!status.ok()) return status;
  return response.value();
}

absl::StatusOr<Client::ScanPage> Client::Scan(uint64_t cursor, std::string_view prefix,
                                              uint32_t limit) {
  pb::ScanRequest request;
  request.set_cursor(cursor);
  request.set_prefix(std::string(prefix));
  request.set_limit(limit);
  pb::ScanResponse response;
  absl::Status status = Run(Safety::kRead, [&](const Route& route, grpc::ClientContext* c) {
    return route.kv->Scan(c, request, &response);
  });
  if (!status.ok()) return status;
  ScanPage page;
  page.cursor = response.cursor();
  for (std::string& key : *response.mutable_keys()) page.keys.push_back(std::move(key));
  return page;
}

namespace {
std::vector<Client::Item> ToItems(google::protobuf::RepeatedPtrField<pb::ItemResult>* results) {
  std::vector<Client::Item> items;
  items.reserve(static_cast<size_t>(results->size()));
  for (pb::ItemResult& r : *results) {
    items.push_back({absl::Status(static_cast<absl::StatusCode>(r.code()), r.message()),
                     std::move(*r.mutable_value()), r.version()});
  }
  return items;
}
}  // namespace

absl::StatusOr<std::vector<Client::Item>> Client::MultiGet(const std::vector<std::string>& keys) {
  pb::MultiGetRequest request;
  for (const std::string& key : keys) request.add_keys(key);
  pb::MultiGetResponse response;
  absl::Status status = Run(Safety::kRead, [&](const Route& route, grpc::ClientContext* c) {
    return route.kv->MultiGet(c, request, &response);
  });
  if (!status.ok()) return status;
  return ToItems(response.mutable_results());
}

absl::StatusOr<std::vector<Client::Item>> Client::MultiPut(
    const std::vector<std::pair<std::string, std::string>>& items, const PutOptions& options) {
  pb::MultiPutRequest request;
  for (const auto& [key, value] : items) {
    pb::KeyValue* item = request.add_items();
    item->set_key(key);
    item->set_value(value);
    item->set_ttl_ms(options.ttl_ms);
    if (options.condition.kind() != WriteCondition::Kind::kNone) {
      options.condition.ToProto(item->mutable_condition());
    }
  }
  pb::MultiPutResponse response;
  absl::Status status = Run(Safety::kWrite, [&](const Route& route, grpc::ClientContext* c) {
    return route.kv->MultiPut(c, request, &response);
  });
  if (!status.ok()) return status;
  return ToItems(response.mutable_results());
}

absl::StatusOr<pb::StatsResponse> Client::Stats() {
  pb::StatsRequest request;
  pb::StatsResponse response;
  absl::Status status = Run(Safety::kRead, [&](const Route& route, grpc::ClientContext* c) {
    return route.kv->Stats(c, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<pb::ReplicateResponse> Client::Replicate(const std::string& to) {
  pb::ReplicateRequest request;
  if (to.empty()) {
    request.set_stop(true);
  } else {
    request.set_to(to);
  }
  pb::ReplicateResponse response;
  absl::Status status = Run(Safety::kWrite, [&](const Route& route, grpc::ClientContext* c) {
    return route.replication->Replicate(c, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<pb::FailoverResponse> Client::Failover(const std::string& to) {
  pb::FailoverRequest request;
  request.set_to(to);
  pb::FailoverResponse response;
  absl::Status status = Run(Safety::kWrite, [&](const Route& route, grpc::ClientContext* c) {
    return route.replication->Failover(c, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<pb::SnapshotResponse> Client::Snapshot() {
  pb::SnapshotRequest request;
  pb::SnapshotResponse response;
  absl::Status status = Run(Safety::kWrite, [&](const Route& route, grpc::ClientContext* c) {
    return route.kv->Snapshot(c, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

}  // namespace ringkv
