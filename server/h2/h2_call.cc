#include "server/h2/h2_call.h"

#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "net/grpc_wire.h"
#include "server/handlers/parse_request.h"
#include "server/server_context.h"
#include "server/shard_loop.h"
#include "server/status_details.h"

namespace ringkv {
namespace {

// A request buffer drops the bytes already handed on once they are this many and at least half
// of it.
constexpr size_t kCompactBytes = 64 * 1024;
// A varint's bytes at most (64 bits).
constexpr size_t kMaxVarintBytes = 10;

// grpc-status-details-bin for `status` (binary headers are base64, unpadded), or empty.
std::string DetailsHeader(const absl::Status& status) {
  std::string details = StatusDetails(status);
  if (details.empty()) return details;
  std::string encoded = absl::Base64Escape(details);
  while (!encoded.empty() && encoded.back() == '=') encoded.pop_back();
  return encoded;
}

}  // namespace

H2Call::H2Call(CallConnection& connection, int32_t stream_id)
    : io_(connection.io()), connection_(&connection), stream_id_(stream_id) {
  io_.CallMade();
}

H2Call::~H2Call() {
  if (start_ns_ != 0 && headers_.method != nullptr) {
    // A call that ended without a status of ours was cancelled (by its client, a lost
    // connection or its deadline, which set DEADLINE_EXCEEDED itself).
    io_.loop().call_metrics()->Record(
        headers_.method->id,
        final_status_.has_value() ? final_status_->code() : absl::StatusCode::kCancelled,
        LoopIo::NowNs() - start_ns_);
  }
  ClearDeadline();
  handler_.reset();  // Before the count: a handler is part of its call.
  if (counted_) io_.loop().context().CallEnded();
  io_.CallGone();
}

void H2Call::OnHeader(std::string_view name, std::string_view value) {
  headers_.bytes += name.size() + value.size() + 32;
  if (headers_.bytes > kMaxHeaderListBytes) return;  // Start() refuses the call.
  if (name == ":path") {
    headers_.method = FindMethod(value);
    if (headers_.method == nullptr) headers_.unknown_path = value;
  } else if (name == ":method") {
    headers_.post = value == "POST";
  } else if (name == "content-type") {
    headers_.has_content_type = true;
    if (value.starts_with("application/grpc")) {
      const std::string_view rest = value.substr(16);
      if (!rest.empty() && rest != "+proto" && rest.front() != ';') {
        headers_.content_type_error =
            rest.front() == '+' ? "unsupported" : "not gRPC";  // application/grpc+json, or ...x
      }
    } else {
      headers_.content_type_error = "not gRPC";
    }
  } else if (name == "grpc-encoding") {
    headers_.identity = value == "identity";
  } else if (name == "grpc-timeout") {
    headers_.timeout_ns = ParseGrpcTimeout(value);
    headers_.bad_timeout = !headers_.timeout_ns.has_value();
  } else if (name == kMinReplicasHeader) {
    headers_.min_replicas = ParseMinReplicas(value);
  } else if (name == kConsistencyHeader) {
    headers_.linearizable = ParseConsistency(value);
  } else if (name == "authorization") {
    headers_.sent_token = true;
    if (const Authenticator* auth = io_.loop().context().auth()) {
      headers_.caller = connection_->role_cache().RoleOf(*auth, value);
    }
  }
}

void H2Call::OnHeadersDone() { Start(); }

void H2Call::Start() {
  const RequestHeaders& h = headers_;
  if (io_.loop().call_metrics() != nullptr) start_ns_ = LoopIo::NowNs();
  if (h.bytes > kMaxHeaderListBytes) {
    return SendTrailersOnly(absl::ResourceExhaustedError(absl::StrCat(
        "the request's headers are ", h.bytes, " bytes; the limit is ", kMaxHeaderListBytes)));
  }
  if (!h.post) {
    return SendTrailersOnly(absl::InternalError("gRPC calls are POST requests"), "405");
  }
  if (!h.has_content_type || h.content_type_error == "not gRPC") {
    return SendTrailersOnly(
        absl::InternalError("content-type must be application/grpc or application/grpc+proto"),
        "415");
  }
  if (!h.content_type_error.empty()) {
    return SendTrailersOnly(absl::UnimplementedError(
        "only protobuf messages are served: content-type application/grpc or "
        "application/grpc+proto"));
  }
  if (h.method == nullptr) {
    return SendTrailersOnly(
        absl::UnimplementedError(absl::StrCat("unknown method ", h.unknown_path)));
  }
  if (!h.identity) {
    return SendTrailersOnly(absl::UnimplementedError(
        "compressed messages are not supported; this server accepts grpc-encoding identity"));
  }
  if (h.bad_timeout) {
    return SendTrailersOnly(absl::InvalidArgumentError("malformed grpc-timeout header"));
  }
  if (!h.min_replicas.ok()) return SendTrailersOnly(h.min_replicas.status());
  if (!h.linearizable.ok()) return SendTrailersOnly(h.linearizable.status());
  ServerContext& context = io_.loop().context();
  const Role caller = context.auth() != nullptr ? h.caller : Role::kAdmin;
  if (absl::Status allowed = Authorize(*h.method, caller, h.sent_token); !allowed.ok()) {
    return SendTrailersOnly(allowed);
  }
  if (context.shutting_down() && !headers_.method->served_while_draining) {
    return SendTrailersOnly(RefusalUnrun("ringkv-server is shutting down", ""));
  }
  if (h.method->needs == Role::kWrite && context.read_only()) {
    return SendTrailersOnly(context.read_only_refusal());
  }
  if (h.timeout_ns.has_value()) {
    const int64_t now = LoopIo::NowNs();
    deadline_ns_ = *h.timeout_ns > INT64_MAX - now ? INT64_MAX : now + *h.timeout_ns;
    io_.AddDeadline(this, deadline_ns_);
  }
  handler_ = headers_.method->make(io_.loop(), *this);
  handler_->set_caller(caller);
  handler_->set_min_replicas(*h.min_replicas);
  handler_->set_linearizable(*h.linearizable);
  if (headers_.method->counted) {
    counted_ = true;
    context.CallStarted();
  }
  handler_->OnStart();
}

void H2Call::OnData(const uint8_t* data, size_t length) {
  if (handler_ == nullptr || handler_done_ || cancelled_) {
    // Nobody will read it: acknowledge it at once, so the connection's window stays open.
    connection_->Consume(stream_id_, length);
    return;
  }
  const bool bidi = headers_.method->kind == MethodKind::kBidiStreaming;
  if (!bidi && request_parsed_) {
    return Fail(absl::InternalError("a second request message on a call that takes one"));
  }
  if (!bidi && in_.empty() && length >= kMessagePrefixBytes &&
      length ==
          kMessagePrefixBytes + ReadMessagePrefix(reinterpret_cast<const char*>(data)).length) {
    // The usual unary request: one whole message in one chunk, parsed where the session holds
    // it.
    in_base_ += length;
    ParseRequest(reinterpret_cast<const char*>(data), length);
    return;
  }
  if (in_read_ == in_.size() || (in_read_ >= kCompactBytes && in_read_ * 2 >= in_.size())) {
    // Drop what was handed over: a long stream whose buffer always ends inside a message
    // would otherwise grow without end.
    in_base_ += in_read_;
    in_.EraseFront(in_read_);
    in_read_ = 0;
  }
  if (!bidi) ReserveRequest(reinterpret_cast<const char*>(data), length);
  in_.append(reinterpret_cast<const char*>(data), length);
  if (bidi) return Deliver();
  TakeRequestPiece();
}

std::span<char> H2Call::DataRoom(size_t want) {
  if (handler_ == nullptr || handler_done_ || cancelled_ || request_parsed_ ||
      headers_.method->kind == MethodKind::kBidiStreaming || in_.size() < kMessagePrefixBytes) {
    return {};
  }
  const MessagePrefix prefix = ReadMessagePrefix(in_.data());
  const uint64_t whole = kMessagePrefixBytes + uint64_t{prefix.length};
  if (prefix.compressed || in_.capacity() < whole || in_.size() >= whole) return {};
  return {in_.spare(), static_cast<size_t>(std::min<uint64_t>(want, whole - in_.size()))};
}

void H2Call::OnDataInPlace(size_t length) {
  in_.Commit(length);
  TakeRequestPiece();
}

void H2Call::TakeRequestPiece() {
  // A unary request that came in pieces: parsed once whole (handed over at its end).
  const size_t available = in_.size();
  if (available >= kMessagePrefixBytes &&
      available >= kMessagePrefixBytes + ReadMessagePrefix(in_.data()).length) {
    in_read_ = available;
    ParseRequest(in_.data(), available, /*stays=*/true);
  } else if (available >= kMessagePrefixBytes) {
    if (absl::Status s = CheckPrefix(ReadMessagePrefix(in_.data())); !s.ok()) return Fail(s);
    Consume();
  } else {
    Consume();
  }
}

absl::Status H2Call::CheckPrefix(const MessagePrefix& prefix) const {
  if (prefix.compressed) {
    return absl::UnimplementedError(
        "the request message is compressed; this server accepts grpc-encoding identity");
  }
  const size_t max_message = io_.loop().context().options().limits.max_message_bytes();
  if (prefix.length > max_message) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the request message is ", prefix.length, " bytes; the limit is ", max_message,
                     " (2 x --max-value-bytes + --max-key-bytes + 1 MiB)"));
  }
  return absl::OkStatus();
}

