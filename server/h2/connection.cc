#include "server/h2/connection.h"

#include <openssl/err.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "net/openssl.h"
#include "net/tls_io.h"
#include "server/server_context.h"
#include "server/shard_loop.h"
#include "server/tls/server_tls.h"

namespace ringkv {
namespace {

// Reads per readiness event before the other connections get their turn.
constexpr int kReadsPerEvent = 4;
// A read straight into a call's buffer (H2Session::DataRoom) for at least this much; less is
// read with what follows it, into the loop's buffer.
constexpr size_t kMinInPlaceRead = 4096;
// Rounds of "nghttp2 to buffer, buffer to socket" per flush.
constexpr int kFlushRounds = 8;

Connection* Of(void* user_data) { return static_cast<Connection*>(user_data); }

// nghttp2's data provider: the call's response, pulled without a copy (OnSendData frames it).
ssize_t ReadResponse(nghttp2_session*, int32_t, uint8_t*, size_t length, uint32_t* data_flags,
                     nghttp2_data_source* source, void*) {
  bool last = false;
  const size_t n = static_cast<H2Call*>(source->ptr)->ReadyResponse(length, &last);
  if (n == 0 && !last) return NGHTTP2_ERR_DEFERRED;
  if (n > 0) *data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  // The trailers end the stream, right after this last DATA frame.
  if (last) *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
  return static_cast<ssize_t>(n);
}

// Header fields for nghttp2, which copies them (NO_COPY would need them to outlive the frame).
std::vector<nghttp2_nv> Nva(std::span<const HeaderField> fields) {
  std::vector<nghttp2_nv> nva;
  nva.reserve(fields.size());
  for (const auto& [name, value] : fields) {
    nva.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                   reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                   value.size(), NGHTTP2_NV_FLAG_NONE});
  }
  return nva;
}

// A sendmsg's header for `pieces` iovecs.
msghdr Message(iovec* iov, int pieces) {
  msghdr message{};
  message.msg_iov = iov;
  message.msg_iovlen = static_cast<size_t>(pieces);
  return message;
}

}  // namespace

Connection::Connection(H2Io& io, int fd, int64_t now_ns, int64_t greet_by_ns)
    : io_(io), fd_(fd), greet_by_ns_(greet_by_ns), idle_since_ns_(now_ns), interest_(EPOLLIN) {
  if (const ServerTls* tls = io.loop().context().tls()) {
    ssl_ = tls->NewSession(fd);  // Null (out of memory): the handshake closes the connection.
    handshaking_ = true;
  }
  const ServerOptions& options = io.loop().context().options();
  if (options.h2 == H2Kind::kRingkv) {
    own_ = std::make_unique<H2Session>(
        events_,
        H2Session::Settings{.max_concurrent_streams = options.max_concurrent_streams,
                            .stream_window = kStreamWindow,
                            .connection_window = kConnectionWindow,
                            .max_header_list_bytes = H2Call::kMaxHeaderListBytes},
        out_);
  } else {
    nghttp2_session_server_new2(&session_, io.callbacks(), this, io.option());
    const nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindow},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, H2Call::kMaxHeaderListBytes},
    };
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
    nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
  }
  // No shutdown notice here even while the server drains: gRPC clients drop a new connection
  // whose first frames include a GOAWAY, and one that connects now wants a health check
  // answered (other calls are refused with UNAVAILABLE).
  MarkDirty();
}

Connection::~Connection() {
  int64_t held = 0;  // The output goes with the connection.
  for (const auto& [end, bytes] : reply_memory_until_) held += bytes;
  if (held != 0) io_.loop().context().reply_memory().fetch_add(held, std::memory_order_relaxed);
  if (fd_ >= 0) {  // Only when the loop goes with connections still open.
    close(fd_);
    io_.gate().ReleaseConnectionSlot();
  }
  if (held_fd_ >= 0) close(held_fd_);
  SSL_free(ssl_);
  if (session_ != nullptr) nghttp2_session_del(session_);
}

