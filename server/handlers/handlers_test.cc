// Handlers without a daemon: each test makes a handler from the method table, drives it the way
// a transport does (OnStart, a request message, OnMessage) and reads what it answered through
// its CallSink. Its Requests run on a real Shard, one engine turn at a time (TestHost::Turn), so
// what is checked is the handler's own logic: input checks, the Requests it makes, and how it
// turns their outcome into an answer. No socket, thread or Server.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.pb.h"
#include "gtest/gtest.h"
#include "ringkv/v1/kv.pb.h"
#include "server/handlers/handler.h"
#include "server/handlers/handler_host.h"
#include "server/handlers/internal/kv_ops.h"
#include "server/handlers/methods.h"
#include "server/handlers/parse_request.h"
#include "server/server_context.h"
#include "server/shard_loop.h"
#include "server/status_details.h"
#include "shard/router.h"
#include "shard/shard.h"

namespace ringkv {
namespace {

namespace pb = ::ringkv::v1;
namespace health = ::grpc::health::v1;

constexpr int64_t kNowMs = 1'700'000'000'000;
int64_t FixedClock() { return kNowMs; }

class TestContext final : public ServerContext {
 public:
  TestContext() {
    options_.clock = FixedClock;
    options_.limits.max_key_bytes = 16;
  }
  const ServerOptions& options() const override { return options_; }
  const Authenticator* auth() const override { return nullptr; }
  const ServerTls* tls() const override { return nullptr; }
  bool shutting_down() const override { return draining; }
  void CallStarted() override { ++calls; }
  void CallEnded() override { --calls; }
  void FillStats(pb::StatsResponse* stats) const override { stats->set_engine("test"); }
  absl::Status RequestSnapshot(persist::DataDir::SnapshotDone) override {
    return absl::FailedPreconditionError("no --data-dir here");
  }
  const std::string& journal_failure_message() const override { return journal_failure_; }
  bool read_only() const override { return false; }
  absl::Status read_only_refusal() const override { return absl::OkStatus(); }
  absl::Status RequestRoleChange(const std::string&, RoleDone) override {
    return absl::UnimplementedError("no replication here");
  }
  const std::string& server_id() const override { return server_id_; }
  bool fenced() const override { return fence_closed; }
  bool may_fence() const override { return true; }
  std::atomic<int64_t>& reply_memory() override { return reply_memory_left; }

  bool draining = false;
  bool fence_closed = false;
  int calls = 0;
  std::atomic<int64_t> reply_memory_left{int64_t{1} << 30};

 private:
  ServerOptions options_;
  const std::string journal_failure_ = "the test's log failed";
  const std::string server_id_ = "test";
};

// One shard, run a turn at a time: Turn() executes what was submitted (or, with
// refuse_writes, refuses writes as a failed journal would), gives every Request back to its
// handler, then flushes.
class TestHost final : public HandlerHost {
 public:
  explicit TestHost(MemoryLimit memory = {}) : shard_(0, memory) {}

  ServerContext& context() override { return context_; }
  void Submit(Request* request, Lane /*lane*/) override {
    pending_.push_back(request);
    ++submitted;
  }
  void SubmitExternal(Handler* handler, Request* request) override { request->tag = handler; }
  void CompleteExternal(Request* request) override { external_.push_back(request); }
  void RequestFlush(Handler* handler) override { flush_.push_back(handler); }
  void AddWatcher(Handler* handler) override { watchers.push_back(handler); }
  void RemoveWatcher(Handler* handler) override { std::erase(watchers, handler); }

  void Turn() {
    std::vector<Request*> batch;
    batch.swap(pending_);
    for (Request* r : batch) {
      if (refuse_writes && r->op != Op::kGet && r->op != Op::kScan) {
        r->result = Result::kUnavailable;
        continue;
      }
      if (r->op != Op::kScan) r->hash = Router::Hash(r->key);
      shard_.Execute(*r, kNowMs);
    }
    batch.insert(batch.end(), external_.begin(), external_.end());  // Nothing to run there.
    external_.clear();
    // Run with the fence open; their answers are made after it closed.
    if (close_fence_after_run) context_.fence_closed = true;
    for (Request* r : batch) static_cast<Handler*>(r->tag)->OnRequestDone(r);
    std::vector<Handler*> flush;
    flush.swap(flush_);
    for (Handler* handler : flush) handler->Flush();
  }

  TestContext context_;
  bool refuse_writes = false;
  bool close_fence_after_run = false;
  int submitted = 0;
  std::vector<Handler*> watchers;

 private:
  Shard shard_;
  std::vector<Request*> pending_;
  std::vector<Request*> external_;
  std::vector<Handler*> flush_;
};

class RecordingSink final : public CallSink {
 public:
  // `shares`: takes large fields as the h2 transport does (ShareField), or refuses as grpc++.
  // `lends`: takes lent values as the h2 transport on epoll does (TakesLoans, ShareLoans).
  explicit RecordingSink(bool shares = false, bool lends = false)
      : shares_(shares), lends_(lends) {}
  void Read() override { ++reads; }
  void Write(const google::protobuf::MessageLite& message) override {
    writes.push_back(message.SerializeAsString());
    acknowledging_writes += std::exchange(acknowledges_next_, false) ? 1 : 0;
  }
  void Finish(const absl::Status& s, const google::protobuf::MessageLite* response) override {
    ++finishes;
    status = s;
    if (response != nullptr) answer = std::move(lent_answer) + response->SerializeAsString();
    acknowledging_finish = std::exchange(acknowledges_next_, false);
  }
  void Acknowledges() override { acknowledges_next_ = true; }
  bool ShareField(uint32_t field, std::string& bytes) override {
    if (!shares_) return false;
    shared_field = field;
    shared = std::move(bytes);
    return true;
  }
  bool TakesLoans() const override { return lends_; }
  void ShareLoans(std::string& bytes, std::vector<LentAt> loans) override {
    lent += static_cast<int>(loans.size());
    CallSink::ShareLoans(bytes, std::move(loans));  // The loans copied in: the reply, whole.
    lent_answer = std::exchange(bytes, {});         // Taken, as the h2 call takes them.
  }
  std::string PeerHost() const override { return ""; }

  int reads = 0;
  int finishes = 0;
  std::vector<std::string> writes;
  absl::Status status;
  std::string answer;
  // Answers the handler said acknowledge writes (CallSink::Acknowledges came just before).
  int acknowledging_writes = 0;
  bool acknowledging_finish = false;
  uint32_t shared_field = 0;  // What ShareField took.
  std::string shared;
  int lent = 0;             // Values ShareLoans took.
  std::string lent_answer;  // What it took them into.

