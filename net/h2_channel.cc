#include "net/h2_channel.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "net/grpc_wire.h"
#include "net/tls_io.h"

namespace ringkv {

class H2Channel::Call {
 public:
  Call(CallObserver* observer, int64_t timeout_ns) : observer(observer), timeout_ns(timeout_ns) {}

  CallObserver* const observer;
  int32_t stream_id = 0;  // 0 while the call waits for a stream ...
  std::string path;       // ... with its path kept meanwhile.
  int64_t timeout_ns;
  // Request side: framed messages not yet in DATA frames, out[out_taken..].
  std::string out;
  size_t out_taken = 0;
  bool send_closed = false;  // The caller has no more to send ...
  bool end_sent = false;     // ... and END_STREAM went.
  bool blocked = false;      // Listed in blocked_.
  int64_t send_window = 0;
  // Response side.
  int64_t recv_window = kStreamWindow;
  int64_t recv_unacked = 0;
  std::string in;  // A message not all in yet, in[in_read..].
  size_t in_read = 0;
  int http_status = 0;
  std::optional<int> grpc_status;
  std::string grpc_message;
};

absl::StatusOr<std::unique_ptr<H2Channel>> H2Channel::Connect(const std::string& address,
                                                              const H2ChannelOptions& options) {
  const int timeout_ms = options.timeout_ms;
  auto unavailable = [&](std::string_view why) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach ringkv-server at ", address, ": ", std::string(why)));
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return unavailable("expected HOST:PORT");
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), address.c_str() + colon + 1, &hints, &found); rc != 0) {
    return unavailable(gai_strerror(rc));
  }
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int err = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p[2] = {{fd, POLLOUT, 0}, {options.cancel_fd, POLLIN, 0}};
      err = poll(p, 2, timeout_ms) <= 0 ? ETIMEDOUT : (p[1].revents & POLLIN) ? ECANCELED : 0;
      socklen_t len = sizeof err;
      if (err == 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == ECANCELED) {
      close(fd);
      freeaddrinfo(found);
      return absl::CancelledError(absl::StrCat("connecting to ", address, " was given up"));
    }
    if (err != 0) {
      why = std::strerror(err);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return unavailable(why);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  SSL* ssl = nullptr;
  if (options.tls != nullptr) {
    absl::StatusOr<SSL*> session = options.tls->Connect(fd, host, timeout_ms, options.cancel_fd);
    if (!session.ok()) {
      close(fd);
      return unavailable(std::string(session.status().message()));
    }
    ssl = *session;
  }
  return std::unique_ptr<H2Channel>(new H2Channel(fd, ssl, address, options));
}

H2Channel::H2Channel(int fd, SSL* ssl, std::string authority, const H2ChannelOptions& options)
    : fd_(fd),
      ssl_(ssl),
      authority_(std::move(authority)),
      authorization_(options.token.empty() ? "" : "Bearer " + options.token),
      consistency_(options.consistency),
      min_replicas_(options.min_replicas),
      encoder_(kInitialTableBytes),
      decoder_(kInitialTableBytes, 256 * 1024),
      in_(new char[kInputBytes]) {
  out_.append(kClientPreface);
  const std::pair<uint16_t, uint32_t> settings[] = {
      {kSettingEnablePush, 0},
      {kSettingInitialWindowSize, static_cast<uint32_t>(kStreamWindow)},
  };
  AppendFrameHeader(kSettingBytes * std::size(settings), kFrameSettings, 0, 0);
  for (const auto& [key, value] : settings) {
    char entry[kSettingBytes];
    WriteSetting(entry, key, value);
    out_.append(entry, sizeof entry);
  }
  AppendWindowUpdate(0, static_cast<uint32_t>(kConnectionWindow - 65535));
  Flush();
}

H2Channel::~H2Channel() { Fail(absl::CancelledError("the channel was closed")); }

ssize_t H2Channel::Receive(char* buffer, size_t length) {
  if (ssl_ == nullptr) return recv(fd_, buffer, length, 0);
  return ToSocketResult(TlsRead(ssl_, buffer, length));
}

