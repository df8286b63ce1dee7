#include "cluster/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/flag_file.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"

namespace ringkv::etcd {

std::string LeaderKey(const std::string& prefix) { return prefix + "/leader"; }

namespace {

namespace pb = ::etcdserverpb;

std::string TermKey(const std::string& prefix) { return prefix + "/term"; }

// A transaction's comparison: `key`'s value is `value`.
void CompareValue(pb::TxnRequest* txn, const std::string& key, const std::string& value) {
  pb::Compare* compare = txn->add_compare();
  compare->set_key(key);
  compare->set_target(pb::Compare::VALUE);
  compare->set_result(pb::Compare::EQUAL);
  compare->set_value(value);
}

// A transaction's success step: put `key` = `value` under `lease` (0: none).
void PutOnSuccess(pb::TxnRequest* txn, const std::string& key, const std::string& value,
                  int64_t lease = 0) {
  pb::PutRequest* put = txn->add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  if (lease != 0) put->set_lease(lease);
}

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMicroseconds(timeout);
}

// One unary call of etcd's `Service` (`method` of its stub) under `timeout`, as a function of
// the endpoint's channel, for EtcdClient::OnSomeEndpoint.
template <typename Service, typename Request, typename Response>
auto Unary(grpc::Status (Service::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
           const Request& request, Response* response, absl::Duration timeout) {
  return [method, &request, response, timeout](const std::shared_ptr<grpc::Channel>& channel) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(timeout));
    return (Service::NewStub(channel).get()->*method)(&context, request, response);
  };
}

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace

std::optional<EtcdClient::Leader> ParseLeader(const std::string& text) {
  const size_t space = text.find(' ');
  EtcdClient::Leader leader;
  if (space == std::string::npos || !absl::SimpleAtoi(text.substr(0, space), &leader.term) ||
      leader.term == 0) {
    return std::nullopt;
  }
  leader.value = text.substr(space + 1);
  return leader;
}

absl::StatusOr<EtcdClient::Tls> EtcdClient::LoadTls(const std::string& ca, const std::string& cert,
                                                    const std::string& key) {
  Tls tls;
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError("--etcd-cert and --etcd-key go together");
  }
  for (auto [flag, path, pem] :
       {std::tuple{"--etcd-ca", &ca, &tls.ca_pem}, std::tuple{"--etcd-cert", &cert, &tls.cert_pem},
        std::tuple{"--etcd-key", &key, &tls.key_pem}}) {
    if (path->empty()) continue;
    tls.on = true;
    if (absl::Status s = ReadFlagFile(flag, *path, pem); !s.ok()) return s;
  }
  return tls;
}

EtcdClient::EtcdClient(Options options) : options_(std::move(options)) {
  bool tls = options_.tls.on;
  for (const std::string& endpoint : options_.endpoints) tls |= endpoint.starts_with("https://");
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.tls.ca_pem;
    ssl.pem_cert_chain = options_.tls.cert_pem;
    ssl.pem_private_key = options_.tls.key_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  for (const std::string& endpoint : options_.endpoints) {
    std::string target = endpoint;
    for (std::string_view scheme : {"http://", "https://"}) {
      if (target.starts_with(scheme)) target = target.substr(scheme.size());
    }
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    channels_.push_back(grpc::CreateCustomChannel(target, credentials, args));
  }
}

EtcdClient::~EtcdClient() = default;

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Connect(Options options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("no etcd endpoint given");
  std::unique_ptr<EtcdClient> client(new EtcdClient(std::move(options)));
  // A count-only read of one key: answered by any member that has a leader.
  pb::RangeRequest request;
  request.set_key("ringkv");
  request.set_count_only(true);
  pb::RangeResponse response;
  absl::Status status = client->OnSomeEndpoint(
      Unary<pb::KV>(&pb::KV::Stub::Range, request, &response, client->options_.timeout));
  if (!status.ok()) return status;
  return client;
}

