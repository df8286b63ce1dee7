#include "server/auth/authenticator.h"

#include <openssl/crypto.h>

#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "server/handlers/methods.h"

namespace ringkv {

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Load(const std::string& path) {
  absl::StatusOr<TokenSet> set = TokenSet::Load(path);
  if (!set.ok()) return set.status();
  return std::unique_ptr<Authenticator>(new Authenticator(path, *std::move(set)));
}

Authenticator::Authenticator(std::string path, TokenSet set)
    : path_(std::move(path)), set_(std::move(set)) {}

absl::Status Authenticator::Reload() {
  absl::StatusOr<TokenSet> set = TokenSet::Load(path_);
  if (!set.ok()) return set.status();
  std::unique_lock lock(mu_);
  set_ = *std::move(set);
  generation_.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

size_t Authenticator::tokens() const {
  std::shared_lock lock(mu_);
  return set_.size();
}

Role Authenticator::RoleOf(std::string_view authorization) const {
  constexpr absl::string_view kScheme = "bearer ";
  const absl::string_view header(authorization.data(), authorization.size());
  if (header.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(header.substr(0, kScheme.size()), kScheme)) {
    return Role::kNone;
  }
  const absl::string_view token = absl::StripAsciiWhitespace(header.substr(kScheme.size()));
  std::shared_lock lock(mu_);
  return set_.Find(std::string_view(token.data(), token.size()));
}

Role RoleCache::RoleOf(const Authenticator& auth, std::string_view authorization) {
  // The generation is read before the lookup: a reload between the two leaves an answer from
  // either set cached under the older generation, which the next call then finds stale.
  const uint64_t generation = auth.generation();
  if (generation == generation_ && authorization.size() == authorization_.size() &&
      CRYPTO_memcmp(authorization.data(), authorization_.data(), authorization.size()) == 0) {
    return role_;
  }
  role_ = auth.RoleOf(authorization);
  authorization_.assign(authorization);
  generation_ = generation;
  return role_;
}

absl::Status Authorize(const Method& method, Role caller, bool sent_token) {
  if (caller >= method.needs) return absl::OkStatus();
  absl::Status refused;
  if (!sent_token) {
    refused = absl::UnauthenticatedError(
        "this server requires a token: send the header 'authorization: Bearer TOKEN'");
  } else if (caller == Role::kNone) {
    refused = absl::UnauthenticatedError("unknown token");
  } else {
    refused = absl::PermissionDeniedError(
        absl::StrCat(std::string(method.path), " needs the ", std::string(RoleName(method.needs)),
                     " role; the token has ", std::string(RoleName(caller))));
  }
  Log(LogLevel::kDebug, "refused %s: %s", std::string(method.path), std::string(refused.message()));
  return refused;
}

}  // namespace ringkv