ssize_t H2Channel::Transmit(const char* data, size_t length) {
  if (ssl_ == nullptr) return send(fd_, data, length, MSG_NOSIGNAL);
  return ToSocketResult(TlsWrite(ssl_, data, length));
}

H2Channel::Call* H2Channel::StartCall(std::string_view path, CallObserver* observer,
                                      int64_t timeout_ns) {
  if (!usable()) return nullptr;
  auto* call = new Call(observer, timeout_ns);
  if (greeted_ && calls_.size() < peer_max_streams_ && waiting_.empty()) {
    Open(call, path);
  } else {
    call->path = std::string(path);
    waiting_.push_back(call);
  }
  return call;
}

void H2Channel::Open(Call* call, std::string_view path) {
  call->stream_id = next_id_;
  next_id_ += 2;
  if (next_id_ < 0 || next_id_ > kMaxWindow - 2) ids_spent_ = true;
  call->send_window = peer_stream_window_;
  calls_.emplace(call->stream_id, call);
  // The optional headers go last, each left out if empty.
  const bool plain = call->timeout_ns <= 0;
  const std::string* block = &memo_block_;
  if (!plain || path != memo_path_ || memo_changes_ != encoder_.table().changes() ||
      encoder_.update_pending()) {
    const uint64_t changes = encoder_.table().changes();
    block_out_.clear();
    encoder_.BeginBlock(&block_out_);
    encoder_.Encode(":method", "POST", HpackEncoder::kIndex, &block_out_);
    encoder_.Encode(":scheme", ssl_ != nullptr ? "https" : "http", HpackEncoder::kIndex,
                    &block_out_);
    encoder_.Encode(":path", path, HpackEncoder::kIndex, &block_out_);
    encoder_.Encode(":authority", authority_, HpackEncoder::kIndex, &block_out_);
    encoder_.Encode("content-type", "application/grpc", HpackEncoder::kIndex, &block_out_);
    encoder_.Encode("te", "trailers", HpackEncoder::kIndex, &block_out_);
    if (!plain) {
      encoder_.Encode("grpc-timeout", FormatGrpcTimeout(call->timeout_ns), HpackEncoder::kNoIndex,
                      &block_out_);
    }
    if (!authorization_.empty()) {
      encoder_.Encode("authorization", authorization_, HpackEncoder::kNever, &block_out_);
    }
    if (!consistency_.empty()) {
      encoder_.Encode("ringkv-consistency", consistency_, HpackEncoder::kIndex, &block_out_);
    }
    if (!min_replicas_.empty()) {
      encoder_.Encode("ringkv-min-replicas", min_replicas_, HpackEncoder::kIndex, &block_out_);
    }
    block = &block_out_;
    if (plain && encoder_.table().changes() == changes) {
      memo_path_ = std::string(path);
      memo_block_ = block_out_;
      memo_changes_ = changes;
    }
  }
  size_t pos = 0;
  uint8_t type = kFrameHeaders;
  do {
    const size_t n = std::min(block->size() - pos, peer_max_frame_);
    AppendFrameHeader(n, type, pos + n == block->size() ? kFlagEndHeaders : 0, call->stream_id);
    out_.append(block->data() + pos, n);
    pos += n;
    type = kFrameContinuation;
  } while (pos < block->size());
  WriteData(call);
}

void H2Channel::OpenWaiting() {
  while (!waiting_.empty() && greeted_ && usable() && calls_.size() < peer_max_streams_) {
    Call* call = waiting_.front();
    waiting_.pop_front();
    const std::string path = std::move(call->path);
    Open(call, path);
  }
  if (ids_spent_ && fd_ >= 0 && !waiting_.empty()) {
    // What waits would wait forever.
    std::vector<Call*> stranded(waiting_.begin(), waiting_.end());
    for (Call* call : stranded) {
      FinishCall(call, absl::UnavailableError("the connection used up its stream ids"));
    }
  }
}