template <typename Call>
absl::Status EtcdClient::OnSomeEndpoint(Call call) {
  std::vector<std::string> errors;
  const size_t n = channels_.size();
  const size_t first = preferred_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    const size_t e = (first + i) % n;
    const grpc::Status status = call(channels_[e]);
    if (status.ok()) {
      preferred_.store(e, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    // An answer that is etcd's own refusal (not a transport failure) is final.
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
        status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return absl::Status(FromGrpc(status).code(), absl::StrCat("etcd at ", options_.endpoints[e],
                                                                ": ", status.error_message()));
    }
    errors.push_back(absl::StrCat(options_.endpoints[e], ": ", status.error_message()));
  }
  return absl::UnavailableError(
      absl::StrCat("no etcd endpoint answered (", absl::StrJoin(errors, "; "), ")"));
}

absl::StatusOr<int64_t> EtcdClient::Grant(int64_t ttl_seconds) {
  pb::LeaseGrantResponse response;
  pb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  absl::Status status = OnSomeEndpoint(
      Unary<pb::Lease>(&pb::Lease::Stub::LeaseGrant, request, &response, options_.timeout));
  if (!status.ok()) return status;
  if (!response.error().empty()) {
    return absl::FailedPreconditionError(absl::StrCat("etcd refused a lease: ", response.error()));
  }
  return response.id();
}

absl::StatusOr<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  pb::LeaseKeepAliveResponse response;
  absl::Status status = OnSomeEndpoint([&](const std::shared_ptr<grpc::Channel>& channel) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(options_.timeout));
    auto stream = pb::Lease::NewStub(channel)->LeaseKeepAlive(&context);
    pb::LeaseKeepAliveRequest request;
    request.set_id(lease);
    if (stream->Write(request) && stream->Read(&response)) {
      stream->WritesDone();
      context.TryCancel();  // The answer is in; the stream is not needed any more.
      (void)stream->Finish();
      return grpc::Status::OK;
    }
    return stream->Finish();
  });
  if (!status.ok()) return status;
  return response.ttl() > 0 ? response.ttl() : 0;
}

absl::Status EtcdClient::Revoke(int64_t lease) {
  pb::LeaseRevokeRequest request;
  request.set_id(lease);
  pb::LeaseRevokeResponse response;
  return OnSomeEndpoint(
      Unary<pb::Lease>(&pb::Lease::Stub::LeaseRevoke, request, &response, options_.timeout));
}

absl::StatusOr<std::optional<EtcdClient::Entry>> EtcdClient::Get(const std::string& key) {
  pb::RangeResponse response;
  pb::RangeRequest request;
  request.set_key(key);
  absl::Status status =
      OnSomeEndpoint(Unary<pb::KV>(&pb::KV::Stub::Range, request, &response, options_.timeout));
  if (!status.ok()) return status;
  if (response.kvs_size() == 0) return std::optional<Entry>();
  const pb::KeyValue& kv = response.kvs(0);
  return Entry{.value = kv.value(),
               .create_revision = kv.create_revision(),
               .mod_revision = kv.mod_revision(),
               .lease = kv.lease()};
}

absl::Status EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  pb::PutRequest request;
  request.set_key(key);
  request.set_value(value);
  request.set_lease(lease);
  pb::PutResponse response;
  return OnSomeEndpoint(Unary<pb::KV>(&pb::KV::Stub::Put, request, &response, options_.timeout));
}

absl::StatusOr<std::vector<std::pair<std::string, EtcdClient::Entry>>> EtcdClient::List(
    const std::string& prefix) {
  // The range [prefix, prefix with its last byte raised): every key that begins with it.
  std::string end = prefix;
  while (!end.empty() && static_cast<uint8_t>(end.back()) == 0xff) end.pop_back();
  if (!end.empty()) end.back() = static_cast<char>(static_cast<uint8_t>(end.back()) + 1);
  pb::RangeResponse response;
  pb::RangeRequest request;
  request.set_key(prefix);
  request.set_range_end(end.empty() ? std::string(1, '\0') : end);
  absl::Status status =
      OnSomeEndpoint(Unary<pb::KV>(&pb::KV::Stub::Range, request, &response, options_.timeout));
  if (!status.ok()) return status;
  std::vector<std::pair<std::string, Entry>> out;
  for (const pb::KeyValue& kv : response.kvs()) {
    out.emplace_back(kv.key(), Entry{.value = kv.value(),
                                     .create_revision = kv.create_revision(),
                                     .mod_revision = kv.mod_revision(),
                                     .lease = kv.lease()});
  }
  return out;
}

