// RequestLimits: what the daemon accepts, from --max-key-bytes and --max-value-bytes. A request
// that breaks one is rejected whole with INVALID_ARGUMENT (or, inside a batch, that item alone)
// and its message names the limit. Constant after construction; any thread.
//
//   RequestLimits limits{.max_key_bytes = 4096, .max_value_bytes = 4 << 20};
//   if (absl::Status s = limits.CheckKey(key); !s.ok()) ...
#ifndef RINGKV_SERVER_REQUEST_LIMITS_H_
#define RINGKV_SERVER_REQUEST_LIMITS_H_

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringkv {

struct RequestLimits {
  size_t max_key_bytes = 4096;
  size_t max_value_bytes = size_t{4} << 20;

  absl::Status CheckKey(std::string_view key) const {
    if (key.empty()) return absl::InvalidArgumentError("key is empty; keys are 1 or more bytes");
    if (key.size() > max_key_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key is ", key.size(), " bytes; the limit is --max-key-bytes=", max_key_bytes));
    }
    return absl::OkStatus();
  }
  absl::Status CheckValue(std::string_view value) const {
    if (value.size() > max_value_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "value is ", value.size(), " bytes; the limit is --max-value-bytes=", max_value_bytes));
    }
    return absl::OkStatus();
  }
  absl::Status CheckPut(std::string_view key, std::string_view value) const {
    absl::Status status = CheckKey(key);
    return status.ok() ? CheckValue(value) : status;
  }
  // The largest request message a transport reads: room for a value at the limit plus its key
  // and framing, with slack for batches, and at most 2 GiB (protobuf's own limit). A bigger one
  // is refused (RESOURCE_EXHAUSTED) before it is read.
  size_t max_message_bytes() const {
    return std::min<size_t>(2 * max_value_bytes + max_key_bytes + (size_t{1} << 20),
                            std::numeric_limits<int>::max());
  }
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_REQUEST_LIMITS_H_
