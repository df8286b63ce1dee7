#include "persist/file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "base/testing/temp_dir.h"

namespace ringkv::persist {
namespace {

class FileTest : public ::testing::Test {
 protected:
  bool Exists(const std::string& name) const { return std::filesystem::exists(dir_ + "/" + name); }

  ringkv::TempDir temp_{"ringkv-file-test"};
  const std::string dir_ = temp_.path();
};

TEST_F(FileTest, WritesReplacesAndLeavesNoTemporaryFile) {
  ASSERT_TRUE(WriteFileAtomically(dir_, "MANIFEST", "first").ok());
  EXPECT_EQ(*ReadFile(dir_ + "/MANIFEST"), "first");
  const std::string big(300'000, 'x');  // More than one read buffer.
  ASSERT_TRUE(WriteFileAtomically(dir_, "MANIFEST", big).ok());
  EXPECT_EQ(*ReadFile(dir_ + "/MANIFEST"), big);
  ASSERT_TRUE(WriteFileAtomically(dir_, "MANIFEST", "").ok());
  EXPECT_EQ(*ReadFile(dir_ + "/MANIFEST"), "");
  EXPECT_FALSE(Exists("MANIFEST.tmp"));
}

TEST_F(FileTest, AMissingFileIsNotFound) {
  const auto read = ReadFile(dir_ + "/nothing");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(read.status().message().find(dir_ + "/nothing"), std::string::npos);
}

TEST_F(FileTest, AFailedStepNamesTheFileAndLeavesTheOldOneInPlace) {
  // No such directory: nothing is created.
  const absl::Status s = WriteFileAtomically(dir_ + "/missing", "MANIFEST", "x");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir_ + "/missing/MANIFEST.tmp"), std::string::npos) << s;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/missing"));

  // The name is a non-empty directory: the rename fails, the directory stays, the temporary
  // file goes.
  ASSERT_EQ(mkdir((dir_ + "/taken").c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/taken", "inside", "keep").ok());
  const absl::Status r = WriteFileAtomically(dir_, "taken", "new");
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.message().find("rename"), std::string::npos) << r;
  EXPECT_EQ(*ReadFile(dir_ + "/taken/inside"), "keep");
  EXPECT_FALSE(Exists("taken.tmp"));
}

}  // namespace
}  // namespace ringkv::persist
