// H2Channel: one gRPC client connection, for callers that drive many calls from one thread and
// count every microsecond of client CPU: ringkv-loadgen's default client, and a replica's flows
// from its primary (server/repl/replica_client.h). It is the client-side mirror of the server's
// HTTP/2 session (server/h2/h2_session.h), on the same frames (net/h2_frames.h) and HPACK
// (net/hpack.h), ringkv's own: HTTP/2 with prior knowledge (h2c) or TLS with ALPN h2
// (net/client_tls.h), gRPC's message framing (net/grpc_wire.h), unary and bidirectional calls,
// grpc-timeout, a bearer token. It does no name resolution beyond getaddrinfo, no retries and no
// compression. (It ran on nghttp2's client session until issue 25: the loadgen spent 2.4 us of
// CPU a call there, as much as the server it measured.)
//
// Frames are written into the channel's output as calls start and send (HEADERS, then DATA as
// the server's windows allow), and go to the socket at Flush; the server's frames are handled
// whole as they are read. The server's SETTINGS_MAX_CONCURRENT_STREAMS is kept: calls past it
// wait for a stream to end, and calls started before the server's SETTINGS came wait for them.
//
// The caller owns the event loop: it polls fd() for readability (and for writability while
// WantsWrite()), calls OnReadable()/Flush(), and flushes after starting calls, so that the
// requests of one turn go out in one send. Results come back through the CallObserver of each
// call, from inside OnReadable() (or Cancel, or the destructor); an observer may start, send on
// and cancel calls from there.
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
#include <openssl/ssl.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "net/byte_buffer.h"
#include "net/client_tls.h"
#include "net/h2_frames.h"
#include "net/hpack.h"

namespace ringkv {

class H2Channel;

// What a call tells its caller: from inside H2Channel::OnReadable, Flush (a send that failed),
// Cancel or the channel's destructor. An observer may start, send on and cancel calls from
// there, but not call OnReadable.
class CallObserver {
 public:
  virtual ~CallObserver() = default;
  // One response message; its bytes are valid during the call only.
  virtual void OnMessage(std::string_view bytes) = 0;
  // The call has ended: the server's grpc-status and grpc-message, or the reason it could not
  // complete (UNAVAILABLE for a lost connection, CANCELLED for Cancel). The call is gone
  // already: its pointer may not be used from here on.
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
  // Resets the call (RST_STREAM CANCEL); its observer hears CANCELLED before this returns.
  void Cancel(Call* call);

  int fd() const { return fd_; }
  // Reads what the socket has and handles its frames; observers hear of what completed.
  void OnReadable();
  // Sends the frames written since the last flush; call after starting or sending calls, and
  // when the socket is writable again.
  void Flush();
  bool WantsWrite() const { return out_sent_ < out_.size(); }
  // False once the connection is lost, the server said GOAWAY, or the connection's stream ids
  // (2^30 calls) ran out; every open call has then
  // finished (UNAVAILABLE) or will finish.
  bool usable() const { return fd_ >= 0 && !goaway_ && !ids_spent_; }
  // Calls started and not yet finished.
  size_t open_calls() const { return calls_.size() + waiting_.size(); }

 private:
  H2Channel(int fd, SSL* ssl, std::string authority, const H2ChannelOptions& options);
  // The socket's bytes, through TLS if any (net/tls_io.h); as recv and send (-1 with errno
  // EAGAIN: not now).
  ssize_t Receive(char* buffer, size_t length);
  ssize_t Transmit(const char* data, size_t length);

  // Closes the connection; every call finishes with `status`.
  void Fail(const absl::Status& status);
  // The server broke HTTP/2: UNAVAILABLE naming what it did. False, for the frame handlers.
  bool Broken(std::string_view what);
  // Removes the call (its stream gone), lets a waiting call have a stream, tells the observer.
  void FinishCall(Call* call, const absl::Status& status);
  // The call's end as its trailers (or reset code) say.
  absl::Status EndStatus(const Call& call, H2Error reset) const;
  Call* Find(int32_t id);

