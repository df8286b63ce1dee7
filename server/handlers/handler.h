// Handler and CallSink: what one RPC does, written once for every transport.
//
// A transport (server/grpc/, server/h2/) turns the bytes of a call into events on a Handler,
// and the Handler answers through the call's CallSink. The handler knows nothing of HTTP/2 or
// grpc++: it reads request messages, submits engine Requests to its HandlerHost (the loop,
// server/handlers/handler_host.h), asks the ServerContext for limits, the clock and the like,
// and writes response messages. Its methods are in server/handlers/methods.h.
//
// The contract, for both sides (loop thread only; a call lives on the loop that took it):
//   - The transport makes the handler, calls OnStart() once the call is accepted, then parses
//     each request message into incoming() and calls OnMessage(). Unary and server-streaming
//     calls get exactly one message without asking; a bidirectional handler asks for each one
//     with sink.Read(), and gets OnMessage() or, once the client has closed its side,
//     OnHalfClose().
//   - sink.Write(m) sends one response message; the next may be written after OnWriteDone(ok).
//     ok == false: the client is gone and nothing more will reach it.
//   - OnCancel(): the call is over for the client (it cancelled, its deadline passed, its
//     connection closed, the server stopped). A Read or Write outstanding is void: neither
//     OnMessage/OnHalfClose nor OnWriteDone will come for it.
//   - sink.Finish(status, response) ends the call, exactly once, and only when none of the
//     handler's Requests is out (their memory is the handler's). A unary call passes its
//     response with an OK status. After a cancel the transport sends nothing; it still waits
//     for Finish. From Finish on the handler gets no call at all, and the transport deletes it
//     (never from inside a call into the handler).
//   - Sink calls never call back into the handler before returning; what they cause comes as a
//     later event.
//
//   class EchoHandler : public Handler {  // unary: answer with what came
//     google::protobuf::MessageLite* incoming() override { return &request_; }
//     void OnMessage() override { sink_.Finish(absl::OkStatus(), &request_); }
//     void OnCancel() override { sink_.Finish(absl::CancelledError(), nullptr); }
//   };
#ifndef RINGKV_SERVER_HANDLERS_HANDLER_H_
#define RINGKV_SERVER_HANDLERS_HANDLER_H_

#include <google/protobuf/message_lite.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/shared_bytes.h"
#include "server/auth/role.h"
#include "server/handlers/handler_host.h"
#include "server/server_context.h"
#include "shard/request.h"

namespace ringkv {

// The header by which a call asks its writes to wait for replicas, and its value: a number
// from 0 to ServerOptions::kMaxMinReplicas, or an error that says so.
inline constexpr std::string_view kMinReplicasHeader = "ringkv-min-replicas";
inline absl::StatusOr<uint32_t> ParseMinReplicas(std::string_view value) {
  uint32_t n = 0;
  if (!absl::SimpleAtoi(absl::string_view(value.data(), value.size()), &n) ||
      n > ServerOptions::kMaxMinReplicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", std::string(kMinReplicasHeader), " header must be a number from 0 to ",
                     ServerOptions::kMaxMinReplicas, ", got '", std::string(value), "'"));
  }
  return n;
}

// The header by which a call asks for linearizable reads: "linearizable" (its Get, MultiGet
// and Scan are answered only by a primary whose fence is open when the answer is made: in a
// group, the elected primary within its lease) or "serializable" (the default: any server
// answers from what it holds, a replica or a deposed primary too). Parsed to whether it is
// linearizable, or an error that says what is accepted.
inline constexpr std::string_view kConsistencyHeader = "ringkv-consistency";
inline absl::StatusOr<bool> ParseConsistency(std::string_view value) {
  if (value == "linearizable") return true;
  if (value == "serializable") return false;
  return absl::InvalidArgumentError(absl::StrCat("the ", std::string(kConsistencyHeader),
                                                 " header is linearizable or serializable, got '",
                                                 std::string(value), "'"));
}

// The answer to writes that ran on a primary which lost the group's leadership before it could
// acknowledge them (its fence closed: server/repl/fence.h): `one` write, or several of a call.
inline absl::Status LostLeadership(bool one) {
  return absl::UnavailableError(absl::StrCat(
      one ? "the write" : "the call's writes",
      " ran here, but this server lost the group's leadership before it could acknowledge ",
      one ? "it: it" : "them: they", " may or may not stay (the new primary's data decides)"));
}

