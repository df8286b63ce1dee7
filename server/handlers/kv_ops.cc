#include "server/handlers/internal/kv_ops.h"

#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/handlers/handler.h"
#include "server/status_details.h"

namespace ringkv::internal {
namespace {

namespace pb = ::ringkv::v1;

// A deadline `ttl_ms` from now; 0 for none (ttl_ms 0) unless `required`.
absl::Status Deadline(int64_t now_ms, int64_t ttl_ms, bool required, int64_t* deadline) {
  if (ttl_ms == 0 && !required) {
    *deadline = 0;
    return absl::OkStatus();
  }
  if (ttl_ms < 1 || ttl_ms > kMaxTtlMs) {
    return absl::InvalidArgumentError(absl::StrCat("ttl_ms is ", ttl_ms, "; it must be 1 .. ",
                                                   kMaxTtlMs, " (100 years)",
                                                   required ? "" : ", or 0 for none"));
  }
  *deadline = now_ms + ttl_ms;
  return absl::OkStatus();
}

absl::Status ApplyCondition(const pb::Condition* condition, bool put, Request* r) {
  r->condition = Condition::kNone;
  if (condition == nullptr) return absl::OkStatus();
  switch (condition->check_case()) {
    case pb::Condition::CHECK_NOT_SET:
      return absl::OkStatus();
    case pb::Condition::kAbsent:
    case pb::Condition::kPresent: {
      if (!put) {
        return absl::InvalidArgumentError(
            "a delete's condition can only be a version (it needs the key to be present)");
      }
      const bool absent = condition->check_case() == pb::Condition::kAbsent;
      if (!(absent ? condition->absent() : condition->present())) {
        return absl::InvalidArgumentError(
            absl::StrCat("condition.", absent ? "absent" : "present", " must be true if set"));
      }
      r->condition = absent ? Condition::kAbsent : Condition::kPresent;
      return absl::OkStatus();
    }
    case pb::Condition::kVersion:
      r->condition = Condition::kVersion;
      r->version = condition->version();
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

void Reset(Op op, std::string_view key, Request* r) {
  r->op = op;
  r->key = key;
  r->value = {};
  r->deadline_ms = 0;
  r->condition = Condition::kNone;
  r->version = 0;
  r->number = 0;
  r->lend = false;
  r->lent.reset();
  r->budget = nullptr;
  r->reply_memory = nullptr;
  r->budget_taken = 0;
}

}  // namespace

absl::Status PrepareGet(const RequestLimits& limits, std::string_view key, Request* r) {
  Reset(Op::kGet, key, r);
  return limits.CheckKey(key);
}

absl::Status PreparePut(const RequestLimits& limits, int64_t now_ms, std::string_view key,
                        std::string_view value, int64_t ttl_ms, const pb::Condition* condition,
                        Request* r) {
  Reset(Op::kPut, key, r);
  r->value = value;
  if (absl::Status s = limits.CheckPut(key, value); !s.ok()) return s;
  if (absl::Status s = Deadline(now_ms, ttl_ms, false, &r->deadline_ms); !s.ok()) return s;
  return ApplyCondition(condition, true, r);
}

absl::Status PrepareDelete(const RequestLimits& limits, std::string_view key,
                           const pb::Condition* condition, Request* r) {
  Reset(Op::kDelete, key, r);
  if (absl::Status s = limits.CheckKey(key); !s.ok()) return s;
  return ApplyCondition(condition, false, r);
}

absl::Status PrepareExpire(const RequestLimits& limits, int64_t now_ms, std::string_view key,
                           int64_t ttl_ms, Request* r) {
  Reset(Op::kExpire, key, r);
  if (absl::Status s = limits.CheckKey(key); !s.ok()) return s;
  return Deadline(now_ms, ttl_ms, true, &r->deadline_ms);
}

absl::Status PreparePersist(const RequestLimits& limits, std::string_view key, Request* r) {
  Reset(Op::kPersist, key, r);
  return limits.CheckKey(key);
}

absl::Status PrepareIncrement(const RequestLimits& limits, std::string_view key, int64_t delta,
                              Request* r) {
  Reset(Op::kIncrement, key, r);
  r->number = delta;
  return limits.CheckKey(key);
}

absl::Status StatusOf(const Request& r, const ServerContext& context) {
  if (r.linearizable && (r.result == Result::kUnavailable || r.result == Result::kNotReplicated))
      [[unlikely]] {
    // Run, but what it read may not stay: no answer (a read may be sent again).
    return absl::UnavailableError(absl::StrCat(
        "the linearizable read ran, but writes it may have seen ",
        r.result == Result::kUnavailable
            ? absl::StrCat("were not made durable: ", context.journal_failure_message())
            : absl::StrCat("are on ", r.acked_replicas, " of the ", r.replicas,
                           " replicas they need (--min-replicas-timeout ",
                           context.options().min_replicas_timeout_ms,
                           " ms, or this server stepped down), so a failover could lose them"),
        "; it was not answered, and may be sent again"));
  }
  switch (r.result) {
    case Result::kOk:
      return absl::OkStatus();
    case Result::kNotFound:
      return absl::NotFoundError("key not found");
    case Result::kConditionFailed:
      return absl::FailedPreconditionError(
          r.version == 0 ? std::string("condition failed: the key does not exist (version 0)")
                         : absl::StrCat("condition failed: the key's version is ", r.version));
    case Result::kNotInteger:
      return absl::InvalidArgumentError(
          "the key's value is not a decimal 64-bit integer, so it cannot be incremented");
    case Result::kOverflow:
      return absl::OutOfRangeError("the sum would not fit in a 64-bit integer");
    case Result::kNoMemory:
      return absl::ResourceExhaustedError(absl::StrCat(
          "out of memory: the write needs ", r.no_memory.needed_bytes, " more bytes, and shard ",
          r.owner, " holds ", r.no_memory.used_bytes, " of the ", r.no_memory.limit_bytes,
          " bytes --max-memory gives each shard, with no key --eviction may evict (reads and "
          "deletes still work)"));
    case Result::kUnavailable:  // Run, not acknowledged.
      if (context.fenced()) return LostLeadership(true);
      return absl::UnavailableError(context.journal_failure_message());
    case Result::kRefused:
      return context.write_refusal();
    case Result::kTooFewReplicas:  // Unrun: a client may send it again once replicas follow.
      return RefusalUnrun(
          absl::StrCat("the write needs ", r.replicas, " replicas (--min-replicas, or the call's ",
                       std::string(kMinReplicasHeader), " header) and ", r.acked_replicas,
                       " follow this server: it was not run"),
          "");
    case Result::kNotReplicated:
      return absl::UnavailableError(
          absl::StrCat("the write was run here, but ", r.acked_replicas, " of the ", r.replicas,
                       " replicas it needs applied it within --min-replicas-timeout (",
                       context.options().min_replicas_timeout_ms,
                       " ms): it may yet reach them, or be lost with this server"));
    case Result::kOverBudget:  // A MultiGet's reply is refused whole instead (BatchHandler).
      return absl::ResourceExhaustedError(absl::StrCat(
          "not read: the values this Stream's answers hold until the client reads them would "
          "pass --max-reply-bytes=",
          context.limits().max_reply_bytes, "; read the answers before asking for more"));
    case Result::kOverReplyMemory:  // A MultiGet's too (BatchHandler).
      return ReplyMemorySpent(context);
    case Result::kPending:
      break;
  }
  return absl::InternalError("the request was never run");
}

absl::Status ReplyMemorySpent(const ServerContext& context) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "not read: the values that the answers of every call hold until their clients read them "
      "would pass --max-reply-memory=",
      context.limits().max_reply_memory, "; try again later (answers are read meanwhile)"));
}

