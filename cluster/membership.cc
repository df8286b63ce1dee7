#include "cluster/membership.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "base/log.h"

namespace ringkv::etcd {
namespace {

// A lease's TTL in whole seconds (etcd's unit), at least 1.
int64_t LeaseSeconds(absl::Duration ttl) {
  return std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1))));
}

// CLOCK_BOOTTIME in nanoseconds (the fence's clock: server/repl/fence.h).
int64_t BootNs() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// How long a candidate waits for a rival that has not stated its standing at a vacancy
// (stuck, or dead with its entry not expired yet) before it leaves it out.
constexpr int64_t kSilentRivalNs = 1'000'000'000;

// What an entry states for an election: "tier=T score=S" ("tier=-": may not lead), and
// "vacancy=TERM" once the member has seen the leader key gone after term TERM.
struct Stated {
  std::optional<Standing> standing;
  std::optional<uint64_t> vacancy;
};
Stated ParseStated(absl::string_view entry) {
  Stated stated;
  for (absl::string_view field : absl::StrSplit(entry, ' ', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&field, "tier=")) {
      Standing s;
      if (absl::SimpleAtoi(field, &s.tier)) stated.standing = s;
    } else if (absl::ConsumePrefix(&field, "score=") && stated.standing.has_value()) {
      if (!absl::SimpleAtoi(field, &stated.standing->score)) stated.standing.reset();
    } else if (absl::ConsumePrefix(&field, "vacancy=")) {
      uint64_t term = 0;
      if (absl::SimpleAtoi(field, &term)) stated.vacancy = term;
    }
  }
  return stated;
}

// Whether `a` (server `a_id`) should lead before `b` (server `b_id`).
bool StandsBetter(const Standing& a, const std::string& a_id, const Standing& b,
                  const std::string& b_id) {
  if (a.tier != b.tier) return a.tier > b.tier;
  if (a.score != b.score) return a.score > b.score;
  return a_id < b_id;
}

}  // namespace

std::string GroupPrefix(const std::string& group) { return absl::StrCat("/ringkv/", group); }

std::string MemberKey(const std::string& group, const std::string& server_id) {
  return absl::StrCat(GroupPrefix(group), "/members/", server_id);
}

std::optional<LeaderValue> ParseLeaderValue(const std::string& value) {
  const size_t space = value.find(' ');
  if (space == std::string::npos || space == 0 || space + 1 == value.size()) return std::nullopt;
  return LeaderValue{value.substr(0, space), value.substr(space + 1)};
}

std::string InSyncKey(const std::string& group) {
  return absl::StrCat(GroupPrefix(group), "/in_sync");
}

bool InSync::Holds(const std::string& server_id) const {
  return server_id == leader_id || std::ranges::find(members, server_id) != members.end();
}

std::string FormatInSync(const InSync& in_sync) {
  return absl::StrCat(in_sync.term, " ", in_sync.leader_id, " ",
                      in_sync.members.empty() ? "-" : absl::StrJoin(in_sync.members, ","));
}

std::optional<InSync> ParseInSync(const std::string& value) {
  const std::vector<absl::string_view> parts = absl::StrSplit(value, ' ');
  InSync in_sync;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &in_sync.term) || parts[1].empty() ||
      parts[2].empty()) {
    return std::nullopt;
  }
  in_sync.leader_id = std::string(parts[1]);
  if (parts[2] != "-") in_sync.members = absl::StrSplit(parts[2], ',');
  return in_sync;
}

absl::Status Membership::RecordInSync(uint64_t term,
                                      const std::optional<std::vector<std::string>>& members) {
  const std::string leader = absl::StrCat(term, " ", options_.server_id, " ", options_.address);
  const std::string key = InSyncKey(options_.group);
  if (!members.has_value()) return client_->DeleteAsLeader(prefix_, leader, key);
  return client_->PutAsLeader(prefix_, leader, key,
                              FormatInSync({term, options_.server_id, *members}));
}