H2Call* Connection::CallOf(int32_t stream_id) {
  // nghttp2's callbacks come a header at a time: remember the last stream asked for.
  if (stream_id != last_stream_id_) {
    last_stream_id_ = stream_id;
    last_call_ = static_cast<H2Call*>(
        own_ != nullptr ? own_->StreamData(stream_id)
                        : nghttp2_session_get_stream_user_data(session_, stream_id));
  }
  return last_call_;
}

void Connection::HoldAck() {
  ++acks_unframed_;
  if (!ack_listed) {
    ack_listed = true;
    io_.ListAckHolder(this);
  }
}

void Connection::HoldReplyMemory(int64_t bytes) {
  if (Unsent() == 0) {
    io_.loop().context().reply_memory().fetch_add(bytes, std::memory_order_relaxed);
    return;
  }
  const uint64_t end = sent_ + Unsent();
  if (!reply_memory_until_.empty() && reply_memory_until_.back().first == end) {
    reply_memory_until_.back().second += bytes;
  } else {
    reply_memory_until_.emplace_back(end, bytes);
  }
}

void Connection::GiveBackSentReplyMemory() {
  int64_t back = 0;
  while (!reply_memory_until_.empty() && reply_memory_until_.front().first <= sent_) {
    back += reply_memory_until_.front().second;
    reply_memory_until_.pop_front();
  }
  if (back != 0) io_.loop().context().reply_memory().fetch_add(back, std::memory_order_relaxed);
}

void Connection::AckFramed() {
  --acks_unframed_;
  acks_end_ = sent_ + Unsent();
}

bool Connection::FencedOut() {
  if (!HoldsAck() || !io_.loop().context().fenced()) return false;
  Log(LogLevel::kWarning,
      "closed a connection holding answers that acknowledge writes, not yet sent when this "
      "server's fence closed: its client cannot tell whether those writes stay");
  Close();
  return true;
}

void Connection::MarkDirty() {
  if (dirty_ || closed()) return;
  dirty_ = true;
  io_.MarkDirty(this);
}

bool Connection::Handshake() {
  if (ssl_ != nullptr) {
    const TlsStatus status = TlsHandshake(ssl_);
    if (status == TlsStatus::kOk) {
      handshaking_ = false;
      tls_wants_write_ = false;
      MarkDirty();  // Our SETTINGS wait in nghttp2.
      return true;
    }
    if (status == TlsStatus::kWantRead || status == TlsStatus::kWantWrite) {
      tls_wants_write_ = status == TlsStatus::kWantWrite;
      UpdateInterest();
      return false;
    }
    io_.gate().CountRefused(ConnectionGate::kTlsHandshake);
    Log(LogLevel::kDebug, "refused a TLS handshake: %s",
        status == TlsStatus::kLost ? std::string("the client closed the connection")
                                   : OpenSslErrors());
  }
  Close();
  return false;
}

ssize_t Connection::Receive(char* buffer, size_t length) {
  if (ssl_ == nullptr) return recv(fd_, buffer, length, 0);
  const TlsTransfer read = TlsRead(ssl_, buffer, length);  // kClosed: the client's close_notify.
  if (read.status == TlsStatus::kWantWrite) tls_wants_write_ = true;
  if (read.broken()) Log(LogLevel::kDebug, "closing a TLS connection: %s", OpenSslErrors());
  return ToSocketResult(read);
}

ssize_t Connection::SendFront(int flags) {
  iovec iov[SendQueue::kMaxIovecs];
  const int pieces = out_.Gather(iov);
  if (pieces == 1) return send(fd_, iov[0].iov_base, iov[0].iov_len, flags);
  const msghdr message = Message(iov, pieces);
  return sendmsg(fd_, &message, flags);
}

ssize_t Connection::Transmit() {
  if (ssl_ == nullptr) {
    const ssize_t n = SendFront(MSG_NOSIGNAL);
    if (n > 0) out_.Consume(static_cast<size_t>(n));
    return n;
  }
  // OpenSSL writes one buffer at a time: the pieces in turn, until one is not taken whole.
  ssize_t taken = 0;
  while (!out_.empty()) {
    const std::string_view piece = out_.Front();
    const TlsTransfer written = TlsWrite(ssl_, piece.data(), piece.size());
    if (written.broken()) Log(LogLevel::kDebug, "closing a TLS connection: %s", OpenSslErrors());
    const ssize_t n = ToSocketResult(written);
    if (n < 0) return taken > 0 ? taken : n;  // An error stays for the next write to see.
    out_.Consume(static_cast<size_t>(n));
    taken += n;
    if (static_cast<size_t>(n) < piece.size()) break;
  }
  return taken;
}