// The transport's side of one call. Loop thread only.
class CallSink {
 public:
  // Bidirectional calls: asks for the next request message (one outstanding at a time).
  virtual void Read() = 0;
  // Sends one response message (one outstanding at a time).
  virtual void Write(const google::protobuf::MessageLite& message) = 0;
  // Ends the call; `response` is the unary reply (null for streams and errors).
  virtual void Finish(const absl::Status& status,
                      const google::protobuf::MessageLite* response) = 0;
  // The client's IP address ("127.0.0.1", "::1"), or empty if unknown. Not cheap: for the rare
  // call that needs it (a replica's Flow, to list where the replica is).
  virtual std::string PeerHost() const = 0;
  // The next Write or Finish acknowledges writes (Handler::MayAcknowledge): the transport keeps
  // it from leaving once the server's fence (server/repl/fence.h) has closed, until its bytes are
  // in the kernel. The h2 transport drops the connection of an answer that the closed fence
  // catches unsent (H2LoopIo::DropAcks), so that its client cannot tell whether its writes
  // stay, which is the truth. What is in the kernel (a socket's buffer, a send io_uring has out)
  // is out of reach. grpc++ takes an answer into buffers of its own as it is made (where the
  // client's flow control may hold it past the fence), so there the checks when a write runs
  // and when its answer is made are the only ones and this does nothing.
  virtual void Acknowledges() {}
  // Hands over `bytes` as the bytes field `field` of the next Finish's response (which leaves
  // that field unset), to be sent from where they lie rather than copied into the serialized
  // message: the h2 transport shares them with its connection's output (net/send_queue.h), so a
  // large GET value reaches the socket with no copy after the shard's. Worth it from
  // kShareBytes. False where the transport cannot (grpc++): `bytes` stay the caller's, to set
  // in the response as usual.
  static constexpr size_t kShareBytes = 16 * 1024;
  virtual bool ShareField(uint32_t /*field*/, std::string& /*bytes*/) { return false; }
  // Whether the transport takes bytes a shard lends where they lie (Request::lend, a GET of a
  // big record on the connection's own worker: shard/internal/table.h's Table::Loan), for
  // ShareLoan and ShareLoans: the h2 transport on epoll without TLS, which sends on this thread
  // and reads its output's bytes only as it sends them; not io_uring, whose kernel reads them
  // later, nor TLS, which copies them to encrypt, nor grpc++.
  virtual bool TakesLoans() const { return false; }
  // ShareField for lent bytes; only where TakesLoans.
  virtual void ShareLoan(uint32_t /*field*/, std::shared_ptr<const SharedBytes> /*bytes*/) {}
  // Lent bytes that go inside a reply the handler wrote itself (a MultiGet's items, each value
  // where it lies), for ShareLoans: at `at`, an offset of the reply's own bytes.
  struct LentAt {
    size_t at;
    std::shared_ptr<const SharedBytes> bytes;
  };
  // ShareLoan for such a reply: the next Finish's response is `bytes` (taken: the response given
  // to Finish must be the empty message they were taken from) with each of `loans`, in order of
  // `at`, inserted where it says. Meant for where TakesLoans; a sink that takes none copies the
  // loans into `bytes` instead, which stay the response, whole.
  virtual void ShareLoans(std::string& bytes, std::vector<LentAt> loans) {
    std::string whole;
    size_t from = 0;
    for (const LentAt& loan : loans) {
      whole.append(bytes, from, loan.at - from).append(loan.bytes->view());
      from = loan.at;
    }
    bytes = std::move(whole.append(bytes, from));
  }

 protected:
  ~CallSink() = default;
};

class Handler {
 public:
  Handler(HandlerHost& host, CallSink& sink)
      : host_(host),
        context_(host.context()),
        sink_(sink),
        min_replicas_(context_.options().min_replicas),
        may_fence_(context_.may_fence()) {}
  virtual ~Handler() {
    // The call's answer has left it (the transport deletes a handler only then, or once its
    // call is gone): what its GETs took of the server's reply memory goes back.
    if (reply_memory_held_ != 0) {
      context_.reply_memory().fetch_add(reply_memory_held_, std::memory_order_relaxed);
    }
  }
  Handler(const Handler&) = delete;
  Handler& operator=(const Handler&) = delete;

  // Where the transport parses the next request message. Valid from construction.
  virtual google::protobuf::MessageLite* incoming() = 0;
  // A unary request's message, `wire`, whose bytes stay put until the handler finishes (the
  // h2 transport's buffer of a request that came in pieces): the handler may parse it itself,
  // keeping views into it rather than copies (a large PUT's value), and returns true; false
  // and the transport parses incoming() as usual.
  virtual bool ParseInPlace(std::string_view /*wire*/) { return false; }
  // The same for a unary request's message whose bytes do not stay (the h2 transport's read
  // buffer): a handler may keep a copy of them and views into it (MultiGet's keys) rather than
  // a string per field. And for each message of a bidirectional call, whose bytes stay until
  // the OnMessage that follows returns (Stream's operations).
  virtual bool ParseCopy(std::string_view /*wire*/) { return false; }
  // Whether ParseCopy may take a message: a transport that has one in pieces (grpc++) joins
  // them only for a handler that does.
  virtual bool ParsesCopies() const { return false; }
  // The call is accepted; a bidirectional handler Reads from here on.
  virtual void OnStart() {}
  // A request message is in incoming().
  virtual void OnMessage() = 0;
  // The client has closed its side (bidirectional calls, after a Read).
  virtual void OnHalfClose() {}
  virtual void OnWriteDone(bool /*ok*/) {}
  virtual void OnCancel() = 0;
  // One of this handler's Requests is back from its shard.
  virtual void OnRequestDone(Request* /*request*/) {}
  // The end of the engine turn in which this handler asked for it (HandlerHost::RequestFlush).
  virtual void Flush() {}
  // The server's serving status changed (health Watch streams, HandlerHost::AddWatcher).
  virtual void OnServingChanged() {}

