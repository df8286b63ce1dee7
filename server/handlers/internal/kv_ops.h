// KV operations between the wire and the engine, for every KV handler (unary calls, batch items
// and stream operations alike): Prepare* fill in an engine Request from the fields a client
// sent, or say what is wrong with them (INVALID_ARGUMENT, naming the limit); StatusOf and
// SetItem turn a Request's outcome back into a status or a batch item. `now_ms` (the server's
// clock, ServerContext::NowMs) turns a TTL into an absolute deadline, and TtlLeft a deadline back
// into a TTL.
#ifndef RINGKV_SERVER_HANDLERS_INTERNAL_KV_OPS_H_
#define RINGKV_SERVER_HANDLERS_INTERNAL_KV_OPS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "ringkv/v1/kv.pb.h"
#include "server/handlers/handler.h"
#include "server/request_limits.h"
#include "server/server_context.h"
#include "shard/request.h"

namespace ringkv::internal {

// The longest TTL accepted: 100 years, in milliseconds.
inline constexpr int64_t kMaxTtlMs = int64_t{100} * 365 * 24 * 3600 * 1000;

// `condition` null: the request has none.
absl::Status PrepareGet(const RequestLimits& limits, std::string_view key, Request* r);
absl::Status PreparePut(const RequestLimits& limits, int64_t now_ms, std::string_view key,
                        std::string_view value, int64_t ttl_ms,
                        const ringkv::v1::Condition* condition, Request* r);
absl::Status PrepareDelete(const RequestLimits& limits, std::string_view key,
                           const ringkv::v1::Condition* condition, Request* r);
absl::Status PrepareExpire(const RequestLimits& limits, int64_t now_ms, std::string_view key,
                           int64_t ttl_ms, Request* r);
absl::Status PreparePersist(const RequestLimits& limits, std::string_view key, Request* r);
absl::Status PrepareIncrement(const RequestLimits& limits, std::string_view key, int64_t delta,
                              Request* r);

// The status of a done request: OK, NOT_FOUND, FAILED_PRECONDITION naming the key's version,
// INVALID_ARGUMENT (an increment of a non-integer), OUT_OF_RANGE (an increment's overflow),
// RESOURCE_EXHAUSTED (no memory), UNAVAILABLE (the log failed: the context's message).
absl::Status StatusOf(const Request& r, const ServerContext& context);
// RESOURCE_EXHAUSTED for a GET refused by the server's --max-reply-memory
// (Result::kOverReplyMemory), a MultiGet's too.
absl::Status ReplyMemorySpent(const ServerContext& context);
// A done request as a batch item: its status, and what its operation returns (a Get's value,
// version and time left; a write's version; an increment's sum). Moves the value out.
void SetItem(ringkv::v1::ItemResult* item, Request& r, const ServerContext& context);
// An item that failed before reaching the engine.
void SetItem(ringkv::v1::ItemResult* item, const absl::Status& status);
// The same items, appended to `out` serialized as a repeated ItemResult field `field` (tag,
// length and the ItemResult, as protobuf writes them): a batch reply written without an
// ItemResult object per item (WireMessage). The OK ones are written here, field by field; the
// others, rarer and with messages, through SetItem. With `loans`, a value lent where it lies
// (Request::lent) is not copied into `out`: its place in `out` (where its bytes would start) and
// the loan, moved out of `r`, go to `loans` instead, for CallSink::ShareLoans.
void AppendItem(uint32_t field, Request& r, const ServerContext& context, std::string* out,
                std::vector<CallSink::LentAt>* loans = nullptr);
void AppendItem(uint32_t field, const absl::Status& status, std::string* out);
// A Stream reply's result (StreamResponse.results: a StreamResult with its id and the item,
// as protobuf writes it), appended to `out`.
void AppendStreamResult(uint64_t id, Request& r, const ServerContext& context, std::string* out);
void AppendStreamResult(uint64_t id, const absl::Status& status, std::string* out);
// Milliseconds before `deadline_ms` (at least 1: an expired key is not returned); -1 for none,
// without reading the clock (a GET of a key with no TTL, the usual one, costs no clock_gettime:
// 3% of the server's samples at MultiGet of 16 when each item read it).
int64_t TtlLeft(int64_t deadline_ms, const ServerContext& context);

}  // namespace ringkv::internal

#endif  // RINGKV_SERVER_HANDLERS_INTERNAL_KV_OPS_H_
