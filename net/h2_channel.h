// H2Channel: one gRPC client connection on libnghttp2, for callers that drive many calls from
// one thread and count every microsecond of client CPU: ringkv-loadgen's default client, and a
// replica's flows from its primary (server/repl/replica_client.h). It is
// the client-side mirror of the server's h2 transport (server/h2/): HTTP/2 with prior knowledge
// (h2c) or TLS with ALPN h2 (net/client_tls.h), gRPC's message framing (net/grpc_wire.h),
// unary and bidirectional calls, grpc-timeout, a bearer token. It does no name resolution beyond
// getaddrinfo, no retries and no compression.
//
// The caller owns the event loop: it polls fd() for readability (and for writability while
// WantsWrite()), calls OnReadable()/Flush(), and flushes after starting calls, so that the
// requests of one turn go out in one send. Results come back through the CallObserver of each
// call, from inside OnReadable().
//
// Threads: one thread at a time per channel (a replica's worker sends on its flow's channel
// under the flow's mutex: server/repl/sink.h); nothing is shared between channels.
//
//   auto channel = H2Channel::Connect("127.0.0.1:50051").value();
//   H2Channel::Call* call = channel->StartCall("/ringkv.v1.KV/Get", &observer);
//   channel->Send(call, request, /*end=*/true);
//   channel->Flush();   // then poll channel->fd() and call OnReadable() until observer hears
#ifndef RINGKV_NET_H2_CHANNEL_H_
#define RINGKV_NET_H2_CHANNEL_H_

#include <google/protobuf/message_lite.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "net/client_tls.h"

namespace ringkv {

class H2Channel;

// What a call tells its caller. Called from inside H2Channel::OnReadable (or Flush).
class CallObserver {
 public:
  virtual ~CallObserver() = default;
  // One response message; its bytes are valid during the call only.
  virtual void OnMessage(std::string_view bytes) = 0;
  // The call has ended: the server's grpc-status and grpc-message, or the reason it could not
  // complete (UNAVAILABLE for a lost connection). The call is gone after this returns.
  virtual void OnFinish(const absl::Status& status) = 0;
};

struct H2ChannelOptions {
  int timeout_ms = 5000;  // To connect (and handshake).
  // Readable (an eventfd, say) when the caller gives up: Connect stops waiting for the
  // connection or the handshake and fails (CANCELLED). -1: none.
  int cancel_fd = -1;
  const ClientTls* tls = nullptr;  // TLS; null: h2c. Must outlive the channel's Connect only.
  std::string token;               // Sent as `authorization: Bearer TOKEN`; empty: none.
  // Sent with every call, each left out if empty: ringkv-consistency (linearizable or
  // serializable) and ringkv-min-replicas (a number).
  std::string consistency;
  std::string min_replicas;
};

class H2Channel {
 public:
  class Call;

  // Connects (blocking, up to the options' timeout), with TLS if asked, and sends the
  // connection preface; the socket is non-blocking afterwards. UNAVAILABLE, naming the address,
  // if it cannot.
  static absl::StatusOr<std::unique_ptr<H2Channel>> Connect(const std::string& address,
                                                            const H2ChannelOptions& options = {});
  ~H2Channel();
  H2Channel(const H2Channel&) = delete;
  H2Channel& operator=(const H2Channel&) = delete;

  // Starts a call to `path` ("/ringkv.v1.KV/Get"); `timeout_ns` > 0 sends it as grpc-timeout.
  // Null if the channel is broken.
  Call* StartCall(std::string_view path, CallObserver* observer, int64_t timeout_ns = 0);
  // Sends one request message on `call`; `end` closes the call's sending side after it.
  void Send(Call* call, const google::protobuf::MessageLite& message, bool end);
  // Closes the call's sending side (a bidirectional call's WritesDone).
  void CloseSend(Call* call);
  // Resets the call (RST_STREAM CANCEL); its observer hears CANCELLED.
  void Cancel(Call* call);

  int fd() const { return fd_; }
  // Reads what the socket has and feeds it to nghttp2; observers hear of what completed.
  void OnReadable();
  // Sends what nghttp2 has to send; call after starting or sending calls, and when the socket
  // is writable again.
  void Flush();
  bool WantsWrite() const { return out_sent_ < out_.size(); }
  // False once the connection is lost or the server said GOAWAY; every open call has then
  // finished (UNAVAILABLE) or will finish.
  bool usable() const { return fd_ >= 0 && !goaway_; }
  // Calls started and not yet finished.
  size_t open_calls() const { return calls_.size(); }

 private:
  H2Channel(int fd, SSL* ssl, std::string authority, const H2ChannelOptions& options);
  // The socket's bytes, through TLS if any (net/tls_io.h); as recv and send (-1 with errno
  // EAGAIN: not now).
  ssize_t Receive(char* buffer, size_t length);
  ssize_t Transmit(const char* data, size_t length);

  void Fail(const absl::Status& status);
  void FinishCall(Call* call, const absl::Status& status);

  // The callbacks below, in nghttp2's table; made once.
  static const nghttp2_session_callbacks* Callbacks();

  static ssize_t OnSend(nghttp2_session*, const uint8_t* data, size_t length, int flags,
                        void* user_data);
  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                      void* user_data);
  static int OnDataChunk(nghttp2_session*, uint8_t flags, int32_t stream_id, const uint8_t* data,
                         size_t len, void* user_data);
  static int OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code,
                           void* user_data);
  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user_data);
  static ssize_t ReadRequest(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                             uint32_t* data_flags, nghttp2_data_source* source, void* user_data);

  int fd_;
  SSL* ssl_;  // With TLS: the session on fd_.
  const std::string authority_;
  const std::string authorization_;  // "Bearer TOKEN", or empty.
  const std::string consistency_;
  const std::string min_replicas_;
  nghttp2_session* session_ = nullptr;
  absl::flat_hash_set<Call*> calls_;  // Started, not finished.
  std::string out_;                   // Frames for the socket; out_[out_sent_..] not sent.
  size_t out_sent_ = 0;
  bool goaway_ = false;
};

}  // namespace ringkv

#endif  // RINGKV_NET_H2_CHANNEL_H_