  // What the handler's GETs took of the server's reply memory, not given back yet, for the
  // transport to give back instead (once the answer has left its own buffers too); the
  // handler then gives back nothing as it goes.
  int64_t TakeReplyMemoryHeld() { return std::exchange(reply_memory_held_, 0); }

  // The role the caller's token grants (kAdmin without --auth-token-file); set by the
  // transport before OnStart, once the call is authorized for its method.
  void set_caller(Role role) { caller_ = role; }
  // The replicas the call's ringkv-min-replicas header asks its writes to wait for (at most
  // ServerOptions::kMaxMinReplicas; the transport refuses more); set before OnStart. Its
  // writes wait for this many or --min-replicas, whichever is more.
  void set_min_replicas(uint32_t n) { min_replicas_ = std::max(min_replicas_, n); }
  // Whether the call's reads must be linearizable (the ringkv-consistency header); set before
  // OnStart.
  void set_linearizable(bool on) { linearizable_ = on; }

 protected:
  // Whether a Request of `op` changes the data (what --min-replicas and the fence are about).
  static bool Writes(Op op) { return op != Op::kGet && op != Op::kScan && op != Op::kReplicate; }
  // Hands a Request to the engine; OnRequestDone gets it back in a later engine turn.
  void Submit(Request& request, Lane lane = Lane::kCall) {
    request.tag = this;
    request.replicas = Writes(request.op) ? static_cast<uint8_t>(min_replicas_) : 0;
    request.linearizable = linearizable_ && (request.op == Op::kGet || request.op == Op::kScan);
    host_.Submit(&request, lane);
  }

  // A GET's Request, made to take its value from the server's reply memory (Request::
  // reply_memory) ...
  void TakeReplyMemory(Request& get) { get.reply_memory = &context_.reply_memory(); }
  // ... and, back from its shard, what it took is held until the handler goes, or ...
  void HoldReplyMemory(const Request& get) { reply_memory_held_ += ReplyMemoryTaken(get); }
  // ... given back sooner, where an answer is written or dropped before that (a Stream's).
  void GiveBackReplyMemory(int64_t bytes) {
    reply_memory_held_ -= bytes;
    context_.reply_memory().fetch_add(bytes, std::memory_order_relaxed);
  }

  HandlerHost& host_;
  ServerContext& context_;
  CallSink& sink_;
  Role caller_ = Role::kAdmin;
  uint32_t min_replicas_;  // --min-replicas, or the call's header if more.
  bool linearizable_ = false;
  const bool may_fence_;           // ServerContext::may_fence.
  int64_t reply_memory_held_ = 0;  // HoldReplyMemory's, not given back yet.

  // Whether `r`, back from the engine, acknowledges a write: an answer that carries it must not
  // leave once the server's fence has closed (server/repl/fence.h).
  static bool Acknowledges(const Request& r) { return r.result == Result::kOk && Writes(r.op); }
  // Just before an answer that acknowledges writes is handed to the sink: false if the fence
  // has closed, so that it must not be (the caller answers LostLeadership() instead, whose
  // client cannot tell whether they stay); otherwise true, and the sink holds the answer back
  // should the fence close before it leaves (CallSink::Acknowledges).
  bool MayAcknowledge() {
    if (!may_fence_) return true;  // Outside a group: the fence never closes.
    if (context_.fenced()) return false;
    sink_.Acknowledges();
    return true;
  }
  // A linearizable read's answer, made now: OK if this server may give it (a primary whose
  // fence is open: no other primary can have acknowledged a write since the read ran), the
  // refusal otherwise (a replica's names its primary).
  absl::Status LinearizableRefusal() const {
    if (context_.read_only()) return context_.read_only_refusal();
    if (context_.fenced()) {
      absl::Status refusal = context_.write_refusal();
      absl::Status status = absl::UnavailableError(
          absl::StrCat("a linearizable read needs the group's primary: ", refusal.message()));
      refusal.ForEachPayload([&status](absl::string_view type_url, const absl::Cord& value) {
        status.SetPayload(type_url, value);
      });
      return status;
    }
    return absl::OkStatus();
  }
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_HANDLERS_HANDLER_H_
