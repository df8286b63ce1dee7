// Connection: one client's TCP connection on the h2 transport, with its HTTP/2 server session:
// ringkv's own (H2Session, --h2=ringkv, the default) or nghttp2's (--h2=nghttp2). The session
// does HTTP/2 itself (framing, HPACK, flow control, SETTINGS, PING, GOAWAY); the connection
// feeds it the socket's bytes, routes its stream events to H2Calls (SessionEvents, or nghttp2's
// callbacks), and gathers what it sends into one output buffer that goes to the socket with one
// send per turn. Everything below holds for both.
//
// Flow control and memory:
//   - Received DATA is acknowledged (WINDOW_UPDATE) only as the calls take it (H2Call), so a
//     stream whose handler is not reading holds its client back by HTTP/2 flow control.
//   - A response waits in its call's buffer until the client's flow-control window lets
//     nghttp2 frame it: at most --max-concurrent-streams responses per connection, since a
//     stream stays open until its response is out.
//   - Frames wait in the connection's output (a SendQueue: a large value's bytes are shared
//     from its call's buffer or lent from the shard's record, not copied, but for TLS) until
//     the socket takes them, a sendmsg per round. While the socket refuses kPauseReadBytes,
//     the connection reads nothing more from it, so a client that sends requests but never
//     reads the answers (even answers that no flow-control window holds back, like errors) is
//     held back by TCP; reading resumes under kResumeReadBytes.
//     Only the socket pauses reading: a response waiting for the client's window must not,
//     since the client's WINDOW_UPDATE would then never be read.
//
// TLS (--tls-cert): the connection holds an OpenSSL session on its socket. The handshake runs
// as the socket allows before any HTTP/2 is read or sent; a refused one (plaintext on the TLS
// port, no client certificate under mTLS, no h2 in ALPN) is logged at debug level and the
// socket closed. Then reads and sends go through the session (net/tls_io.h says what OpenSSL's
// answers mean); nothing else changes.
//
// A connection sees its loop through H2Io (server/h2/h2_io.h), and its calls see it as their
// CallConnection (server/h2/h2_call.h).
//
// Idle: the loop's sweep (H2LoopIo) asks SweepIdle every so often. Reads and ended calls only
// set a flag, so the hot path reads no clock; the sweep stamps a connection busy (at its own
// clock) when the flag is set or a call is open, and its idle time runs from the last stamp.
// A connection is idle while it has no call open (a Watch stream is one) and has received
// nothing since; a client's PINGs count as something.
//
// --io=uring (server/h2/uring.h), plaintext connections: the socket's bytes come and go through
// the loop's ring instead. One multishot receive is out while reading goes on (cancelled when
// it pauses: what it still brings is read), and one send, of all the frames gathered until
// then (a sendmsg when some are shared); frames gathered meanwhile wait in a second queue for the
// send after it. A TLS connection stays on readiness (OpenSSL reads and writes its socket
// itself).
//
// Answers that acknowledge writes (CallSink::Acknowledges) are followed until their bytes are
// in the kernel: counted from the call's HoldAck until nghttp2 has framed them (H2Call), then
// until the socket has taken the output through their last byte. Meanwhile the connection
// HoldsAck(), and the loop lists it (H2Io::ListAckHolder), so that a fence that closes before
// they leave drops it (H2LoopIo::DropAcks, and FencedOut before every send): flow control or a
// full socket cannot carry an acknowledgement past the fence. Bytes in the kernel (a send the
// ring has out included: the kernel finishes it by itself) are out of reach.
//
// Lifetime: made on accept; Close() (a fatal error, the peer gone, or both sides done) cancels
// its calls, closes the socket and retires the object, which the loop deletes at the end of the
// turn, or, under --io=uring, once the ring has given back the receive and send it had out.
// Calls outlive their connection if their handler still has Requests out.
//
// Threads: its loop's thread only.
#ifndef RINGKV_SERVER_H2_CONNECTION_H_
#define RINGKV_SERVER_H2_CONNECTION_H_

#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "net/listener.h"
#include "net/send_queue.h"
#include "server/auth/authenticator.h"
#include "server/h2/h2_call.h"
#include "server/h2/h2_io.h"
#include "server/h2/h2_session.h"

