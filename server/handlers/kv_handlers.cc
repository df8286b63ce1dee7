// ringkv.v1.KV's handlers. Unary methods check their input, submit one Request per key (Scan:
// one per shard), and Finish once all are back. Stream keeps up to
// kMaxStreamInFlight operations in flight (and one message's more) and coalesces the results
// that pile up while a Write is outstanding into the next message (BidiHandler does the reading
// and writing). --max-batch-items and --max-reply-bytes bound what one call may hold.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "ringkv/v1/kv.pb.h"
#include "server/handlers/internal/bidi_handler.h"
#include "server/handlers/internal/factories.h"
#include "server/handlers/internal/kv_ops.h"
#include "server/handlers/internal/wire_message.h"
#include "server/handlers/parse_request.h"
#include "shard/scan.h"

namespace ringkv::internal {
namespace {

namespace pb = ::ringkv::v1;

// Operations a single Stream keeps in flight before it pauses reading: at most this, less one,
// plus one message's (--max-batch-items).
constexpr size_t kMaxStreamInFlight = 4096;
// A Stream reply message stops taking results at about this size; more go in the next one.
constexpr size_t kStreamReplyBytes = size_t{1} << 20;

absl::Status Cancelled() { return absl::CancelledError("call cancelled"); }

// The parts every unary method shares: its messages, the count of Requests out, and one reply
// once the last is back (or at once, with no Request out). Derived supplies Start (the request
// is in request_), Take (a Request is back) and, optionally, Result (the status to reply with).
template <typename RequestPb, typename ResponsePb>
class UnaryHandler : public Handler {
 public:
  using Handler::Handler;

  google::protobuf::MessageLite* incoming() override { return &request_; }

  void OnMessage() override { Start(); }

  void OnCancel() override {
    cancelled_ = true;
    if (outstanding_ == 0) sink_.Finish(Cancelled(), nullptr);
  }

  void OnRequestDone(Request* request) final {
    acknowledges_ = acknowledges_ || Acknowledges(*request);
    HoldReplyMemory(*request);  // A GET's value: held until the answer has left the call.
    if (!cancelled_) Take(*request);
    if (--outstanding_ != 0) return;
    if (cancelled_) return Reply(Cancelled());
    // A linearizable read is answered only while this server may (after the read ran).
    absl::Status refusal = linearizable_ && reads() ? LinearizableRefusal() : absl::OkStatus();
    Reply(refusal.ok() ? Result() : refusal);
  }

 protected:
  virtual void Start() = 0;
  virtual void Take(Request& request) = 0;
  virtual absl::Status Result() { return absl::OkStatus(); }
  // Whether the method reads (the ringkv-consistency header applies to it).
  virtual bool reads() const { return false; }

  // Every Submit is counted before the first can come back: completions come only from a later
  // engine turn.
  void SubmitCounted(Request& request, Lane lane = Lane::kCall) {
    ++outstanding_;
    Submit(request, lane);
  }
  // Counts a Request that comes back by another way than Submit (ShardLoop::SubmitExternal).
  void CountExternal() { ++outstanding_; }
  // Ends the call; only with no Request out.
  void Reply(const absl::Status& status) {
    if (status.ok() && acknowledges_ && !MayAcknowledge()) {
      return sink_.Finish(LostLeadership(ops() == 1), nullptr);
    }
    sink_.Finish(status, status.ok() ? &response_ : nullptr);
    // The transport has the answer's bytes now (serialized into its own buffers, or shared):
    // this copy goes at once, not with the call, which a client that does not read keeps.
    if constexpr (std::is_same_v<ResponsePb, WireMessage>) {
      std::string().swap(response_.bytes());
    } else {
      ResponsePb().Swap(&response_);
    }
  }
  // The writes a reply acknowledges at most (single-key methods: 1).
  virtual size_t ops() const { return 1; }

  RequestPb request_;
  ResponsePb response_;

 private:
  size_t outstanding_ = 0;
  bool cancelled_ = false;
  bool acknowledges_ = false;  // A write came back OK: the reply acknowledges it.
};

// The single-key methods: one Request, prepared from the call's fields (or the call answered
// at once with what is wrong), and the reply is that Request's status. Derived supplies Prepare
// and, for what the reply carries, Take.
template <typename RequestPb, typename ResponsePb>
class SingleKeyHandler : public UnaryHandler<RequestPb, ResponsePb> {
 public:
  using UnaryHandler<RequestPb, ResponsePb>::UnaryHandler;

 protected:
  virtual absl::Status Prepare(Request* op) = 0;

  void Start() final {
    if (absl::Status s = Prepare(&op_); !s.ok()) return this->Reply(s);
    this->SubmitCounted(op_);
  }
  void Take(Request&) override {}
  absl::Status Result() final { return StatusOf(op_, this->context_); }

