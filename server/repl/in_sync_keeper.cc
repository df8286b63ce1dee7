#include "server/repl/in_sync_keeper.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"

namespace ringkv::repl {
namespace {

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

InSyncKeeper::InSyncKeeper(Options options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

InSyncKeeper::~InSyncKeeper() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void InSyncKeeper::Lead(uint64_t term) {
  options_.set->Set({});
  std::lock_guard lock(mu_);
  term_ = term;
  recorded_.clear();
}

void InSyncKeeper::Stop() {
  std::lock_guard lock(mu_);
  term_ = 0;
}

std::vector<std::string> InSyncKeeper::recorded() const {
  std::lock_guard lock(mu_);
  return recorded_;
}

void InSyncKeeper::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait_for(lock, std::chrono::milliseconds(kTickMs), [this] { return stop_; });
    if (stop_) return;
    const uint64_t term = term_;
    if (term == 0) continue;
    lock.unlock();
    Tick(term, SteadyMs());
    lock.lock();
  }
}

std::map<std::string, InSyncKeeper::Replica> InSyncKeeper::Replicas() const {
  std::map<std::string, Replica> replicas;
  const size_t workers = options_.sources.size();
  options_.flows->ForEach([&](const ReplicaFlow& flow) {
    if (!flow.streaming.load(std::memory_order_relaxed) || flow.worker >= workers) return;
    Replica& replica = replicas[flow.replica_id];
    replica.address = flow.address;
    replica.acked.resize(workers);
    std::optional<uint64_t>& acked = replica.acked[flow.worker];
    acked = std::max(acked.value_or(0), flow.acked.load(std::memory_order_relaxed));
  });
  return replicas;
}

bool InSyncKeeper::Record(uint64_t term, std::vector<std::string> members) {
  const absl::Status status = options_.record(term, members);
  if (!status.ok()) {
    if (!std::exchange(record_failing_, true)) {
      Log(LogLevel::kWarning,
          "in-sync set: cannot record it in etcd (%s); writes wait for the replicas it names "
          "until it is",
          status.message());
    }
    return false;
  }
  record_failing_ = false;
  std::lock_guard lock(mu_);
  if (term_ == term) recorded_ = std::move(members);
  return true;
}

void InSyncKeeper::Tick(uint64_t term, int64_t now_ms) {
  if (term != ticked_term_) {
    ticked_term_ = term;
    behind_.clear();
    joining_.reset();
    let_go_ms_.clear();
  }
  const std::map<std::string, Replica> replicas = Replicas();
  const size_t workers = options_.sources.size();
  std::vector<ReplSource::Figures> figures;
  for (const ReplSource* source : options_.sources) figures.push_back(source->figures());
  std::vector<std::string> members = recorded();
  const auto acked_at = [&](const std::string& id, size_t worker) -> std::optional<uint64_t> {
    auto it = replicas.find(id);
    return it == replicas.end() || it->second.acked.empty() ? std::nullopt
                                                            : it->second.acked[worker];
  };

  // Shrink: a member behind (no flow, or short of what a write waited for) for too long.
  for (const std::string& member : members) {
    bool drop = false;
    for (size_t w = 0; w < workers; ++w) {
      const std::optional<uint64_t> acked = acked_at(member, w);
      const std::pair<std::string, size_t> key(member, w);
      auto b = behind_.find(key);
      if (b != behind_.end() && acked.has_value() &&
          (*acked >= b->second.target || b->second.target == UINT64_MAX)) {
        behind_.erase(b);
        b = behind_.end();
      }
      if (b == behind_.end()) {
        if (!acked.has_value()) {
          b = behind_.emplace(key, Behind{now_ms, UINT64_MAX}).first;
        } else if (*acked < figures[w].wanted_lsn) {
          b = behind_.emplace(key, Behind{now_ms, figures[w].wanted_lsn}).first;
        }
      }
      if (b != behind_.end() && now_ms - b->second.since_ms >= options_.lag_limit_ms) drop = true;
    }
    if (!drop) continue;
    std::vector<std::string> rest = members;
    std::erase(rest, member);
    if (!Record(term, rest)) return;  // Writes wait for it until etcd no longer names it.
    std::erase_if(behind_, [&](const auto& entry) { return entry.first.first == member; });
    // Not asked to join again at once: writes would wait for it again.
    let_go_ms_[member] = now_ms;
    std::vector<std::string> local = rest;
    if (joining_.has_value()) local.push_back(joining_->id);
    const uint64_t generation = options_.set->Set(std::move(local));
    if (joining_.has_value()) joining_->generation = generation;
    Log(LogLevel::kWarning,
        "in-sync set of term %d: replica %s left it (no acknowledgement for %d ms); %d members",
        term, member, options_.lag_limit_ms, rest.size());
    return;  // One change a tick.
  }

  // Growth: one replica at a time. The workers wait for a joining replica: one that falls
  // behind what a write waits for, for as long as a member may, is let go like a member.
  const std::map<std::string, std::vector<std::optional<uint64_t>>> before =
      std::exchange(last_acked_, {});
  for (const auto& [id, replica] : replicas) last_acked_[id] = replica.acked;
  if (joining_.has_value()) {
    const std::string id = joining_->id;
    bool everywhere = true;
    bool short_of_writes = false;
    for (size_t w = 0; w < workers; ++w) {
      const std::optional<uint64_t> acked = acked_at(id, w);
      everywhere &= acked.has_value();
      short_of_writes |= acked.has_value() && *acked < figures[w].wanted_lsn;
    }
    if (!short_of_writes) {
      joining_->behind_since_ms = 0;
    } else if (joining_->behind_since_ms == 0) {
      joining_->behind_since_ms = now_ms;
    }
    const bool stuck = joining_->behind_since_ms != 0 &&
                       now_ms - joining_->behind_since_ms >= options_.lag_limit_ms;
    if (!everywhere || stuck || now_ms - joining_->since_ms > kJoinMs) {
      options_.set->Set(members);
      let_go_ms_[id] = now_ms;
      joining_.reset();
      Log(LogLevel::kWarning,
          "in-sync set of term %d: replica %s did not catch up (%s); tried again in %d ms", term,
          id,
          stuck ? absl::StrCat("behind what writes wait for for ", options_.lag_limit_ms, " ms")
                : absl::StrCat("not within ", kJoinMs, " ms"),
          kJoinMs);
      return;
    }
    for (size_t w = 0; w < workers; ++w) {
      // Every worker waits for it, and it holds what each had made when it began to.
      if (figures[w].set_generation < joining_->generation) return;
      if (*acked_at(id, w) < figures[w].set_taken_lsn) return;
    }
    members.push_back(id);
    if (!Record(term, members)) return;
    joining_.reset();
    Log(LogLevel::kInfo, "in-sync set of term %d: replica %s (%s) joined it; members: %s", term, id,
        replicas.at(id).address, absl::StrJoin(members, ","));
    return;
  }
  for (const auto& [id, replica] : replicas) {
    if (std::ranges::find(members, id) != members.end()) continue;
    if (!std::ranges::all_of(replica.acked, [](const auto& a) { return a.has_value(); })) {
      continue;  // Not on every worker.
    }
    auto let_go = let_go_ms_.find(id);
    if (let_go != let_go_ms_.end() && now_ms - let_go->second < kJoinMs) continue;
    // Alive: it acknowledged something since the last tick, or it holds every position. A
    // stopped replica's connection may stay open: it is no candidate while writes come.
    bool caught_up = true;
    for (size_t w = 0; w < workers; ++w) caught_up &= *replica.acked[w] >= figures[w].lsn;
    auto seen = before.find(id);
    if (!caught_up && seen != before.end() && seen->second == replica.acked) continue;
    std::vector<std::string> local = members;
    local.push_back(id);
    joining_ = Joining{id, options_.set->Set(std::move(local)), now_ms, 0};
    return;
  }
}

}  // namespace ringkv::repl
