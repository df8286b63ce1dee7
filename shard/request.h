// Request: one GET, PUT or DELETE on its way from the thread that made it (its origin) to the
// shard that owns its key and back.
//
// Ownership: the origin allocates the request and owns the bytes `key` and `value` point to until
// the request comes back to it; the request is freed by its origin only (so no allocator ever
// sees a free from a thread other than the one that allocated). Between the hand-offs exactly one
// thread touches it: the ring's release/acquire pair orders the writes of one side before the
// reads of the other.
#ifndef RINGKV_SHARD_REQUEST_H_
#define RINGKV_SHARD_REQUEST_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace ringkv {

enum class Op : uint8_t { kGet, kPut, kDelete };

// The outcome, set by the owning shard. A small code, not a Status: this is the shard path.
enum class Result : uint8_t {
  kPending,   // Not executed yet.
  kOk,        // GET found the key (value in `out`), PUT stored it, DELETE removed it.
  kNotFound,  // GET or DELETE of a key the shard does not hold.
};

struct Request {
  // Set by the origin.
  Op op = Op::kGet;
  std::string_view key;
  std::string_view value;  // PUT only.
  void* tag = nullptr;     // The origin's own, untouched by the engine.

  // Set by the engine when the origin hands it in.
  uint16_t origin = 0;
  uint16_t owner = 0;
  uint64_t hash = 0;

  // Set by the owning shard.
  Result result = Result::kPending;
  std::string out;  // GET's value. Reused across uses of a pooled request.
};

}  // namespace ringkv

#endif  // RINGKV_SHARD_REQUEST_H_
