#include "persist/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ringkv::persist {
namespace {

constexpr size_t kWriteBuffer = size_t{1} << 20;

}  // namespace

absl::Status IoError(std::string_view step, const std::string& path, int error) {
  std::string message = absl::StrCat(std::string(step), " ", path, ": ", std::strerror(error));
  if (error == ENOSPC || error == EDQUOT) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

int WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open the directory", dir, errno);
  const int error = fsync(fd) == 0 ? 0 : errno;
  close(fd);
  if (error != 0) return IoError("cannot fsync the directory", dir, error);
  return absl::OkStatus();
}

AtomicFileWriter::AtomicFileWriter(std::string dir, std::string path, int fd)
    : dir_(std::move(dir)), path_(std::move(path)), tmp_(path_ + ".tmp"), fd_(fd) {}

absl::StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Create(
    const std::string& dir, const std::string& name) {
  std::string path = absl::StrCat(dir, "/", name);
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("cannot create", tmp, errno);
  return std::unique_ptr<AtomicFileWriter>(new AtomicFileWriter(dir, std::move(path), fd));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    close(fd_);
    unlink(tmp_.c_str());
  }
}

absl::Status AtomicFileWriter::Fail(absl::Status status) {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  unlink(tmp_.c_str());
  return status;
}

absl::Status AtomicFileWriter::Flush() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(tmp_, " failed before"));
  const int error = WriteAll(fd_, buffer_);
  buffer_.clear();
  if (error != 0) return Fail(IoError("cannot write", tmp_, error));
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Append(std::string_view data) {
  bytes_ += data.size();
  if (buffer_.size() + data.size() > kWriteBuffer) {
    if (absl::Status s = Flush(); !s.ok()) return s;
    if (data.size() >= kWriteBuffer) {
      const int error = WriteAll(fd_, data);
      if (error != 0) return Fail(IoError("cannot write", tmp_, error));
      return absl::OkStatus();
    }
  }
  buffer_.append(data);
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (absl::Status s = Flush(); !s.ok()) return s;
  if (fsync(fd_) != 0) return Fail(IoError("cannot fsync", tmp_, errno));
  const int fd = std::exchange(fd_, -1);
  if (close(fd) != 0) {
    const int error = errno;
    unlink(tmp_.c_str());
    return IoError("cannot close", tmp_, error);
  }
  if (rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    unlink(tmp_.c_str());
    return IoError("cannot rename into place", tmp_, error);
  }
  return SyncDirectory(dir_);
}

absl::Status WriteFileAtomically(const std::string& dir, const std::string& name,
                                 std::string_view data) {
  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Create(dir, name);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = (*writer)->Append(data); !s.ok()) return s;
  return (*writer)->Commit();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  return std::string((*file)->data());
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no file ", path));
    return IoError("cannot open", path, errno);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int error = errno;
    close(fd);
    return IoError("cannot stat", path, error);
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* base = nullptr;
  if (size > 0) {
    base = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED) {
      const int error = errno;
      close(fd);
      return IoError("cannot map", path, error);
    }
    madvise(base, size, MADV_SEQUENTIAL);
  }
  close(fd);
  return std::unique_ptr<MappedFile>(new MappedFile(base, size));
}

MappedFile::~MappedFile() {
  if (base_ != nullptr) munmap(base_, size_);
}

}  // namespace ringkv::persist
