// Membership: a server's entry in its group (--etcd, --group; issue 23). The key
//   /ringkv/GROUP/members/SERVER_ID
// lives under a lease of --failover-timeout and holds what the server is, one line of
// space-separated NAME=VALUE fields (`describe`: address, role, primary, positions), written
// at each renewal, about three times a lease. A server that dies drops out when its lease
// expires; one that stops cleanly revokes it (Leave), and drops out at once. If etcd cannot be
// reached for a while, the thread keeps trying (a lease that expired meanwhile is replaced by
// a new one), and says so in the log once per outage.
//
// Threads: its own; Join and Leave from the control thread.
#ifndef RINGKV_CLUSTER_MEMBERSHIP_H_
#define RINGKV_CLUSTER_MEMBERSHIP_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/etcd_client.h"

namespace ringkv::etcd {

// The prefix of a group's keys in etcd.
std::string GroupPrefix(const std::string& group);
// A group's member key for `server_id`.
std::string MemberKey(const std::string& group, const std::string& server_id);

class Membership {
 public:
  struct Options {
    EtcdClient::Options etcd;
    std::string group;
    std::string server_id;
    absl::Duration ttl = absl::Seconds(3);  // --failover-timeout.
    // What the entry says; called from the membership's thread at each renewal.
    std::function<std::string()> describe;
  };
  // Connects, takes a lease and writes the entry; an error names the endpoints otherwise.
  static absl::StatusOr<std::unique_ptr<Membership>> Join(Options options);
  ~Membership();
  // Stops renewing and revokes the lease (the entry goes). Idempotent.
  void Leave();

 private:
  Membership(Options options, std::unique_ptr<EtcdClient> client, int64_t lease);
  void Run();
  // Renews the lease (a new one if it expired) and rewrites the entry.
  absl::Status Renew();

  const Options options_;
  const std::string key_;
  std::unique_ptr<EtcdClient> client_;
  int64_t lease_;        // The membership's thread (Join before it starts, Leave after it stops).
  bool healthy_ = true;  // The membership's thread: the last renewal reached etcd.
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // Guarded by mu_.
  std::thread thread_;
};

}  // namespace ringkv::etcd

#endif  // RINGKV_CLUSTER_MEMBERSHIP_H_