  Request op_;
};

class GetHandler : public SingleKeyHandler<pb::GetRequest, pb::GetResponse> {
 public:
  using SingleKeyHandler::SingleKeyHandler;
  bool reads() const override { return true; }
  absl::Status Prepare(Request* op) override {
    absl::Status s = PrepareGet(context_.limits(), request_.key(), op);
    op->lend = sink_.TakesLoans();
    TakeReplyMemory(*op);
    return s;
  }
  void Take(Request& r) override {
    if (r.result != ringkv::Result::kOk) return;
    if (r.lent != nullptr) {
      sink_.ShareLoan(pb::GetResponse::kValueFieldNumber, std::move(r.lent));
    } else if (r.out.size() < CallSink::kShareBytes ||
               !sink_.ShareField(pb::GetResponse::kValueFieldNumber, r.out)) {
      response_.set_value(std::move(r.out));
    }
    response_.set_version(r.version);
    response_.set_ttl_ms(TtlLeft(r.deadline_ms, context_));
  }
};

// The handlers' own parsers hold a tag to protobuf's parser's rule (its ReadTag): at most 5
// bytes, where CodedInputStream::ReadTag takes up to 10. A longer one leaves the message to
// protobuf, which refuses it.
constexpr int kMaxTagBytes = 5;

// A length-delimited field's bytes, after its tag: a view of `wire`, which `in` reads. The
// length is held to protobuf's own parser's rule (its ReadSize): at most 5 bytes, and under
// 2 GiB, where CodedInputStream::ReadVarint32 would take up to 10 bytes and drop the bits past
// 32. A length protobuf refuses is refused here too, so that the message goes to protobuf and
// is refused there, as it would be without these parsers.
bool ReadBytes(google::protobuf::io::CodedInputStream& in, std::string_view wire,
               std::string_view* bytes) {
  constexpr int kMaxLengthBytes = 5;
  constexpr uint8_t kFifthByteBelow = 8;  // Its bits are 28 and up: below 8, under 2^31.
  const int at = in.CurrentPosition();
  uint32_t length;
  if (!in.ReadVarint32(&length)) return false;
  const size_t from = static_cast<size_t>(in.CurrentPosition());
  const int length_bytes = in.CurrentPosition() - at;
  if (length_bytes > kMaxLengthBytes || (length_bytes == kMaxLengthBytes &&
                                         static_cast<uint8_t>(wire[from - 1]) >= kFifthByteBelow)) {
    return false;
  }
  if (length > wire.size() - from || !in.Skip(static_cast<int>(length))) return false;
  *bytes = wire.substr(from, length);
  return true;
}

class PutHandler : public SingleKeyHandler<pb::PutRequest, pb::PutResponse> {
 public:
  using SingleKeyHandler::SingleKeyHandler;
  // A large value stays where the transport received it (its one copy is the shard's, into
  // the table); the other fields (key, TTL, condition) are parsed from a copy of their bytes.
  // Malformed bytes, a group (long deprecated), or other fields of more than
  // MaxRequestFields (unknown ones, which protobuf keeps an object each) are left to the
  // transport's parse, which refuses the last (ParseRequest).
  bool ParseInPlace(std::string_view wire) override {
    if (wire.size() < CallSink::kShareBytes) return false;
    google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(wire.data()),
                                              static_cast<int>(wire.size()));
    std::string fields;
    std::string_view value;
    for (;;) {
      const size_t at = static_cast<size_t>(in.CurrentPosition());
      const uint32_t tag = in.ReadTag();
      if (tag == 0) {
        if (at != wire.size()) return false;
        break;
      }
      if (in.CurrentPosition() - static_cast<int>(at) > kMaxTagBytes) return false;
      switch (tag & 7) {  // The wire type.
        case 0: {         // Varint.
          uint64_t scalar;
          if (!in.ReadVarint64(&scalar)) return false;
          break;
        }
        case 1:  // 64-bit.
          if (!in.Skip(8)) return false;
          break;
        case 5:  // 32-bit.
          if (!in.Skip(4)) return false;
          break;
        case 2: {  // Length-delimited.
          std::string_view bytes;
          if (!ReadBytes(in, wire, &bytes)) return false;
          if (tag >> 3 == pb::PutRequest::kValueFieldNumber) {
            value = bytes;  // As protobuf: the last one counts.
            continue;
          }
          break;
        }
        default:
          return false;
      }
      fields.append(wire.substr(at, static_cast<size_t>(in.CurrentPosition()) - at));
    }
    if (fields.size() >= kCountFieldsFromBytes) {
      google::protobuf::io::CodedInputStream count(reinterpret_cast<const uint8_t*>(fields.data()),
                                                   static_cast<int>(fields.size()));
      if (!CheckRequestFields(request_, count, context_.limits()).ok()) return false;
    }
    if (!request_.ParseFromString(fields)) return false;
    value_in_place_ = value;
    return true;
  }
  absl::Status Prepare(Request* op) override {
    return PreparePut(context_.limits(), context_.NowMs(), request_.key(),
                      value_in_place_.value_or(request_.value()), request_.ttl_ms(),
                      request_.has_condition() ? &request_.condition() : nullptr, op);
  }
  void Take(Request& r) override { response_.set_version(r.version); }