bool Connection::Fed(bool ok) {
  greeted_ = own_->greeted();
  if (ok) return true;
  // Its GOAWAY says why; the flush sends it, and the connection closes once it is out.
  Log(LogLevel::kDebug, "closing a connection: %s", own_->error().c_str());
  reading_done_ = true;
  MarkDirty();
  UpdateInterest();
  return false;
}

bool Connection::FeedInPlace(size_t length) {
  return Fed(own_->FeedInPlace(length, io_.TurnNowNs()));
}

bool Connection::Feed(const char* data, size_t length) {
  if (own_ != nullptr) return Fed(own_->Feed(data, length, io_.TurnNowNs()));
  const ssize_t used =
      nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(data), length);
  if (used < 0) {  // Not HTTP/2 at all, a flood, or out of memory: nothing to answer.
    Log(LogLevel::kDebug, "closing a connection: %s", nghttp2_strerror(static_cast<int>(used)));
    Close();
    return false;
  }
  return true;
}

void Connection::OnReadable() {
  if (closed()) return;
  active_ = true;  // For the idle sweep: no clock here.
  if (handshaking_ && !Handshake()) return;
  char* buffer = io_.read_buffer();
  for (int i = 0; i < kReadsPerEvent && !read_paused_; ++i) {
    // The rest of a large request message goes straight to its call's buffer.
    std::span<char> room;
    if (own_ != nullptr && ssl_ == nullptr) room = own_->DataRoom();
    const bool in_place = room.size() >= kMinInPlaceRead;
    const size_t want = in_place ? room.size() : H2Io::kReadBufferBytes;
    const ssize_t n = Receive(in_place ? room.data() : buffer, want);
    if (n > 0) {
      if (!(in_place ? FeedInPlace(static_cast<size_t>(n)) : Feed(buffer, static_cast<size_t>(n))))
        return;
      // A short read emptied the socket; a TLS read stops at a record's end (16 KiB at most).
      if (ssl_ == nullptr && static_cast<size_t>(n) < want) break;
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) {  // The peer has gone.
      Close();
      return;
    }
    break;
  }
  MarkDirty();  // nghttp2 may have frames to send: SETTINGS and PING acks, WINDOW_UPDATE.
}

void Connection::OnWritable() {
  if (handshaking_ && !Handshake()) return;
  tls_wants_write_ = false;
  MarkDirty();
}

void Connection::UseCompletions() {
  completions_ = true;
  UpdateInterest();  // The first receive.
}

void Connection::OnReceived(int result, const char* data, bool more) {
  if (!more) {
    --ops_;
    receiving_ = false;
    cancelling_ = false;
  }
  if (closed()) return;
  if (result > 0) {
    active_ = true;  // For the idle sweep: no clock here.
    if (!Feed(data, static_cast<size_t>(result))) return;
    MarkDirty();  // nghttp2 may have frames to send: SETTINGS and PING acks, WINDOW_UPDATE.
  } else if (result == 0 || (result != -ENOBUFS && result != -EINTR && result != -EAGAIN &&
                             result != -ECANCELED)) {
    Close();  // The peer has gone.
    return;
  }
  // Ended for want of a free provided buffer (they are back by the next submission), or
  // cancelled for a pause: again once reading goes on.
  UpdateInterest();
}

void Connection::OnSent(int result) {
  --ops_;
  if (closed()) return;
  if (result < 0 && result != -EINTR && result != -EAGAIN) {
    Close();  // The peer has gone.
    return;
  }
  if (result > 0) {
    sending_.Consume(static_cast<size_t>(result));
    sent_ += static_cast<uint64_t>(result);
    if (!reply_memory_until_.empty()) GiveBackSentReplyMemory();
  }
  if (!sending_.empty()) {
    SendRest();
    return;
  }
  MarkDirty();  // What gathered meanwhile, and what nghttp2 held back for room.
}

