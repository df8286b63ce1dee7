// Request: one operation on one key, on its way from the thread that made it (its origin) to the
// shard that owns its key and back. Shard::Execute says what each operation does.
//
// Ownership: the origin allocates the request and owns the bytes `key` and `value` point to until
// the request comes back to it; the request is freed by its origin only (so no allocator ever
// sees a free from a thread other than the one that allocated). Between the hand-offs exactly one
// thread touches it: the ring's release/acquire pair orders the writes of one side before the
// reads of the other.
#ifndef RINGKV_SHARD_REQUEST_H_
#define RINGKV_SHARD_REQUEST_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/shared_bytes.h"

namespace ringkv {

enum class Op : uint8_t {
  kGet,        // out: the value; version; deadline_ms (0: no TTL).
  kPut,        // value; deadline_ms (0: none, and any TTL the key had goes); condition.
  kDelete,     // condition (kNone or kVersion).
  kExpire,     // deadline_ms: the key's new TTL. NOT_FOUND if the key is absent.
  kPersist,    // The key's TTL goes. NOT_FOUND if the key is absent.
  kIncrement,  // number: the delta in, the new value out (also stored as decimal text).
  // Runs on shard `target`, not the key's: the next keys in scan order (shard/scan.h) from
  // position `version`, with prefix `key`, as records in `out`; whole home buckets, until
  // `number` keys or a budget of buckets. Out: `version` is the position reached (every key
  // before it is in `out`), and `number` is 1 if the shard has no more keys, else 0.
  kScan,
  // Runs on shard `target`: a step of one replica's flow of this worker's changes, served by
  // the worker's ReplicationPort (shard/replication_port.h), which says what the fields carry.
  kReplicate,
};

// What must hold for a Put or Delete to happen.
enum class Condition : uint8_t {
  kNone,
  kAbsent,   // Put only: the key does not exist.
  kPresent,  // Put only: the key exists.
  kVersion,  // The key's version is `version` (0: the key does not exist).
};

// The outcome, set by the owning shard. A small code, not a Status: this is the shard path.
enum class Result : uint8_t {
  kPending,          // Not executed yet.
  kOk,               // Done.
  kNotFound,         // GET, DELETE, EXPIRE or PERSIST of a key the shard does not hold.
  kConditionFailed,  // The condition did not hold; `version` is the key's (0: absent).
  kNotInteger,       // INCREMENT of a value that is not a decimal 64-bit integer.
  kOverflow,         // INCREMENT past the 64-bit range.
  kNoMemory,         // A write that needs memory the shard may not take (shard/memory.h);
                     // `no_memory` says how much.
  kUnavailable,      // A write run here that its journal could not make durable (its disk
                     // failed), or that lost its wait for replicas to a change of role: not
                     // acknowledged, and it may or may not stay.
  kRefused,          // A write refused before it ran: its journal had failed or stalled (a
                     // full disk), or the primary's fence had closed (server/repl/fence.h).
  kTooFewReplicas,   // A write that asked for `replicas` replicas while fewer follow this
                     // worker (`acked_replicas` of them): refused, not run.
  kNotReplicated,    // A write run here whose records `acked_replicas` of the `replicas` it
                     // asked for applied within --min-replicas-timeout: not acknowledged, yet
                     // it stays (and may still reach them).
  kOverBudget,       // A GET with a `budget` whose value would take it below 0: neither copied
                     // nor lent, nothing taken (its version and TTL are not set).
  kOverReplyMemory,  // The same for a GET's `reply_memory` (the server's): nothing taken from
                     // either.
};

struct Request {
  // Set by the origin.
  Op op = Op::kGet;
  Condition condition = Condition::kNone;
  uint16_t target = 0;  // SCAN only: the shard to run on.
  // GET only: the origin takes the value lent (`lent`) rather than copied, where the shard can
  // lend it (a big record) and runs on the origin's own thread (the engine clears it otherwise).
  bool lend = false;
  std::string_view key;
  std::string_view value;   // PUT only.
  int64_t deadline_ms = 0;  // PUT, EXPIRE: wall-clock milliseconds since the Unix epoch.
  void* tag = nullptr;      // The origin's own, untouched by the engine.

