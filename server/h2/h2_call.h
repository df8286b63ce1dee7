// H2Call: one gRPC call on one HTTP/2 stream of the h2 transport, and its Handler's CallSink.
//
// Request side: the headers pick the method (:path), the deadline (grpc-timeout) and check the
// rest (POST, content-type application/grpc[+proto], grpc-encoding identity, the header list's
// size); DATA is cut into gRPC messages (net/grpc_wire.h), each parsed into the handler's
// incoming() and handed over: unary and server-streaming calls get their one message, a
// bidirectional handler one per Read. Bytes are acknowledged to the client's flow-control
// window only up to the end of the first message not yet handed over, so a handler that is not
// reading holds the client back.
//
// Response side: Write appends a framed message to the call's queue and Finish the status;
// the first of them submits the response headers, and the connection's session pulls the DATA
// from that queue (no copy until the connection's output, and none there for a field the handler
// shared: ShareField, a large GET's value); once it is drained after Finish, the
// trailers (grpc-status, grpc-message percent-encoded) end the stream. An error before any
// message is a trailers-only response. A call the server ends while the client is still
// sending is then reset with NO_ERROR, so the client stops.
//
// Errors the call answers itself, without a handler or in its place: unknown method
// (UNIMPLEMENTED), not POST (HTTP 405), not gRPC (HTTP 415), a compressed message
// (UNIMPLEMENTED), a message over the limit (RESOURCE_EXHAUSTED), an unparsable or missing
// message (INTERNAL), too large a header list (RESOURCE_EXHAUSTED), the deadline passed
// (DEADLINE_EXCEEDED), a drain (UNAVAILABLE, but for health checks), no token or a token
// without the method's role (UNAUTHENTICATED, PERMISSION_DENIED; server/auth/).
//
// A call sees its connection as a CallConnection (the session, its loop's H2Io) and nothing
// more, so that Connection, which makes and owns calls, is above it.
//
// Lifetime: made when the stream's headers begin; retired (H2Io::Retire) once the stream
// is closed (or its connection gone) and its handler has finished, since the handler's Requests
// point into its memory. A RST_STREAM, a passed deadline or a lost connection cancels the
// handler (Handler::OnCancel) and it finishes once its Requests are back.
//
// Threads: its loop's thread only.
#ifndef RINGKV_SERVER_H2_H2_CALL_H_
#define RINGKV_SERVER_H2_H2_CALL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "net/byte_buffer.h"
#include "net/grpc_wire.h"
#include "net/send_queue.h"
#include "server/auth/authenticator.h"
#include "server/h2/h2_io.h"
#include "server/handlers/handler.h"
#include "server/handlers/methods.h"
#include "server/request_limits.h"

namespace ringkv {

// A header field of a response: name and value.
using HeaderField = std::pair<std::string_view, std::string_view>;

// What an H2Call asks of the connection it came on; Connection implements it, on whichever
// HTTP/2 session it runs (nghttp2's, or ringkv's own: --h2).
class CallConnection {
 public:
  virtual H2Io& io() = 0;
  // The call took `bytes` of its stream's DATA: the stream's window and the connection's grow
  // again ...
  virtual void Consume(int32_t stream_id, size_t bytes) = 0;
  // ... or only the connection's (bytes of a stream that is gone).
  virtual void ConsumeConnection(size_t bytes) = 0;
  // The response's headers; its DATA is then pulled from the call (ReadyResponse, TakeResponse).
  virtual void SubmitResponse(H2Call& call) = 0;
  // The response has more ready, after ReadyResponse found none.
  virtual void ResumeData(int32_t stream_id) = 0;
  // Trailers that end the stream, after the response's DATA ...
  virtual void SubmitTrailers(int32_t stream_id, std::span<const HeaderField> fields) = 0;
  // ... or headers that end it at once (a trailers-only response).
  virtual void SubmitHeadersOnly(int32_t stream_id, std::span<const HeaderField> fields) = 0;
  // The connection has frames to send (it is flushed at the end of the turn).
  virtual void MarkDirty() = 0;
  // The role of the client's last authorization header: it sends the same one on every call.
  virtual RoleCache& role_cache() = 0;
  // The client's IP address (CallSink::PeerHost).
  virtual std::string peer_host() const = 0;
  // A call holds an answer that acknowledges writes, until it is framed: AckFramed (from the
  // connection's side) or the stream's close.
  virtual void HoldAck() = 0;
  // A call whose stream has closed after its handler finished holds `bytes` of the server's
  // reply memory for an answer whose last frames are in the connection's output now (where a
  // shared value stays referenced whole): the connection gives them back once its socket has
  // taken what the output holds, or as it goes.
  virtual void HoldReplyMemory(int64_t bytes) = 0;
  // Whether its sends read the bytes they send before they return, so that a call's output may
  // hold bytes a shard lends (CallSink::TakesLoans).
  virtual bool sends_at_once() const { return false; }

