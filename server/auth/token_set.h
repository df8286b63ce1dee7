// TokenSet: the bearer tokens of --auth-token-file and the role each one grants. Only a
// SHA-256 digest of each token is kept, and a lookup compares the digest of what a client sent
// with every entry's, in constant time and without an early exit, so neither the time a lookup
// takes nor anything kept in memory tells a token away.
//
// The file: one `TOKEN ROLE` per line; blank lines and lines starting with '#' are skipped. A
// token is 16 .. 4096 visible ASCII characters (no spaces); a role is read, replication
// (includes read, plus following as a replica), write (includes replication) or admin
// (includes write, plus Snapshot and Replicate). A parse error names the line, never the token.
//
// Immutable once made; any thread.
//
//   absl::StatusOr<TokenSet> set = TokenSet::Parse("s3cr3t-t0ken-0123456789 write\n");
//   Role role = set->Find("s3cr3t-t0ken-0123456789");   // Role::kWrite
#ifndef RINGKV_SERVER_AUTH_TOKEN_SET_H_
#define RINGKV_SERVER_AUTH_TOKEN_SET_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/auth/role.h"

namespace ringkv {

class TokenSet {
 public:
  static constexpr size_t kMinTokenBytes = 16;
  static constexpr size_t kMaxTokenBytes = 4096;
  // A token file larger than this is refused (it is a list of tokens, not data).
  static constexpr size_t kMaxFileBytes = size_t{1} << 20;

  // INVALID_ARGUMENT naming the first bad line; a file without any token is an error too (it
  // would refuse every call).
  static absl::StatusOr<TokenSet> Parse(std::string_view text);
  // Reads and parses `path`; the error names the file.
  static absl::StatusOr<TokenSet> Load(const std::string& path);

  // The role `token` grants; kNone if it is not in the set.
  Role Find(std::string_view token) const;
  size_t size() const { return entries_.size(); }

 private:
  using Digest = std::array<uint8_t, 32>;
  struct Entry {
    Digest digest;
    Role role;
  };
  static Digest DigestOf(std::string_view token);

  std::vector<Entry> entries_;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_AUTH_TOKEN_SET_H_
