// TokenSet parsing and lookup, the Authenticator's reload and RoleCache, Authorize's answers,
// and which listen addresses count as loopback. Real files in a temporary directory.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "server/auth/authenticator.h"
#include "server/auth/exposure.h"
#include "server/auth/token_set.h"
#include "server/handlers/methods.h"

namespace ringkv {
namespace {

constexpr char kRead[] = "read-token-0123456789";
constexpr char kWrite[] = "write-token-0123456789";
constexpr char kAdmin[] = "admin-token-0123456789";

TEST(TokenSetTest, ParsesRolesCommentsAndBlankLines) {
  absl::StatusOr<TokenSet> set = TokenSet::Parse(
      absl::StrCat("# tokens\n\n", kRead, " read\n  ", kWrite, "\twrite  \r\n", kAdmin, " admin"));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->size(), 3u);
  EXPECT_EQ(set->Find(kRead), Role::kRead);
  EXPECT_EQ(set->Find(kWrite), Role::kWrite);
  EXPECT_EQ(set->Find(kAdmin), Role::kAdmin);
  EXPECT_EQ(set->Find("read-token-012345678"), Role::kNone);  // One character short.
  EXPECT_EQ(set->Find(""), Role::kNone);
  EXPECT_EQ(set->Find("read"), Role::kNone);
}

TEST(TokenSetTest, RefusesBadLinesNamingTheLineNotTheToken) {
  const struct {
    std::string text;
    std::string error;
  } cases[] = {
      {absl::StrCat(kRead, " read\n", kWrite, " root\n"), "line 2: unknown role 'root'"},
      {absl::StrCat(kRead, "\n"), "line 1: expected TOKEN ROLE"},
      {absl::StrCat(kRead, " read extra\n"), "line 1: expected TOKEN ROLE"},
      {"0123456789abcde read\n", "line 1: a token must be 16 .. 4096 characters, this one is 15"},
      {absl::StrCat(std::string(4097, 'x'), " read\n"), "this one is 4097"},
      {absl::StrCat(kRead, " read\n", kRead, " admin\n"), "line 2: the same token is listed"},
      {"read-token-01234\x01"
       "56789 read\n",
       "line 1: a token must be visible ASCII"},
      {"# only comments\n\n", "no tokens"},
      {"", "no tokens"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<TokenSet> set = TokenSet::Parse(c.text);
    ASSERT_FALSE(set.ok()) << c.text;
    EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(set.status().message().find(c.error), std::string_view::npos) << set.status();
    EXPECT_EQ(set.status().message().find("token-0123"), std::string_view::npos) << set.status();
  }
}

class AuthenticatorTest : public testing::Test {
 protected:
  void Write(const std::string& text) { std::ofstream(path_) << text; }

  ringkv::TempDir temp_{"ringkv-auth"};
  const std::string path_ = temp_.Path("tokens");
};

TEST_F(AuthenticatorTest, RoleOfReadsTheBearerHeader) {
  Write(absl::StrCat(kRead, " read\n", kWrite, " write\n"));
  auto auth = Authenticator::Load(path_);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ((*auth)->RoleOf(absl::StrCat("Bearer ", kRead)), Role::kRead);
  EXPECT_EQ((*auth)->RoleOf(absl::StrCat("bEaReR  ", kWrite, " ")), Role::kWrite);
  EXPECT_EQ((*auth)->RoleOf(kRead), Role::kNone);  // No scheme.
  EXPECT_EQ((*auth)->RoleOf(absl::StrCat("Basic ", kRead)), Role::kNone);
  EXPECT_EQ((*auth)->RoleOf("Bearer "), Role::kNone);
  EXPECT_EQ((*auth)->RoleOf(""), Role::kNone);
}

TEST_F(AuthenticatorTest, ReloadSwapsTheSetAndACacheSeesIt) {
  Write(absl::StrCat(kRead, " read\n"));
  auto loaded = Authenticator::Load(path_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Authenticator& auth = **loaded;
  RoleCache cache;
  const std::string header = absl::StrCat("Bearer ", kRead);
  EXPECT_EQ(cache.RoleOf(auth, header), Role::kRead);
  EXPECT_EQ(cache.RoleOf(auth, header), Role::kRead);  // Cached.
  EXPECT_EQ(cache.RoleOf(auth, absl::StrCat("Bearer ", kAdmin)), Role::kNone);

  Write(absl::StrCat(kAdmin, " admin\n"));
  ASSERT_TRUE(auth.Reload().ok());
  EXPECT_EQ(auth.tokens(), 1u);
  EXPECT_EQ(cache.RoleOf(auth, header), Role::kNone);  // Removed: the cached answer is stale.
  EXPECT_EQ(cache.RoleOf(auth, absl::StrCat("Bearer ", kAdmin)), Role::kAdmin);

  // A bad file or a missing one keeps the set in force.
  Write("garbage\n");
  absl::Status bad = auth.Reload();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find(path_ + ", line 1"), std::string_view::npos) << bad;
  unlink(path_.c_str());
  EXPECT_FALSE(auth.Reload().ok());
  EXPECT_EQ(cache.RoleOf(auth, absl::StrCat("Bearer ", kAdmin)), Role::kAdmin);
  EXPECT_FALSE(Authenticator::Load(path_).ok());
}

TEST(AuthorizeTest, OpenHealthAndEachRolesReach) {
  const Method& get = MethodOf(MethodId::kGet);
  const Method& put = MethodOf(MethodId::kPut);
  const Method& snapshot = MethodOf(MethodId::kSnapshot);
  const Method& health = MethodOf(MethodId::kHealthCheck);
  const Method& reflection = MethodOf(MethodId::kReflectionV1);
  EXPECT_TRUE(Authorize(health, Role::kNone, false).ok());
  EXPECT_EQ(Authorize(get, Role::kNone, false).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Authorize(get, Role::kNone, true).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Authorize(reflection, Role::kNone, true).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(Authorize(get, Role::kRead, true).ok());
  EXPECT_TRUE(Authorize(reflection, Role::kRead, true).ok());
  const absl::Status denied = Authorize(put, Role::kRead, true);
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.message(), "/ringkv.v1.KV/Put needs the write role; the token has read");
  EXPECT_TRUE(Authorize(put, Role::kWrite, true).ok());
  EXPECT_EQ(Authorize(snapshot, Role::kWrite, true).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Authorize(snapshot, Role::kAdmin, true).ok());
}

TEST(ExposureTest, LoopbackOnlyWithoutProtection) {
  EXPECT_TRUE(IsLoopbackListen("127.0.0.1:50051"));
  EXPECT_TRUE(IsLoopbackListen("127.8.9.10:1"));
  EXPECT_TRUE(IsLoopbackListen("[::1]:50051"));
  EXPECT_TRUE(IsLoopbackListen("localhost:0"));
  EXPECT_TRUE(IsLoopbackListen("[::ffff:127.0.0.1]:0"));
  EXPECT_FALSE(IsLoopbackListen("0.0.0.0:50051"));
  EXPECT_FALSE(IsLoopbackListen("[::]:50051"));
  EXPECT_FALSE(IsLoopbackListen(":50051"));
  EXPECT_FALSE(IsLoopbackListen("*:50051"));
  EXPECT_FALSE(IsLoopbackListen("10.1.2.3:50051"));
  EXPECT_FALSE(IsLoopbackListen("[::ffff:10.0.0.1]:0"));

  EXPECT_TRUE(CheckExposure("127.0.0.1:1", {}).ok());
  EXPECT_TRUE(CheckExposure("0.0.0.0:1", {.tokens = true}).ok());
  EXPECT_TRUE(CheckExposure("0.0.0.0:1", {.insecure = true}).ok());
  const absl::Status refused = CheckExposure("0.0.0.0:1", {});
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("--insecure"), std::string_view::npos) << refused;
}

}  // namespace
}  // namespace ringkv