absl::StatusOr<uint64_t> Membership::HandOver(const std::string& target_id) {
  absl::StatusOr<std::optional<EtcdClient::Leader>> leader = client_->CurrentLeader(prefix_);
  if (!leader.ok()) return leader.status();
  const std::string mine = absl::StrCat(options_.server_id, " ", options_.address);
  if (!leader->has_value() || (*leader)->value != mine) {
    return absl::FailedPreconditionError(
        absl::StrCat("this server does not hold group ", options_.group, "'s leader key now"));
  }
  absl::StatusOr<std::optional<EtcdClient::Entry>> entry =
      client_->Get(MemberKey(options_.group, target_id));
  if (!entry.ok()) return entry.status();
  std::string address;
  if (entry->has_value()) {
    for (absl::string_view field : absl::StrSplit((*entry)->value, ' ')) {
      if (absl::ConsumePrefix(&field, "address=")) address = std::string(field);
    }
  }
  if (address.empty() || (*entry)->lease == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "server ", target_id, " has no live entry in group ", options_.group, " (it left?)"));
  }
  return client_->HandOver(prefix_, **leader, absl::StrCat(target_id, " ", address),
                           (*entry)->lease);
}

absl::Status Membership::AwaitPrimary(const std::string& server_id, uint64_t term,
                                      absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string key = MemberKey(options_.group, server_id);
  for (;;) {
    absl::StatusOr<std::optional<EtcdClient::Leader>> leader = client_->CurrentLeader(prefix_);
    absl::StatusOr<std::optional<EtcdClient::Entry>> entry = client_->Get(key);
    if (leader.ok() && leader->has_value() && (*leader)->term >= term && entry.ok() &&
        entry->has_value()) {
      for (absl::string_view field : absl::StrSplit((*entry)->value, ' ')) {
        if (field == "role=primary") return absl::OkStatus();
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the leader key was handed to server ", server_id, " in term ", term,
          ", which did not say it serves as the primary within ", absl::FormatDuration(timeout),
          "; `ringkv cluster status` shows where the group stands"));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

absl::StatusOr<std::unique_ptr<Membership>> Membership::Join(Options options) {
  absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Connect(options.etcd);
  if (!client.ok()) return client.status();
  const int64_t sent = BootNs();
  absl::StatusOr<int64_t> lease = (*client)->Grant(LeaseSeconds(options.ttl));
  if (!lease.ok()) return lease.status();
  std::unique_ptr<Membership> membership(
      new Membership(std::move(options), std::move(*client), *lease));
  membership->lease_until_ = sent + LeaseSeconds(membership->options_.ttl) * 1'000'000'000;
  if (absl::Status s = membership->Publish(); !s.ok()) {
    (void)membership->client_->Revoke(*lease);
    return s;
  }
  if (membership->options_.lead) {
    Membership* m = membership.get();
    m->watch_ = m->client_->WatchKey(LeaderKey(m->prefix_), [m] {
      {
        std::lock_guard lock(m->mu_);
        m->leader_changed_ = true;
      }
      m->cv_.notify_all();
    });
  }
  membership->thread_ = std::thread([m = membership.get()] { m->Run(); });
  return membership;
}

Membership::Membership(Options options, std::unique_ptr<EtcdClient> client, int64_t lease)
    : options_(std::move(options)),
      key_(MemberKey(options_.group, options_.server_id)),
      prefix_(GroupPrefix(options_.group)),
      poll_ns_(std::clamp<int64_t>(absl::ToInt64Nanoseconds(options_.ttl / 20), 50'000'000,
                                   250'000'000)),
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
  watch_.reset();
  if (leading_) options_.fence(0);
  if (absl::Status s = client_->Revoke(lease_); !s.ok()) {
    Log(LogLevel::kWarning,
        "etcd: could not revoke this server's lease (%s); its entry %s goes "
        "when the lease expires",
        s.message(), key_);
  }
}

Membership::View Membership::view() const {
  std::lock_guard lock(mu_);
  return view_;
}

void Membership::SetView(bool leading, uint64_t term, const std::string& leader_address) {
  std::lock_guard lock(mu_);
  view_ = {.leading = leading, .term = term, .leader_address = leader_address};
}

int64_t Membership::Margin() const {
  return std::max<int64_t>(500'000'000, absl::ToInt64Nanoseconds(options_.ttl / 10));
}

std::string Membership::Entry() const {
  std::string entry = options_.describe();
  if (!options_.standing) return entry;
  const std::optional<Standing> standing = options_.standing();
  if (!standing.has_value() || !eligible_) return absl::StrCat(entry, " tier=-");
  absl::StrAppend(&entry, " tier=", standing->tier, " score=", standing->score);
  if (vacancy_.has_value()) absl::StrAppend(&entry, " vacancy=", *vacancy_);
  return entry;
}

absl::Status Membership::Renew() {
  const int64_t sent = BootNs();
  absl::StatusOr<int64_t> left = client_->KeepAlive(lease_);
  if (!left.ok()) return left.status();
  if (*left == 0) {  // Expired while etcd was out of reach: a new lease, a new entry.
    if (leading_) {
      leading_ = false;  // The leader key went with the lease.
      options_.fence(0);
      Log(LogLevel::kWarning,
          "group %s: this server's lease expired while etcd was out of reach, and its "
          "leadership with it: writes are refused",
          options_.group);
    }
    const int64_t granted_at = BootNs();
    absl::StatusOr<int64_t> lease = client_->Grant(LeaseSeconds(options_.ttl));
    if (!lease.ok()) return lease.status();
    lease_ = *lease;
    lease_until_ = granted_at + LeaseSeconds(options_.ttl) * 1'000'000'000;
    Log(LogLevel::kWarning, "etcd: this server's lease had expired; rejoined group %s",
        options_.group);
  } else {
    lease_until_ = sent + *left * 1'000'000'000;
    if (leading_) options_.fence(lease_until_ - Margin());
  }
  return Publish();
}

absl::Status Membership::Publish() {
  std::string entry = Entry();
  if (entry == published_ && lease_ == published_lease_) return absl::OkStatus();
  absl::Status status = client_->Put(key_, entry, lease_);
  if (status.ok()) {
    published_ = std::move(entry);
    published_lease_ = lease_;
  }
  return status;
}

void Membership::Run() {
  const bool elect = static_cast<bool>(options_.lead);
  const int64_t renew_every = absl::ToInt64Nanoseconds(options_.ttl / 3);
  int64_t next_renewal = BootNs() + renew_every;
  if (elect) Elect();
  std::unique_lock lock(mu_);
  for (;;) {
    // Asleep until the next renewal, unless the leader key changes (the watch wakes the
    // thread), or while a vacancy is being decided (every poll).
    const int64_t now = BootNs();
    const int64_t wake_at =
        elect && vacant_since_ != 0 ? std::min(next_renewal, now + poll_ns_) : next_renewal;
    cv_.wait_for(lock, std::chrono::nanoseconds(std::max<int64_t>(0, wake_at - now)),
                 [&] { return stop_ || leader_changed_; });
    if (stop_) return;
    leader_changed_ = false;
    lock.unlock();
    if (BootNs() >= next_renewal) {
      const absl::Status status = Renew();
      next_renewal = BootNs() + (status.ok() ? renew_every : poll_ns_);
      const bool was = std::exchange(healthy_, status.ok());
      if (was && !status.ok()) {
        Log(LogLevel::kWarning,
            "etcd: cannot renew this server's membership of group %s (%s); retrying%s",
            options_.group, status.message(),
            leading_ ? "; writes stop when the lease could run out" : "");
      } else if (!was && status.ok()) {
        Log(LogLevel::kInfo, "etcd: reached again; membership of group %s renewed", options_.group);
      }
    }
    // At a change, a vacancy's poll, and each renewal (in case the watch missed a change).
    if (elect) Elect();
    lock.lock();
  }
}

void Membership::Elect() {
  absl::StatusOr<std::optional<EtcdClient::Leader>> leader = client_->CurrentLeader(prefix_);
  if (!leader.ok()) return;  // Out of reach: a leader's fence runs out by itself.
  if (!leader->has_value()) {
    Vacancy();
    return;
  }
  vacant_since_ = 0;
  vacancy_.reset();
  eligible_ = true;
  const EtcdClient::Leader& held = **leader;
  const std::optional<LeaderValue> who = ParseLeaderValue(held.value);
  if (!who.has_value()) return;
  if (who->server_id == options_.server_id) {
    if (!leading_ && held.term != led_term_) {
      // A term this server did not campaign for: the last primary handed the key over
      // (HandOver), under this server's lease.
      Log(LogLevel::kInfo,
          "group %s: the primary handed its leadership over in term %d; "
          "taking over",
          options_.group, held.term);
      TakeOver(held.term);
      return;
    }
    if (!leading_ && held.term == led_term_) {
      // Won and taken over, but the renewal or the look after it failed: the key is still
      // this server's, so the fence may open from the last renewal.
      leading_ = true;
      following_.clear();
      options_.fence(lease_until_ - Margin());
      Log(LogLevel::kInfo, "group %s: primary in term %d; writes are served", options_.group,
          held.term);
    }
    SetView(leading_, held.term, who->address);
    return;
  }
  if (leading_) {
    leading_ = false;
    options_.fence(0);
    Log(LogLevel::kWarning,
        "group %s: %s leads in term %d; this server no longer acknowledges writes", options_.group,
        who->address, held.term);
  }
  SetView(false, held.term, who->address);
  // A key left by this server's previous run (same address, another id): it expires with
  // that run's lease.
  if (who->address == options_.address || who->address == following_) return;
  if (absl::Status s = options_.follow(who->address); !s.ok()) {
    Log(LogLevel::kWarning, "group %s: cannot follow the primary %s of term %d: %s", options_.group,
        who->address, held.term, s.message());
    return;
  }
  following_ = who->address;
  (void)Publish();  // The entry says so at once.
}

void Membership::Vacancy() {
  if (leading_) {
    leading_ = false;
    options_.fence(0);
    Log(LogLevel::kWarning,
        "group %s: this server's leader key is gone (its lease ran out): writes are refused "
        "until a primary is elected",
        options_.group);
  }
  SetView(false, view().term, "");  // The term stays the last one seen.
  const std::optional<Standing> me = options_.standing();
  if (!me.has_value()) return;  // May not lead now.
  const int64_t now = BootNs();
  if (vacant_since_ == 0) {
    // The entry states this server's standing at this vacancy (named by the last term handed
    // out), for the others to rank against.
    absl::StatusOr<std::optional<EtcdClient::Entry>> term = client_->Get(prefix_ + "/term");
    if (!term.ok()) return;
    uint64_t last = 0;
    if (term->has_value() && !absl::SimpleAtoi((*term)->value, &last)) return;
    // While an in-sync set is kept, only its leader and members may lead (they alone hold
    // every write acknowledged).
    absl::StatusOr<std::optional<EtcdClient::Entry>> in_sync =
        client_->Get(InSyncKey(options_.group));
    if (!in_sync.ok()) return;
    in_sync_revision_ = in_sync->has_value() ? (*in_sync)->mod_revision : 0;
    const bool was_eligible = eligible_;
    eligible_ = true;
    if (in_sync->has_value()) {
      const std::optional<InSync> set = ParseInSync((*in_sync)->value);
      eligible_ = set.has_value() && set->Holds(options_.server_id);
      if (!eligible_ && was_eligible) {
        Log(LogLevel::kWarning,
            "group %s: this server is not in the in-sync set (%s = \"%s\"), so it may lack "
            "acknowledged writes and will not take over; waiting for the set's leader or a "
            "member (deleting the key lets any server take over, losing what only they hold)",
            options_.group, InSyncKey(options_.group), (*in_sync)->value);
      }
    }
    vacancy_ = last;
    vacant_since_ = now;
    if (!Publish().ok()) {
      vacant_since_ = 0;
      return;
    }
  }
  const std::string members_prefix = MemberKey(options_.group, "");
  absl::StatusOr<std::vector<std::pair<std::string, EtcdClient::Entry>>> members =
      client_->List(members_prefix);
  if (!members.ok()) return;
  // Campaign once every rival (a member of this tier or above) has stated its standing at
  // this vacancy and none stands better; a rival silent for kSilentRivalNs is left out. A
  // better one that goes silent after stating keeps the others waiting until its entry
  // expires with its lease: it may hold acknowledged writes that they lack.
  int64_t better = 0;
  int64_t silent = 0;
  for (const auto& [key, entry] : *members) {
    const std::string id = key.substr(members_prefix.size());
    if (id == options_.server_id) continue;
    const Stated theirs = ParseStated(entry.value);
    if (!theirs.standing.has_value() || theirs.standing->tier < me->tier) continue;
    if (theirs.vacancy != vacancy_) {
      ++silent;
    } else if (StandsBetter(*theirs.standing, id, *me, options_.server_id)) {
      ++better;
    }
  }
  if (!eligible_) {
    vacant_since_ = 0;  // The set is read again at the next look (an operator may delete it).
    return;
  }
  if (better > 0 || (silent > 0 && now < vacant_since_ + kSilentRivalNs)) return;
  const std::pair<std::string, int64_t> guard(InSyncKey(options_.group), in_sync_revision_);
  absl::StatusOr<std::optional<uint64_t>> won = client_->Campaign(
      prefix_, absl::StrCat(options_.server_id, " ", options_.address), lease_, nullptr, &guard);
  if (absl::IsFailedPrecondition(won.status())) vacant_since_ = 0;  // Look at the set again.
  if (!won.ok() || !won->has_value()) return;  // Another won: the next look follows it.
  const uint64_t term = **won;
  vacant_since_ = 0;
  vacancy_.reset();
  Log(LogLevel::kInfo, "group %s: won term %d (%d rivals silent); taking over", options_.group,
      term, silent);
  TakeOver(term);
}

void Membership::TakeOver(uint64_t term) {
  absl::Status status = RecordInSync(
      term, options_.in_sync ? std::optional(std::vector<std::string>()) : std::nullopt);
  if (status.ok()) status = options_.lead(term);
  if (!status.ok()) {
    Log(LogLevel::kError, "group %s: could not take over in term %d (%s); giving it up",
        options_.group, term, status.message());
    (void)client_->Revoke(lease_);  // The leader key goes; the next renewal takes a new lease.
    return;
  }
  led_term_ = term;
  // The promotion may have taken a while: the fence opens from a fresh renewal, and only if
  // the key is still this server's.
  if (!Renew().ok()) return;
  absl::StatusOr<std::optional<EtcdClient::Leader>> still = client_->CurrentLeader(prefix_);
  if (!still.ok() || !still->has_value()) return;
  const std::optional<LeaderValue> holder = ParseLeaderValue((*still)->value);
  if (!holder.has_value() || holder->server_id != options_.server_id) return;
  leading_ = true;
  following_.clear();
  options_.fence(lease_until_ - Margin());
  (void)Publish();  // The entry says so at once.
  SetView(true, term, options_.address);
  Log(LogLevel::kInfo, "group %s: primary in term %d; writes are served", options_.group, term);
}

}  // namespace ringkv::etcd