 private:
  std::optional<std::string_view> value_in_place_;  // ParseInPlace's value.
};

class DeleteHandler : public SingleKeyHandler<pb::DeleteRequest, pb::DeleteResponse> {
 public:
  using SingleKeyHandler::SingleKeyHandler;
  absl::Status Prepare(Request* op) override {
    return PrepareDelete(context_.limits(), request_.key(),
                         request_.has_condition() ? &request_.condition() : nullptr, op);
  }
};

class ExpireHandler : public SingleKeyHandler<pb::ExpireRequest, pb::ExpireResponse> {
 public:
  using SingleKeyHandler::SingleKeyHandler;
  absl::Status Prepare(Request* op) override {
    return PrepareExpire(context_.limits(), context_.NowMs(), request_.key(), request_.ttl_ms(),
                         op);
  }
};

class PersistHandler : public SingleKeyHandler<pb::PersistRequest, pb::PersistResponse> {
 public:
  using SingleKeyHandler::SingleKeyHandler;
  absl::Status Prepare(Request* op) override {
    return PreparePersist(context_.limits(), request_.key(), op);
  }
};

class IncrementHandler : public SingleKeyHandler<pb::IncrementRequest, pb::IncrementResponse> {
 public:
  using SingleKeyHandler::SingleKeyHandler;
  absl::Status Prepare(Request* op) override {
    return PrepareIncrement(context_.limits(), request_.key(), request_.delta(), op);
  }
  void Take(Request& r) override {
    response_.set_value(r.number);
    response_.set_version(r.version);
  }
};

// Reads the message `wire` field by field, `read(tag, in)` for each, to its end: false as soon
// as `read` is, or if the bytes do not parse to their end (a tag cut short, or a zero tag,
// which protobuf refuses too). The handlers' own parsers, which leave anything else to
// protobuf.
template <typename Read>
bool ReadFields(std::string_view wire, Read read) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(wire.data()),
                                            static_cast<int>(wire.size()));
  for (;;) {
    const size_t at = static_cast<size_t>(in.CurrentPosition());
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return at == wire.size();
    if (in.CurrentPosition() - static_cast<int>(at) > kMaxTagBytes) return false;
    if (!read(tag, in)) return false;
  }
}

// How often the message `wire` holds length-delimited field `number` (a batch's items): its
// other fields, groups too, are skipped as protobuf would read past them; nullopt if the bytes
// do not parse. A batch past --max-batch-items that its handler's own parser leaves to protobuf
// (an item with a condition, an unknown field) is refused on this count, before protobuf would
// make a string per item: a message of 1-byte keys costs protobuf about 13 times its size.
std::optional<size_t> CountField(std::string_view wire, uint32_t number) {
  using google::protobuf::internal::WireFormatLite;
  size_t count = 0;
  auto read = [&](uint32_t tag, google::protobuf::io::CodedInputStream& in) {
    if (tag != (number << 3 | 2)) return WireFormatLite::SkipField(&in, tag);
    std::string_view bytes;
    ++count;
    return ReadBytes(in, wire, &bytes);
  };
  if (!ReadFields(wire, read)) return std::nullopt;
  return count;
}

// MultiGet and MultiPut: one Request per item, answered per item; a bad item is answered at
// once and the others still run. The reply (a ResponsePb: repeated ItemResult results = 1) is
// written item by item once all are back (AppendItem), with no ItemResult object per item; a
// MultiGet's values lent where they lie go to the transport beside it (CallSink::ShareLoans).
template <typename RequestPb, typename ResponsePb>
class BatchHandler : public UnaryHandler<RequestPb, WireMessage> {
 public:
  using UnaryHandler<RequestPb, WireMessage>::UnaryHandler;
  // A copy of bytes that do not stay, split in place (the derived ParseInPlace) if it can be.
  bool ParsesCopies() const override { return true; }
  bool ParseCopy(std::string_view wire) override {
    wire_.assign(wire);
    const bool taken = this->ParseInPlace(wire_);
    // Not kept for protobuf, which parses it instead, nor for a refusal on its count.
    if (!taken || unparsed_items_ != 0) std::string().swap(wire_);
    return taken;
  }

 protected:
  void Take(Request&) override {}  // Its outcome stays in ops_ until the reply is written.
  absl::Status Result() override { return WriteReply(); }
  size_t ops() const override { return ops_.size(); }

  static constexpr size_t kInlineItems = 32;

  // For a message the handler's own parser leaves to protobuf: true if its items (field
  // `number`) are past --max-batch-items, which Start then refuses (RefuseUnparsed) with
  // nothing parsed.
  bool PastBatchLimit(std::string_view wire, uint32_t number) {
    const std::optional<size_t> items = CountField(wire, number);
    unparsed_items_ =
        items.has_value() && *items > this->context_.limits().max_batch_items ? *items : 0;
    return unparsed_items_ != 0;
  }
  // Replies with the refusal PastBatchLimit found, if it found one.
  bool RefuseUnparsed(const char* what, const char* unit) {
    if (unparsed_items_ == 0) return false;
    this->Reply(this->context_.limits().CheckBatch(what, unparsed_items_, unit));
    return true;
  }

  // Prepares every item with `prepare(i, request)`: an item it refuses is answered with what
  // is wrong with it, the others are submitted. A batch of more than --max-batch-items is
  // refused whole, before any item is (`what` names the method, `unit` its items).
  template <typename Prepare>
  void Run(size_t items, const char* what, const char* unit, Prepare prepare) {
    if (absl::Status s = this->context_.limits().CheckBatch(what, items, unit); !s.ok()) {
      return this->Reply(s);
    }
    ops_.resize(items);
    // None allocated for a batch's accepted items up to kInlineItems, where growing them one
    // item at a time took several.
    absl::InlinedVector<Request*, kInlineItems> accepted;
    for (size_t i = 0; i < items; ++i) {
      Request& op = ops_[i];
      if (absl::Status s = prepare(i, &op); !s.ok()) {
        refused_.emplace_back(i, std::move(s));
      } else {
        accepted.push_back(&op);
      }
    }
    if (accepted.empty()) return this->Reply(WriteReply());
    // Each is counted as it is submitted: a completion comes only from a later engine turn.
    for (Request* op : accepted) this->SubmitCounted(*op, Lane::kBatch);
  }