void H2Channel::Send(Call* call, const google::protobuf::MessageLite& message, bool end) {
  if (call->send_closed) return;
  const size_t size = message.ByteSizeLong();
  const size_t framed = kMessagePrefixBytes + size;
  call->send_closed = end;
  // Writes the message, prefixed, at `to` (`framed` bytes).
  auto write = [&](char* to) {
    WriteMessagePrefix(to, false, static_cast<uint32_t>(size));
    message.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(to + kMessagePrefixBytes));
  };
  // The usual case: nothing of the call's is waiting, and the message fits the windows and a
  // frame. It is serialized straight into its DATA frame, in room not zero-filled first (for an
  // 80 KB PUT, a memset as dear as the serializing).
  if (call->stream_id != 0 && call->out_taken == call->out.size() && OutputHasRoom() &&
      static_cast<int64_t>(framed) <= std::min(send_window_, call->send_window) &&
      framed <= peer_max_frame_) {
    AppendFrameHeader(framed, kFrameData, end ? kFlagEndStream : 0, call->stream_id);
    write(out_.Room(framed));
    out_.Commit(framed);
    send_window_ -= static_cast<int64_t>(framed);
    call->send_window -= static_cast<int64_t>(framed);
    call->end_sent = end;
    return;
  }
  if (call->out_taken == call->out.size()) {
    call->out.clear();
    call->out_taken = 0;
  }
  const size_t at = call->out.size();
  call->out.resize(at + framed);
  write(call->out.data() + at);
  if (call->stream_id != 0 && !call->blocked) WriteData(call);
}

void H2Channel::CloseSend(Call* call) {
  if (call->send_closed) return;
  call->send_closed = true;
  if (call->stream_id != 0 && !call->blocked) WriteData(call);
}

void H2Channel::WriteData(Call* call) {
  while (!call->end_sent) {
    const size_t left = call->out.size() - call->out_taken;
    if (left == 0 && !call->send_closed) break;
    const int64_t window = std::min(send_window_, call->send_window);
    const size_t n = std::min<size_t>(
        {left, peer_max_frame_, static_cast<size_t>(std::max<int64_t>(window, 0))});
    if ((n == 0 && left > 0) || !OutputHasRoom()) {
      if (!call->blocked) {
        call->blocked = true;
        blocked_.push_back(call);
      }
      return;
    }
    const bool last = n == left && call->send_closed;
    AppendFrameHeader(n, kFrameData, last ? kFlagEndStream : 0, call->stream_id);
    out_.append(call->out.data() + call->out_taken, n);
    call->out_taken += n;
    send_window_ -= static_cast<int64_t>(n);
    call->send_window -= static_cast<int64_t>(n);
    call->end_sent = last;
  }
  if (call->out_taken == call->out.size()) {
    call->out.clear();
    call->out_taken = 0;
  }
}

void H2Channel::ResumeBlocked() {
  if (blocked_.empty()) return;
  std::vector<Call*> blocked;
  blocked.swap(blocked_);
  for (Call* call : blocked) {
    call->blocked = false;
    WriteData(call);
  }
}

void H2Channel::Cancel(Call* call) {
  if (call->stream_id != 0) AppendRst(call->stream_id, H2Error::kCancel);
  FinishCall(call, absl::CancelledError("call cancelled"));
}

