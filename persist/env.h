// Env: the file-system operations of the logs and the snapshot commit that a test may want to
// fault, behind one small interface, in the manner of LevelDB's Env: the per-worker logs open,
// write, zero ahead, fdatasync and close their files through it, and DataDir reports each step of a
// snapshot commit to it. DefaultEnv() is the plain POSIX behaviour; a test's Env (e.g.
// persist/testing/fault_env.h) fails writes as a full disk would, drops what was not synced as
// a power loss would, or kills the process at a step, so production code has no test branches.
//
// Everything else (reading, mapping, the atomic file writer, directory syncs) goes to the
// system directly: nothing faults it yet. A new fault seam adds the operation here, calls it
// where the production code did the system call, and fakes it in a test Env.
//
// Threads: any; an Env is shared by every log of a data directory and must be thread-safe.
// It outlives the DataDir and logs that use it.
//
//   int fd;
//   if (int error = env.OpenLog(path, &fd); error != 0) return IoError("cannot create", path,
//   error); if (int error = env.Write(fd, 0, bytes); error != 0) ...
#ifndef RINGKV_PERSIST_ENV_H_
#define RINGKV_PERSIST_ENV_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace ringkv::persist {

class Env {
 public:
  virtual ~Env() = default;

  // Creates `path` (which must not exist) for writing; 0 and the descriptor, or the errno.
  virtual int OpenLog(const std::string& path, int* fd);
  // Writes all of `data` at `offset` (through short writes and EINTR); 0 or the errno. A
  // failure may have written part of it. A log writes at the end of its records, which may be
  // inside the zeros Zero wrote ahead of them.
  virtual int Write(int fd, uint64_t offset, std::string_view data);
  // Writes `bytes` zero bytes at `offset` and waits until the disk has them (sync_file_range:
  // the data, not the file's size, which only an fdatasync makes durable); 0 or the errno.
  virtual int Zero(int fd, uint64_t offset, uint64_t bytes);
  // fdatasync; 0 or the errno. Never retried after a failure (persist/file.h says why).
  virtual int SyncData(int fd);
  // Cuts the file back to `size` bytes (after a write that failed part way); 0 or the errno.
  virtual int Truncate(int fd, uint64_t size);
  virtual void CloseLog(int fd);
  // A snapshot commit reached `step`: "writing" (shard 0's temporary file written, not
  // committed), "renamed" (every snapshot file in place, no MANIFEST yet), "manifest" (the
  // MANIFEST in place, nothing removed yet), "cleanup" (one stale file removed).
  virtual void AtSnapshotStep(std::string_view step);
};

// The POSIX Env; never destroyed.
Env* DefaultEnv();

}  // namespace ringkv::persist

#endif  // RINGKV_PERSIST_ENV_H_