void H2Call::ReserveRequest(const char* data, size_t length) {
  const char* prefix = in_.size() >= kMessagePrefixBytes              ? in_.data()
                       : in_.empty() && length >= kMessagePrefixBytes ? data
                                                                      : nullptr;
  if (prefix == nullptr) return;
  const uint64_t whole = kMessagePrefixBytes + uint64_t{ReadMessagePrefix(prefix).length};
  const uint64_t have = in_.size() + length;
  const uint64_t ratio = whole <= kEagerReserveBytes ? kReserveRatio : 2;
  if (whole > in_.capacity() && have < whole && have * ratio >= whole &&
      whole <= kMessagePrefixBytes + io_.loop().context().options().limits.max_message_bytes()) {
    in_.reserve(whole);
  }
}

const RequestLimits& H2Call::Limits() const { return io_.loop().context().limits(); }

void H2Call::ParseRequest(const char* bytes, size_t length, bool stays) {
  const MessagePrefix prefix = ReadMessagePrefix(bytes);
  if (absl::Status s = CheckPrefix(prefix); !s.ok()) return Fail(s);
  if (length > kMessagePrefixBytes + prefix.length) {
    return Fail(absl::InternalError("a second request message on a call that takes one"));
  }
  const std::string_view message(bytes + kMessagePrefixBytes, prefix.length);
  if (absl::Status s = ringkv::ParseRequest(*handler_, message, stays, Limits()); !s.ok())
    return Fail(s);
  request_parsed_ = true;
  Consume();
}