namespace ringkv {

class Connection final : public CallConnection {
 public:
  // Output gathered for one send; nghttp2 is asked for more only while less is waiting.
  static constexpr size_t kOutputChunk = size_t{1} << 20;
  static constexpr size_t kPauseReadBytes = 512 * 1024;
  static constexpr size_t kResumeReadBytes = 128 * 1024;
  // Initial flow-control windows granted to clients: per stream, and for the connection.
  static constexpr int32_t kStreamWindow = 1 << 20;
  static constexpr int32_t kConnectionWindow = 16 << 20;
  // Takes `fd`, an accepted non-blocking socket, and registers it with `io`, at `now_ns`.
  // `greet_by_ns`: the client's preface must be in by then (the loop closes it otherwise).
  Connection(H2Io& io, int fd, int64_t now_ns, int64_t greet_by_ns);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Events from the loop: readiness (epoll) ...
  void OnReadable();
  void OnWritable();
  // ... or, under --io=uring, completions: switched to before any I/O, once.
  void UseCompletions();
  // A receive's result (bytes, 0: the client closed, or -errno), for bytes where they are, and
  // whether the receive goes on (multishot).
  void OnReceived(int result, const char* data, bool more);
  void OnSent(int result);  // Bytes sent, or -errno.
  // Whether its output may hold bytes a shard lends (net/send_queue.h): its sends read their
  // bytes before they return (epoll's; not io_uring's, which the kernel reads later), and share
  // them rather than copy them into the output (not TLS's, which copies to encrypt anyway, so
  // a loan would only add the copy a changed record makes into it).
  bool sends_at_once() const override { return !completions_ && ssl_ == nullptr; }
  // Operations the ring has of this connection's (it is deleted only once there are none).
  uint32_t ops() const { return ops_; }
  // End of turn: nghttp2's frames to the output buffer, the buffer to the socket.
  void Flush();
  // The server started draining: GOAWAY with the highest stream id, so clients send new calls
  // elsewhere (or to a new connection) while the calls in flight go on.
  void SendShutdownNotice();
  // The server stops: calls left end with UNAVAILABLE, GOAWAY (with `why` as its debug data),
  // a last flush, then Close.
  void Terminate(std::string_view why = {});
  void Close();
  bool closed() const { return fd_ < 0; }
  // Whether the client's connection preface is in (its TLS handshake done, its first SETTINGS
  // received), and when it must be by (--handshake-timeout; the steady clock's ns).
  bool greeted() const { return greeted_; }
  int64_t greet_by_ns() const { return greet_by_ns_; }
  // The loop's sweep at `now_ns`: a connection that received bytes or ended a call since the
  // last sweep, or has a call open, is busy as of now (0); otherwise how long it has been idle.
  int64_t SweepIdle(int64_t now_ns) {
    if (active_ || !calls_.empty()) {
      active_ = false;
      idle_since_ns_ = now_ns;
      return 0;
    }
    return now_ns - idle_since_ns_;
  }
  // No call open and nothing received since the last sweep; idle since then at least.
  bool idle() const { return !active_ && calls_.empty(); }
  int64_t idle_since_ns() const { return idle_since_ns_; }
  // The loop's sweep at `now_ns`, for --send-timeout: how long this client has left its
  // answers untaken (0: it has not, or took some since the last sweep). Answers' DATA waits in
  // the output for the socket, or in its call for the client's flow-control window; it moves
  // as it is framed, or as the socket takes the output up to it. The socket taking other frames
  // is not an answer moving: a client that reads the socket but keeps its windows shut, and is
  // sent PING acks, still holds its answers. Output of any kind that the socket takes nothing
  // of between two sweeps is stuck too (error answers, with a call open). The stall runs from
  // the first sweep that saw it, so it is never overstated (by up to a sweep period it is
  // understated).
  int64_t SweepStalled(int64_t now_ns);