 protected:
  ~CallConnection() = default;
};

class H2Call final : public CallSink {
 public:
  // A Write is done (the handler may write the next) once fewer than this many of its bytes
  // wait in the call's buffer.
  static constexpr size_t kWriteDoneBytes = 256 * 1024;
  // Largest header list a request may carry (SETTINGS_MAX_HEADER_LIST_SIZE).
  static constexpr uint32_t kMaxHeaderListBytes = 16 * 1024;

  H2Call(CallConnection& connection, int32_t stream_id);
  ~H2Call();
  H2Call(const H2Call&) = delete;
  H2Call& operator=(const H2Call&) = delete;

  // Request headers, as they come (OnHeader).
  struct RequestHeaders {
    const Method* method = nullptr;  // Null: unknown, or no :path yet.
    std::string unknown_path;        // Kept for the error message only.
    bool post = false;
    std::string_view content_type_error;  // Empty if application/grpc[+proto].
    bool has_content_type = false;
    bool identity = true;  // grpc-encoding absent or identity.
    std::optional<int64_t> timeout_ns;
    bool bad_timeout = false;
    size_t bytes = 0;           // As HTTP/2 counts a header list (name + value + 32).
    bool sent_token = false;    // An authorization header came.
    Role caller = Role::kNone;  // The role its token grants (with --auth-token-file).
    absl::StatusOr<uint32_t> min_replicas = 0;  // ringkv-min-replicas.
    absl::StatusOr<bool> linearizable = false;  // ringkv-consistency.
  };

  // From the connection's HTTP/2 session.
  void OnHeader(std::string_view name, std::string_view value);
  // What OnHeader made of the headers so far; TakeHeaders: what it made of another call's
  // fields, the same as this one's, in place of its calls.
  const RequestHeaders& headers() const { return headers_; }
  void TakeHeaders(const RequestHeaders& headers) { headers_ = headers; }
  // The header list was `bytes` (counted as HTTP/2 counts it), over kMaxHeaderListBytes: the
  // session dropped the fields past the limit, and Start refuses the call.
  void OnHeaderListOver(size_t bytes) { headers_.bytes = bytes; }
  void OnHeadersDone();
  void OnData(const uint8_t* data, size_t length);
  // Where the next `want` bytes of DATA (or fewer) may be read straight to: the rest of a unary
  // request message whose buffer is sized for it whole (ReserveRequest). Empty otherwise.
  std::span<char> DataRoom(size_t want);
  // `length` bytes were read to DataRoom's span.
  void OnDataInPlace(size_t length);
  void OnRemoteEnd();
  // The stream is closed: both sides ended, or a reset. `error_code` is HTTP/2's.
  void OnStreamClose(uint32_t error_code);
  // The session's pull of the response: how many of its bytes are ready for a DATA frame of at
  // most `max` (0: none now; the call resumes the stream when there are), and whether they are
  // its last, the trailers (submitted now) following them.
  size_t ReadyResponse(size_t max, bool* last);
  // The next `length` bytes of the response, now framed, moved to `to` (the connection's
  // output; `share`: shared ranges stay shared, SendQueue::MoveTo). No copy until there.
  void TakeResponse(size_t length, SendQueue& to, bool share);
  // Response bytes not framed yet: waiting for the client's window, or for room in the
  // connection's output.
  size_t Unsent() const { return out_.size(); }

  // From the loop.
  void Pump();
  void OnDeadline();
  void OnConnectionGone();
  // The server stops: UNAVAILABLE to the client, and the handler is cancelled.
  void Stop();

  // CallSink, for the handler.
  void Read() override;
  void Write(const google::protobuf::MessageLite& message) override;
  void Finish(const absl::Status& status, const google::protobuf::MessageLite* response) override;
  std::string PeerHost() const override {
    return connection_ != nullptr ? connection_->peer_host() : std::string();
  }
  void Acknowledges() override { ack_next_ = true; }
  bool ShareField(uint32_t field, std::string& bytes) override;
  bool TakesLoans() const override {
    return connection_ != nullptr && connection_->sends_at_once();
  }
  void ShareLoan(uint32_t field, std::shared_ptr<const SharedBytes> bytes) override;
  void ShareLoans(std::string& bytes, std::vector<LentAt> loans) override;

  // For the connection's count of answers that acknowledge writes and are not framed yet
  // (Connection::HoldsAck): true once, when the held answer has been taken by the session (after a
  // DATA frame: its bytes through the acknowledging message), ...
  bool TakeFramedAck() {
    if (!ack_held_ || taken_ < ack_until_) return false;
    ack_held_ = false;
    return true;
  }
  // ... or when the stream closes (its trailers are framed, or the client reset it).
  bool TakeAckAtClose() { return std::exchange(ack_held_, false); }

  int32_t stream_id() const { return stream_id_; }

  // For the loop's ready list and retirement.
  bool queued = false;
  bool retired = false;