  // Set by the engine when the origin hands it in.
  uint16_t origin = 0;
  uint16_t owner = 0;
  // Set by the owning shard (here, in the padding after owner).
  Result result = Result::kPending;
  // Set by the origin: the replicas that must have applied a write's records before its
  // answer goes back (0: none; ReplicationPort::Await). Set by the owning worker: how many
  // had, when that failed.
  uint8_t replicas = 0;
  uint8_t acked_replicas = 0;
  // Set by the origin, GET and SCAN only: a linearizable read (the ringkv-consistency header),
  // whose answer waits until every write its shard ran before it is answered (durable, and
  // applied by the replicas it waited for, or failed): it never returns what a failover or a
  // crash may yet take back.
  bool linearizable = false;
  uint64_t hash = 0;

  // Both ways: the expected version in (Condition::kVersion), the key's version out (after a
  // write, or what failed a condition); INCREMENT's delta in and new value out.
  uint64_t version = 0;
  int64_t number = 0;

  // Set by the owning shard.
  std::string out;  // GET's value; SCAN's records. Reused across uses of a pooled request.
  // Set by the owning worker: the journal record (shard/journal.h) that must be durable before
  // the answer goes back; 0 if none.
  uint64_t log_seq = 0;
  // Set by the owning worker, for a write with `replicas`: the replication position after its
  // records (ReplicationPort::position); 0 if it made none.
  uint64_t repl_seq = 0;

  // Set by the owning shard, Result::kNoMemory only (last: the hot fields keep the first two
  // cache lines): the bytes the write needed, the shard's memory in use, and the limit
  // --max-memory gives the shard.
  struct NoMemory {
    uint64_t needed_bytes = 0;
    uint64_t used_bytes = 0;
    uint64_t limit_bytes = 0;
  } no_memory;
  // Set by the replication port, Op::kReplicate's kTail answers only (server/repl/source.h):
  // when the answer's oldest record was made (SystemClockUs; 0: it carries none), and the bytes
  // of records the flow has published up to the answer's end, and up to its head.
  struct Tail {
    int64_t made_us = 0;
    uint64_t end_bytes = 0;
    uint64_t head_bytes = 0;
  } tail;
  // Set by the owning shard, GET with `lend` only: the value, lent where it lies in the shard's
  // record (shard/internal/table.h's Table::Loan), instead of `out`. Its holders' last
  // reference must go on the owning worker's thread, or once the workers have stopped (the
  // server's loops, and their connections, go before its engine and shards: server.h).
  std::shared_ptr<const SharedBytes> lent;
  // Set by the origin, GET only (null: none): the bytes of values the call may still hold for
  // its answers, shared by its GETs whichever shards run them (a MultiGet's reply; a Stream's
  // results not yet read, which its origin gives back as they are written). The owning shard
  // takes a found value of kBudgetedValueBytes or more from it before copying or lending it,
  // or, if that would leave it below 0, takes nothing and answers Result::kOverBudget: a call
  // that asks for more than it may hold stops costing memory there. Relaxed: a count, with
  // nothing published through it.
  std::atomic<int64_t>* budget = nullptr;
  // Set by the origin, GET only (null: none): the same for what every call's answers together
  // may still hold (the server's --max-reply-memory), taken after `budget` and only if both
  // fit; the origin gives back what it took (ReplyMemoryTaken) once its answer has left.
  std::atomic<int64_t>* reply_memory = nullptr;
  // Set by the owning shard, GET with a `budget` or `reply_memory` only: what it took from each
  // (the value's size, or 0), whatever the result becomes later (a linearizable read's journal
  // or replicas may fail it). The origin clears it (with `budget`) before each use.
  int64_t budget_taken = 0;
};

// The smallest value a GET takes from its `budget`: a smaller one is copied uncounted (a batch
// of N items copies at most N times this past its budget), and its shard touches no shared
// counter.
inline constexpr size_t kBudgetedValueBytes = 1024;

// What a Request back from its shard took from its `reply_memory`, to give back.
inline int64_t ReplyMemoryTaken(const Request& r) {
  return r.reply_memory != nullptr ? r.budget_taken : 0;
}

}  // namespace ringkv

#endif  // RINGKV_SHARD_REQUEST_H_