void H2Call::Deliver() {
  while (handler_ != nullptr && !handler_done_ && !cancelled_) {
    const size_t available = in_.size() - in_read_;
    if (available < kMessagePrefixBytes) break;
    const MessagePrefix prefix = ReadMessagePrefix(in_.data() + in_read_);
    if (absl::Status s = CheckPrefix(prefix); !s.ok()) return Fail(s);
    const size_t message_end = kMessagePrefixBytes + prefix.length;
    if (available < message_end || !read_wanted_) break;
    const std::string_view message(in_.data() + in_read_ + kMessagePrefixBytes, prefix.length);
    if (absl::Status s = ringkv::ParseRequest(*handler_, message, /*stays=*/false, Limits());
        !s.ok()) {
      return Fail(s);
    }
    in_read_ += message_end;
    Consume();
    read_wanted_ = false;
    handler_->OnMessage();
  }
  Consume();
  if (read_wanted_ && remote_ended_ && in_read_ == in_.size() && handler_ != nullptr &&
      !handler_done_ && !cancelled_) {
    read_wanted_ = false;
    handler_->OnHalfClose();
  }
}

void H2Call::Consume() {
  if (connection_ == nullptr) return;
  // Up to the end of the first message not handed over: it must be able to arrive whole, but
  // what follows it waits for the handler to read.
  uint64_t upto = in_base_ + in_read_;
  const size_t available = in_.size() - in_read_;
  if (available >= kMessagePrefixBytes) {
    const MessagePrefix prefix = ReadMessagePrefix(in_.data() + in_read_);
    upto += std::min<uint64_t>(available, kMessagePrefixBytes + uint64_t{prefix.length});
  } else {
    upto += available;
  }
  if (upto <= consumed_) return;
  connection_->Consume(stream_id_, upto - consumed_);
  consumed_ = upto;
  connection_->MarkDirty();  // A WINDOW_UPDATE may be due.
}