  // CallConnection, for H2Call.
  H2Io& io() override { return io_; }
  void Consume(int32_t stream_id, size_t bytes) override;
  void ConsumeConnection(size_t bytes) override;
  void SubmitResponse(H2Call& call) override;
  void ResumeData(int32_t stream_id) override;
  void SubmitTrailers(int32_t stream_id, std::span<const HeaderField> fields) override;
  void SubmitHeadersOnly(int32_t stream_id, std::span<const HeaderField> fields) override;
  void MarkDirty() override;
  RoleCache& role_cache() override { return role_cache_; }
  std::string peer_host() const override { return fd_ >= 0 ? PeerHost(fd_) : std::string(); }
  // Appends a DATA frame of `call` to the output: its 9-byte header and `length` bytes the
  // call moves from its own queue (the no-copy path of nghttp2's data provider; what the call
  // shares stays shared).
  bool AppendData(const uint8_t* frame_header, H2Call& call, size_t length);
  void Forget(H2Call* call) { calls_.erase(call); }
  void HoldAck() override;
  void HoldReplyMemory(int64_t bytes) override;

  // Whether an answer that acknowledges writes has not reached the kernel yet (see above).
  bool HoldsAck() const { return !closed() && (acks_unframed_ > 0 || sent_ < acks_end_); }
  // Closes the connection if it HoldsAck() once the fence has closed; true if it did. Every
  // send checks it first (Flush, Terminate), so that nothing the turn's check let through can
  // leave after a pause between the two.
  bool FencedOut();
  // In the loop's list of connections that may hold one (H2LoopIo).
  bool ack_listed = false;

