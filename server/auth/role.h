// Role: what a caller of ringkv-server may do, as its bearer token says (--auth-token-file,
// server/auth/token_set.h). Each role includes those before it; a method names the least role
// that may call it (server/handlers/methods.h).
#ifndef RINGKV_SERVER_AUTH_ROLE_H_
#define RINGKV_SERVER_AUTH_ROLE_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace ringkv {

enum class Role : uint8_t {
  kNone,         // No token, or one not in the set: health checks only.
  kRead,         // Get, MultiGet, Scan, Stats, Stream reads, reflection.
  kReplication,  // And Replication.Flow: a replica's token, which reads everything (its
                 // primary's image) but writes nothing.
  kWrite,        // And Put, Delete, MultiPut, Expire, Persist, Increment, Stream writes.
  kAdmin,        // And Snapshot and Replication.Replicate.
};

// "read", "replication", "write", "admin"; "none" for kNone.
std::string_view RoleName(Role role);
std::optional<Role> ParseRole(std::string_view name);

}  // namespace ringkv

#endif  // RINGKV_SERVER_AUTH_ROLE_H_
