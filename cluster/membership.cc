#include "cluster/membership.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace ringkv::etcd {
namespace {

// A lease's TTL in whole seconds (etcd's unit), at least 1.
int64_t LeaseSeconds(absl::Duration ttl) {
  return std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1))));
}

}  // namespace

std::string GroupPrefix(const std::string& group) { return absl::StrCat("/ringkv/", group); }

std::string MemberKey(const std::string& group, const std::string& server_id) {
  return absl::StrCat(GroupPrefix(group), "/members/", server_id);
}

absl::StatusOr<std::unique_ptr<Membership>> Membership::Join(Options options) {
  absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Connect(options.etcd);
  if (!client.ok()) return client.status();
  absl::StatusOr<int64_t> lease = (*client)->Grant(LeaseSeconds(options.ttl));
  if (!lease.ok()) return lease.status();
  std::unique_ptr<Membership> membership(
      new Membership(std::move(options), std::move(*client), *lease));
  if (absl::Status s =
          membership->client_->Put(membership->key_, membership->options_.describe(), *lease);
      !s.ok()) {
    (void)membership->client_->Revoke(*lease);
    return s;
  }
  membership->thread_ = std::thread([m = membership.get()] { m->Run(); });
  return membership;
}

Membership::Membership(Options options, std::unique_ptr<EtcdClient> client, int64_t lease)
    : options_(std::move(options)),
      key_(MemberKey(options_.group, options_.server_id)),
      client_(std::move(client)),
      lease_(lease) {}

Membership::~Membership() { Leave(); }

void Membership::Leave() {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (absl::Status s = client_->Revoke(lease_); !s.ok()) {
    Log(LogLevel::kWarning,
        "etcd: could not revoke this server's lease (%s); its entry %s goes "
        "when the lease expires",
        s.message(), key_);
  }
}

absl::Status Membership::Renew() {
  absl::StatusOr<int64_t> left = client_->KeepAlive(lease_);
  if (!left.ok()) return left.status();
  if (*left == 0) {  // Expired while etcd was out of reach: a new lease, a new entry.
    absl::StatusOr<int64_t> lease = client_->Grant(LeaseSeconds(options_.ttl));
    if (!lease.ok()) return lease.status();
    lease_ = *lease;
    Log(LogLevel::kWarning, "etcd: this server's lease had expired; rejoined group %s",
        options_.group);
  }
  return client_->Put(key_, options_.describe(), lease_);
}

void Membership::Run() {
  const auto every = absl::ToChronoMilliseconds(options_.ttl / 3);
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, every, [&] { return stop_; })) {
    lock.unlock();
    const absl::Status status = Renew();
    const bool was = std::exchange(healthy_, status.ok());
    if (was && !status.ok()) {
      Log(LogLevel::kWarning,
          "etcd: cannot renew this server's membership of group %s (%s); "
          "retrying",
          options_.group, status.message());
    } else if (!was && status.ok()) {
      Log(LogLevel::kInfo, "etcd: reached again; membership of group %s renewed", options_.group);
    }
    lock.lock();
  }
}

}  // namespace ringkv::etcd