absl::StatusOr<std::optional<EtcdClient::Leader>> EtcdClient::CurrentLeader(
    const std::string& prefix) {
  absl::StatusOr<std::optional<Entry>> entry = Get(LeaderKey(prefix));
  if (!entry.ok()) return entry.status();
  if (!entry->has_value()) return std::optional<Leader>();
  std::optional<Leader> leader = ParseLeader((*entry)->value);
  if (!leader.has_value()) {
    return absl::DataLossError(absl::StrCat("etcd key ", LeaderKey(prefix), " holds \"",
                                            (*entry)->value, "\", not \"TERM VALUE\""));
  }
  leader->lease = (*entry)->lease;
  return leader;
}

absl::Status EtcdClient::PutAsLeader(const std::string& prefix, const std::string& leader,
                                     const std::string& key, const std::string& value) {
  return AsLeader(prefix, leader, key, value);
}

absl::Status EtcdClient::DeleteAsLeader(const std::string& prefix, const std::string& leader,
                                        const std::string& key) {
  return AsLeader(prefix, leader, key, std::nullopt);
}

absl::StatusOr<uint64_t> EtcdClient::HandOver(const std::string& prefix, const Leader& leader,
                                              const std::string& value, int64_t lease) {
  const std::string held = absl::StrCat(leader.term, " ", leader.value);
  const uint64_t next = leader.term + 1;
  pb::TxnRequest txn;
  CompareValue(&txn, LeaderKey(prefix), held);
  CompareValue(&txn, TermKey(prefix), absl::StrCat(leader.term));
  PutOnSuccess(&txn, LeaderKey(prefix), absl::StrCat(next, " ", value), lease);
  PutOnSuccess(&txn, TermKey(prefix), absl::StrCat(next));
  pb::TxnResponse response;
  absl::Status status =
      OnSomeEndpoint(Unary<pb::KV>(&pb::KV::Stub::Txn, txn, &response, options_.timeout));
  if (!status.ok()) return status;
  if (!response.succeeded()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd key ", LeaderKey(prefix), " no longer holds \"", held, "\" in term ", leader.term));
  }
  return next;
}