void H2Channel::OnReadable() {
  if (fd_ < 0) return;
  for (;;) {
    const size_t room = kInputBytes - in_len_;
    const ssize_t n = Receive(in_.get() + in_len_, room);
    if (n > 0) {
      in_len_ += static_cast<size_t>(n);
      size_t at = 0;
      while (in_len_ - at >= kFrameHeaderBytes) {
        const FrameHeader frame = ReadFrameHeader(in_.get() + at);
        if (frame.length > kDefaultMaxFrame) {
          Broken(absl::StrCat("a frame of ", frame.length,
                              " bytes, over SETTINGS_MAX_FRAME_SIZE (16384)"));
          return;
        }
        if (in_len_ - at - kFrameHeaderBytes < frame.length) break;
        if (!OnFrame(frame, in_.get() + at + kFrameHeaderBytes)) return;
        at += kFrameHeaderBytes + frame.length;
      }
      in_len_ -= at;
      if (in_len_ > 0 && at > 0) std::memmove(in_.get(), in_.get() + at, in_len_);
      // A short read emptied the socket; a TLS read ends at a record's end, so TLS reads on
      // until OpenSSL says there is nothing more.
      if (ssl_ == nullptr && static_cast<size_t>(n) < room) break;
      continue;
    }
    if (n == 0) return Fail(absl::UnavailableError("the server closed the connection"));
    if (errno == EAGAIN || errno == EINTR) break;
    return Fail(absl::UnavailableError(absl::StrCat("connection lost: ", std::strerror(errno))));
  }
  Flush();  // Acks and window updates.
}

void H2Channel::Flush() {
  for (int round = 0; round < 8 && fd_ >= 0; ++round) {
    if (out_sent_ == out_.size()) {
      out_.clear();
      out_sent_ = 0;
      ResumeBlocked();
      if (out_.empty()) return;
    }
    const ssize_t n = Transmit(out_.data() + out_sent_, out_.size() - out_sent_);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      return Fail(absl::UnavailableError(absl::StrCat("connection lost: ", std::strerror(errno))));
    }
    out_sent_ += static_cast<size_t>(n);
  }
  if (out_sent_ == out_.size()) {
    out_.clear();
    out_sent_ = 0;
    ResumeBlocked();  // Then WantsWrite() says whether it wrote.
  }
}

void H2Channel::Fail(const absl::Status& status) {
  if (fd_ >= 0) {
    SSL_free(ssl_);
    ssl_ = nullptr;
    close(fd_);
    fd_ = -1;
  }
  while (!calls_.empty()) FinishCall(calls_.begin()->second, status);
  while (!waiting_.empty()) FinishCall(waiting_.front(), status);
}

bool H2Channel::Broken(std::string_view what) {
  Fail(absl::UnavailableError(
      absl::StrCat("the server's HTTP/2 made no sense: ", std::string(what))));
  return false;
}

void H2Channel::FinishCall(Call* call, const absl::Status& status) {
  if (call->stream_id != 0) {
    calls_.erase(call->stream_id);
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), call));
  }
  if (call->blocked) blocked_.erase(std::find(blocked_.begin(), blocked_.end(), call));
  if (last_found_ == call) last_found_ = nullptr;
  if (delivering_ == call) delivering_ = nullptr;
  CallObserver* observer = call->observer;
  delete call;
  OpenWaiting();
  observer->OnFinish(status);
}

absl::Status H2Channel::EndStatus(const Call& call, H2Error reset) const {
  if (call.grpc_status.has_value()) {
    return absl::Status(static_cast<absl::StatusCode>(*call.grpc_status), call.grpc_message);
  }
  if (reset == H2Error::kCancel) return absl::CancelledError("call cancelled");
  if (reset != H2Error::kNoError) {
    return absl::UnavailableError(
        absl::StrCat("stream reset, HTTP/2 error ", static_cast<uint32_t>(reset)));
  }
  return absl::InternalError(
      absl::StrCat("no grpc-status in the response (HTTP status ", call.http_status, ")"));
}

H2Channel::Call* H2Channel::Find(int32_t id) {
  if (last_found_ != nullptr && last_found_->stream_id == id) return last_found_;
  auto it = calls_.find(id);
  if (it == calls_.end()) return nullptr;
  last_found_ = it->second;
  return last_found_;
}

void H2Channel::AppendFrameHeader(size_t length, uint8_t type, uint8_t flags, int32_t id) {
  char h[kFrameHeaderBytes];
  WriteFrameHeader(h, length, type, flags, id);
  out_.append(h, kFrameHeaderBytes);
}

