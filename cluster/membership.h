// Membership: a server's entry in its group (--etcd, --group; issue 23), and its part in the
// group's election.
//
// The entry: the key
//   /ringkv/GROUP/members/SERVER_ID
// lives under a lease of --failover-timeout and holds what the server is, one line of
// space-separated NAME=VALUE fields (`describe`: address, role, primary, positions; then the
// standing, below), rewritten at a renewal (about three times a lease) when it has changed. A
// server that dies drops out when its lease expires; one that stops cleanly revokes it (Leave), and
// drops out at once. If etcd cannot be reached for a while, the thread keeps trying (a lease that
// expired meanwhile is replaced by a new one), and says so in the log once per outage.
//
// The election (when Options::lead is set). The group's leader key, /ringkv/GROUP/leader,
// holds "TERM SERVER_ID ADDRESS" under the leader's member lease (EtcdClient::Campaign: one
// transaction, so one winner, and each win a term above every earlier one). The thread
// watches it (etcd's Watch stream), and reads it at each change, at each renewal (in case the
// watch missed one), and, while nobody leads, every `poll` (TTL/20, from 50 to 250 ms):
//   - held by this server: it leads; each renewal etcd answers moves its fence (`fence`) to
//     the renewal's send time + the TTL granted - a margin (TTL/10, at least 0.5 s), so that
//     writes stop before the lease can expire, even when etcd cannot be reached;
//   - held by another: if this server led, its fence closes at once; it follows that address
//     (`follow`), unless the address is its own (a key left by this server's previous run,
//     which expires with that run's lease);
//   - held by nobody: the fence closes if this server led; if `standing` says it may lead, it
//     reads the last term handed out, T, and writes its entry with its standing at that
//     vacancy ("vacancy=T"). It campaigns once each rival (a member of its tier or above) has
//     stated its standing at vacancy T too and none stands better (tier, then score, then the
//     lower id); a rival silent for a second is left out (dead, its entry not expired yet).
//     Ranking on standings all written after the leader went means the replica that applied
//     the most of the old primary's records takes over, whatever each one's timing. A win calls
//     `lead` (the server promotes itself; it may take a while), renews the lease, and opens the
//     fence if the key is still its own. A failed `lead` revokes the lease, which gives the key up.
//
// The in-sync set (--acks=isr). PREFIX/in_sync holds "TERM LEADER_ID MEMBER_ID,..." ("-" for
// no member), written by the leader of TERM only while it holds the leader key
// (EtcdClient::PutAsLeader), and without a lease: it outlives its writer. The leader and the
// members hold every write acknowledged in the group (server/repl/in_sync_keeper.h), so while
// the key exists only they may campaign: another server's entry says "tier=-", and a campaign
// fails if the key changed since it was read. A leader without an in-sync set deletes the key.
//
// Threads: its own; Join and Leave from the control thread. The hooks run on its thread.
#ifndef RINGKV_CLUSTER_MEMBERSHIP_H_
#define RINGKV_CLUSTER_MEMBERSHIP_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/etcd_client.h"

namespace ringkv::etcd {

// The prefix of a group's keys in etcd.
std::string GroupPrefix(const std::string& group);
// A group's member key for `server_id`.
std::string MemberKey(const std::string& group, const std::string& server_id);

// Who should lead when the group has no leader: the higher tier first, then the higher score.
struct Standing {
  // 2: a replica with a whole image of the primary it followed (score: the sum of its applied
  //    positions); 1: a server with data of its own (score: its keys); 0: an empty server.
  int tier = 0;
  uint64_t score = 0;
};

// The leader key's value parsed: "SERVER_ID ADDRESS" (nullopt if it is not that).
struct LeaderValue {
  std::string server_id;
  std::string address;
};
std::optional<LeaderValue> ParseLeaderValue(const std::string& value);

// The in-sync set's key (PREFIX/in_sync) and its value.
std::string InSyncKey(const std::string& group);
struct InSync {
  uint64_t term = 0;
  std::string leader_id;
  std::vector<std::string> members;
  // Whether `server_id` holds every write acknowledged under this set: its leader or a member.
  bool Holds(const std::string& server_id) const;
};
std::string FormatInSync(const InSync& in_sync);
std::optional<InSync> ParseInSync(const std::string& value);

class Membership {
 public:
  struct Options {
    EtcdClient::Options etcd;
    std::string group;
    std::string server_id;
    absl::Duration ttl = absl::Seconds(3);  // --failover-timeout.
    // What the entry says; called from the membership's thread at each renewal.
    std::function<std::string()> describe;