 private:
  static constexpr uint32_t kResults = ResponsePb::kResultsFieldNumber;

  // A reply's most: protobuf's limit on a message (and within the gRPC prefix's 4 bytes).
  static constexpr size_t kMaxReplyBytes = std::numeric_limits<int32_t>::max();

  absl::Status WriteReply() {
    this->response_.set_type_name(ResponsePb::descriptor()->full_name().c_str());
    std::string& out = this->response_.bytes();
    size_t values = 0;  // Copied into the items.
    size_t lent = 0;
    bool over_budget = false;  // A shard found the reply's values past --max-reply-bytes ...
    bool over_memory = false;  // ... or past what all calls' answers may hold.
    for (const Request& op : ops_) {
      values += op.out.size();
      if (op.lent != nullptr) lent += op.lent->size();
      over_budget = over_budget || op.result == Result::kOverBudget;
      over_memory = over_memory || op.result == Result::kOverReplyMemory;
    }
    const size_t room = values + 32 * ops_.size();  // About what the items take: one allocation.
    const size_t max_values = this->context_.limits().max_reply_bytes;
    if (over_budget || values + lent > max_values) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the reply's values would take more than ", max_values,
                       " bytes; the limit is --max-reply-bytes=", max_values,
                       ": ask for fewer or smaller values at a time"));
    }
    if (over_memory) return ReplyMemorySpent(this->context_);
    if (room + lent > kMaxReplyBytes) {  // Lent values make such a reply cheap to ask for.
      return absl::ResourceExhaustedError(absl::StrCat(
          "the reply would take about ", room + lent, " bytes; a gRPC message is at most ",
          kMaxReplyBytes, " (protobuf's limit): ask for fewer or smaller values at a time"));
    }
    out.reserve(room);
    std::vector<CallSink::LentAt> loans;  // A MultiGet's values lent where they lie, if any.
    auto refused = refused_.begin();
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (refused != refused_.end() && refused->first == i) {
        AppendItem(kResults, (refused++)->second, &out);
      } else {
        AppendItem(kResults, ops_[i], this->context_, &out, &loans);
        std::string().swap(ops_[i].out);  // In the reply now: not held twice while it is sent.
        ops_[i].lent.reset();             // Copied, if not in `loans` now (a linearizable read).
      }
    }
    if (!loans.empty()) this->sink_.ShareLoans(out, std::move(loans));
    return absl::OkStatus();
  }

  std::vector<Request> ops_;
  std::vector<std::pair<size_t, absl::Status>> refused_;  // By item, in order.
  size_t unparsed_items_ = 0;  // A batch past the limit, counted by PastBatchLimit.
  std::string wire_;           // ParseCopy's bytes.
};

class MultiGetHandler : public BatchHandler<pb::MultiGetRequest, pb::MultiGetResponse> {
 public:
  using BatchHandler::BatchHandler;
  bool reads() const override { return true; }
  // The keys as views of the message, not a string each: a request of only keys (field 1,
  // as every client sends it) is split here; any other field, or bytes that do not parse,
  // are left to protobuf.
  bool ParseInPlace(std::string_view wire) override {
    const size_t most = context_.limits().max_batch_items;
    in_place_ = ReadFields(wire, [&](uint32_t tag, google::protobuf::io::CodedInputStream& in) {
      std::string_view key;
      if (tag != (pb::MultiGetRequest::kKeysFieldNumber << 3 | 2) || !ReadBytes(in, wire, &key)) {
        return false;
      }
      if (++count_ <= most) keys_.push_back(key);  // Past it, counted for the refusal only.
      return true;
    });
    if (!in_place_) {
      keys_.clear();
      count_ = 0;
      return PastBatchLimit(wire, pb::MultiGetRequest::kKeysFieldNumber);
    }
    return true;
  }
  void Start() override {
    if (RefuseUnparsed("MultiGet", "keys")) return;
    // Each large value is lent where it lies, where the transport takes loans (GetHandler).
    const bool lend = sink_.TakesLoans();
    // The GETs take their values from one budget, whichever shard runs them, and from the
    // server's reply memory: past either, they stop copying, and the reply is refused
    // (WriteReply).
    budget_.store(context_.limits().reply_budget(), std::memory_order_relaxed);
    auto get = [&](std::string_view key, Request* op) {
      absl::Status s = PrepareGet(context_.limits(), key, op);
      op->lend = lend;
      op->budget = &budget_;
      TakeReplyMemory(*op);
      return s;
    };
    if (in_place_) {
      return Run(count_, "MultiGet", "keys",
                 [&](size_t i, Request* op) { return get(keys_[i], op); });
    }
    Run(static_cast<size_t>(request_.keys_size()), "MultiGet", "keys",
        [&](size_t i, Request* op) { return get(request_.keys(static_cast<int>(i)), op); });
  }