void H2Channel::AppendWindowUpdate(int32_t id, uint32_t increment) {
  AppendFrameHeader(4, kFrameWindowUpdate, 0, id);
  char p[4];
  Put32(p, increment);
  out_.append(p, 4);
}

void H2Channel::AppendRst(int32_t id, H2Error error) {
  AppendFrameHeader(4, kFrameRstStream, 0, id);
  char p[4];
  Put32(p, static_cast<uint32_t>(error));
  out_.append(p, 4);
}

bool H2Channel::OnFrame(const FrameHeader& frame, const char* p) {
  if (!greeted_ && frame.type != kFrameSettings) {
    return Broken("its first frame is not SETTINGS");
  }
  if (block_id_ != 0 && frame.type != kFrameContinuation) {
    return Broken("a frame inside a header block");
  }
  switch (frame.type) {
    case kFrameData:
      return OnData(frame, p);
    case kFrameHeaders:
      return OnHeaders(frame, p);
    case kFrameContinuation: {
      if (block_id_ == 0 || frame.id != block_id_) return Broken("a CONTINUATION out of place");
      block_.append(p, frame.length);
      if (block_.size() > kMaxHeaderBlock) return Broken("a header block over 1 MiB");
      if ((frame.flags & kFlagEndHeaders) == 0) return true;
      const int32_t id = block_id_;
      block_id_ = 0;
      std::string block = std::move(block_);
      block_.clear();
      return OnHeaderBlock(id, block_flags_, block);
    }
    case kFrameSettings:
      return OnSettings(frame, p);
    case kFrameWindowUpdate:
      return OnWindowUpdate(frame, p);
    case kFrameRstStream: {
      if (frame.length != 4 || frame.id == 0) return Broken("a malformed RST_STREAM");
      if (Call* call = Find(frame.id)) {
        FinishCall(call, EndStatus(*call, static_cast<H2Error>(Read32(p))));
      }
      return fd_ >= 0;
    }
    case kFramePing:
      if (frame.length != 8 || frame.id != 0) return Broken("a malformed PING");
      if ((frame.flags & kFlagAck) == 0) {
        AppendFrameHeader(8, kFramePing, kFlagAck, 0);
        out_.append(p, 8);
      }
      return true;
    case kFrameGoaway:
      if (frame.length < 8 || frame.id != 0) return Broken("a malformed GOAWAY");
      return OnGoaway(p, frame.length);
    case kFramePushPromise:
      return Broken("PUSH_PROMISE, though push is off");
    default:
      return true;  // PRIORITY and unknown frames are ignored.
  }
}

bool H2Channel::OnData(const FrameHeader& frame, const char* p) {
  if (frame.id == 0) return Broken("DATA on stream 0");
  const auto length = static_cast<int64_t>(frame.length);
  if ((recv_window_ -= length) < 0) return Broken("DATA past the connection's window");
  // What the connection's window lost comes back at once: the observers take what they are
  // given.
  if ((recv_unacked_ += length) >= kConnectionWindow / 2) {
    AppendWindowUpdate(0, static_cast<uint32_t>(recv_unacked_));
    recv_window_ += recv_unacked_;
    recv_unacked_ = 0;
  }
  size_t n = frame.length;
  if (frame.flags & kFlagPadded) {
    if (n == 0 || static_cast<uint8_t>(p[0]) >= n) return Broken("DATA padded past its end");
    n -= 1 + static_cast<uint8_t>(p[0]);
    ++p;
  }
  Call* call = Find(frame.id);
  if (call == nullptr) return true;  // A call finished here (cancelled, say): dropped.
  if ((call->recv_window -= length) < 0) return Broken("DATA past a stream's window");
  if (n > 0 && !Deliver(call, p, n)) return fd_ >= 0;
  if (frame.flags & kFlagEndStream) {
    if (!call->end_sent) AppendRst(call->stream_id, H2Error::kNoError);
    FinishCall(call, EndStatus(*call, H2Error::kNoError));
    return fd_ >= 0;
  }
  if ((call->recv_unacked += length) >= kStreamWindow / 2) {
    AppendWindowUpdate(call->stream_id, static_cast<uint32_t>(call->recv_unacked));
    call->recv_window += call->recv_unacked;
    call->recv_unacked = 0;
  }
  return true;
}