int64_t TtlLeft(int64_t deadline_ms, const ServerContext& context) {
  return deadline_ms == 0 ? -1 : std::max<int64_t>(1, deadline_ms - context.NowMs());
}

void SetItem(pb::ItemResult* item, const absl::Status& status) {
  item->set_code(static_cast<int>(status.code()));
  // Every batch item passes here. Setting even an empty message gives the item a string of its
  // own, allocated and later freed; the OK ones have none, and no payload to look up.
  if (status.ok()) return;
  item->set_message(std::string(status.message()));
  if (const auto redirect =
          status.GetPayload(absl::string_view(kRedirectTypeUrl.data(), kRedirectTypeUrl.size()))) {
    item->mutable_redirect()->ParseFromString(std::string(*redirect));
  }
}

void SetItem(pb::ItemResult* item, Request& r, const ServerContext& context) {
  SetItem(item, StatusOf(r, context));
  if (r.result == Result::kOk || r.result == Result::kConditionFailed) {
    item->set_version(r.version);
  }
  if (r.result != Result::kOk) return;
  switch (r.op) {
    case Op::kGet:
      if (r.lent != nullptr) {
        item->set_value(std::string(r.lent->view()));  // Copied: a linearizable read's.
      } else {
        item->set_value(std::move(r.out));
      }
      item->set_ttl_ms(TtlLeft(r.deadline_ms, context));
      break;
    case Op::kIncrement:
      item->set_number(r.number);
      break;
    default:
      break;
  }
}

