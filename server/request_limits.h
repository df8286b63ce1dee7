// RequestLimits: what the daemon accepts, from --max-key-bytes, --max-value-bytes,
// --max-batch-items, --max-reply-bytes and --max-reply-memory. A request that breaks one is
// rejected whole with INVALID_ARGUMENT (or, inside a batch, that item alone), a MultiGet whose
// values would pass the reply's limit (or a Stream GET past its unread answers', or a GET past
// what all calls' answers may hold) with RESOURCE_EXHAUSTED, and the message names the limit.
// They bound what one call, and all of them together, can make the server hold: a MultiGet of
// one key many times over asks for its value as often. Constant after construction; any
// thread.
//
//   RequestLimits limits{.max_key_bytes = 4096, .max_value_bytes = 4 << 20};
//   if (absl::Status s = limits.CheckKey(key); !s.ok()) ...
#ifndef RINGKV_SERVER_REQUEST_LIMITS_H_
#define RINGKV_SERVER_REQUEST_LIMITS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringkv {

struct RequestLimits {
  size_t max_key_bytes = 4096;
  size_t max_value_bytes = size_t{4} << 20;
  // Keys of a MultiGet, items of a MultiPut, operations of one Stream message.
  size_t max_batch_items = 10000;
  // The bytes of values one MultiGet's reply may carry, or one Stream's answers hold until they
  // are written (at least max_value_bytes).
  size_t max_reply_bytes = size_t{64} << 20;
  // The bytes of values all calls' answers together may hold until they leave their calls
  // (at least max_reply_bytes): every GET of a value of kBudgetedValueBytes or more takes its
  // size (ServerContext::reply_memory).
  size_t max_reply_memory = size_t{1} << 30;

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
  // max_reply_bytes as a Request::budget (an int64_t, however large the flag).
  int64_t reply_budget() const { return AsBudget(max_reply_bytes); }
  // max_reply_memory as the server's ServerContext::reply_memory, the same way.
  int64_t reply_memory_budget() const { return AsBudget(max_reply_memory); }
  // `what` ("MultiGet", "a Stream message") holds `items` items, named `unit` ("keys"):
  // refused past max_batch_items.
  absl::Status CheckBatch(const char* what, size_t items, const char* unit) const {
    if (items <= max_batch_items) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", items, " ", unit,
                     "; the limit is --max-batch-items=", max_batch_items, ": split it"));
  }
  // The largest request message a transport reads: room for a value at the limit plus its key
  // and framing, with slack for batches, and at most 2 GiB (protobuf's own limit). A bigger one
  // is refused (RESOURCE_EXHAUSTED) before it is read.
  size_t max_message_bytes() const {
    return std::min<size_t>(2 * max_value_bytes + max_key_bytes + (size_t{1} << 20),
                            std::numeric_limits<int>::max());
  }

 private:
  static int64_t AsBudget(size_t bytes) {
    return static_cast<int64_t>(std::min<size_t>(bytes, size_t{1} << 62));
  }
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_REQUEST_LIMITS_H_