 private:
  // nghttp2 callbacks; user_data is the Connection.
  static ssize_t OnSend(nghttp2_session*, const uint8_t* data, size_t length, int flags,
                        void* user_data);
  static int OnSendData(nghttp2_session*, nghttp2_frame* frame, const uint8_t* frame_header,
                        size_t length, nghttp2_data_source* source, void* user_data);
  static int OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user_data);
  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                      void* user_data);
  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user_data);
  static int OnDataChunkRecv(nghttp2_session*, uint8_t flags, int32_t stream_id,
                             const uint8_t* data, size_t len, void* user_data);
  static int OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code,
                           void* user_data);
  static int OnFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user_data);
  // H2LoopIo builds the callbacks table from the functions above, and clears dirty_ as it
  // flushes.
  friend class H2LoopIo;

  // --h2=ringkv: ringkv's own session's events, to the calls as nghttp2's callbacks route them.
  class SessionEvents final : public H2Session::Listener {
   public:
    explicit SessionEvents(Connection& c) : c_(c) {}
    void OnBeginStream(int32_t id) override;
    void OnHeader(int32_t id, std::string_view name, std::string_view value) override;
    void OnHeadersDone(int32_t id, size_t list_bytes_over) override;
    bool OnHeadersAsLast(int32_t id) override;
    void OnData(int32_t id, const char* data, size_t length) override;
    std::span<char> DataRoom(int32_t id, size_t want) override;
    void OnDataInPlace(int32_t id, size_t length) override;
    void OnRemoteEnd(int32_t id) override;
    void OnStreamClose(int32_t id, H2Error error, void* call) override;
    size_t DataReady(int32_t id, size_t max, bool* last) override;
    void TakeData(int32_t id, size_t length, SendQueue& out) override;

   private:
    Connection& c_;
  };
  // A new stream's call (either session).
  void BeginCall(int32_t stream_id);
  // A stream's end (either session): its call, if any, learns it, and any answer it held is
  // framed.
  void EndCall(H2Call* call, uint32_t error_code);

  H2Call* CallOf(int32_t stream_id);
  // An answer held by a call is framed: it leaves with the output gathered so far.
  void AckFramed();
  // `length` bytes of an answer's DATA are in out_, behind the rest (for SweepStalled).
  void Framed(size_t length);
  size_t Unsent() const { return out_.size() + sending_.size(); }
  void UpdateInterest();
  // Hands received bytes to the session; false if that closed the connection.
  bool Feed(const char* data, size_t length);
  // The same for `length` bytes read straight into the session's DataRoom (--h2=ringkv).
  bool FeedInPlace(size_t length);
  // What the session's Feed or FeedInPlace returned: false if the connection is closing.
  bool Fed(bool ok);
  // nghttp2's frames to out_ while less than kOutputChunk waits; false if that closed the
  // connection.
  bool GatherFrames();
  // A flush's end: closes the connection if both sides are done, else updates its interest.
  void EndFlush();
  // Flush under --io=uring: the frames go to a send of the ring's.
  void FlushToRing();
  void SendRest();
  // Advances the TLS handshake; true once it is done. Closes the connection if it failed.
  bool Handshake();
  // The socket's bytes, through TLS if any: > 0 bytes, 0 the client closed its side, -1 with
  // errno (EAGAIN: nothing now).
  ssize_t Receive(char* buffer, size_t length);
  // The front of out_ (a sendmsg of up to SendQueue::kMaxIovecs pieces; through TLS, one piece
  // at a time), consumed as the socket takes it: bytes taken, or -1 with errno.
  ssize_t Transmit();
  // One send(msg) of out_'s front with `flags`, plaintext; consumes nothing.
  ssize_t SendFront(int flags);

  H2Io& io_;
  int fd_;
  SSL* ssl_ = nullptr;            // With TLS: the session on fd_.
  bool handshaking_ = false;      // With TLS: until the handshake is done.
  bool tls_wants_write_ = false;  // OpenSSL needs the socket writable to go on.
  bool greeted_ = false;
  int64_t greet_by_ns_;
  bool active_ = false;    // Bytes received or a call ended since the last sweep.
  int64_t idle_since_ns_;  // The sweep's clock: last seen busy (or accepted).
  // SweepStalled's: what the last sweep saw, and since when answers have waited unmoved (0:
  // they have not).
  uint64_t swept_sent_ = 0;
  uint64_t swept_framed_ = 0;
  bool swept_unsent_ = false;
  int64_t stalled_since_ns_ = 0;
  nghttp2_session* session_ = nullptr;  // --h2=nghttp2, or own_ below.
  absl::flat_hash_set<H2Call*> calls_;  // Open streams' calls.
  int32_t last_stream_id_ = 0;          // CallOf's last answer (0: none).
  H2Call* last_call_ = nullptr;
  SendQueue out_;  // Frames for the socket, not sent.
  // --h2=ringkv: ringkv's own session, which writes its frames into out_.
  SessionEvents events_{*this};
  std::unique_ptr<H2Session> own_;
  bool reading_done_ = false;   // It failed: its GOAWAY goes, and nothing more is read.
  uint64_t sent_ = 0;           // Bytes the socket has taken, ever.
  uint64_t framed_ = 0;         // Bytes of answers' DATA framed into out_, ever.
  uint64_t data_end_ = 0;       // sent_ once the socket has taken the last DATA framed.
  uint32_t acks_unframed_ = 0;  // Calls holding an answer not framed yet (H2Call::HoldAck).
  uint64_t acks_end_ = 0;       // sent_ once the framed answers are all in the kernel.
  // Reply memory that the answers of closed streams hold in the output (HoldReplyMemory), by
  // the output's end when each was handed over: given back once sent_ reaches it
  // (GiveBackSentReplyMemory), the rest with the connection.
  std::deque<std::pair<uint64_t, int64_t>> reply_memory_until_;
  void GiveBackSentReplyMemory();
  uint32_t interest_;  // Events epoll reports for the socket.
  bool read_paused_ = false;
  bool dirty_ = false;  // In the loop's flush list.
  // --io=uring.
  bool completions_ = false;
  bool receiving_ = false;   // A receive is out ...
  bool cancelling_ = false;  // ... and asked to end.
  uint32_t ops_ = 0;         // Receives and sends out.
  int held_fd_ = -1;         // Closed with ops out: the socket, shut down, until deletion.
  SendQueue sending_;        // What the send out holds, not yet sent.
  // The ring's sendmsg out, when sending_ has more than one piece (made on first use).
  struct RingMessage {
    iovec iov[SendQueue::kMaxIovecs];
    msghdr header;
  };
  std::unique_ptr<RingMessage> ring_message_;
  RoleCache role_cache_;
  // --h2=ringkv: the last call's headers, as its call made them, when they can be another's:
  // they sent no token (whose role is looked up each call, as the tokens file may change) and
  // were within the limit. headers_as_last_: the call under way took them (OnHeadersAsLast).
  H2Call::RequestHeaders last_headers_;
  bool last_headers_kept_ = false;
  bool headers_as_last_ = false;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_H2_CONNECTION_H_