 private:
  absl::InlinedVector<std::string_view, kInlineItems> keys_;  // Into the message's bytes.
  size_t count_ = 0;  // The keys ParseInPlace found (keys_ holds the first --max-batch-items).
  bool in_place_ = false;
  // The bytes of values the reply may still take (Request::budget). Written here before the
  // GETs are submitted (the ring's hand-off publishes it), then only by the shards.
  std::atomic<int64_t> budget_{0};
};

class MultiPutHandler : public BatchHandler<pb::MultiPutRequest, pb::MultiPutResponse> {
 public:
  using BatchHandler::BatchHandler;
  // The items' keys and values as views of the message, not a KeyValue and two strings each:
  // items of only a key, a value and a TTL are split here; a condition, any other field, or
  // bytes that do not parse are left to protobuf.
  bool ParseInPlace(std::string_view wire) override {
    in_place_ = SplitItems(wire);
    if (!in_place_) {
      items_.clear();
      count_ = 0;
      return PastBatchLimit(wire, pb::MultiPutRequest::kItemsFieldNumber);
    }
    return true;
  }
  void Start() override {
    if (RefuseUnparsed("MultiPut", "items")) return;
    const int64_t now = context_.NowMs();
    if (in_place_) {
      return Run(count_, "MultiPut", "items", [&](size_t i, Request* op) {
        const Item& item = items_[i];
        return PreparePut(context_.limits(), now, item.key, item.value, item.ttl_ms, nullptr, op);
      });
    }
    Run(static_cast<size_t>(request_.items_size()), "MultiPut", "items",
        [&](size_t i, Request* op) {
          const pb::KeyValue& item = request_.items(static_cast<int>(i));
          return PreparePut(context_.limits(), now, item.key(), item.value(), item.ttl_ms(),
                            item.has_condition() ? &item.condition() : nullptr, op);
        });
  }

 private:
  struct Item {  // A field the item leaves out is empty, as protobuf's, not null.
    std::string_view key = "";
    std::string_view value = "";
    int64_t ttl_ms = 0;
  };

  bool SplitItems(std::string_view wire) {
    using google::protobuf::io::CodedInputStream;
    const size_t most = context_.limits().max_batch_items;
    return ReadFields(wire, [&](uint32_t tag, CodedInputStream& in) {
      std::string_view bytes;
      if (tag != (pb::MultiPutRequest::kItemsFieldNumber << 3 | 2) ||
          !ReadBytes(in, wire, &bytes)) {
        return false;
      }
      // A field given twice in an item: the last one counts, as protobuf has it. Past
      // --max-batch-items, an item is read for its count only (Run refuses the batch).
      Item spare;
      Item& item = ++count_ <= most ? items_.emplace_back() : spare;
      return ReadFields(bytes, [&](uint32_t field_tag, CodedInputStream& fields) {
        uint64_t ttl;
        switch (field_tag) {
          case pb::KeyValue::kKeyFieldNumber << 3 | 2:
            return ReadBytes(fields, bytes, &item.key);
          case pb::KeyValue::kValueFieldNumber << 3 | 2:
            return ReadBytes(fields, bytes, &item.value);
          case pb::KeyValue::kTtlMsFieldNumber << 3:
            if (!fields.ReadVarint64(&ttl)) return false;
            item.ttl_ms = static_cast<int64_t>(ttl);
            return true;
          default:
            return false;
        }
      });
    });
  }

  absl::InlinedVector<Item, kInlineItems> items_;  // Into the message's bytes.
  size_t count_ = 0;  // The items SplitItems found (items_ holds the first --max-batch-items).
  bool in_place_ = false;
};

// Scan: one Request per shard, all from the page's cursor; the page is what they all covered
// (MergeScanPages).
class ScanHandler : public UnaryHandler<pb::ScanRequest, pb::ScanResponse> {
 public:
  using UnaryHandler::UnaryHandler;
  bool reads() const override { return true; }
  void Start() override {
    limit_ = request_.limit() == 0 ? kDefaultScanLimit : request_.limit();
    if (limit_ > kMaxScanLimit) {
      return Reply(absl::InvalidArgumentError(absl::StrCat("limit is ", limit_,
                                                           "; it must be 1 .. ", kMaxScanLimit,
                                                           ", or 0 for ", kDefaultScanLimit)));
    }
    const std::string& prefix = request_.prefix();
    if (prefix.size() > context_.limits().max_key_bytes) {
      return Reply(absl::InvalidArgumentError(
          absl::StrCat("prefix is ", prefix.size(),
                       " bytes; the limit is --max-key-bytes=", context_.limits().max_key_bytes)));
    }
    parts_.resize(context_.options().threads);
    for (size_t i = 0; i < parts_.size(); ++i) {
      Request& op = parts_[i];
      op.op = Op::kScan;
      op.target = static_cast<uint16_t>(i);
      op.key = prefix;
      op.version = request_.cursor();
      op.number = limit_;
    }
    for (Request& op : parts_) SubmitCounted(op);
  }
  void Take(Request&) override {}
  absl::Status Result() override {
    std::vector<ShardScanPart> parts;
    for (const Request& op : parts_) {
      // A linearizable scan whose shard could not settle what it read.
      if (op.result != ringkv::Result::kOk) return StatusOf(op, context_);
      parts.push_back({op.out, op.number == 1, op.version});
    }
    std::vector<std::string_view> keys;
    response_.set_cursor(MergeScanPages(parts, limit_, kScanPageBytes, &keys));
    for (std::string_view key : keys) response_.add_keys(std::string(key));
    return absl::OkStatus();
  }

