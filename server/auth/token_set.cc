#include "server/auth/token_set.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ringkv {

TokenSet::Digest TokenSet::DigestOf(std::string_view token) {
  Digest digest{};
  unsigned int length = 0;
  EVP_Digest(token.data(), token.size(), digest.data(), &length, EVP_sha256(), nullptr);
  return digest;
}

absl::StatusOr<TokenSet> TokenSet::Parse(std::string_view text) {
  TokenSet set;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const auto bad = [line_number](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": ", why));
    };
    if (fields.size() != 2) return bad("expected TOKEN ROLE");
    const std::string_view token(fields[0].data(), fields[0].size());
    if (token.size() < kMinTokenBytes || token.size() > kMaxTokenBytes) {
      return bad(absl::StrCat("a token must be ", kMinTokenBytes, " .. ", kMaxTokenBytes,
                              " characters, this one is ", token.size()));
    }
    for (char c : token) {
      if (c < 0x21 || c > 0x7e) return bad("a token must be visible ASCII characters");
    }
    const std::optional<Role> role =
        ParseRole(std::string_view(fields[1].data(), fields[1].size()));
    if (!role) {
      return bad(
          absl::StrCat("unknown role '", fields[1], "'; use read, replication, write or admin"));
    }
    const Digest digest = DigestOf(token);
    for (const Entry& entry : set.entries_) {
      if (entry.digest == digest) return bad("the same token is listed twice");
    }
    set.entries_.push_back({digest, *role});
  }
  if (set.entries_.empty()) {
    return absl::InvalidArgumentError("no tokens (each line is TOKEN ROLE)");
  }
  return set;
}

absl::StatusOr<TokenSet> TokenSet::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read token file ", path, ": ", std::strerror(errno)));
  }
  std::string text(kMaxFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read token file ", path));
  }
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, " is larger than ", kMaxFileBytes, " bytes"));
  }
  absl::StatusOr<TokenSet> set = Parse(text);
  if (!set.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, ", ", set.status().message()));
  }
  return set;
}

Role TokenSet::Find(std::string_view token) const {
  const Digest digest = DigestOf(token);
  // Every entry is compared, and the match picked without a branch on it.
  uint8_t found = 0;
  for (const Entry& entry : entries_) {
    const uint8_t equal = CRYPTO_memcmp(entry.digest.data(), digest.data(), digest.size()) == 0;
    found |= static_cast<uint8_t>(-equal) & static_cast<uint8_t>(entry.role);
  }
  return static_cast<Role>(found);
}

}  // namespace ringkv