void H2Call::OnRemoteEnd() {
  remote_ended_ = true;
  if (handler_ == nullptr || handler_done_ || cancelled_) return;
  if (headers_.method->kind == MethodKind::kBidiStreaming) {
    const size_t available = in_.size() - in_read_;
    if (available > 0 &&
        (available < kMessagePrefixBytes ||
         available < kMessagePrefixBytes + ReadMessagePrefix(in_.data() + in_read_).length)) {
      return Fail(absl::InternalError("the request ended inside a message"));
    }
    return Deliver();  // A Read outstanding learns of the half-close.
  }
  // A unary or server-streaming call starts once its request is whole: one message, then the
  // end of the stream, so that a second message fails the call before anything ran. Clients
  // send both together: this costs no round trip.
  if (!request_parsed_) {
    return Fail(absl::InternalError(in_.empty() ? "the request ended without its message"
                                                : "the request ended inside a message"));
  }
  if (deadline_ns_ > 0 && LoopIo::NowNs() >= deadline_ns_) {
    ClearDeadline();
    return Fail(absl::DeadlineExceededError("deadline exceeded"));
  }
  handler_->OnMessage();
}

void H2Call::Read() {
  read_wanted_ = true;
  if (in_read_ < in_.size() || remote_ended_) io_.MakeReady(this);
}

void H2Call::Pump() {
  if (handler_ == nullptr || handler_done_ || cancelled_) return;
  if (headers_.method->kind == MethodKind::kBidiStreaming) Deliver();
  if (handler_done_ || cancelled_) return;
  if (write_pending_ && Unsent() < kWriteDoneBytes) {
    write_pending_ = false;
    handler_->OnWriteDone(true);
  }
}

void H2Call::AppendMessage(const google::protobuf::MessageLite& message, SendQueue::Shared shared,
                           uint32_t field) {
  const size_t size = message.ByteSizeLong();
  if (shared == nullptr) {
    char* at = out_.AppendSpace(kMessagePrefixBytes + size);
    WriteMessagePrefix(at, false, static_cast<uint32_t>(size));
    message.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(at + kMessagePrefixBytes));
    return;
  }
  // The shared field, then the message's own (which leave it unset): a parser takes fields in
  // any order, and for field 1 this is also the order protobuf writes.
  using google::protobuf::io::CodedOutputStream;
  uint8_t head[kMessagePrefixBytes + 2 * kMaxVarintBytes];
  const uint8_t* const end = CodedOutputStream::WriteVarint64ToArray(
      shared->size(),
      CodedOutputStream::WriteTagToArray(field << 3 | 2, head + kMessagePrefixBytes));
  const size_t head_bytes = static_cast<size_t>(end - head);
  WriteMessagePrefix(
      reinterpret_cast<char*>(head), false,
      static_cast<uint32_t>(head_bytes - kMessagePrefixBytes + shared->size() + size));
  out_.Append({reinterpret_cast<const char*>(head), head_bytes});
  const std::string_view bytes = shared->view();
  out_.Append(std::move(shared), bytes);
  if (size > 0) {
    message.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(out_.AppendSpace(size)));
  }
}

bool H2Call::ShareField(uint32_t field, std::string& bytes) {
  shared_ = std::make_shared<const SharedBytes>(std::move(bytes));
  shared_field_ = field;
  return true;
}

void H2Call::ShareLoan(uint32_t field, std::shared_ptr<const SharedBytes> bytes) {
  shared_ = std::move(bytes);
  shared_field_ = field;
}

void H2Call::ShareLoans(std::string& bytes, std::vector<LentAt> loans) {
  shared_ = std::make_shared<const SharedBytes>(std::move(bytes));
  loans_ = std::move(loans);
}