absl::Status EtcdClient::AsLeader(const std::string& prefix, const std::string& leader,
                                  const std::string& key, const std::optional<std::string>& value) {
  pb::TxnRequest txn;
  CompareValue(&txn, LeaderKey(prefix), leader);
  if (value.has_value()) {
    PutOnSuccess(&txn, key, *value);
  } else {
    txn.add_success()->mutable_request_delete_range()->set_key(key);
  }
  pb::TxnResponse response;
  absl::Status status =
      OnSomeEndpoint(Unary<pb::KV>(&pb::KV::Stub::Txn, txn, &response, options_.timeout));
  if (!status.ok()) return status;
  if (!response.succeeded()) {
    return absl::FailedPreconditionError(
        absl::StrCat("etcd key ", LeaderKey(prefix), " no longer holds \"", leader, "\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<uint64_t>> EtcdClient::Campaign(
    const std::string& prefix, const std::string& value, int64_t lease, Leader* holder,
    const std::pair<std::string, int64_t>* guard) {
  // A race with another candidate's transaction (the term moved, the leader key did not
  // stay) is tried again; a few rounds settle it.
  for (int attempt = 0; attempt < 16; ++attempt) {
    absl::StatusOr<std::optional<Entry>> term_entry = Get(TermKey(prefix));
    if (!term_entry.ok()) return term_entry.status();
    uint64_t term = 0;
    int64_t term_mod = 0;  // An absent key's mod revision compares as 0.
    if (term_entry->has_value()) {
      if (!absl::SimpleAtoi((*term_entry)->value, &term)) {
        return absl::DataLossError(absl::StrCat("etcd key ", TermKey(prefix), " holds \"",
                                                (*term_entry)->value, "\", not a number"));
      }
      term_mod = (*term_entry)->mod_revision;
    }
    const uint64_t next = term + 1;
    pb::TxnRequest txn;
    pb::Compare* free = txn.add_compare();
    free->set_key(LeaderKey(prefix));
    free->set_target(pb::Compare::CREATE);
    free->set_result(pb::Compare::EQUAL);
    free->set_create_revision(0);
    pb::Compare* same_term = txn.add_compare();
    same_term->set_key(TermKey(prefix));
    same_term->set_target(pb::Compare::MOD);
    same_term->set_result(pb::Compare::EQUAL);
    same_term->set_mod_revision(term_mod);
    if (guard != nullptr) {
      pb::Compare* same = txn.add_compare();
      same->set_key(guard->first);
      same->set_target(pb::Compare::MOD);
      same->set_result(pb::Compare::EQUAL);
      same->set_mod_revision(guard->second);
    }
    PutOnSuccess(&txn, LeaderKey(prefix), absl::StrCat(next, " ", value), lease);
    PutOnSuccess(&txn, TermKey(prefix), absl::StrCat(next));
    txn.add_failure()->mutable_request_range()->set_key(LeaderKey(prefix));
    pb::TxnResponse response;
    absl::Status status =
        OnSomeEndpoint(Unary<pb::KV>(&pb::KV::Stub::Txn, txn, &response, options_.timeout));
    if (!status.ok()) return status;
    if (response.succeeded()) return std::optional<uint64_t>(next);
    if (response.responses_size() == 1 && response.responses(0).response_range().kvs_size() == 1) {
      const pb::KeyValue& kv = response.responses(0).response_range().kvs(0);
      std::optional<Leader> leader = ParseLeader(kv.value());
      if (!leader.has_value()) {
        return absl::DataLossError(absl::StrCat("etcd key ", LeaderKey(prefix), " holds \"",
                                                kv.value(), "\", not \"TERM VALUE\""));
      }
      leader->lease = kv.lease();
      if (holder != nullptr) *holder = *leader;
      return std::optional<uint64_t>();
    }
    if (guard != nullptr) {
      absl::StatusOr<std::optional<Entry>> guarded = Get(guard->first);
      if (!guarded.ok()) return guarded.status();
      if ((guarded->has_value() ? (*guarded)->mod_revision : 0) != guard->second) {
        return absl::FailedPreconditionError(
            absl::StrCat("etcd key ", guard->first, " changed since it was read"));
      }
    }
    // The leader key is free but the term moved: another candidate won and lost meanwhile.
  }
  return absl::AbortedError(absl::StrCat("the election under ", prefix, " kept racing; try again"));
}

std::unique_ptr<EtcdClient::Watch> EtcdClient::WatchKey(const std::string& key,
                                                        std::function<void()> changed) {
  std::unique_ptr<Watch> watch(new Watch(*this, key, std::move(changed)));
  watch->thread_ = std::thread([w = watch.get()] { w->Run(); });
  return watch;
}

EtcdClient::Watch::Watch(EtcdClient& client, std::string key, std::function<void()> changed)
    : client_(client), key_(std::move(key)), changed_(std::move(changed)) {}

EtcdClient::Watch::~Watch() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    if (call_ != nullptr) call_->TryCancel();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EtcdClient::Watch::Run() {
  auto backoff = std::chrono::milliseconds(100);
  size_t endpoint = client_.preferred_.load(std::memory_order_relaxed);
  for (;;) {
    grpc::ClientContext context;
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      call_ = &context;
    }
    const auto& channel = client_.channels_[endpoint % client_.channels_.size()];
    auto stream = pb::Watch::NewStub(channel)->Watch(&context);
    pb::WatchRequest request;
    request.mutable_create_request()->set_key(key_);
    pb::WatchResponse response;
    if (stream->Write(request)) {
      while (stream->Read(&response)) {
        if (response.canceled()) break;
        if (response.created() || response.events_size() > 0) {
          backoff = std::chrono::milliseconds(100);
          changed_();
        }
      }
    }
    context.TryCancel();
    (void)stream->Finish();
    std::unique_lock lock(mu_);
    call_ = nullptr;
    if (cv_.wait_for(lock, backoff, [&] { return stop_; })) return;
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(1));
    ++endpoint;  // The next endpoint, in case this one is down.
  }
}

}  // namespace ringkv::etcd
