// TempDir: a fresh, empty directory for one test (under $TMPDIR, else /tmp), removed with all
// it holds when the TempDir goes. The one temporary-directory fixture of the C++ tests.
// Test thread only.
//
//   TempDir temp("ringkv-file-test");
//   WriteFileAtomically(temp.path(), "MANIFEST", "x");
//   std::string data = temp.Path("data");  // temp.path() + "/data"; not created.
#ifndef RINGKV_BASE_TESTING_TEMP_DIR_H_
#define RINGKV_BASE_TESTING_TEMP_DIR_H_

#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace ringkv {

class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "ringkv-test") {
    std::string pattern = (std::filesystem::temp_directory_path() / prefix).string() + "-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "cannot make a temporary directory %s: %s\n", pattern.c_str(),
                   std::strerror(errno));
      std::abort();
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // `name` inside the directory.
  std::string Path(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

}  // namespace ringkv

#endif  // RINGKV_BASE_TESTING_TEMP_DIR_H_
