#include "client/client.h"

#include <chrono>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/flag_file.h"

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

Client::Client(std::string address, absl::Duration timeout, ClientCredentials credentials)
    : timeout_(timeout),
      authorization_(credentials.token.empty() ? "" : "Bearer " + credentials.token),
      min_replicas_(credentials.min_replicas == 0 ? "" : std::to_string(credentials.min_replicas)),
      linearizable_(credentials.linearizable),
      channel_credentials_(ChannelCredentials(credentials)) {
  Connect(std::move(address));
}

void Client::Connect(std::string address) {
  address_ = std::move(address);
  channel_ = grpc::CreateCustomChannel(address_, channel_credentials_, ChannelArgs());
  stub_ = pb::KV::NewStub(channel_);
  replication_stub_ = pb::Replication::NewStub(channel_);
}

std::string Client::RedirectOf(const grpc::Status& status) {
  pb::RpcStatus details;
  if (status.error_details().empty() || !details.ParseFromString(status.error_details())) {
    return {};
  }
  for (const pb::AnyDetail& detail : details.details()) {
    pb::Redirect redirect;
    if (detail.type_url() == "type.googleapis.com/ringkv.v1.Redirect" &&
        redirect.ParseFromString(detail.value())) {
      return redirect.primary();
    }
  }
  return {};
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

absl::Status Client::ToStatus(const grpc::Status& status,
                              const grpc::ClientContext& context) const {
  if (status.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  // An UNAVAILABLE the server itself sent (a failed log, a stop) carries its reason; grpc-core
  // marks such a status "received from peer", and not one it made up for a failed connection.
  if (code == absl::StatusCode::kUnavailable &&
      absl::StrContains(context.debug_error_string(), "received from peer")) {
    return absl::UnavailableError(
        absl::StrCat("ringkv-server at ", address_, ": ", status.error_message()));
  }
  if (code == absl::StatusCode::kUnavailable) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach ringkv-server at ", address_, ": ", status.error_message()));
  }
  if (code == absl::StatusCode::kDeadlineExceeded) {
    return absl::DeadlineExceededError(
        absl::StrCat("no answer from ", address_, " within ", absl::FormatDuration(timeout_)));
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
  auto context = NewContext();
  grpc::Status status = stub_->Get(context.get(), request, &response);
  if (!status.ok()) return ToStatus(status, *context);
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
  auto context = NewContext();
  grpc::Status status =
      Write([&](grpc::ClientContext* c) { return stub_->Put(c, request, &response); }, &context);
  if (!status.ok()) return ToStatus(status, *context);
  return response.version();
}

absl::Status Client::Delete(std::string_view key, const WriteCondition& condition) {
  pb::DeleteRequest request;
  request.set_key(std::string(key));
  if (condition.kind() != WriteCondition::Kind::kNone)
    condition.ToProto(request.mutable_condition());
  pb::DeleteResponse response;
  auto context = NewContext();
  const grpc::Status status =
      Write([&](grpc::ClientContext* c) { return stub_->Delete(c, request, &response); }, &context);
  return ToStatus(status, *context);
}

absl::Status Client::Expire(std::string_view key, int64_t ttl_ms) {
  pb::ExpireRequest request;
  request.set_key(std::string(key));
  request.set_ttl_ms(ttl_ms);
  pb::ExpireResponse response;
  auto context = NewContext();
  const grpc::Status status =
      Write([&](grpc::ClientContext* c) { return stub_->Expire(c, request, &response); }, &context);
  return ToStatus(status, *context);
}

absl::Status Client::Persist(std::string_view key) {
  pb::PersistRequest request;
  request.set_key(std::string(key));
  pb::PersistResponse response;
  auto context = NewContext();
  const grpc::Status status = Write(
      [&](grpc::ClientContext* c) { return stub_->Persist(c, request, &response); }, &context);
  return ToStatus(status, *context);
}

absl::StatusOr<int64_t> Client::Increment(std::string_view key, int64_t delta) {
  pb::IncrementRequest request;
  request.set_key(std::string(key));
  request.set_delta(delta);
  pb::IncrementResponse response;
  auto context = NewContext();
  grpc::Status status = Write(
      [&](grpc::ClientContext* c) { return stub_->Increment(c, request, &response); }, &context);
  if (!status.ok()) return ToStatus(status, *context);
  return response.value();
}

absl::StatusOr<Client::ScanPage> Client::Scan(uint64_t cursor, std::string_view prefix,
                                              uint32_t limit) {
  pb::ScanRequest request;
  request.set_cursor(cursor);
  request.set_prefix(std::string(prefix));
  request.set_limit(limit);
  pb::ScanResponse response;
  auto context = NewContext();
  grpc::Status status = stub_->Scan(context.get(), request, &response);
  if (!status.ok()) return ToStatus(status, *context);
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
  auto context = NewContext();
  grpc::Status status = stub_->MultiGet(context.get(), request, &response);
  if (!status.ok()) return ToStatus(status, *context);
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
  auto context = NewContext();
  grpc::Status status = Write(
      [&](grpc::ClientContext* c) { return stub_->MultiPut(c, request, &response); }, &context);
  if (!status.ok()) return ToStatus(status, *context);
  return ToItems(response.mutable_results());
}

absl::StatusOr<pb::StatsResponse> Client::Stats() {
  pb::StatsRequest request;
  pb::StatsResponse response;
  auto context = NewContext();
  grpc::Status status = stub_->Stats(context.get(), request, &response);
  if (!status.ok()) return ToStatus(status, *context);
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
  auto context = NewContext();
  grpc::Status status = replication_stub_->Replicate(context.get(), request, &response);
  if (!status.ok()) return ToStatus(status, *context);
  return response;
}

absl::StatusOr<pb::SnapshotResponse> Client::Snapshot() {
  pb::SnapshotRequest request;
  pb::SnapshotResponse response;
  auto context = NewContext();
  grpc::Status status = stub_->Snapshot(context.get(), request, &response);
  if (!status.ok()) return ToStatus(status, *context);
  return response;
}

}  // namespace ringkv