 private:
  static constexpr uint32_t kDefaultScanLimit = 100;
  static constexpr uint32_t kMaxScanLimit = 10000;
  static constexpr size_t kScanPageBytes = size_t{1} << 20;

  uint32_t limit_ = 0;
  std::vector<Request> parts_;
};

class StatsHandler : public UnaryHandler<pb::StatsRequest, pb::StatsResponse> {
 public:
  using UnaryHandler::UnaryHandler;
  void Start() override {
    context_.FillStats(&response_);
    Reply(absl::OkStatus());
  }
  void Take(Request&) override {}
};

// Snapshot: the data dir's snapshotter takes it; its Request is a placeholder that comes back
// (HandlerHost::CompleteExternal) once the snapshot is durable or has failed, or at once,
// through the same door, when the server has no data directory.
class SnapshotHandler : public UnaryHandler<pb::SnapshotRequest, pb::SnapshotResponse> {
 public:
  using UnaryHandler::UnaryHandler;
  void Start() override {
    CountExternal();
    host_.SubmitExternal(this, &placeholder_);
    // Called on the snapshotter's thread; the loop touches nothing of this until the Request
    // is back (CompleteExternal hands it over under a mutex).
    const absl::Status requested =
        context_.RequestSnapshot([this](const absl::StatusOr<persist::SnapshotInfo>& info) {
          result_ = info.status();
          if (info.ok()) {
            response_.set_generation(info->generation);
            response_.set_keys(info->keys);
            response_.set_bytes(info->bytes);
            response_.set_unix_ms(info->unix_ms);
            response_.set_seconds(info->seconds);
          }
          host_.CompleteExternal(&placeholder_);
        });
    if (!requested.ok()) {  // No data directory: `done` never runs.
      result_ = requested;
      host_.CompleteExternal(&placeholder_);
    }
  }
  void Take(Request&) override {}
  absl::Status Result() override { return result_; }

 private:
  Request placeholder_;
  absl::Status result_;
};

// Stream: up to kMaxStreamInFlight operations in flight; the answers that one engine turn
// completes, or that pile up while a Write is out, share the next reply message. The values
// its GETs found are held to about --max-reply-bytes until the client reads them (budget_).
class StreamHandler : public BidiHandler<WireMessage> {
 public:
  using BidiHandler::BidiHandler;

  google::protobuf::MessageLite* incoming() override { return &incoming_; }

  void OnRequestDone(Request* request) override {
    InFlight& op = *static_cast<InFlight*>(request);
    // What the shard took of the server's reply memory: held with the reply that carries the
    // value (given back as the call's budget is, Written), or back now if none will.
    HoldReplyMemory(*request);
    if (cancelled()) {
      GiveBackReplyMemory(ReplyMemoryTaken(*request));
    } else {
      // A linearizable GET is answered only while this server may (after the read ran).
      const absl::Status refusal =
          linearizable_ && request->op == Op::kGet ? LinearizableRefusal() : absl::OkStatus();
      // What the shard took from the budget (and as much from the reply memory), whatever the
      // result became (a linearizable read's may turn UNAVAILABLE; its value is moved out
      // below).
      const int64_t taken = request->budget_taken;
      std::string& reply = Gathering(request->out.size() + 32);
      if (refusal.ok()) {
        AppendStreamResult(op.id, *request, context_, &reply);
        if (Acknowledges(*request)) MarkAcknowledging();
      } else {
        AppendStreamResult(op.id, refusal, &reply);
      }
      if (taken != 0) Hold(taken);  // Back once written (Written).
    }
    Release(op);
    --in_flight_;
    ReadNext();
    if (!flush_requested_) {  // Write once this engine turn is over, with whatever it answered.
      flush_requested_ = true;
      host_.RequestFlush(this);
    }
  }

  void Flush() override {
    flush_requested_ = false;
    Progress();
  }

 private:
  // A Request with the storage for its key and value (swapped out of the message it came in).
  struct InFlight : Request {
    std::string key_bytes;
    std::string value_bytes;
    uint64_t id = 0;
  };

  // The room an idle operation's strings keep for the next, at most.
  static constexpr size_t kKeptOpBytes = 1024;

  bool Busy() const override { return in_flight_ > 0; }
  // Not while less than the largest value's room is left of the budget: a client that asks
  // and does not read is held back by HTTP/2's flow control. All of it is back once every
  // answer is written, so a call with nothing in flight and nothing unwritten reads on.
  bool RoomForMore() const override {
    return in_flight_ < kMaxStreamInFlight &&
           budget_.load(std::memory_order_relaxed) >=
               std::min(static_cast<int64_t>(context_.limits().max_value_bytes),
                        context_.limits().reply_budget());
  }