 private:
  const bool shares_;
  const bool lends_;
  bool acknowledges_next_ = false;
};

// One unary call of `id` with `request`, run to its end; the sink holds its answer.
class Call {
 public:
  // `shares`: the sink takes shared fields (CallSink::ShareField). `wire`: the request's bytes
  // as sent (request.SerializeAsString() if empty), parsed in place if the handler takes them
  // so (Handler::ParseInPlace), as the h2 transport offers a request that came in pieces; or,
  // `stays` false, offered as bytes that do not stay (Handler::ParseCopy), as the h2 transport
  // offers a request read whole: they are overwritten right after.
  Call(TestHost& host, MethodId id, const google::protobuf::MessageLite& request,
       bool shares = false, std::string wire = "", bool stays = true, bool lends = false)
      : host_(host), sink_(shares, lends), handler_(MethodOf(id).make(host, sink_)) {
    handler_->OnStart();
    if (wire.empty()) wire = request.SerializeAsString();
    wire_ = std::move(wire);  // Stays put while the handler lives, as the transport's buffer.
    if (stays) {
      in_place = handler_->ParseInPlace(wire_);
    } else {
      std::string read_buffer = wire_;
      in_place = handler_->ParseCopy(read_buffer);
      std::fill(read_buffer.begin(), read_buffer.end(), '\xee');
    }
    if (!in_place) {
      EXPECT_TRUE(handler_->incoming()->ParseFromString(wire_));
    }
    handler_->OnMessage();
    for (int turn = 0; turn < 4 && sink_.finishes == 0; ++turn) host_.Turn();
  }
  const RecordingSink& sink() const { return sink_; }
  bool in_place = false;
  template <typename Response>
  Response Answer() const {
    Response response;
    EXPECT_TRUE(response.ParseFromString(sink_.answer));
    return response;
  }