void H2Call::AppendMessage(SendQueue::Shared own, std::vector<LentAt>& loans) {
  const std::string_view bytes = own->view();
  size_t size = bytes.size();
  for (const LentAt& loan : loans) size += loan.bytes->size();
  WriteMessagePrefix(out_.AppendSpace(kMessagePrefixBytes), false, static_cast<uint32_t>(size));
  size_t from = 0;
  for (LentAt& loan : loans) {
    out_.Append(own, bytes.substr(from, loan.at - from));
    const std::string_view lent = loan.bytes->view();
    out_.Append(std::move(loan.bytes), lent);
    from = loan.at;
  }
  out_.Append(std::move(own), bytes.substr(from));
}

void H2Call::StartResponse() {
  connection_->SubmitResponse(*this);
  response_started_ = true;
}

void H2Call::ResumeResponse() {
  if (!response_started_) {
    StartResponse();
  } else if (data_deferred_) {
    data_deferred_ = false;
    connection_->ResumeData(stream_id_);
  }
}

void H2Call::Write(const google::protobuf::MessageLite& message) {
  const bool acknowledges = std::exchange(ack_next_, false);
  if (!Alive() || cancelled_) return;  // The handler has been told; nothing reaches the client.
  AppendMessage(message);
  if (acknowledges) HoldAck(taken_ + out_.size());
  write_pending_ = true;
  ResumeResponse();
  if (Unsent() < kWriteDoneBytes) io_.MakeReady(this);
  connection_->MarkDirty();
}

void H2Call::Finish(const absl::Status& status, const google::protobuf::MessageLite* response) {
  const bool acknowledges = std::exchange(ack_next_, false);
  SendQueue::Shared shared = std::move(shared_);
  std::vector<LentAt> loans = std::move(loans_);
  handler_done_ = true;
  read_wanted_ = false;
  write_pending_ = false;
  ReleaseInput();
  if (!cancelled_ && Alive() && !final_status_.has_value()) {
    ClearDeadline();
    if (status.ok() && response != nullptr) {
      if (loans.empty()) {
        AppendMessage(*response, std::move(shared), shared_field_);
      } else {
        AppendMessage(std::move(shared), loans);
      }
    }
    // The trailers' grpc-status 0 is what acknowledges: held until the stream closes.
    if (acknowledges && status.ok()) HoldAck(kUntilClose);
    if (!response_started_ && Unsent() == 0) {
      SendTrailersOnly(status);
    } else {
      final_status_ = status;
      ResumeResponse();
      connection_->MarkDirty();
    }
  }
  MaybeRetire();
}

size_t H2Call::ReadyResponse(size_t max, bool* last) {
  const size_t unsent = Unsent();
  if (unsent == 0 && !final_status_.has_value()) {
    data_deferred_ = true;
    return 0;
  }
  const size_t n = std::min(max, unsent);
  promised_ = n;
  *last = n == unsent && final_status_.has_value();
  if (*last) SubmitTrailers();  // They end the stream, right after this last DATA frame.
  return n;
}

void H2Call::TakeResponse(size_t length, SendQueue& to, bool share) {
  promised_ = 0;
  out_.MoveTo(to, length, share);
  taken_ += length;
  if (write_pending_ && Unsent() < kWriteDoneBytes) io_.MakeReady(this);
}

void H2Call::SubmitTrailers() {
  ended_ = true;
  const absl::Status& status = *final_status_;
  if (status.ok()) {  // The common case.
    const HeaderField ok[] = {{"grpc-status", "0"}};
    connection_->SubmitTrailers(stream_id_, ok);
    return;
  }
  const std::string code = std::to_string(static_cast<int>(status.code()));
  const std::string message =
      PercentEncode(std::string_view(status.message().data(), status.message().size()));
  const std::string details = DetailsHeader(status);
  HeaderField trailers[3] = {{"grpc-status", code}};
  size_t n = 1;
  if (!message.empty()) trailers[n++] = {"grpc-message", message};
  if (!details.empty()) trailers[n++] = {"grpc-status-details-bin", details};
  connection_->SubmitTrailers(stream_id_, std::span<const HeaderField>(trailers, n));
}