void Connection::SendRest() {
  ++ops_;
  if (sending_.Front().size() == sending_.size()) {  // One piece: a plain send.
    io_.Send(this, sending_.Front());
    return;
  }
  if (ring_message_ == nullptr) ring_message_ = std::make_unique<RingMessage>();
  ring_message_->header = Message(ring_message_->iov, sending_.Gather(ring_message_->iov));
  io_.Send(this, &ring_message_->header);
}

bool Connection::GatherFrames() {
  if (own_ != nullptr) {  // Its control frames are in out_ already; DATA as room allows.
    if (Unsent() < kOutputChunk)
      own_->WriteData(kOutputChunk - std::min(kOutputChunk, sending_.size()));
    return true;
  }
  if (Unsent() < kOutputChunk && nghttp2_session_want_write(session_)) {
    const int rv = nghttp2_session_send(session_);
    if (rv != 0) {
      Log(LogLevel::kDebug, "closing a connection: %s", nghttp2_strerror(rv));
      Close();
      return false;
    }
  }
  return true;
}

void Connection::EndFlush() {
  const bool done = own_ != nullptr ? own_->Done()
                                    : !nghttp2_session_want_read(session_) &&
                                          !nghttp2_session_want_write(session_);
  if (done && Unsent() == 0) {
    Close();  // Both sides are done: after a GOAWAY, or a protocol error nghttp2 answered.
    return;
  }
  UpdateInterest();
}

void Connection::FlushToRing() {
  if (!GatherFrames()) return;
  if (sending_.empty() && !out_.empty()) {  // One send out at a time, of all that gathered.
    sending_.swap(out_);
    SendRest();
  }
  EndFlush();
}

void Connection::Flush() {
  dirty_ = false;
  if (closed() || handshaking_) return;  // The handshake sends what it needs itself.
  if (FencedOut()) return;
  if (completions_) return FlushToRing();
  for (int round = 0; round < kFlushRounds; ++round) {
    if (!GatherFrames()) return;
    if (Unsent() == 0) break;
    const ssize_t n = Transmit();
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      Close();  // The peer has gone.
      return;
    }
    sent_ += static_cast<uint64_t>(n);
    if (!reply_memory_until_.empty()) GiveBackSentReplyMemory();
  }
  EndFlush();
}

void Connection::UpdateInterest() {
  if (!read_paused_ && Unsent() >= kPauseReadBytes) {
    read_paused_ = true;
  } else if (read_paused_ && Unsent() < kResumeReadBytes) {
    read_paused_ = false;
  }
  if (completions_) {
    if (closed()) return;
    if (!read_paused_ && !reading_done_ && !receiving_) {
      receiving_ = true;
      ++ops_;
      io_.Receive(this);
    } else if ((read_paused_ || reading_done_) && receiving_ && !cancelling_) {
      cancelling_ = true;
      io_.CancelReceive(this);
    }
    return;
  }
  // Frames wait in out_ during a TLS handshake (ringkv's session writes its SETTINGS at once):
  // the handshake, not they, says when the socket is wanted writable.
  const uint32_t want =
      (read_paused_ || reading_done_ ? 0u : uint32_t{EPOLLIN}) |
      ((Unsent() > 0 && !handshaking_) || tls_wants_write_ ? uint32_t{EPOLLOUT} : 0u);
  if (want != interest_) {
    interest_ = want;
    io_.Watch(this, want);
  }
}

bool Connection::AppendData(const uint8_t* frame_header, H2Call& call, size_t length) {
  if (Unsent() >= kOutputChunk) return false;
  out_.Append({reinterpret_cast<const char*>(frame_header), 9});
  call.TakeResponse(length, out_, /*share=*/ssl_ == nullptr);  // OpenSSL copies anyway.
  Framed(length);
  if (call.TakeFramedAck()) AckFramed();
  return true;
}

void Connection::Framed(size_t length) {
  framed_ += length;
  data_end_ = sent_ + Unsent();
}