  // The back reply holds `bytes` of the budget.
  void Hold(int64_t bytes) {
    const uint64_t seq = back_seq();
    if (!held_.empty() && held_.back().first == seq) {
      held_.back().second += bytes;
    } else {
      held_.emplace_back(seq, bytes);
    }
  }
  // The replies before `end` are written (or dropped): what they held goes back to the budget.
  void Written(uint64_t end) override {
    while (!held_.empty() && held_.front().first < end) {
      budget_.fetch_add(held_.front().second, std::memory_order_relaxed);
      GiveBackReplyMemory(held_.front().second);  // Every GET took as much from each.
      held_.pop_front();
    }
  }

  // The operations' fields read from the message's bytes, with no StreamOp object each: ops
  // of an id, a type, a key, a value, a TTL and a delta (every field but a condition) are read
  // here; a condition, any other field, or bytes that do not parse are left to protobuf. The
  // bytes stay only until the OnMessage that follows returns, so TakeMessage copies each key
  // and value into its operation's strings, whose room is kept from one operation to the next.
  bool ParsesCopies() const override { return true; }
  bool ParseCopy(std::string_view wire) override {
    ClearParsed();
    if (SplitOps(wire)) return true;
    ClearParsed();
    // Past --max-batch-items, the message is not parsed: TakeMessage ends the call on the
    // count alone.
    const std::optional<size_t> ops = CountField(wire, pb::StreamRequest::kOpsFieldNumber);
    if (ops.has_value() && *ops > context_.limits().max_batch_items) {
      parsed_count_ = *ops;
      return true;
    }
    return false;
  }
  void ClearParsed() {
    parsed_.clear();
    parsed_count_ = 0;
  }

  void TakeMessage() override {
    // A message of more operations than --max-batch-items ends the call, as one whose bytes
    // do not parse would: answering each with a refusal would cost as much as running it.
    const size_t ops =
        parsed_count_ != 0 ? parsed_count_ : static_cast<size_t>(incoming_.ops_size());
    if (absl::Status s = context_.limits().CheckBatch("a Stream message", ops, "operations");
        !s.ok()) {
      ClearParsed();
      incoming_.Clear();
      return End(s);
    }
    const int64_t now = context_.NowMs();
    if (!parsed_.empty()) {
      for (const OpFields& in : parsed_) {
        InFlight& op = NewOp();
        op.key_bytes.assign(in.key);
        op.value_bytes.assign(in.value);
        TakeOp(in.id, in.type, in.ttl_ms, in.delta, nullptr, now, op);
      }
      ClearParsed();
      return;
    }
    for (pb::StreamOp& in : *incoming_.mutable_ops()) {
      InFlight& op = NewOp();
      op.key_bytes.swap(*in.mutable_key());
      op.value_bytes.swap(*in.mutable_value());
      TakeOp(in.id(), in.type(), in.ttl_ms(), in.delta(),
             in.has_condition() ? &in.condition() : nullptr, now, op);
    }
    incoming_.Clear();
  }

  // An operation as the message gave it, its key and value already in `op`'s strings:
  // submitted, or answered at once with what is wrong with it.
  void TakeOp(uint64_t id, int type, int64_t ttl_ms, int64_t delta, const pb::Condition* condition,
              int64_t now, InFlight& op) {
    const RequestLimits& limits = context_.limits();
    op.id = id;
    const std::string_view key = op.key_bytes;
    absl::Status status;
    // Every type from PUT on writes (an unknown one is refused below).
    const bool writes = type >= pb::OP_TYPE_PUT && type <= pb::OP_TYPE_PERSIST;
    if (writes && caller_ < Role::kWrite) {
      status = absl::PermissionDeniedError(absl::StrCat(
          "Stream ", absl::StripPrefix(pb::OpType_Name(static_cast<pb::OpType>(type)), "OP_TYPE_"),
          " needs the write role; the token has ", std::string(RoleName(caller_))));
    } else if (writes && context_.read_only()) {
      status = context_.read_only_refusal();
    } else {
      switch (type) {
        case pb::OP_TYPE_GET:
          status = PrepareGet(limits, key, &op);
          op.budget = &budget_;
          TakeReplyMemory(op);
          break;
        case pb::OP_TYPE_PUT:
          status = PreparePut(limits, now, key, op.value_bytes, ttl_ms, condition, &op);
          break;
        case pb::OP_TYPE_DELETE:
          status = PrepareDelete(limits, key, condition, &op);
          break;
        case pb::OP_TYPE_INCREMENT:
          status = PrepareIncrement(limits, key, delta, &op);
          break;
        case pb::OP_TYPE_EXPIRE:
          status = PrepareExpire(limits, now, key, ttl_ms, &op);
          break;
        case pb::OP_TYPE_PERSIST:
          status = PreparePersist(limits, key, &op);
          break;
        default:
          status = absl::InvalidArgumentError(
              "op type is unset or unknown; use GET, PUT, DELETE, INCREMENT, EXPIRE or PERSIST");
      }
    }
    if (!status.ok()) {
      AppendStreamResult(id, status, &Gathering(status.message().size() + 32));
      Release(op);
      return;
    }
    ++in_flight_;
    Submit(op, Lane::kBatch);
  }

  // StreamOp's fields but its condition. A field the op leaves out is zero or empty, as
  // protobuf's, not null; a field given twice counts as its last, as protobuf has it.
  struct OpFields {
    uint64_t id = 0;
    int type = 0;
    std::string_view key = "";
    std::string_view value = "";
    int64_t ttl_ms = 0;
    int64_t delta = 0;
  };