void H2Call::SendTrailersOnly(const absl::Status& status, const char* http_status) {
  const std::string code = std::to_string(static_cast<int>(status.code()));
  const std::string message =
      PercentEncode(std::string_view(status.message().data(), status.message().size()));
  const std::string http(http_status);
  const std::string details = DetailsHeader(status);
  HeaderField headers[6] = {
      {":status", http},
      {"content-type", "application/grpc"},
      {"grpc-accept-encoding", "identity"},
      {"grpc-status", code},
  };
  size_t n = 4;
  if (!message.empty()) headers[n++] = {"grpc-message", message};
  if (!details.empty()) headers[n++] = {"grpc-status-details-bin", details};
  // Ended before the submission: ringkv's session closes the stream within it (nghttp2's
  // once the frame is sent), and the close must find the call ended, not cancel it.
  ended_ = true;
  final_status_ = status;
  ClearDeadline();
  CallConnection* connection = connection_;
  connection->SubmitHeadersOnly(stream_id_, std::span<const HeaderField>(headers, n));
  connection->MarkDirty();
}

void H2Call::Fail(const absl::Status& status) {
  if (Alive() && !final_status_.has_value()) {
    ClearDeadline();
    if (!response_started_) {
      SendTrailersOnly(status);
    } else {
      // Messages not yet framed are dropped; the trailers say why. A DATA frame the session has
      // been promised (and retries when the connection has room) keeps its bytes.
      taken_ += out_.size() - promised_;
      out_.Truncate(promised_);
      final_status_ = status;
      ResumeResponse();
      connection_->MarkDirty();
    }
  }
  Cancel();
}

void H2Call::Cancel() {
  if (handler_ != nullptr && !handler_done_ && !cancelled_) {
    cancelled_ = true;
    read_wanted_ = false;
    write_pending_ = false;
    handler_->OnCancel();  // It may Finish at once, or once its Requests are back.
  }
  ReleaseInput();
}

void H2Call::ReleaseInput() {
  if (connection_ == nullptr || stream_closed_ || consumed_ == in_base_ + in_.size()) return;
  // What no handler will read: acknowledged, or the connection's window shrinks for good.
  connection_->Consume(stream_id_, in_base_ + in_.size() - consumed_);
  consumed_ = in_base_ + in_.size();
}

void H2Call::OnDeadline() {
  deadline_ns_ = 0;  // The loop has taken it out of its deadlines.
  Fail(absl::DeadlineExceededError("deadline exceeded"));
}

void H2Call::OnStreamClose(uint32_t /*error_code*/) {
  ClearDeadline();
  if (connection_ != nullptr && consumed_ < in_base_ + in_.size()) {
    // The stream is gone, the connection's window is not: give back what was never read.
    connection_->ConsumeConnection(in_base_ + in_.size() - consumed_);
    consumed_ = in_base_ + in_.size();
  }
  stream_closed_ = true;
  if (handler_done_ && handler_ != nullptr && connection_ != nullptr) {
    // Its answer's last frames are in the connection's output (a value shared there stays
    // whole while any of its slices is): what the handler took of the reply memory goes back
    // once they are sent. The handler gets no call after its Finish, so it holds no more.
    // A stream closed before its handler finished carries no answer of its into the output
    // (a Stream's replies are copied there), and its handler gives all back as it goes.
    if (const int64_t held = handler_->TakeReplyMemoryHeld(); held != 0) {
      connection_->HoldReplyMemory(held);
    }
  }
  if (!ended_) Cancel();  // Reset by the client before the call ended.
  MaybeRetire();
}

void H2Call::HoldAck(uint64_t until) {
  ack_until_ = until;
  if (ack_held_) return;
  ack_held_ = true;
  connection_->HoldAck();
}

void H2Call::OnConnectionGone() {
  connection_ = nullptr;
  ack_held_ = false;  // The connection sends nothing more.
  ClearDeadline();
  stream_closed_ = true;
  Cancel();
  MaybeRetire();
}

void H2Call::Stop() {
  Fail(absl::UnavailableError("ringkv-server stopped before the call finished"));
}

void H2Call::ClearDeadline() {
  if (deadline_ns_ > 0) {
    io_.RemoveDeadline(this, deadline_ns_);
    deadline_ns_ = 0;
  }
}

void H2Call::MaybeRetire() {
  if (!retired && stream_closed_ && (handler_ == nullptr || handler_done_)) io_.Retire(this);
}

}  // namespace ringkv
