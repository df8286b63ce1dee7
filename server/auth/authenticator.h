// Authenticator: token auth for both transports (--auth-token-file). It holds the current
// TokenSet, swaps in a new one when the file is re-read (SIGHUP), and answers which role a
// request's `authorization` header grants. Authorize() then decides a call: health checks are
// open, every other method needs a token whose role is at least the method's
// (server/handlers/methods.h).
//
// The per-call cost: a connection's client sends the same header on every call, so each
// connection (h2) or loop (grpc++) keeps a RoleCache, and a call whose header matches the cached
// one costs an atomic load and a comparison; only a new header takes the lock and hashes.
//
// Threads: Load and Reload on the control thread; RoleOf and generation from any thread; a
// RoleCache belongs to one thread.
//
//   auto auth = Authenticator::Load("/etc/ringkv/tokens").value();
//   RoleCache cache;
//   Role caller = cache.RoleOf(*auth, "Bearer s3cr3t-t0ken-0123456789");
//   absl::Status allowed = Authorize(MethodOf(MethodId::kPut), caller, /*sent_token=*/true);
#ifndef RINGKV_SERVER_AUTH_AUTHENTICATOR_H_
#define RINGKV_SERVER_AUTH_AUTHENTICATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/auth/role.h"
#include "server/auth/token_set.h"

namespace ringkv {

struct Method;

class Authenticator {
 public:
  // Reads `path`; INVALID_ARGUMENT naming the file (and line) if it cannot.
  static absl::StatusOr<std::unique_ptr<Authenticator>> Load(const std::string& path);

  // Re-reads the file. On success the new set is in force for every call from now on; on
  // failure the old set stays, and the error says why. Control thread.
  absl::Status Reload();
  // The role an `authorization` header value grants: "Bearer TOKEN" (the scheme in any case)
  // with a TOKEN in the set; kNone otherwise. Any thread.
  Role RoleOf(std::string_view authorization) const;
  // Grows at each reload that took effect. A RoleOf answer found after reading generation g
  // is good while generation() is still g. Any thread.
  uint64_t generation() const {
    // Pairs with Reload's release: a reader that sees the new generation also sees the new set.
    return generation_.load(std::memory_order_acquire);
  }
  const std::string& path() const { return path_; }
  size_t tokens() const;

 private:
  Authenticator(std::string path, TokenSet set);

  const std::string path_;
  // A std::shared_mutex, not absl::Mutex: Debian's Abseil is built without TSan, which then
  // cannot see the lock and reports every reload as a race with the readers.
  mutable std::shared_mutex mu_;
  TokenSet set_;                         // Guarded by mu_.
  std::atomic<uint64_t> generation_{1};  // Written under mu_.
};

// The last header seen and the role it granted. One thread.
class RoleCache {
 public:
  Role RoleOf(const Authenticator& auth, std::string_view authorization);

 private:
  std::string authorization_;
  Role role_ = Role::kNone;
  uint64_t generation_ = 0;  // 0: nothing cached (Authenticator's start at 1).
};

// Whether a call of `method` may run for `caller`: OK; UNAUTHENTICATED without a token
// (`sent_token` false) or with one not in the set; PERMISSION_DENIED if the token's role is
// below the method's. Health checks are always allowed. Refusals are logged at debug level
// (never with the token).
absl::Status Authorize(const Method& method, Role caller, bool sent_token);

}  // namespace ringkv

#endif  // RINGKV_SERVER_AUTH_AUTHENTICATOR_H_