  bool SplitOps(std::string_view wire) {
    using google::protobuf::io::CodedInputStream;
    const size_t most = context_.limits().max_batch_items;
    return ReadFields(wire, [&](uint32_t tag, CodedInputStream& in) {
      std::string_view bytes;
      if (tag != (pb::StreamRequest::kOpsFieldNumber << 3 | 2) || !ReadBytes(in, wire, &bytes)) {
        return false;
      }
      // Past --max-batch-items, an op is read for its count only (TakeMessage ends the call).
      OpFields spare;
      OpFields& op = ++parsed_count_ <= most ? parsed_.emplace_back() : spare;
      return ReadFields(bytes, [&](uint32_t field_tag, CodedInputStream& fields) {
        uint64_t number;
        switch (field_tag) {
          case pb::StreamOp::kKeyFieldNumber << 3 | 2:
            return ReadBytes(fields, bytes, &op.key);
          case pb::StreamOp::kValueFieldNumber << 3 | 2:
            return ReadBytes(fields, bytes, &op.value);
          case pb::StreamOp::kIdFieldNumber << 3:
            return fields.ReadVarint64(&op.id);
          // Protobuf's conversions: an enum is an int32, the others are 64-bit.
          case pb::StreamOp::kTypeFieldNumber << 3:
            if (!fields.ReadVarint64(&number)) return false;
            op.type = static_cast<int32_t>(number);
            return true;
          case pb::StreamOp::kTtlMsFieldNumber << 3:
            if (!fields.ReadVarint64(&number)) return false;
            op.ttl_ms = static_cast<int64_t>(number);
            return true;
          case pb::StreamOp::kDeltaFieldNumber << 3:
            if (!fields.ReadVarint64(&number)) return false;
            op.delta = static_cast<int64_t>(number);
            return true;
          default:
            return false;
        }
      });
    });
  }

  // Back to the free list, with its strings emptied (their memory kept for the next op).
  void Release(InFlight& op) {
    for (std::string* bytes : {&op.key_bytes, &op.value_bytes, &op.out}) {
      if (bytes->capacity() > kKeptOpBytes) {
        std::string().swap(*bytes);  // A large value's room is not kept for the stream's life.
      } else {
        bytes->clear();
      }
    }
    free_.push_back(&op);
  }

  InFlight& NewOp() {
    if (free_.empty()) {
      ops_.push_back(std::make_unique<InFlight>());
      return *ops_.back();
    }
    InFlight* op = free_.back();
    free_.pop_back();
    return *op;
  }

  // The bytes of the reply being gathered (a StreamResponse), for a result of about `bytes`.
  std::string& Gathering(size_t bytes) {
    // Looked up once: descriptor() takes a call into protobuf each time (0.9% of the server's
    // samples at Stream GET, one lookup per result).
    static const char* const kTypeName = pb::StreamResponse::descriptor()->full_name().c_str();
    WireMessage& reply = BidiHandler::Gathering(bytes, kStreamReplyBytes);
    reply.set_type_name(kTypeName);
    return reply.bytes();
  }

  pb::StreamRequest incoming_;
  std::vector<OpFields> parsed_;  // ParseCopy's, into the message's bytes until TakeMessage.
  size_t parsed_count_ = 0;       // The ops ParseCopy found (parsed_ holds the first ones).
  std::vector<std::unique_ptr<InFlight>> ops_;  // Every one made; free_ lists the idle ones.
  std::vector<InFlight*> free_;
  size_t in_flight_ = 0;
  bool flush_requested_ = false;
  // The bytes of values the GETs may still take (Request::budget): taken by the shards, given
  // back by this thread as the replies that hold them are written. RoomForMore reads it
  // relaxed: a shard's take shows up by the next look, and nothing else is published with it.
  std::atomic<int64_t> budget_{context_.limits().reply_budget()};
  // Each reply's hold on the budget, by its number (BidiHandler's), oldest first.
  std::deque<std::pair<uint64_t, int64_t>> held_;
};

}  // namespace

std::unique_ptr<Handler> MakeGetHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<GetHandler>(host, sink);
}
std::unique_ptr<Handler> MakePutHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<PutHandler>(host, sink);
}
std::unique_ptr<Handler> MakeDeleteHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<DeleteHandler>(host, sink);
}
std::unique_ptr<Handler> MakeMultiGetHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<MultiGetHandler>(host, sink);
}
std::unique_ptr<Handler> MakeMultiPutHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<MultiPutHandler>(host, sink);
}
std::unique_ptr<Handler> MakeStreamHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<StreamHandler>(host, sink);
}
std::unique_ptr<Handler> MakeStatsHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<StatsHandler>(host, sink);
}
std::unique_ptr<Handler> MakeSnapshotHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<SnapshotHandler>(host, sink);
}
std::unique_ptr<Handler> MakeExpireHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<ExpireHandler>(host, sink);
}
std::unique_ptr<Handler> MakePersistHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<PersistHandler>(host, sink);
}
std::unique_ptr<Handler> MakeIncrementHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<IncrementHandler>(host, sink);
}
std::unique_ptr<Handler> MakeScanHandler(HandlerHost& host, CallSink& sink) {
  return std::make_unique<ScanHandler>(host, sink);
}

}  // namespace ringkv::internal
