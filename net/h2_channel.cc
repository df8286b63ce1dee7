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
  explicit Call(CallObserver* observer) : observer(observer) {}

  CallObserver* const observer;
  int32_t stream_id = 0;
  // Request side: framed messages; out[out_taken..] not yet handed to nghttp2.
  std::string out;
  size_t out_taken = 0;
  bool send_closed = false;
  bool deferred = false;  // The data provider said DEFERRED: resume it on new data.
  // Response side.
  std::string in;
  size_t in_read = 0;
  int http_status = 0;
  std::optional<int> grpc_status;
  std::string grpc_message;
};

namespace {

constexpr uint8_t kNoCopy = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;

nghttp2_nv Header(std::string_view name, std::string_view value, uint8_t flags = kNoCopy) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          flags};
}

}  // namespace

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
      min_replicas_(options.min_replicas) {
  nghttp2_session_client_new(&session_, Callbacks(), this);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, 16 << 20);
  Flush();
}

H2Channel::~H2Channel() {
  Fail(absl::CancelledError("the channel was closed"));
  nghttp2_session_del(session_);
}

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
  auto* call = new Call(observer);
  const std::string timeout = timeout_ns > 0 ? FormatGrpcTimeout(timeout_ns) : "";
  // The optional headers go last, each left out if empty.
  nghttp2_nv headers[10] = {
      Header(":method", "POST"),
      Header(":scheme", ssl_ != nullptr ? "https" : "http"),
      Header(":path", path, NGHTTP2_NV_FLAG_NO_COPY_NAME),
      Header(":authority", authority_),
      Header("content-type", "application/grpc"),
      Header("te", "trailers"),
  };
  size_t count = 6;
  if (!timeout.empty()) {
    headers[count++] = Header("grpc-timeout", timeout, NGHTTP2_NV_FLAG_NO_COPY_NAME);
  }
  if (!authorization_.empty()) headers[count++] = Header("authorization", authorization_);
  if (!consistency_.empty()) headers[count++] = Header("ringkv-consistency", consistency_);
  if (!min_replicas_.empty()) headers[count++] = Header("ringkv-min-replicas", min_replicas_);
  nghttp2_data_provider provider;
  provider.source.ptr = call;
  provider.read_callback = ReadRequest;
  call->stream_id = nghttp2_submit_request(session_, nullptr, headers, count, &provider, call);
  if (call->stream_id < 0) {
    delete call;
    return nullptr;
  }
  calls_.insert(call);
  return call;
}

void H2Channel::Send(Call* call, const google::protobuf::MessageLite& message, bool end) {
  if (call->out_taken == call->out.size()) {
    call->out.clear();
    call->out_taken = 0;
  }
  const size_t size = message.ByteSizeLong();
  const size_t at = call->out.size();
  call->out.resize(at + kMessagePrefixBytes + size);
  WriteMessagePrefix(call->out.data() + at, false, static_cast<uint32_t>(size));
  message.SerializeWithCachedSizesToArray(
      reinterpret_cast<uint8_t*>(call->out.data() + at + kMessagePrefixBytes));
  if (end) call->send_closed = true;
  if (call->deferred) {
    call->deferred = false;
    nghttp2_session_resume_data(session_, call->stream_id);
  }
}

void H2Channel::CloseSend(Call* call) {
  call->send_closed = true;
  if (call->deferred) {
    call->deferred = false;
    nghttp2_session_resume_data(session_, call->stream_id);
  }
}

void H2Channel::Cancel(Call* call) {
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, call->stream_id, NGHTTP2_CANCEL);
}

void H2Channel::OnReadable() {
  if (fd_ < 0) return;
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t n = Receive(buffer, sizeof buffer);
    if (n > 0) {
      if (nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(buffer),
                                   static_cast<size_t>(n)) < 0) {
        return Fail(absl::UnavailableError("the server's HTTP/2 made no sense"));
      }
      // A short read emptied the socket; a TLS read ends at a record's end, so TLS reads on
      // until OpenSSL says there is nothing more.
      if (ssl_ == nullptr && static_cast<size_t>(n) < sizeof buffer) break;
      continue;
    }
    if (n == 0) return Fail(absl::UnavailableError("the server closed the connection"));
    if (errno == EAGAIN || errno == EINTR) break;
    return Fail(absl::UnavailableError(absl::StrCat("connection lost: ", std::strerror(errno))));
  }
  Flush();  // Acks and window updates.
}

void H2Channel::Flush() {
  if (fd_ < 0) return;
  for (int round = 0; round < 8; ++round) {
    if (out_sent_ == out_.size() && nghttp2_session_want_write(session_)) {
      if (nghttp2_session_send(session_) != 0) {
        return Fail(absl::UnavailableError("HTTP/2 session failed"));
      }
    }
    if (out_sent_ == out_.size()) break;
    const ssize_t n = Transmit(out_.data() + out_sent_, out_.size() - out_sent_);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      return Fail(absl::UnavailableError(absl::StrCat("connection lost: ", std::strerror(errno))));
    }
    out_sent_ += static_cast<size_t>(n);
    if (out_sent_ == out_.size()) {
      out_.clear();
      out_sent_ = 0;
    }
  }
}