bool H2Channel::Deliver(Call* call, const char* p, size_t n) {
  delivering_ = call;
  if (call->in_read == call->in.size()) {
    call->in.clear();
    call->in_read = 0;
  }
  if (call->in.empty()) {
    // Whole messages straight from the frame; only a partial one is kept.
    while (n >= kMessagePrefixBytes) {
      const MessagePrefix prefix = ReadMessagePrefix(p);
      if (n - kMessagePrefixBytes < prefix.length) break;
      call->observer->OnMessage(std::string_view(p + kMessagePrefixBytes, prefix.length));
      if (delivering_ != call) return false;
      p += kMessagePrefixBytes + prefix.length;
      n -= kMessagePrefixBytes + prefix.length;
    }
    call->in.append(p, n);
    delivering_ = nullptr;
    return true;
  }
  call->in.append(p, n);
  while (call->in.size() - call->in_read >= kMessagePrefixBytes) {
    const MessagePrefix prefix = ReadMessagePrefix(call->in.data() + call->in_read);
    if (call->in.size() - call->in_read - kMessagePrefixBytes < prefix.length) break;
    call->observer->OnMessage(
        std::string_view(call->in.data() + call->in_read + kMessagePrefixBytes, prefix.length));
    if (delivering_ != call) return false;
    call->in_read += kMessagePrefixBytes + prefix.length;
  }
  // A long stream whose frames end mid-message never reads `in` to its end: drop what was read
  // once it is most of the buffer, so that the buffer holds about one message, not the stream.
  if (call->in_read > 0 && call->in_read >= call->in.size() / 2) {
    call->in.erase(0, call->in_read);
    call->in_read = 0;
  }
  delivering_ = nullptr;
  return true;
}

bool H2Channel::OnHeaders(const FrameHeader& frame, const char* p) {
  if (frame.id == 0) return Broken("HEADERS on stream 0");
  size_t n = frame.length;
  size_t pad = 0;
  if (frame.flags & kFlagPadded) {
    if (n == 0) return Broken("HEADERS padded past its end");
    pad = static_cast<uint8_t>(p[0]);
    ++p;
    --n;
  }
  if (frame.flags & kFlagPriority) {
    if (n < 5) return Broken("HEADERS too short for its priority");
    p += 5;
    n -= 5;
  }
  if (pad > n) return Broken("HEADERS padded past its end");
  n -= pad;
  if (frame.flags & kFlagEndHeaders) return OnHeaderBlock(frame.id, frame.flags, {p, n});
  block_.assign(p, n);
  block_id_ = frame.id;
  block_flags_ = frame.flags;
  return true;
}

bool H2Channel::OnHeaderBlock(int32_t id, uint8_t flags, std::string_view block) {
  Call* call = Find(id);
  const absl::Status decoded = decoder_.Decode(block, [&](std::string_view n, std::string_view v) {
    if (call == nullptr) return;  // Decoded all the same: the table must stay in step.
    if (n == ":status") {
      int status = 0;
      if (absl::SimpleAtoi(absl::string_view(v.data(), v.size()), &status)) {
        call->http_status = status;
      }
    } else if (n == "grpc-status") {
      int code = 0;
      if (absl::SimpleAtoi(absl::string_view(v.data(), v.size()), &code)) call->grpc_status = code;
    } else if (n == "grpc-message") {
      call->grpc_message = PercentDecode(v);
    }
  });
  if (!decoded.ok() && !absl::IsResourceExhausted(decoded)) {
    return Broken(absl::StrCat("its header block: ", decoded.message()));
  }
  if (call == nullptr) return true;
  if (!decoded.ok()) {
    AppendRst(id, H2Error::kCancel);
    FinishCall(call, absl::ResourceExhaustedError(absl::StrCat(
                         "the response's headers are over 256 KiB: ", decoder_.last_list_bytes(),
                         " bytes")));
    return fd_ >= 0;
  }
  if (flags & kFlagEndStream) {
    if (!call->end_sent) AppendRst(id, H2Error::kNoError);
    FinishCall(call, EndStatus(*call, H2Error::kNoError));
    return fd_ >= 0;
  }
  return true;
}

