// Durable files: how ringkv puts a file in place so that after a crash at any moment the name
// holds either the old file or the whole new one, never a part.
//
// AtomicFileWriter writes DIR/NAME.tmp as it is given bytes (through a buffer of its own, so a
// file of any size costs that buffer), and Commit fsyncs it, renames it over DIR/NAME and
// fsyncs DIR (the rename is only durable once the directory is: Redis's RDB and Dragonfly's
// manifest do the same). A failure at any step leaves DIR/NAME as it was, removes the temporary
// file, and comes back as an error that names the file and the step; a failed fsync is not
// retried (the kernel may have dropped the dirty pages it could not write, so a second fsync
// that succeeds proves nothing). WriteFileAtomically does all of it for bytes in memory.
//
//   absl::Status s = WriteFileAtomically("/var/lib/ringkv", "MANIFEST", bytes);
//   absl::StatusOr<std::string> back = ReadFile("/var/lib/ringkv/MANIFEST");
#ifndef RINGKV_PERSIST_FILE_H_
#define RINGKV_PERSIST_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ringkv::persist {

class AtomicFileWriter {
 public:
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Create(const std::string& dir,
                                                                  const std::string& name);
  // Without a Commit, the temporary file is removed.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  absl::Status Append(std::string_view data);
  absl::Status Commit();
  // Bytes appended so far.
  uint64_t bytes() const { return bytes_; }

 private:
  AtomicFileWriter(std::string dir, std::string path, int fd);
  absl::Status Flush();
  absl::Status Fail(absl::Status status);

  const std::string dir_;
  const std::string path_;
  const std::string tmp_;
  int fd_;
  std::string buffer_;
  uint64_t bytes_ = 0;
};

absl::Status WriteFileAtomically(const std::string& dir, const std::string& name,
                                 std::string_view data);

// The whole of a file; NOT_FOUND if there is none.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// A file mapped read-only, for reading big files without a copy; unmapped when destroyed.
class MappedFile {
 public:
  // NOT_FOUND if there is no such file.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view data() const { return {static_cast<const char*>(base_), size_}; }

 private:
  MappedFile(void* base, size_t size) : base_(base), size_(size) {}
  void* base_;
  size_t size_;
};

// Writes all of `data` to `fd`, through short writes and EINTR; 0 or the errno.
int WriteAll(int fd, std::string_view data);
// fsyncs directory `dir`, so that the names created or removed in it are durable.
absl::Status SyncDirectory(const std::string& dir);
// An error naming the step, the path and errno's text: RESOURCE_EXHAUSTED for a want of space
// (ENOSPC, EDQUOT), INTERNAL for anything else.
absl::Status IoError(std::string_view step, const std::string& path, int error);
// Whether `status` is IoError's want of space.
inline bool IsOutOfSpace(const absl::Status& status) {
  return status.code() == absl::StatusCode::kResourceExhausted;
}

}  // namespace ringkv::persist

#endif  // RINGKV_PERSIST_FILE_H_