void H2Channel::Fail(const absl::Status& status) {
  if (fd_ >= 0) {
    SSL_free(ssl_);
    ssl_ = nullptr;
    close(fd_);
    fd_ = -1;
  }
  while (!calls_.empty()) FinishCall(*calls_.begin(), status);
}

void H2Channel::FinishCall(Call* call, const absl::Status& status) {
  calls_.erase(call);
  if (fd_ >= 0) nghttp2_session_set_stream_user_data(session_, call->stream_id, nullptr);
  CallObserver* observer = call->observer;
  delete call;
  observer->OnFinish(status);
}

// nghttp2's callbacks; user_data is the channel.

ssize_t H2Channel::OnSend(nghttp2_session*, const uint8_t* data, size_t length, int,
                          void* user_data) {
  auto* channel = static_cast<H2Channel*>(user_data);
  if (channel->out_.size() - channel->out_sent_ >= (size_t{1} << 20)) {
    return NGHTTP2_ERR_WOULDBLOCK;
  }
  channel->out_.append(reinterpret_cast<const char*>(data), length);
  return static_cast<ssize_t>(length);
}

ssize_t H2Channel::ReadRequest(nghttp2_session*, int32_t, uint8_t* buf, size_t length,
                               uint32_t* data_flags, nghttp2_data_source* source, void*) {
  auto* call = static_cast<Call*>(source->ptr);
  const size_t unsent = call->out.size() - call->out_taken;
  if (unsent == 0 && !call->send_closed) {
    call->deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  const size_t n = std::min(length, unsent);
  std::memcpy(buf, call->out.data() + call->out_taken, n);
  call->out_taken += n;
  if (n == unsent && call->send_closed) *data_flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

int H2Channel::OnHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                        size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void*) {
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  auto* call =
      static_cast<Call*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
  if (call == nullptr) return 0;
  const std::string_view n(reinterpret_cast<const char*>(name), namelen);
  const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
  if (n == ":status") {
    int status = 0;
    if (absl::SimpleAtoi(absl::string_view(v.data(), v.size()), &status))
      call->http_status = status;
  } else if (n == "grpc-status") {
    int code = 0;
    if (absl::SimpleAtoi(absl::string_view(v.data(), v.size()), &code)) call->grpc_status = code;
  } else if (n == "grpc-message") {
    call->grpc_message = PercentDecode(v);
  }
  return 0;
}

int H2Channel::OnDataChunk(nghttp2_session* session, uint8_t, int32_t stream_id,
                           const uint8_t* data, size_t len, void*) {
  auto* call = static_cast<Call*>(nghttp2_session_get_stream_user_data(session, stream_id));
  if (call == nullptr) return 0;
  if (call->in_read == call->in.size()) {
    call->in.clear();
    call->in_read = 0;
  }
  call->in.append(reinterpret_cast<const char*>(data), len);
  while (call->in.size() - call->in_read >= kMessagePrefixBytes) {
    const MessagePrefix prefix = ReadMessagePrefix(call->in.data() + call->in_read);
    if (call->in.size() - call->in_read < kMessagePrefixBytes + prefix.length) break;
    call->observer->OnMessage(
        std::string_view(call->in.data() + call->in_read + kMessagePrefixBytes, prefix.length));
    call->in_read += kMessagePrefixBytes + prefix.length;
  }
  // A long stream whose chunks end mid-message never reads `in` to its end: drop what was read
  // once it is most of the buffer, so that the buffer holds about one message, not the stream.
  if (call->in_read > 0 && call->in_read >= call->in.size() / 2) {
    call->in.erase(0, call->in_read);
    call->in_read = 0;
  }
  return 0;
}

int H2Channel::OnStreamClose(nghttp2_session* session, int32_t stream_id, uint32_t error_code,
                             void* user_data) {
  auto* call = static_cast<Call*>(nghttp2_session_get_stream_user_data(session, stream_id));
  if (call == nullptr) return 0;
  absl::Status status;
  if (call->grpc_status.has_value()) {
    status = absl::Status(static_cast<absl::StatusCode>(*call->grpc_status), call->grpc_message);
  } else if (error_code == NGHTTP2_CANCEL) {
    status = absl::CancelledError("call cancelled");
  } else if (error_code != NGHTTP2_NO_ERROR) {
    status = absl::UnavailableError(absl::StrCat("stream reset, HTTP/2 error ", error_code));
  } else {
    status = absl::InternalError(
        absl::StrCat("no grpc-status in the response (HTTP status ", call->http_status, ")"));
  }
  static_cast<H2Channel*>(user_data)->FinishCall(call, status);
  return 0;
}

int H2Channel::OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  if (frame->hd.type == NGHTTP2_GOAWAY) static_cast<H2Channel*>(user_data)->goaway_ = true;
  return 0;
}

const nghttp2_session_callbacks* H2Channel::Callbacks() {
  static nghttp2_session_callbacks* const kCallbacks = [] {
    nghttp2_session_callbacks* c;
    nghttp2_session_callbacks_new(&c);
    nghttp2_session_callbacks_set_send_callback(c, OnSend);
    nghttp2_session_callbacks_set_on_header_callback(c, OnHeader);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(c, OnDataChunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(c, OnStreamClose);
    nghttp2_session_callbacks_set_on_frame_recv_callback(c, OnFrameRecv);
    return c;
  }();
  return kCallbacks;
}

}  // namespace ringkv
