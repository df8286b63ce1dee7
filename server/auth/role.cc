#include "server/auth/role.h"

namespace ringkv {

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kRead:
      return "read";
    case Role::kReplication:
      return "replication";
    case Role::kWrite:
      return "write";
    case Role::kAdmin:
      return "admin";
    case Role::kNone:
      break;
  }
  return "none";
}

std::optional<Role> ParseRole(std::string_view name) {
  if (name == "read") return Role::kRead;
  if (name == "replication") return Role::kReplication;
  if (name == "write") return Role::kWrite;
  if (name == "admin") return Role::kAdmin;
  return std::nullopt;
}

}  // namespace ringkv