    // The election; without `lead`, the server only registers.
    std::string address;  // Where clients reach this server: the leader key names it.
    // Whether this server may lead now, and how well (nullopt: not now, e.g. a replica in the
    // middle of a full sync).
    std::function<std::optional<Standing>()> standing;
    // This server won `term`: it must serve as the primary once this returns OK (the fence
    // opens after it).
    std::function<absl::Status(uint64_t term)> lead;
    // Another server leads, at `address`: follow it.
    std::function<absl::Status(const std::string& address)> follow;
    // Writes may be acknowledged until `deadline_ns` (CLOCK_BOOTTIME; 0: not at all).
    std::function<void(int64_t deadline_ns)> fence;
    // Whether this server keeps an in-sync set when it leads (--acks=isr): a win records an
    // empty one before `lead`; otherwise it deletes the key.
    bool in_sync = false;
  };
  // Connects, takes a lease and writes the entry; an error names the endpoints otherwise.
  static absl::StatusOr<std::unique_ptr<Membership>> Join(Options options);
  ~Membership();
  // Stops renewing and revokes the lease (the entry, and the leader key if held, go).
  // Idempotent.
  void Leave();

  // What the membership knows, for stats (any thread).
  struct View {
    bool leading = false;
    uint64_t term = 0;           // The term of the leader last seen (0: none seen).
    std::string leader_address;  // The leader last seen (empty: none).
  };
  View view() const;

  // A planned failover: while this server holds the leader key, gives it to the member
  // `target_id` (under that member's lease, in the next term, one etcd transaction:
  // EtcdClient::HandOver); the term. The target's membership sees the key become its own and
  // takes over as after a win; this one's sees it go, closes the fence and follows. Any
  // thread.
  absl::StatusOr<uint64_t> HandOver(const std::string& target_id);
  // Waits until the member `server_id`'s entry says it serves as the primary of `term` (or a
  // later one); DEADLINE_EXCEEDED after `timeout`. Any thread.
  absl::Status AwaitPrimary(const std::string& server_id, uint64_t term, absl::Duration timeout);

  // The leader of `term` (this server) records its in-sync set (nullopt: it keeps none, and
  // the key goes). FAILED_PRECONDITION once it no longer holds the leader key. Any thread.
  absl::Status RecordInSync(uint64_t term, const std::optional<std::vector<std::string>>& members);

 private:
  Membership(Options options, std::unique_ptr<EtcdClient> client, int64_t lease);
  void Run();
  // Renews the lease (a new one if it expired) and rewrites the entry.
  absl::Status Renew();
  // One look at the leader key, and what follows from it.
  void Elect();
  // Nobody leads: campaigns when this server's turn comes.
  void Vacancy();
  // This server holds the leader key in `term` (won, or handed over): records an empty
  // in-sync set if it keeps one, promotes it (`lead`), and opens the fence.
  void TakeOver(uint64_t term);
  // The entry's text: describe() and the standing.
  std::string Entry() const;
  // Writes the entry unless etcd holds it as it is, under the lease it has.
  absl::Status Publish();
  int64_t Margin() const;
  void SetView(bool leading, uint64_t term, const std::string& leader_address);

  const Options options_;
  const std::string key_;
  const std::string prefix_;
  const int64_t poll_ns_;
  std::unique_ptr<EtcdClient> client_;
  // The membership's thread only (Join before it starts, Leave after it stops).
  int64_t lease_;
  bool healthy_ = true;      // The last renewal reached etcd.
  int64_t lease_until_ = 0;  // What the last renewal etcd answered allows (CLOCK_BOOTTIME).
  bool leading_ = false;
  uint64_t led_term_ = 0;            // The last term won whose `lead` succeeded.
  std::string following_;            // The leader address this server follows (empty: none yet).
  int64_t vacant_since_ = 0;         // When this server saw that nobody leads (0: somebody does).
  std::optional<uint64_t> vacancy_;  // The last term handed out, at that sight.
  // The in-sync key's revision at that sight (0: absent), and whether it let this server lead.
  int64_t in_sync_revision_ = 0;
  bool eligible_ = true;
  std::string published_;        // The entry etcd holds, as last written,
  int64_t published_lease_ = 0;  // and the lease it was written under.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;            // Guarded by mu_.
  bool leader_changed_ = false;  // Guarded by mu_: the watch saw the leader key change.
  View view_;                    // Guarded by mu_.
  std::thread thread_;
  std::unique_ptr<EtcdClient::Watch> watch_;  // The leader key's, with an election.
};

}  // namespace ringkv::etcd

#endif  // RINGKV_CLUSTER_MEMBERSHIP_H_