bool H2Channel::OnSettings(const FrameHeader& frame, const char* p) {
  if (frame.id != 0) return Broken("SETTINGS on a stream");
  if (frame.flags & kFlagAck) return true;
  if (frame.length % kSettingBytes != 0) return Broken("SETTINGS not a whole number of entries");
  for (size_t i = 0; i < frame.length; i += kSettingBytes) {
    const auto [key, value] = ReadSetting(p + i);
    switch (key) {
      case kSettingHeaderTableSize:
        encoder_.SetPeerMaxTableBytes(value);
        break;
      case kSettingMaxConcurrentStreams:
        peer_max_streams_ = value;
        break;
      case kSettingInitialWindowSize: {
        if (value > kMaxWindow) return Broken("SETTINGS_INITIAL_WINDOW_SIZE over 2^31 - 1");
        const int64_t delta = int64_t{value} - peer_stream_window_;
        for (auto& [id, call] : calls_) {
          if ((call->send_window += delta) > kMaxWindow)
            return Broken("a stream's window over 2^31 - 1");
        }
        peer_stream_window_ = value;
        break;
      }
      case kSettingMaxFrameSize:
        if (value < 16384 || value > 16777215) {
          return Broken("SETTINGS_MAX_FRAME_SIZE out of its range");
        }
        peer_max_frame_ = value;
        break;
      default:
        break;
    }
  }
  greeted_ = true;
  AppendFrameHeader(0, kFrameSettings, kFlagAck, 0);
  ResumeBlocked();
  OpenWaiting();
  return true;
}

bool H2Channel::OnWindowUpdate(const FrameHeader& frame, const char* p) {
  if (frame.length != 4) return Broken("WINDOW_UPDATE of other than 4 bytes");
  const uint32_t increment = Read32(p) & 0x7fffffff;
  if (frame.id == 0) {
    if (increment == 0) return Broken("a WINDOW_UPDATE of 0");
    if ((send_window_ += increment) > kMaxWindow)
      return Broken("the connection's window over 2^31 - 1");
  } else if (Call* call = Find(frame.id)) {
    if (increment == 0 || (call->send_window += increment) > kMaxWindow) {
      AppendRst(frame.id, increment == 0 ? H2Error::kProtocol : H2Error::kFlowControl);
      FinishCall(call, absl::UnavailableError("the server's WINDOW_UPDATE for the call was wrong"));
      return fd_ >= 0;
    }
  }
  ResumeBlocked();
  return true;
}

bool H2Channel::OnGoaway(const char* p, size_t n) {
  goaway_ = true;
  const auto last = static_cast<int32_t>(Read32(p) & 0x7fffffff);
  const auto error = static_cast<H2Error>(Read32(p + 4));
  const std::string why =
      absl::StrCat("the server went away (GOAWAY, HTTP/2 error ", static_cast<uint32_t>(error),
                   n > 8 ? ": " : "", std::string(p + 8, n - 8), ") before it took the call");
  std::vector<int32_t> refused;
  for (const auto& [id, call] : calls_) {
    if (id > last) refused.push_back(id);
  }
  std::sort(refused.begin(), refused.end());
  // An observer may cancel other calls as it hears of its own: each is looked up again.
  for (const int32_t id : refused) {
    if (Call* call = Find(id)) FinishCall(call, absl::UnavailableError(why));
    if (fd_ < 0) return false;
  }
  while (!waiting_.empty()) FinishCall(waiting_.front(), absl::UnavailableError(why));
  return fd_ >= 0;
}

}  // namespace ringkv