namespace {

using google::protobuf::io::CodedOutputStream;

// Tags, lengths and integer fields, gathered on the stack and appended to the reply at once:
// a reply's append per varint was 3-4% of the server's samples at Stream GET.
class Heads {
 public:
  Heads() = default;
  Heads(const Heads&) = delete;
  Heads& operator=(const Heads&) = delete;

  // Tag and length of a length-delimited field.
  void Head(uint32_t field, size_t length) {
    Varint(field << 3 | 2);
    Varint(length);
  }
  // An integer field of ItemResult or StreamResult (fields 1-15: a one-byte tag) as protobuf
  // writes it: proto3 leaves a zero out.
  void IntField(uint32_t field, uint64_t value) {
    if (value == 0) return;
    *end_++ = static_cast<uint8_t>(field << 3);
    Varint(value);
  }
  // Appends what was gathered, and starts again.
  void AppendTo(std::string* out) {
    out->append(reinterpret_cast<const char*>(bytes_), static_cast<size_t>(end_ - bytes_));
    end_ = bytes_;
  }

 private:
  void Varint(uint64_t value) { end_ = CodedOutputStream::WriteVarint64ToArray(value, end_); }

  // Room for the most gathered between two appends, 44 bytes: before a value, three heads and
  // the id's field, of at most 11 bytes each (a one-byte tag, a varint of up to 10). With no
  // value, StreamResult's and its item's heads (their lengths, under 128, take a byte) with the
  // id's, the version's and the TTL's fields: 37 (an item has a TTL or a number, not both).
  uint8_t bytes_[64];
  uint8_t* end_ = bytes_;
};

// What a length-delimited field's tag and length take.
size_t HeadBytes(uint32_t field, size_t length) {
  return CodedOutputStream::VarintSize32(field << 3 | 2) + CodedOutputStream::VarintSize64(length);
}

// What an integer field takes (IntField).
size_t IntFieldBytes(uint64_t value) {
  return value == 0 ? 0 : 1 + CodedOutputStream::VarintSize64(value);
}

// One item, its size known before its bytes are written (for the heads around it). An OK item
// is written here, field by field, as SetItem sets it, in protobuf's order: code 0 and no
// message (left out), then value 3, version 4, ttl_ms 5, number 6. Any other goes through
// SetItem and protobuf.
class ItemWriter {
 public:
  ItemWriter(Request& r, const ServerContext& context) {
    // StatusOf's OK: a result of kOk, unless a linearizable read's writes did not stay.
    if (r.result != Result::kOk || r.linearizable) [[unlikely]] {
      slow_.emplace();
      SetItem(&*slow_, r, context);
      size_ = slow_->ByteSizeLong();
      return;
    }
    version_ = r.version;
    if (r.op == Op::kGet) {
      value_ = r.out;
      if (r.lent != nullptr) {
        value_ = r.lent->view();
        lent_ = &r.lent;
      }
      ttl_ = static_cast<uint64_t>(TtlLeft(r.deadline_ms, context));
    } else if (r.op == Op::kIncrement) {
      number_ = static_cast<uint64_t>(r.number);
    }
    size_ = (value_.empty()
                 ? 0
                 : HeadBytes(pb::ItemResult::kValueFieldNumber, value_.size()) + value_.size()) +
            IntFieldBytes(version_) + IntFieldBytes(ttl_) + IntFieldBytes(number_);
  }
  explicit ItemWriter(const absl::Status& status) : slow_(std::in_place) {
    SetItem(&*slow_, status);
    size_ = slow_->ByteSizeLong();
  }