 private:
  // Starts the handler, or answers the call itself with the reason it cannot be served.
  void Start();
  // A bidirectional call: hands whole messages to the handler while it Reads.
  void Deliver();
  // A unary or server-streaming call: parses its one message (prefix included) into the
  // handler's incoming(); it is handed over at the end of the stream. `stays`: the bytes are
  // in_'s, which stay put while the handler lives (Handler::ParseInPlace may keep views).
  void ParseRequest(const char* bytes, size_t length, bool stays = false);
  const RequestLimits& Limits() const;
  // A unary request in pieces: its buffer is sized once for the whole message, as the prefix
  // says, once an eighth of it is in (with `length` more bytes at `data`; half of it for a
  // message over kEagerReserveBytes), rather than doubled to the end, which copies it again each
  // time. From then on the connection reads the rest straight into it (DataRoom). The buffer is
  // never more than kReserveRatio times what the client sent, nor more than twice past 1 MiB.
  void ReserveRequest(const char* data, size_t length);
  static constexpr uint64_t kReserveRatio = 8;
  static constexpr uint64_t kEagerReserveBytes = 1 << 20;
  // The unary request's pieces so far: parses it once whole; else checks its prefix and
  // acknowledges what came.
  void TakeRequestPiece();
  // UNIMPLEMENTED for a compressed message, RESOURCE_EXHAUSTED for one over the limit.
  absl::Status CheckPrefix(const MessagePrefix& prefix) const;
  // Acknowledges received bytes up to the end of the first message not yet handed over.
  void Consume();
  // Ends the call on the transport's side: `status` to the client (if it can still be sent),
  // and the handler, if any, is cancelled.
  void Fail(const absl::Status& status);
  // The response: headers with a data provider, then messages, then trailers. A message
  // appended with `shared` (ShareField's) has that field ahead of its own fields, shared.
  void AppendMessage(const google::protobuf::MessageLite& message,
                     SendQueue::Shared shared = nullptr, uint32_t field = 0);
  // A message that is `own` (ShareLoans's bytes) with each of `loans` inserted where it says,
  // shared: no byte of either copied here.
  void AppendMessage(SendQueue::Shared own, std::vector<LentAt>& loans);
  void StartResponse();
  // The response has something new to send: starts it, or resumes the session's pull.
  void ResumeResponse();
  // Acknowledges to the flow-control windows every byte received that no handler will read.
  void ReleaseInput();
  void SendTrailersOnly(const absl::Status& status, const char* http_status = "200");
  void SubmitTrailers();
  void Cancel();
  void ClearDeadline();
  // The answer just handed over acknowledges writes (CallSink::Acknowledges), through response
  // byte `until` (taken_'s count; kUntilClose: the trailers).
  void HoldAck(uint64_t until);
  static constexpr uint64_t kUntilClose = UINT64_MAX;
  // Retires the call if both the stream and the handler are done.
  void MaybeRetire();
  bool Alive() const { return !stream_closed_ && !ended_; }

  H2Io& io_;
  CallConnection* connection_;  // Null once the connection is gone.
  const int32_t stream_id_;
  RequestHeaders headers_;
  std::unique_ptr<Handler> handler_;
  bool counted_ = false;  // In the server's count of calls being served.

  // Request side. in_[in_read_..] is received and not handed over; in_ starts at byte
  // in_base_ of the stream's DATA; bytes before consumed_ are acknowledged.
  ByteBuffer in_;
  size_t in_read_ = 0;
  uint64_t in_base_ = 0;
  uint64_t consumed_ = 0;
  bool request_parsed_ = false;  // Unary and server streaming: the one message is parsed.
  bool read_wanted_ = false;     // The handler's Read is outstanding.
  bool remote_ended_ = false;

  // Response side. out_ is framed response not yet taken by the session.
  SendQueue out_;
  uint64_t taken_ = 0;         // Bytes of the response taken by the session (or dropped).
  size_t promised_ = 0;        // Bytes ReadyResponse gave a DATA frame, not yet taken.
  SendQueue::Shared shared_;   // ShareField's or ShareLoan's bytes, for Finish's response ...
  uint32_t shared_field_ = 0;  // ... as this field; or ShareLoans's, the whole response ...
  std::vector<LentAt> loans_;  // ... with these inserted.
  bool ack_next_ = false;      // Acknowledges() came: the next Write or Finish acknowledges.
  bool ack_held_ = false;      // Counted in the connection's answers not framed (HoldAck).
  uint64_t ack_until_ = 0;
  bool response_started_ = false;  // Headers submitted with the data provider.
  bool data_deferred_ = false;     // ReadyResponse had none; resume the stream on new data.
  bool write_pending_ = false;     // The handler's Write is outstanding.
  std::optional<absl::Status> final_status_;  // Set by Finish or Fail: trailers to send.
  bool ended_ = false;  // Our END_STREAM is submitted: nothing more for the client.

  // Both.
  bool stream_closed_ = false;
  bool handler_done_ = false;  // The handler called Finish.
  bool cancelled_ = false;     // The handler was told OnCancel.
  int64_t deadline_ns_ = 0;    // In the loop's deadlines while > 0.
  int64_t start_ns_ = 0;       // When its headers were done; 0: not timed (no --metrics-listen).
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_H2_H2_CALL_H_