int64_t Connection::SweepStalled(int64_t now_ns) {
  const bool unsent = Unsent() > 0;
  const bool took = sent_ != swept_sent_;
  // Answers' DATA waits in a call for the client's window, or in the output; it moves as it is
  // framed, or as the socket takes output up to it (framed_ unchanged means data_end_ is too).
  // The socket taking other frames, PING and SETTINGS acks say, is no answer moving.
  const auto data_waits = [this] {
    return sent_ < data_end_ || std::any_of(calls_.begin(), calls_.end(),
                                            [](const H2Call* call) { return call->Unsent() > 0; });
  };
  const bool data_moved = framed_ != swept_framed_ || (took && swept_sent_ < data_end_);
  // Any output (error answers and trailers too): stuck if the socket took none of it between
  // two sweeps that both saw some.
  const bool stuck = unsent && swept_unsent_ && !took;
  swept_sent_ = sent_;
  swept_framed_ = framed_;
  swept_unsent_ = unsent;
  if (!stuck && (data_moved || !data_waits())) {
    stalled_since_ns_ = 0;
    return 0;
  }
  if (stalled_since_ns_ == 0) stalled_since_ns_ = now_ns;
  return now_ns - stalled_since_ns_;
}

void Connection::SendShutdownNotice() {
  if (closed()) return;
  if (own_ != nullptr) {
    own_->SubmitShutdownNotice();
  } else {
    nghttp2_submit_shutdown_notice(session_);
  }
  MarkDirty();
}

void Connection::Terminate(std::string_view why) {
  if (closed() || FencedOut()) return;
  for (H2Call* call : std::vector<H2Call*>(calls_.begin(), calls_.end())) call->Stop();
  if (own_ != nullptr) {
    own_->SubmitGoaway(H2Error::kNoError, why);
  } else {
    nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                          reinterpret_cast<const uint8_t*>(why.data()), why.size());
  }
  if (completions_) {
    // One try, now: what a send already out holds goes first, so nothing is sent beside it.
    const bool gathered = own_ != nullptr ? (own_->WriteData(kOutputChunk), true)
                                          : nghttp2_session_want_write(session_) &&
                                                nghttp2_session_send(session_) == 0;
    if (gathered && sending_.empty() && !out_.empty()) {
      [[maybe_unused]] ssize_t n = SendFront(MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  } else {
    Flush();  // One try: a client that does not read does not hold up the stop.
  }
  if (!closed()) {
    if (ssl_ != nullptr && !handshaking_) {
      ERR_clear_error();
      SSL_shutdown(ssl_);  // close_notify, one try as well.
    }
    shutdown(fd_, SHUT_WR);
    Close();
  }
}

void Connection::Close() {
  if (closed()) return;
  if (ops_ > 0) {
    // The ring's receive and send of this socket end at once, those already submitted and
    // those still queued (the ring finds a queued one's socket by its number at submission):
    // the number stays this socket's, open, until the connection is deleted, so that no
    // socket accepted meanwhile can take it.
    shutdown(fd_, SHUT_RDWR);
    held_fd_ = fd_;
  } else {
    close(fd_);  // Also takes it out of the epoll set.
  }
  fd_ = -1;
  SSL_free(ssl_);
  ssl_ = nullptr;
  io_.gate().ReleaseConnectionSlot();
  for (H2Call* call : calls_) call->OnConnectionGone();
  calls_.clear();
  io_.Retire(this);
}

// nghttp2's callbacks. None of them closes the connection or deletes a call: that happens
// once nghttp2 has returned.

ssize_t Connection::OnSend(nghttp2_session*, const uint8_t* data, size_t length, int,
                           void* user_data) {
  Connection* c = Of(user_data);
  if (c->Unsent() >= kOutputChunk) return NGHTTP2_ERR_WOULDBLOCK;
  c->out_.Append({reinterpret_cast<const char*>(data), length});
  return static_cast<ssize_t>(length);
}

int Connection::OnSendData(nghttp2_session*, nghttp2_frame*, const uint8_t* frame_header,
                           size_t length, nghttp2_data_source* source, void* user_data) {
  return Of(user_data)->AppendData(frame_header, *static_cast<H2Call*>(source->ptr), length)
             ? 0
             : NGHTTP2_ERR_WOULDBLOCK;
}

void Connection::BeginCall(int32_t stream_id) {
  auto* call = new H2Call(*this, stream_id);
  calls_.insert(call);
  if (own_ != nullptr) {
    own_->SetStreamData(stream_id, call);
  } else {
    nghttp2_session_set_stream_user_data(session_, stream_id, call);
  }
  last_stream_id_ = stream_id;
  last_call_ = call;
}

void Connection::EndCall(H2Call* call, uint32_t error_code) {
  active_ = true;  // Its idle time starts now, not when the call began.
  if (call != nullptr) {
    calls_.erase(call);
    last_stream_id_ = 0;  // The call may be deleted from here on.
    last_call_ = nullptr;
    // Every frame of the stream is in the output by now (either session closes a stream only
    // once its last frame is out of its hands).
    if (call->TakeAckAtClose()) AckFramed();
    call->OnStreamClose(error_code);
  }
}

int Connection::OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  Of(user_data)->BeginCall(frame->hd.stream_id);
  return 0;
}