  size_t size() const { return size_; }
  // The item as field `field`: its tag, its length and its bytes, after what `heads` holds. With
  // `loans`, a lent value goes there, not into `out` (AppendItem).
  void AppendTo(uint32_t field, Heads& heads, std::string* out,
                std::vector<CallSink::LentAt>* loans = nullptr) const {
    heads.Head(field, size_);
    if (slow_.has_value()) {
      heads.AppendTo(out);
      const size_t at = out->size();
      out->resize(at + size_);
      slow_->SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(out->data() + at));
      return;
    }
    if (!value_.empty()) {
      heads.Head(pb::ItemResult::kValueFieldNumber, value_.size());
      heads.AppendTo(out);
      if (lent_ != nullptr && loans != nullptr) {
        loans->push_back({out->size(), std::move(*lent_)});
      } else {
        out->append(value_);
      }
    }
    heads.IntField(pb::ItemResult::kVersionFieldNumber, version_);
    heads.IntField(pb::ItemResult::kTtlMsFieldNumber, ttl_);
    heads.IntField(pb::ItemResult::kNumberFieldNumber, number_);
    heads.AppendTo(out);
  }

 private:
  std::optional<pb::ItemResult> slow_;
  std::string_view value_;
  std::shared_ptr<const SharedBytes>* lent_ = nullptr;  // The request's loan, if value_ is one.
  uint64_t version_ = 0;
  uint64_t ttl_ = 0;
  uint64_t number_ = 0;
  size_t size_ = 0;
};

// StreamResult: its id (left out if 0), then its item (`result`, written even if empty, as
// protobuf writes a submessage that is set), as a results field of StreamResponse.
void AppendStreamResult(uint64_t id, const ItemWriter& item, std::string* out) {
  const uint32_t field = pb::StreamResult::kResultFieldNumber;
  Heads heads;
  heads.Head(pb::StreamResponse::kResultsFieldNumber,
             IntFieldBytes(id) + HeadBytes(field, item.size()) + item.size());
  heads.IntField(pb::StreamResult::kIdFieldNumber, id);
  item.AppendTo(field, heads, out);
}

}  // namespace

void AppendItem(uint32_t field, Request& r, const ServerContext& context, std::string* out,
                std::vector<CallSink::LentAt>* loans) {
  Heads heads;
  ItemWriter(r, context).AppendTo(field, heads, out, loans);
}

void AppendItem(uint32_t field, const absl::Status& status, std::string* out) {
  Heads heads;
  ItemWriter(status).AppendTo(field, heads, out);
}

void AppendStreamResult(uint64_t id, Request& r, const ServerContext& context, std::string* out) {
  AppendStreamResult(id, ItemWriter(r, context), out);
}

void AppendStreamResult(uint64_t id, const absl::Status& status, std::string* out) {
  AppendStreamResult(id, ItemWriter(status), out);
}

}  // namespace ringkv::internal