  // Frames out, appended to out_.
  void AppendFrameHeader(size_t length, uint8_t type, uint8_t flags, int32_t id);
  void AppendWindowUpdate(int32_t id, uint32_t increment);
  void AppendRst(int32_t id, H2Error error);
  // Gives the call a stream: its HEADERS, then what it has to send.
  void Open(Call* call, std::string_view path);
  // Opens waiting calls while the server's stream limit allows (once its SETTINGS came).
  void OpenWaiting();
  // The call's DATA frames, as the windows and the output's room allow; END_STREAM after the
  // last once it is closed. A call that must wait goes to blocked_.
  void WriteData(Call* call);
  void ResumeBlocked();
  bool OutputHasRoom() const { return out_.size() - out_sent_ < kOutputRoom; }

  // Frames in, each whole. False: the connection failed (Fail was called).
  bool OnFrame(const FrameHeader& frame, const char* p);
  bool OnData(const FrameHeader& frame, const char* p);
  bool OnHeaders(const FrameHeader& frame, const char* p);
  bool OnHeaderBlock(int32_t id, uint8_t flags, std::string_view block);
  bool OnSettings(const FrameHeader& frame, const char* p);
  bool OnWindowUpdate(const FrameHeader& frame, const char* p);
  bool OnGoaway(const char* p, size_t n);
  // A response's messages from DATA; false if the call went meanwhile (its observer cancelled).
  bool Deliver(Call* call, const char* p, size_t n);

  // The windows this side grants: per stream and for the connection.
  static constexpr int64_t kStreamWindow = 1 << 20;
  static constexpr int64_t kConnectionWindow = 16 << 20;
  // Unsent output past which DATA waits for the socket (HEADERS and control frames do not).
  static constexpr size_t kOutputRoom = 1 << 20;
  static constexpr size_t kInputBytes = 96 * 1024;
  // The most a response's header block may hold in its frames (the decoded list: 256 KiB).
  static constexpr size_t kMaxHeaderBlock = 1 << 20;

  int fd_;
  SSL* ssl_;  // With TLS: the session on fd_.
  const std::string authority_;
  const std::string authorization_;  // "Bearer TOKEN", or empty.
  const std::string consistency_;
  const std::string min_replicas_;

  HpackEncoder encoder_;
  HpackDecoder decoder_;
  // The last request block encoded that left the encoder's table as it was (no grpc-timeout):
  // the same path at the same table gives the same block.
  std::string memo_path_;
  std::string memo_block_;
  uint64_t memo_changes_ = UINT64_MAX;
  std::string block_out_;

  absl::flat_hash_map<int32_t, Call*> calls_;  // With a stream, not finished.
  std::deque<Call*> waiting_;                  // Started, waiting for a stream.
  std::vector<Call*> blocked_;                 // With DATA waiting for a window or room.
  Call* last_found_ = nullptr;
  Call* delivering_ = nullptr;  // The call Deliver is handing messages to.
  int32_t next_id_ = 1;

  // What the server allows.
  bool greeted_ = false;                    // Its SETTINGS came.
  uint32_t peer_max_streams_ = UINT32_MAX;  // Unlimited unless its SETTINGS say.
  size_t peer_max_frame_ = kDefaultMaxFrame;
  int64_t peer_stream_window_ = 65535;
  int64_t send_window_ = 65535;  // The connection's.
  // What the server may still send on the connection, and what was read since the last update.
  int64_t recv_window_ = kConnectionWindow;
  int64_t recv_unacked_ = 0;

  // Bytes read: in_[0, in_len_) not yet handled (less than a frame after OnReadable).
  std::unique_ptr<char[]> in_;
  size_t in_len_ = 0;
  // A header block under way (HEADERS without END_HEADERS, then CONTINUATIONs).
  std::string block_;
  int32_t block_id_ = 0;
  uint8_t block_flags_ = 0;

  ByteBuffer out_;  // Frames for the socket; out_[out_sent_..] not sent.
  size_t out_sent_ = 0;
  bool goaway_ = false;
  bool ids_spent_ = false;
};

}  // namespace ringkv

#endif  // RINGKV_NET_H2_CHANNEL_H_