int Connection::OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                         size_t namelen, const uint8_t* value, size_t valuelen, uint8_t,
                         void* user_data) {
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  if (H2Call* call = Of(user_data)->CallOf(frame->hd.stream_id)) {
    call->OnHeader({reinterpret_cast<const char*>(name), namelen},
                   {reinterpret_cast<const char*>(value), valuelen});
  }
  return 0;
}

int Connection::OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  Of(user_data)->greeted_ = true;  // nghttp2 checked the preface: this is its SETTINGS or later.
  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
  H2Call* call = Of(user_data)->CallOf(frame->hd.stream_id);
  if (call == nullptr) return 0;
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
    call->OnHeadersDone();
  }
  if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) call->OnRemoteEnd();
  return 0;
}

int Connection::OnDataChunkRecv(nghttp2_session* session, uint8_t, int32_t stream_id,
                                const uint8_t* data, size_t len, void* user_data) {
  if (H2Call* call = Of(user_data)->CallOf(stream_id)) {
    call->OnData(data, len);
  } else {
    nghttp2_session_consume(session, stream_id, len);
  }
  return 0;
}

int Connection::OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code,
                              void* user_data) {
  Connection* c = Of(user_data);
  c->EndCall(c->CallOf(stream_id), error_code);
  return 0;
}

int Connection::OnFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void*) {
  // Our side of a stream has ended while the client is still sending (an error, or an answer
  // that did not need the whole request): reset it with NO_ERROR so that the client stops.
  if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
      nghttp2_session_get_stream_remote_close(session, frame->hd.stream_id) == 0) {
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
  }
  return 0;
}

// CallConnection: either session.

void Connection::Consume(int32_t stream_id, size_t bytes) {
  if (own_ != nullptr) {
    own_->Consume(stream_id, bytes);
  } else {
    nghttp2_session_consume(session_, stream_id, bytes);
  }
}

void Connection::ConsumeConnection(size_t bytes) {
  if (own_ != nullptr) {
    own_->ConsumeConnection(bytes);
  } else {
    nghttp2_session_consume_connection(session_, bytes);
  }
}

void Connection::SubmitResponse(H2Call& call) {
  const int32_t id = call.stream_id();
  if (own_ != nullptr) {
    own_->SubmitHeaders(id,
                        {{":status", "200"},
                         {"content-type", "application/grpc"},
                         {"grpc-accept-encoding", "identity"}},
                        /*end_stream=*/false);
    own_->ResumeData(id);
    return;
  }
  static constexpr uint8_t kNoCopy = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
  static const char* const kFields[][2] = {{":status", "200"},
                                           {"content-type", "application/grpc"},
                                           {"grpc-accept-encoding", "identity"}};
  nghttp2_nv headers[3];
  for (size_t i = 0; i < 3; ++i) {
    headers[i] = {reinterpret_cast<uint8_t*>(const_cast<char*>(kFields[i][0])),
                  reinterpret_cast<uint8_t*>(const_cast<char*>(kFields[i][1])),
                  strlen(kFields[i][0]), strlen(kFields[i][1]), kNoCopy};
  }
  nghttp2_data_provider provider;
  provider.source.ptr = &call;
  provider.read_callback = ReadResponse;
  nghttp2_submit_response(session_, id, headers, std::size(headers), &provider);
}