 private:
  TestHost& host_;
  RecordingSink sink_;
  std::string wire_;
  std::unique_ptr<Handler> handler_;
};

pb::PutRequest Put(const std::string& key, const std::string& value) {
  pb::PutRequest put;
  put.set_key(key);
  put.set_value(value);
  return put;
}

pb::GetRequest Get(const std::string& key) {
  pb::GetRequest get;
  get.set_key(key);
  return get;
}

TEST(HandlersTest, APutIsReadBackWithItsVersionAndAMissingKeyIsNotFound) {
  TestHost host;
  Call put(host, MethodId::kPut, Put("k", "v1"));
  ASSERT_TRUE(put.sink().status.ok()) << put.sink().status;
  const uint64_t version = put.Answer<pb::PutResponse>().version();
  EXPECT_GT(version, 0u);

  Call get(host, MethodId::kGet, Get("k"));
  ASSERT_TRUE(get.sink().status.ok()) << get.sink().status;
  EXPECT_EQ(get.Answer<pb::GetResponse>().value(), "v1");
  EXPECT_EQ(get.Answer<pb::GetResponse>().version(), version);
  EXPECT_EQ(get.Answer<pb::GetResponse>().ttl_ms(), -1);

  Call missing(host, MethodId::kGet, Get("nope"));
  EXPECT_EQ(missing.sink().status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.sink().finishes, 1);
}

// A large value leaves the shard once and is handed to a transport that sends it from there
// (CallSink::ShareField); a small one, or one for a transport that cannot, is in the response.
TEST(HandlersTest, ALargeGetValueIsSharedWithATransportThatTakesIt) {
  TestHost host;
  const std::string large(CallSink::kShareBytes, 'L');
  const std::string below(CallSink::kShareBytes - 1, 'b');
  for (const auto& [key, value] : {std::pair{"large", large}, {"below", below}}) {
    Call put(host, MethodId::kPut, Put(key, value));
    ASSERT_TRUE(put.sink().status.ok()) << put.sink().status;
  }
  Call shared(host, MethodId::kGet, Get("large"), /*shares=*/true);
  ASSERT_TRUE(shared.sink().status.ok()) << shared.sink().status;
  EXPECT_EQ(shared.sink().shared_field, pb::GetResponse::kValueFieldNumber);
  EXPECT_EQ(shared.sink().shared, large);
  EXPECT_EQ(shared.Answer<pb::GetResponse>().value(), "");  // Not in the message as well.
  EXPECT_GT(shared.Answer<pb::GetResponse>().version(), 0u);
  EXPECT_EQ(shared.Answer<pb::GetResponse>().ttl_ms(), -1);

  Call small(host, MethodId::kGet, Get("below"), /*shares=*/true);
  EXPECT_EQ(small.sink().shared_field, 0u);
  EXPECT_EQ(small.Answer<pb::GetResponse>().value(), below);
  Call copied(host, MethodId::kGet, Get("large"), /*shares=*/false);
  EXPECT_EQ(copied.Answer<pb::GetResponse>().value(), large);
}

// A GET's value of kBudgetedValueBytes or more is taken from the server's reply memory
// (--max-reply-memory) and held until its handler goes (a transport deletes it once the answer
// has left the call); past it, a GET or a MultiGet is refused RESOURCE_EXHAUSTED, naming the
// flag, and a small value is still read.
TEST(HandlersTest, LargeValuesHoldTheServersReplyMemoryUntilTheirHandlersGo) {
  TestHost host;
  const std::string large(kBudgetedValueBytes, 'L');
  const auto size = static_cast<int64_t>(large.size());
  for (const auto& [key, value] : {std::pair{"large", large}, {"small", std::string("s")}}) {
    Call put(host, MethodId::kPut, Put(key, value));
    ASSERT_TRUE(put.sink().status.ok()) << put.sink().status;
  }
  std::atomic<int64_t>& left = host.context().reply_memory();
  left = 2 * size;
  {
    Call held(host, MethodId::kGet, Get("large"));
    ASSERT_TRUE(held.sink().status.ok()) << held.sink().status;
    EXPECT_EQ(left.load(), size);
    pb::MultiGetRequest twice;
    for (int i = 0; i < 2; ++i) twice.add_keys("large");
    for (const bool lends : {false, true}) {
      Call multi(host, MethodId::kMultiGet, twice, false, "", true, lends);
      EXPECT_EQ(multi.sink().status.code(), absl::StatusCode::kResourceExhausted);
      EXPECT_NE(multi.sink().status.message().find("would pass --max-reply-memory=1073741824"),
                absl::string_view::npos)
          << multi.sink().status;
      EXPECT_EQ(left.load(), 0);  // The one value it took, until it goes.
    }
    EXPECT_EQ(left.load(), size);
    Call small(host, MethodId::kGet, Get("small"));
    EXPECT_EQ(small.Answer<pb::GetResponse>().value(), "s");
    Call second(host, MethodId::kGet, Get("large"));
    EXPECT_EQ(left.load(), 0);
    Call refused(host, MethodId::kGet, Get("large"));
    EXPECT_EQ(refused.sink().status.code(), absl::StatusCode::kResourceExhausted)
        << refused.sink().status;
    EXPECT_EQ(left.load(), 0);
  }
  EXPECT_EQ(left.load(), 2 * size);  // All back.
}

// A MultiGet's large values go to a transport that takes loans beside the reply's own bytes
// (CallSink::ShareLoans), each where it belongs: the reply, put together, is protobuf's. One
// record asked for twice, a small value and a missing key between.
TEST(HandlersTest, AMultiGetsLargeValuesAreLentToATransportThatTakesThem) {
  TestHost host;
  const std::string big(300'000, 'B');
  const std::string large(CallSink::kShareBytes, 'L');
  for (const auto& [key, value] :
       {std::pair{"big", big}, {"large", large}, {"small", std::string("s")}}) {
    Call put(host, MethodId::kPut, Put(key, value));
    ASSERT_TRUE(put.sink().status.ok()) << put.sink().status;
  }
  pb::MultiGetRequest gets;
  for (const char* key : {"big", "small", "missing", "large", "big"}) gets.add_keys(key);
  for (const bool lends : {false, true}) {
    Call get(host, MethodId::kMultiGet, gets, false, "", true, lends);
    ASSERT_TRUE(get.sink().status.ok()) << get.sink().status;
    EXPECT_EQ(get.sink().lent, lends ? 3 : 0);
    const pb::MultiGetResponse reply = get.Answer<pb::MultiGetResponse>();
    ASSERT_EQ(reply.results_size(), 5) << lends;
    EXPECT_EQ(reply.results(0).value(), big);
    EXPECT_EQ(reply.results(1).value(), "s");
    EXPECT_EQ(reply.results(2).code(), static_cast<int>(absl::StatusCode::kNotFound));
    EXPECT_EQ(reply.results(3).value(), large);
    EXPECT_EQ(reply.results(4).value(), big);
    EXPECT_GT(reply.results(4).version(), 0u);
    EXPECT_EQ(reply.results(4).ttl_ms(), -1);
    EXPECT_EQ(get.sink().answer, reply.SerializeAsString()) << lends;
  }
}

// A large PUT's value is not copied out of the transport's buffer before the shard's copy
// (Handler::ParseInPlace): the other fields still count, and protobuf's rules hold.
TEST(HandlersTest, ALargePutIsParsedInPlaceWithItsOtherFields) {
  TestHost host;
  std::string large(CallSink::kShareBytes, 'P');
  large[100] = 'x';
  pb::PutRequest put = Put("k", large);
  put.set_ttl_ms(600'000);
  // A value field before the last one is overwritten, as protobuf merges concatenated messages.
  const std::string wire = Put("", "lost").SerializeAsString() + put.SerializeAsString();
  Call in_place(host, MethodId::kPut, put, false, wire);
  EXPECT_TRUE(in_place.in_place);
  ASSERT_TRUE(in_place.sink().status.ok()) << in_place.sink().status;
  Call get(host, MethodId::kGet, Get("k"));
  EXPECT_EQ(get.Answer<pb::GetResponse>().value(), large);
  EXPECT_GT(get.Answer<pb::GetResponse>().ttl_ms(), 0);

  // A small value is parsed as usual; bytes that are not a PutRequest are left to the
  // transport's parse, which refuses them.
  Call small(host, MethodId::kPut, Put("s", "v"));
  EXPECT_FALSE(small.in_place);
  std::string truncated = put.SerializeAsString();
  truncated.pop_back();
  TestHost other;
  RecordingSink sink;
  auto handler = MethodOf(MethodId::kPut).make(other, sink);
  EXPECT_FALSE(handler->ParseInPlace(truncated));
  EXPECT_FALSE(handler->ParseInPlace(std::string(CallSink::kShareBytes, '\xff')));
}

pb::MultiPutRequest MultiPut(const std::vector<std::string>& keys) {
  pb::MultiPutRequest put;
  for (const std::string& key : keys) {
    pb::KeyValue* item = put.add_items();
    item->set_key(key);
    item->set_value("v");
  }
  return put;
}

// The fence (server/repl/fence.h): an answer acknowledging writes is marked as such for the
// transport, and one made after the fence closed says the writes may or may not stay.
TEST(HandlersTest, OnlyAnswersThatAcknowledgeWritesAreMarkedForTheFence) {
  TestHost host;
  Call put(host, MethodId::kPut, Put("k", "v"));
  ASSERT_TRUE(put.sink().status.ok()) << put.sink().status;
  EXPECT_TRUE(put.sink().acknowledging_finish);
  Call multi_put(host, MethodId::kMultiPut, MultiPut({"a", "b"}));
  ASSERT_TRUE(multi_put.sink().status.ok()) << multi_put.sink().status;
  EXPECT_TRUE(multi_put.sink().acknowledging_finish);
  Call get(host, MethodId::kGet, Get("k"));
  ASSERT_TRUE(get.sink().status.ok()) << get.sink().status;
  EXPECT_FALSE(get.sink().acknowledging_finish);
  pb::PutRequest absent_only = Put("k", "v2");
  absent_only.mutable_condition()->set_absent(true);
  Call refused(host, MethodId::kPut, absent_only);
  EXPECT_EQ(refused.sink().status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(refused.sink().acknowledging_finish);
}

TEST(HandlersTest, AWriteAnsweredAfterTheFenceClosedIsNotAcknowledged) {
  TestHost host;
  host.close_fence_after_run = true;
  Call put(host, MethodId::kPut, Put("k", "v"));
  EXPECT_EQ(put.sink().status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(put.sink().status.message(),
            "the write ran here, but this server lost the group's leadership before it could "
            "acknowledge it: it may or may not stay (the new primary's data decides)");
  EXPECT_FALSE(put.sink().acknowledging_finish);
  Call multi_put(host, MethodId::kMultiPut, MultiPut({"a", "b"}));
  EXPECT_EQ(multi_put.sink().status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(multi_put.sink().status.message().find("the call's writes ran here"), std::string::npos)
      << multi_put.sink().status;
  // It ran: a read finds it.
  Call get(host, MethodId::kGet, Get("k"));
  ASSERT_TRUE(get.sink().status.ok()) << get.sink().status;
  EXPECT_EQ(get.Answer<pb::GetResponse>().value(), "v");
}

// A Stream with one PUT in one message, run for a turn: its sink.
void StreamOnePut(TestHost& host, RecordingSink& sink) {
  std::unique_ptr<Handler> handler = MethodOf(MethodId::kStream).make(host, sink);
  handler->OnStart();
  pb::StreamRequest request;
  pb::StreamOp* op = request.add_ops();
  op->set_id(1);
  op->set_type(pb::OP_TYPE_PUT);
  op->set_key("s");
  op->set_value("v");
  ASSERT_TRUE(handler->incoming()->ParseFromString(request.SerializeAsString()));
  handler->OnMessage();
  host.Turn();
  if (sink.finishes == 0) {  // The client closes its side; the handler finishes.
    if (!sink.writes.empty()) handler->OnWriteDone(true);
    handler->OnHalfClose();
  }
  EXPECT_EQ(sink.finishes, 1);
}

TEST(HandlersTest, AStreamReplyAcknowledgingWritesAfterTheFenceClosedEndsTheStream) {
  TestHost host;
  RecordingSink open;
  StreamOnePut(host, open);
  EXPECT_TRUE(open.status.ok()) << open.status;
  ASSERT_EQ(open.writes.size(), 1u);
  EXPECT_EQ(open.acknowledging_writes, 1);

  host.close_fence_after_run = true;
  RecordingSink closed;
  StreamOnePut(host, closed);
  EXPECT_TRUE(closed.writes.empty());
  EXPECT_EQ(closed.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(closed.status.message().find("the call's writes ran here, but this server lost"),
            std::string::npos)
      << closed.status;
}

// A Stream fed `messages`, one at a time, each run for a turn and its replies written: what
// it wrote. `handler_parses`: each message is offered as bytes that do not stay
// (Handler::ParseCopy, which must take it), and overwritten once OnMessage has returned, as
// the h2 transport's buffer moves on; else protobuf parses it.
std::string RunStream(const std::vector<std::string>& messages, bool handler_parses) {
  TestHost host;
  RecordingSink sink;
  std::unique_ptr<Handler> handler = MethodOf(MethodId::kStream).make(host, sink);
  handler->OnStart();
  size_t written = 0;
  for (const std::string& message : messages) {
    if (handler_parses) {
      std::string read_buffer = message;
      EXPECT_TRUE(handler->ParseCopy(read_buffer));
      handler->OnMessage();
      std::fill(read_buffer.begin(), read_buffer.end(), '\xee');
    } else {
      EXPECT_TRUE(handler->incoming()->ParseFromString(message));
      handler->OnMessage();
    }
    host.Turn();
    while (written < sink.writes.size()) {
      ++written;
      handler->OnWriteDone(true);
    }
  }
  handler->OnHalfClose();
  EXPECT_EQ(sink.finishes, 1);
  EXPECT_TRUE(sink.status.ok()) << sink.status;
  std::string all;
  for (const std::string& write : sink.writes) all += write;
  return all;
}

// Stream's operations read from the message's bytes by the handler are run and answered as
// protobuf's parse of them is, for every type, an unknown one, a refused key, a negative
// delta and type, and ids of one byte and more; one with a condition is left to protobuf.
TEST(HandlersTest, AStreamsOperationsAreReadByItsHandlerAsProtobufReadsThem) {
  auto op = [](pb::StreamRequest& request, uint64_t id, int type, const std::string& key) {
    pb::StreamOp* op = request.add_ops();
    op->set_id(id);
    op->set_type(static_cast<pb::OpType>(type));
    op->set_key(key);
    return op;
  };
  pb::StreamRequest first;
  op(first, 1, pb::OP_TYPE_PUT, "a")->set_value("value of a");
  first.mutable_ops(0)->set_ttl_ms(60'000);
  op(first, 2, pb::OP_TYPE_PUT, "b")->set_value(std::string(300, 'b'));
  op(first, 3, pb::OP_TYPE_INCREMENT, "c")->set_delta(5);
  op(first, 0, pb::OP_TYPE_GET, "a");
  pb::StreamRequest second;
  op(second, 300, pb::OP_TYPE_GET, "b");
  op(second, 4, pb::OP_TYPE_DELETE, "b");
  op(second, 5, pb::OP_TYPE_EXPIRE, "a")->set_ttl_ms(1'000);
  op(second, 6, pb::OP_TYPE_GET, "a");
  op(second, 7, pb::OP_TYPE_PERSIST, "a");
  op(second, 8, 99, "a");
  op(second, 9, -1, "a");
  op(second, uint64_t{1} << 40, pb::OP_TYPE_GET, std::string(17, 'k'));
  op(second, 10, pb::OP_TYPE_INCREMENT, "c")->set_delta(-7);
  op(second, 11, pb::OP_TYPE_GET, "b");
  const std::vector<std::string> messages = {first.SerializeAsString(), second.SerializeAsString()};
  const std::string by_protobuf = RunStream(messages, false);
  EXPECT_EQ(RunStream(messages, true), by_protobuf);

  // Every operation was answered, each as its type says.
  pb::StreamResponse replies;
  size_t results = 0;
  std::map<uint64_t, pb::ItemResult> by_id;
  // The writes, one after the other, parse as one message: their results together.
  ASSERT_TRUE(replies.ParseFromString(by_protobuf));
  for (const pb::StreamResult& r : replies.results()) {
    ++results;
    by_id[r.id()] = r.result();
  }
  EXPECT_EQ(results, static_cast<size_t>(first.ops_size() + second.ops_size()));
  EXPECT_EQ(by_id[0].value(), "value of a");
  EXPECT_EQ(by_id[0].ttl_ms(), 60'000);
  EXPECT_EQ(by_id[3].number(), 5);
  EXPECT_EQ(by_id[300].value(), std::string(300, 'b'));
  EXPECT_EQ(by_id[6].ttl_ms(), 1'000);
  EXPECT_EQ(by_id[8].code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(by_id[9].code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(by_id[uint64_t{1} << 40].code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(by_id[10].number(), -2);
  EXPECT_EQ(by_id[11].code(), static_cast<int>(absl::StatusCode::kNotFound));

  // A condition, an unknown field or a trailing zero tag: left to protobuf.
  RecordingSink sink;
  TestHost host;
  const std::unique_ptr<Handler> handler = MethodOf(MethodId::kStream).make(host, sink);
  pb::StreamRequest conditioned;
  op(conditioned, 1, pb::OP_TYPE_DELETE, "a")->mutable_condition()->set_absent(true);
  EXPECT_FALSE(handler->ParseCopy(conditioned.SerializeAsString()));
  EXPECT_FALSE(handler->ParseCopy(first.SerializeAsString() + std::string("\x48\x01", 2)));
  EXPECT_FALSE(handler->ParseCopy(first.SerializeAsString() + '\0'));
  EXPECT_TRUE(handler->ParseCopy(first.SerializeAsString()));
}

// A batch past --max-batch-items that the handlers' own parsers leave to protobuf (an unknown
// field, a group, a condition) is counted, not parsed, and refused whole: protobuf would have
// made a string of each item first. At the limit, protobuf parses it as before.
TEST(HandlersTest, ABatchPastTheLimitLeftToProtobufIsRefusedUnparsed) {
  TestHost host;
  const size_t most = host.context().limits().max_batch_items;
  const std::string unknown("\x48\x01", 2);        // Field 9, a varint.
  const std::string group("\x4b\x08\x01\x4c", 4);  // Field 9, a group holding a varint.
  for (const size_t keys : {most, most + 1}) {
    pb::MultiGetRequest gets;
    for (size_t i = 0; i < keys; ++i) gets.add_keys("k");
    for (const std::string& extra : {unknown, group}) {
      for (const bool stays : {true, false}) {
        const int submitted = host.submitted;
        Call get(host, MethodId::kMultiGet, gets, false, gets.SerializeAsString() + extra, stays);
        EXPECT_EQ(get.in_place, keys > most) << keys;
        if (keys <= most) {
          ASSERT_TRUE(get.sink().status.ok()) << get.sink().status;
          EXPECT_EQ(get.Answer<pb::MultiGetResponse>().results_size(), static_cast<int>(keys));
          continue;
        }
        EXPECT_EQ(get.sink().status.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_EQ(get.sink().status.message(),
                  absl::StrCat("MultiGet has ", keys,
                               " keys; the limit is --max-batch-items=", most, ": split it"));
        EXPECT_EQ(host.submitted, submitted);
      }
    }
  }
  pb::MultiPutRequest puts;
  for (size_t i = 0; i <= most; ++i) puts.add_items()->set_key("k");
  puts.mutable_items(0)->mutable_condition()->set_absent(true);
  const int submitted = host.submitted;
  Call put(host, MethodId::kMultiPut, puts);
  EXPECT_TRUE(put.in_place);
  EXPECT_EQ(put.sink().status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(put.sink().status.message().find("MultiPut has 10001 items"), std::string::npos)
      << put.sink().status;
  EXPECT_EQ(host.submitted, submitted);

  // A Stream message: taken on its count alone (TakeMessage ends the call), or left to protobuf
  // at the limit; bytes that do not parse are left to protobuf, which refuses them.
  RecordingSink sink;
  const std::unique_ptr<Handler> stream = MethodOf(MethodId::kStream).make(host, sink);
  pb::StreamRequest ops;
  for (size_t i = 0; i < most; ++i) ops.add_ops()->set_key("k");
  EXPECT_FALSE(stream->ParseCopy(ops.SerializeAsString() + unknown));
  ops.add_ops()->set_key("k");
  EXPECT_TRUE(stream->ParseCopy(ops.SerializeAsString() + unknown));
  EXPECT_TRUE(stream->ParseCopy(ops.SerializeAsString() + group));
  EXPECT_FALSE(stream->ParseCopy(ops.SerializeAsString() + '\0'));
  EXPECT_FALSE(stream->ParseCopy(ops.SerializeAsString() + "\x4c"));  // An end with no group.
}

// Protobuf makes an object of every field it parses, unknown ones too: a message left to it
// (ParseRequest) of 4 KiB or more is counted first, at every depth, and refused past
// MaxRequestFields with nothing parsed.
TEST(HandlersTest, AMessageOfTooManyFieldsIsRefusedBeforeProtobufParsesIt) {
  TestHost host;
  const RequestLimits& limits = host.context().limits();
  const size_t most = MaxRequestFields(limits);
  EXPECT_EQ(most, 16 * limits.max_batch_items + 1024);
  auto repeat = [](std::string_view bytes, size_t times) {
    std::string out;
    for (size_t i = 0; i < times; ++i) out += bytes;
    return out;
  };
  const std::string empty_unknown("\x7a\x00", 2);  // Field 15, length-delimited, empty.
  const std::string key = Get("k").SerializeAsString();
  struct Case {
    const char* what;
    MethodId id;
    std::string wire;
    bool refused;
    bool stays = false;  // Offered to ParseInPlace (a large PUT's own parser), not ParseCopy.
  };
  pb::MultiPutRequest conditioned;  // Left to protobuf for its condition.
  pb::KeyValue* item = conditioned.add_items();
  item->set_key("k");
  item->mutable_condition()->set_absent(true);
  // One item holding the unknown fields, inside its own length.
  const std::string inner = item->SerializeAsString() + repeat(empty_unknown, most);
  std::string nested = "\x0a";  // Field 1, its length a varint.
  for (size_t n = inner.size(); n != 0; n >>= 7) {
    nested.push_back(static_cast<char>((n & 0x7f) | (n >> 7 != 0 ? 0x80 : 0)));
  }
  nested += inner;
  const std::vector<Case> cases = {
      {"under 4 KiB", MethodId::kGet, key + repeat(empty_unknown, 1000), false},
      {"at the limit", MethodId::kGet, key + repeat(empty_unknown, most - 1), false},
      {"one past it", MethodId::kGet, key + repeat(empty_unknown, most), true},
      {"in an unknown group", MethodId::kGet,
       key + "\x7b" + repeat(std::string("\x0a\x01x", 3), most) + "\x7c", true},
      {"inside a batch's item", MethodId::kMultiPut, nested, true},
      {"beside a large PUT's value", MethodId::kPut,
       Put("k", std::string(CallSink::kShareBytes, 'v')).SerializeAsString() +
           repeat(empty_unknown, most),
       true, true},
      {"beside a large PUT's value, at the limit", MethodId::kPut,
       Put("k", std::string(CallSink::kShareBytes, 'v')).SerializeAsString() +
           repeat(empty_unknown, most - 2),
       false, true},
  };
  for (const Case& c : cases) {
    RecordingSink sink;
    const std::unique_ptr<Handler> handler = MethodOf(c.id).make(host, sink);
    const absl::Status s = ParseRequest(*handler, c.wire, c.stays, limits);
    if (!c.refused) {
      EXPECT_TRUE(s.ok()) << c.what << ": " << s;
      // Its key, field 1, first: parsed (a GET's, or a large PUT's beside its value).
      EXPECT_EQ(handler->incoming()->SerializeAsString().substr(0, 3), std::string("\x0a\x01k", 3))
          << c.what;
      continue;
    }
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << s;
    EXPECT_EQ(s.message(), absl::StrCat("the request message holds more than ", most,
                                        " fields (unknown ones count too); the limit is 16 for "
                                        "each of --max-batch-items=10000 and 1024 more: split it"))
        << c.what;
    EXPECT_EQ(handler->incoming()->ByteSizeLong(), 0u) << c.what;  // Nothing parsed.
  }

  // Every field counts once, a nested message's own fields too; bytes that do not parse are
  // left to protobuf.
  pb::MultiPutRequest three;
  for (int i = 0; i < 3; ++i) {
    pb::KeyValue* kv = three.add_items();
    kv->set_key("k");
    kv->set_value("v");
    kv->mutable_condition()->set_version(7);
  }
  const std::string wire = three.SerializeAsString();
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(wire.data()),
                                            static_cast<int>(wire.size()));
  EXPECT_EQ(CountMessageFields(pb::MultiPutRequest::descriptor(), in, most), 3u * 5);
  const std::string cut = wire + "\x0a\x05k";  // An item's length past the message's end.
  google::protobuf::io::CodedInputStream cut_in(reinterpret_cast<const uint8_t*>(cut.data()),
                                                static_cast<int>(cut.size()));
  EXPECT_EQ(CountMessageFields(pb::MultiPutRequest::descriptor(), cut_in, most), std::nullopt);
  RecordingSink sink;
  const std::unique_ptr<Handler> handler = MethodOf(MethodId::kGet).make(host, sink);
  EXPECT_EQ(
      ParseRequest(*handler, key + repeat(empty_unknown, 3000) + "\x0a\x05k", false, limits).code(),
      absl::StatusCode::kInternal);
}

TEST(HandlersTest, AKeyPastTheLimitIsRefusedByNameAndNeverReachesTheShard) {
  TestHost host;
  Call put(host, MethodId::kPut, Put(std::string(17, 'k'), "v"));
  EXPECT_EQ(put.sink().status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(put.sink().status.message().find("--max-key-bytes=16"), std::string::npos)
      << put.sink().status;
  EXPECT_EQ(host.submitted, 0);
}

TEST(HandlersTest, AWriteAFailedLogRefusesCarriesTheContextsMessage) {
  TestHost host;
  host.refuse_writes = true;
  Call put(host, MethodId::kPut, Put("k", "v"));
  EXPECT_EQ(put.sink().status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(put.sink().status.message(), host.context_.journal_failure_message());
}

TEST(HandlersTest, AWriteOverTheMemoryLimitNamesTheBytesItNeededAndTheLimit) {
  TestHost host(MemoryLimit{.bytes = 64 << 10, .eviction = Eviction::kNoEviction});
  Call put(host, MethodId::kPut, Put("big", std::string(100 << 10, 'v')));
  ASSERT_EQ(put.sink().status.code(), absl::StatusCode::kResourceExhausted);
  const std::string message(put.sink().status.message());
  EXPECT_NE(message.find("of the 65536 bytes --max-memory gives each shard"), std::string::npos)
      << message;
  // The bytes needed are at least the value's, not a deadline or a version.
  const size_t at = message.find("the write needs ");
  ASSERT_NE(at, std::string::npos) << message;
  EXPECT_GE(std::stoull(message.substr(at + 16)), uint64_t{100} << 10) << message;
}

// A batch reply is written item by item without protobuf (internal::AppendItem): each item must
// be the bytes protobuf writes for the ItemResult that SetItem makes of it.
TEST(HandlersTest, ABatchItemIsWrittenAsProtobufWritesIt) {
  TestContext context;
  std::vector<Request> requests;
  auto add = [&](Op op, Result result, uint64_t version, std::string out = "",
                 int64_t deadline_ms = 0, int64_t number = 0) {
    Request r;
    r.op = op;
    r.result = result;
    r.version = version;
    r.out = std::move(out);
    r.deadline_ms = deadline_ms;
    r.number = number;
    requests.push_back(std::move(r));
  };
  add(Op::kGet, Result::kOk, 7, "value");
  add(Op::kGet, Result::kOk, 1, std::string(300, 'v'), kNowMs + 1500);  // A two-byte length.
  add(Op::kGet, Result::kOk, uint64_t{1} << 40, "", kNowMs - 5);        // Empty, TTL passed: 1 ms.
  add(Op::kGet, Result::kNotFound, 0);
  add(Op::kPut, Result::kOk, 3);
  add(Op::kPut, Result::kConditionFailed, 9);
  add(Op::kPut, Result::kConditionFailed, 0);
  add(Op::kDelete, Result::kOk, 0);
  add(Op::kIncrement, Result::kOk, 4, "", 0, -12);
  add(Op::kIncrement, Result::kOverflow, 0);
  add(Op::kPut, Result::kRefused, 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    Request copy = requests[i];
    pb::MultiGetResponse want;
    internal::SetItem(want.add_results(), copy, context);
    std::string got;
    internal::AppendItem(pb::MultiGetResponse::kResultsFieldNumber, requests[i], context, &got);
    EXPECT_EQ(got, want.SerializeAsString()) << "request " << i;
    // As a Stream result, with an id of 0 (left out), one byte or more.
    for (const uint64_t id : {uint64_t{0}, uint64_t{5}, uint64_t{1} << 35}) {
      Request again = requests[i];
      pb::StreamResponse stream;
      pb::StreamResult* result = stream.add_results();
      result->set_id(id);
      internal::SetItem(result->mutable_result(), again, context);
      got.clear();
      internal::AppendStreamResult(id, requests[i], context, &got);
      EXPECT_EQ(got, stream.SerializeAsString()) << "request " << i << ", id " << id;
    }
  }
  absl::Status redirected = absl::UnavailableError("not the primary");
  pb::Redirect redirect;
  redirect.set_primary("10.0.0.1:7000");
  redirected.SetPayload(absl::string_view(kRedirectTypeUrl.data(), kRedirectTypeUrl.size()),
                        absl::Cord(redirect.SerializeAsString()));
  for (const absl::Status& status :
       {absl::InvalidArgumentError("the key is 17 bytes; the limit is 16"), redirected}) {
    pb::MultiPutResponse want;
    internal::SetItem(want.add_results(), status);
    std::string got;
    internal::AppendItem(pb::MultiPutResponse::kResultsFieldNumber, status, &got);
    EXPECT_EQ(got, want.SerializeAsString()) << status;
    pb::StreamResponse stream;
    pb::StreamResult* result = stream.add_results();
    result->set_id(77);
    internal::SetItem(result->mutable_result(), status);
    got = "a first result ";
    internal::AppendStreamResult(77, status, &got);
    EXPECT_EQ(got, "a first result " + stream.SerializeAsString()) << status;
  }
}

TEST(HandlersTest, ABatchAnswersEachItemInOrderAndABadOneDoesNotStopTheOthers) {
  TestHost host;
  pb::MultiPutRequest puts;
  for (const char* key : {"a", "bbbbbbbbbbbbbbbbbbbbb", "c"}) {  // The second is over 16 bytes.
    pb::KeyValue* item = puts.add_items();
    item->set_key(key);
    item->set_value(std::string("value of ") + key);
  }
  Call put(host, MethodId::kMultiPut, puts);
  ASSERT_TRUE(put.sink().status.ok()) << put.sink().status;
  const pb::MultiPutResponse put_reply = put.Answer<pb::MultiPutResponse>();
  ASSERT_EQ(put_reply.results_size(), 3);
  EXPECT_EQ(put_reply.results(0).code(), 0);
  EXPECT_GT(put_reply.results(0).version(), 0u);
  EXPECT_EQ(put_reply.results(1).code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(put_reply.results(1).message().find("16"), std::string::npos);
  EXPECT_EQ(put_reply.results(2).code(), 0);

  pb::MultiGetRequest gets;
  for (const char* key : {"c", "missing", "a", "bbbbbbbbbbbbbbbbbbbbb"}) gets.add_keys(key);
  // The keys split by the handler from bytes that stay, from a copy of bytes that do not, and
  // by protobuf where the request has a field the handler leaves to it (an unknown one, 9).
  const std::string unknown_field = gets.SerializeAsString() + std::string("\x48\x01", 2);
  for (const auto& [wire, stays, in_place] : {std::tuple<std::string, bool, bool>{"", true, true},
                                              {"", false, true},
                                              {unknown_field, true, false},
                                              {unknown_field, false, false}}) {
    Call get(host, MethodId::kMultiGet, gets, false, wire, stays);
    EXPECT_EQ(get.in_place, in_place) << stays;
    ASSERT_TRUE(get.sink().status.ok()) << get.sink().status;
    const pb::MultiGetResponse reply = get.Answer<pb::MultiGetResponse>();
    ASSERT_EQ(reply.results_size(), 4);
    EXPECT_EQ(reply.results(0).value(), "value of c");
    EXPECT_EQ(reply.results(0).ttl_ms(), -1);
    EXPECT_EQ(reply.results(1).code(), static_cast<int>(absl::StatusCode::kNotFound));
    EXPECT_EQ(reply.results(2).value(), "value of a");
    EXPECT_EQ(reply.results(2).version(), put_reply.results(0).version());
    EXPECT_EQ(reply.results(3).code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  }

  // Items split by the handler from bytes that stay, from a copy of bytes that do not, and by
  // protobuf where an item has a condition: each key, value and TTL lands.
  for (const auto& [stays, condition, in_place] : {std::tuple<bool, bool, bool>{true, false, true},
                                                   {false, false, true},
                                                   {true, true, false},
                                                   {false, true, false}}) {
    const std::string prefix = std::string(stays ? "s" : "c") + (condition ? "p" : "i");
    pb::MultiPutRequest more;
    for (int i = 0; i < 3; ++i) {
      pb::KeyValue* item = more.add_items();
      item->set_key(prefix + std::to_string(i));
      item->set_value(std::string(40, static_cast<char>('a' + i)));
      item->set_ttl_ms(i == 1 ? 60'000 : 0);
      if (condition && i == 2) item->mutable_condition()->set_absent(true);
    }
    Call multi_put(host, MethodId::kMultiPut, more, false, "", stays);
    EXPECT_EQ(multi_put.in_place, in_place) << prefix;
    ASSERT_EQ(multi_put.Answer<pb::MultiPutResponse>().results_size(), 3) << prefix;
    pb::MultiGetRequest check;
    for (int i = 0; i < 3; ++i) check.add_keys(prefix + std::to_string(i));
    Call multi_get(host, MethodId::kMultiGet, check);
    const pb::MultiGetResponse got = multi_get.Answer<pb::MultiGetResponse>();
    ASSERT_EQ(got.results_size(), 3) << prefix;
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(got.results(i).value(), std::string(40, static_cast<char>('a' + i))) << prefix;
      EXPECT_EQ(got.results(i).ttl_ms(), i == 1 ? 60'000 : -1) << prefix;
    }
  }

  // A zero tag at the end (of the message, or of an item) makes a message protobuf refuses:
  // the handlers leave it to protobuf too.
  pb::MultiPutRequest one;
  one.add_items()->set_key("k");
  std::string inner_zero = one.SerializeAsString();
  inner_zero[1] = static_cast<char>(inner_zero[1] + 1);  // The item's length, one more ...
  inner_zero.push_back('\0');                            // ... for a zero tag inside it.
  // An item with no value, split by the handler: the key holds an empty value.
  Call no_value(host, MethodId::kMultiPut, one);
  EXPECT_TRUE(no_value.in_place);
  ASSERT_EQ(no_value.Answer<pb::MultiPutResponse>().results_size(), 1);
  EXPECT_EQ(no_value.Answer<pb::MultiPutResponse>().results(0).code(), 0);
  pb::MultiGetRequest k;
  k.add_keys("k");
  Call read_k(host, MethodId::kMultiGet, k);
  ASSERT_EQ(read_k.Answer<pb::MultiGetResponse>().results_size(), 1);
  EXPECT_EQ(read_k.Answer<pb::MultiGetResponse>().results(0).code(), 0);
  EXPECT_EQ(read_k.Answer<pb::MultiGetResponse>().results(0).value(), "");
  for (const auto& [id, zero] :
       {std::pair<MethodId, std::string>{MethodId::kMultiGet, gets.SerializeAsString() + '\0'},
        {MethodId::kMultiPut, puts.SerializeAsString() + '\0'},
        {MethodId::kMultiPut, inner_zero}}) {
    RecordingSink sink(false);
    const std::unique_ptr<Handler> handler = MethodOf(id).make(host, sink);
    EXPECT_FALSE(handler->incoming()->ParseFromString(zero));
    EXPECT_FALSE(handler->ParseInPlace(zero));
    EXPECT_FALSE(handler->ParseCopy(zero));
  }

  // All refused: answered at once, nothing submitted.
  const int submitted = host.submitted;
  pb::MultiGetRequest bad;
  bad.add_keys(std::string(20, 'x'));
  Call refused(host, MethodId::kMultiGet, bad);
  ASSERT_TRUE(refused.sink().status.ok()) << refused.sink().status;
  ASSERT_EQ(refused.Answer<pb::MultiGetResponse>().results_size(), 1);
  EXPECT_EQ(refused.Answer<pb::MultiGetResponse>().results(0).code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(host.submitted, submitted);
}

// `value` as a varint of `bytes` bytes, or as few more as it needs: longer than it needs,
// with continuation bits on zero groups, as a lenient writer or a hostile one may send it.
std::string LongVarint(uint64_t value, int bytes) {
  std::string out;
  for (int i = 0; i < bytes || value != 0; ++i, value >>= 7) {
    const bool more = i + 1 < bytes || (value >> 7) != 0;
    out.push_back(static_cast<char>((value & 0x7f) | (more ? 0x80 : 0)));
  }
  return out;
}

// A length-delimited field: its tag and its length each written in the bytes given.
std::string Field(int number, std::string_view bytes, int tag_bytes = 1, int length_bytes = 1) {
  return LongVarint(static_cast<uint64_t>(number) << 3 | 2, tag_bytes) +
         LongVarint(bytes.size(), length_bytes) + std::string(bytes);
}

// The handlers' own parsers (ParseCopy, ParseInPlace) take a message exactly when protobuf's
// parser does, so that a message they split is one protobuf would have taken, and one it
// refuses reaches protobuf to be refused. Varints written longer than they need: protobuf's
// parser takes a tag or a length of up to 5 bytes (a length's 5th byte under 8: under 2 GiB),
// where CodedInputStream's reads take up to 10 and drop the bits past 32.
TEST(HandlersTest, AHandlersOwnParserTakesTheVarintsProtobufTakesAndNoOthers) {
  struct Case {
    MethodId id;
    std::string wire;
    bool protobuf_takes;
    std::string label;
  };
  std::vector<Case> cases;
  const std::string key = "k";
  const std::string large(CallSink::kShareBytes, 'v');
  // Each method's message with one of its fields' tag and length written in the bytes given:
  // the outer field, or (MultiPut, Stream) a field inside an item.
  auto add = [&](int tag_bytes, int length_bytes, bool protobuf_takes) {
    const std::string how = ": a tag of " + std::to_string(tag_bytes) + " bytes, a length of " +
                            std::to_string(length_bytes);
    auto field = [&](int number, std::string_view bytes) {
      return Field(number, bytes, tag_bytes, length_bytes);
    };
    const std::string value = Field(pb::KeyValue::kValueFieldNumber, "v");
    const std::string stream_op = field(pb::StreamOp::kKeyFieldNumber, key);
    for (Case c :
         std::vector<Case>{{MethodId::kMultiGet, field(pb::MultiGetRequest::kKeysFieldNumber, key),
                            false, "MultiGet's key"},
                           {MethodId::kMultiPut,
                            field(pb::MultiPutRequest::kItemsFieldNumber,
                                  Field(pb::KeyValue::kKeyFieldNumber, key) + value),
                            false, "MultiPut's item"},
                           {MethodId::kMultiPut,
                            Field(pb::MultiPutRequest::kItemsFieldNumber,
                                  field(pb::KeyValue::kKeyFieldNumber, key) + value),
                            false, "a MultiPut item's key"},
                           {MethodId::kStream, Field(pb::StreamRequest::kOpsFieldNumber, stream_op),
                            false, "a Stream op's key"},
                           {MethodId::kPut,
                            Field(pb::PutRequest::kKeyFieldNumber, key) +
                                field(pb::PutRequest::kValueFieldNumber, large),
                            false, "a large Put's value"}}) {
      c.protobuf_takes = protobuf_takes;
      c.label += how;
      cases.push_back(std::move(c));
    }
  };
  add(1, 1, true);
  add(1, 2, true);
  add(1, 5, true);
  add(5, 1, true);
  add(5, 5, true);
  add(1, 6, false);
  add(1, 10, false);
  add(6, 1, false);
  add(10, 1, false);
  // A 5-byte length whose 5th byte holds bit 32 (over 2 GiB): ReadVarint32 would drop the bit
  // and read the small length left.
  for (const auto& [id, prefix, bytes, label] :
       {std::tuple<MethodId, std::string, std::string, std::string>{MethodId::kMultiGet, "", key,
                                                                    "MultiGet's key"},
        {MethodId::kPut, Field(pb::PutRequest::kKeyFieldNumber, key), large,
         "a large Put's value"}}) {
    const int number = id == MethodId::kPut ? int{pb::PutRequest::kValueFieldNumber}
                                            : int{pb::MultiGetRequest::kKeysFieldNumber};
    std::string field = Field(number, bytes, 1, 5);
    field[5] = static_cast<char>(field[5] | 0x10);  // The length's 5th byte.
    cases.push_back({id, prefix + field, false, label + ": a length with bit 32 set"});
  }

  TestHost host;
  for (const Case& c : cases) {
    RecordingSink protobuf_sink;
    const std::unique_ptr<Handler> by_protobuf = MethodOf(c.id).make(host, protobuf_sink);
    const bool protobuf_takes = by_protobuf->incoming()->ParseFromString(c.wire);
    EXPECT_EQ(protobuf_takes, c.protobuf_takes) << c.label;
    // Where protobuf takes a message, the handler splits it (it holds only fields the handler
    // knows); where protobuf refuses, the handler refuses too.
    RecordingSink sink;
    const std::unique_ptr<Handler> handler = MethodOf(c.id).make(host, sink);
    const bool own_takes =
        c.id == MethodId::kPut ? handler->ParseInPlace(c.wire) : handler->ParseCopy(c.wire);
    EXPECT_EQ(own_takes, protobuf_takes) << c.label;
  }
}

TEST(HandlersTest, ASnapshotWithoutADataDirIsAFailedPrecondition) {
  TestHost host;
  Call snapshot(host, MethodId::kSnapshot, pb::SnapshotRequest());
  EXPECT_EQ(snapshot.sink().status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(snapshot.sink().finishes, 1);
}

TEST(HandlersTest, HealthSaysNotServingOnceTheServerDrains) {
  TestHost host;
  Call serving(host, MethodId::kHealthCheck, health::HealthCheckRequest());
  EXPECT_EQ(serving.Answer<health::HealthCheckResponse>().status(),
            health::HealthCheckResponse::SERVING);
  host.context_.draining = true;
  Call draining(host, MethodId::kHealthCheck, health::HealthCheckRequest());
  EXPECT_EQ(draining.Answer<health::HealthCheckResponse>().status(),
            health::HealthCheckResponse::NOT_SERVING);
}

// The loop's two lanes: a call submitted behind a batch's items is taken in the next poll, each
// lane keeps its order, and while both wait each gets half of a burst.
TEST(ShardLoopTest, ACallBehindABatchIsTakenFirstAndTheLanesShareABurst) {
  TestContext context;
  FinishLine finish_line(1);
  ShardLoop loop({.id = 0, .context = &context, .finish_line = &finish_line});
  std::vector<Request> batch(100), calls(40);
  for (Request& r : batch) loop.Submit(&r, Lane::kBatch);
  for (int i = 0; i < 3; ++i) loop.Submit(&calls[i], Lane::kCall);
  Request* out[32];
  ASSERT_EQ(loop.Poll(out, 32), 32u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(out[i], &calls[i]) << i;
  for (size_t i = 3; i < 32; ++i) EXPECT_EQ(out[i], &batch[i - 3]) << i;

  // 37 calls and 71 items wait: 16 of each, in order.
  for (size_t i = 3; i < calls.size(); ++i) loop.Submit(&calls[i], Lane::kCall);
  ASSERT_EQ(loop.Poll(out, 32), 32u);
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(out[i], &calls[3 + i]) << i;
  for (size_t i = 16; i < 32; ++i) EXPECT_EQ(out[i], &batch[29 + i - 16]) << i;

  // The rest: 21 calls, then 55 items; a lane alone takes the whole burst.
  size_t calls_seen = 0, items_seen = 0;
  for (size_t n; (n = loop.Poll(out, 32)) > 0;) {
    for (size_t i = 0; i < n; ++i) {
      if (out[i] >= calls.data() && out[i] < calls.data() + calls.size()) {
        EXPECT_EQ(out[i], &calls[19 + calls_seen++]);
      } else {
        EXPECT_EQ(out[i], &batch[45 + items_seen++]);
      }
    }
  }
  EXPECT_EQ(calls_seen, 21u);
  EXPECT_EQ(items_seen, 55u);
}

}  // namespace
}  // namespace ringkv
