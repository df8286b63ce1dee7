// Durable files: how ringkv puts a file in place so that after a crash at any moment the name
// holds either the old file or the whole new one, never a part.
//
// WriteFileAtomically writes DIR/NAME.tmp, fsyncs it, renames it over DIR/NAME and fsyncs DIR
// (the rename is only durable once the directory is: Redis's RDB and Dragonfly's manifest do
// the same). A failure at any step leaves DIR/NAME as it was, removes the temporary file, and
// comes back as an error that names the file and the step; a failed fsync is not retried (the
// kernel may have dropped the dirty pages it could not write, so a second fsync that succeeds
// proves nothing).
//
//   absl::Status s = WriteFileAtomically("/var/lib/ringkv", "MANIFEST", bytes);
//   absl::StatusOr<std::string> back = ReadFile("/var/lib/ringkv/MANIFEST");
#ifndef RINGKV_PERSIST_FILE_H_
#define RINGKV_PERSIST_FILE_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ringkv::persist {

absl::Status WriteFileAtomically(const std::string& dir, const std::string& name,
                                 std::string_view data);

// The whole of a file; NOT_FOUND if there is none.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace ringkv::persist

#endif  // RINGKV_PERSIST_FILE_H_