void Connection::ResumeData(int32_t stream_id) {
  if (own_ != nullptr) {
    own_->ResumeData(stream_id);
  } else {
    nghttp2_session_resume_data(session_, stream_id);
  }
}

void Connection::SubmitTrailers(int32_t stream_id, std::span<const HeaderField> fields) {
  if (own_ != nullptr) {
    own_->SubmitTrailers(stream_id, fields);
    return;
  }
  const std::vector<nghttp2_nv> nva = Nva(fields);
  nghttp2_submit_trailer(session_, stream_id, nva.data(), nva.size());
}

void Connection::SubmitHeadersOnly(int32_t stream_id, std::span<const HeaderField> fields) {
  if (own_ != nullptr) {
    own_->SubmitHeaders(stream_id, fields, /*end_stream=*/true);
    return;
  }
  const std::vector<nghttp2_nv> nva = Nva(fields);
  nghttp2_submit_response(session_, stream_id, nva.data(), nva.size(), nullptr);
}

// --h2=ringkv: the session's events.

void Connection::SessionEvents::OnBeginStream(int32_t id) {
  c_.headers_as_last_ = false;
  c_.BeginCall(id);
}

void Connection::SessionEvents::OnHeader(int32_t id, std::string_view name,
                                         std::string_view value) {
  if (H2Call* call = c_.CallOf(id)) call->OnHeader(name, value);
}

bool Connection::SessionEvents::OnHeadersAsLast(int32_t id) {
  H2Call* call = c_.CallOf(id);
  if (call == nullptr || !c_.last_headers_kept_) return false;
  call->TakeHeaders(c_.last_headers_);
  c_.headers_as_last_ = true;
  return true;
}

void Connection::SessionEvents::OnHeadersDone(int32_t id, size_t list_bytes_over) {
  const bool as_last = std::exchange(c_.headers_as_last_, false);
  H2Call* call = c_.CallOf(id);
  if (call == nullptr) {
    c_.last_headers_kept_ = false;
    return;
  }
  if (!as_last) {
    const H2Call::RequestHeaders& h = call->headers();
    c_.last_headers_kept_ = list_bytes_over == 0 && !h.sent_token && h.method != nullptr;
    if (c_.last_headers_kept_) c_.last_headers_ = h;
  }
  if (list_bytes_over > 0) call->OnHeaderListOver(list_bytes_over);
  call->OnHeadersDone();
}

void Connection::SessionEvents::OnData(int32_t id, const char* data, size_t length) {
  if (H2Call* call = c_.CallOf(id)) {
    call->OnData(reinterpret_cast<const uint8_t*>(data), length);
  } else {
    c_.own_->Consume(id, length);
  }
}

std::span<char> Connection::SessionEvents::DataRoom(int32_t id, size_t want) {
  H2Call* call = c_.CallOf(id);
  return call != nullptr ? call->DataRoom(want) : std::span<char>();
}

void Connection::SessionEvents::OnDataInPlace(int32_t id, size_t length) {
  if (H2Call* call = c_.CallOf(id)) call->OnDataInPlace(length);
}

void Connection::SessionEvents::OnRemoteEnd(int32_t id) {
  if (H2Call* call = c_.CallOf(id)) call->OnRemoteEnd();
}

void Connection::SessionEvents::OnStreamClose(int32_t, H2Error error, void* call) {
  c_.EndCall(static_cast<H2Call*>(call), static_cast<uint32_t>(error));
}

size_t Connection::SessionEvents::DataReady(int32_t id, size_t max, bool* last) {
  H2Call* call = c_.CallOf(id);
  return call != nullptr ? call->ReadyResponse(max, last) : 0;
}

void Connection::SessionEvents::TakeData(int32_t id, size_t length, SendQueue& out) {
  H2Call* call = c_.CallOf(id);
  if (call == nullptr) return;
  call->TakeResponse(length, out, /*share=*/c_.ssl_ == nullptr);  // OpenSSL copies anyway.
  c_.Framed(length);
  if (call->TakeFramedAck()) c_.AckFramed();
}

}  // namespace ringkv
