// H2Session: the server side of one HTTP/2 connection (RFC 9113), ringkv's own, for what gRPC
// needs: the h2 transport's connections run on it by default (--h2=ringkv; --h2=nghttp2 keeps
// nghttp2's, the reference), docs/architecture.md "ringkv's own HTTP/2 session" (issue 25).
//
// It parses what the client sends (the preface, then frames, possibly split anywhere between
// Feed calls) and tells its Listener about streams: a request's header fields as HPACK decodes
// them, its DATA as it arrives, its end, and a reset. It writes what the server sends straight
// into the connection's output (a SendQueue): control frames at once, a response's HEADERS when
// submitted, DATA as both flow-control windows allow when the connection asks for them
// (WriteData), pulled from the Listener without a copy, then the trailers.
//
// Errors, as RFC 9113 names them: a connection error queues a GOAWAY with its code and a debug
// text that says what was wrong, and Feed returns false (the connection flushes and closes); a
// stream error resets that stream alone (RST_STREAM), its Listener told by OnStreamClose. A header
// list over the limit is not an error of the protocol: OnHeadersDone says so, and the Listener
// answers as it sees fit (a gRPC error that names the limit).
//
// Flow control: the client's DATA counts against the windows this side grants (Settings), which
// grow again only as the Listener consumes what it took (Consume, ConsumeConnection), so a call
// that stops reading holds its client back, as with nghttp2's no_auto_window_update. DATA the
// session drops (on a stream reset or closed) it consumes itself.
//
// What is left out, since gRPC does not use it: server push, priorities (PRIORITY frames and
// fields are checked and ignored), padding on what this side sends, HTTP/1.1 upgrade.
//
// Threads: the connection's thread only.
//
//   H2Session session(listener, settings, out);   // queues the server's SETTINGS
//   if (!session.Feed(bytes, n)) { flush out, close }
//   session.SubmitHeaders(id, {{":status", "200"}, ...}, /*end_stream=*/false);
//   session.ResumeData(id);                        // the Listener has bytes for it
//   session.WriteData(limit);                      // DATA frames, then trailers, into out
#ifndef RINGKV_SERVER_H2_H2_SESSION_H_
#define RINGKV_SERVER_H2_H2_SESSION_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "net/h2_frames.h"
#include "net/hpack.h"
#include "net/send_queue.h"

namespace ringkv {

class H2Session {
 public:
  // What this side advertises and grants.
  struct Settings {
    uint32_t max_concurrent_streams = 100;
    int32_t stream_window = 1 << 20;       // SETTINGS_INITIAL_WINDOW_SIZE (at least 65,535)
    int32_t connection_window = 16 << 20;  // raised to at start (at least 65,535)
    uint32_t max_header_list_bytes = 64 * 1024;
    // Client resets (RST_STREAM) a connection may send in a burst, then per second: a flood of
    // requests reset at once (CVE-2023-44487) ends the connection with ENHANCE_YOUR_CALM.
    uint32_t reset_burst = 1000;
    uint32_t resets_per_second = 100;
  };
  using Field = std::pair<std::string_view, std::string_view>;

  class Listener {
   public:
    virtual ~Listener() = default;
    // A new stream's request headers: begun, then each field (views valid during the call).
    virtual void OnBeginStream(int32_t id) = 0;
    virtual void OnHeader(int32_t id, std::string_view name, std::string_view value) = 0;
    // All of them are in. `list_bytes_over`: 0, or the size of a header list over
    // max_header_list_bytes (counted as SETTINGS_MAX_HEADER_LIST_SIZE counts), whose fields
    // past the limit were dropped.
    virtual void OnHeadersDone(int32_t id, size_t list_bytes_over) = 0;
    // In place of OnHeader's calls: a new stream's header block is the same as the last
    // stream's, whose fields all went to OnHeader and which reached OnHeadersDone (a client
    // sends the same headers call after call). True if the Listener took what it made of those
    // again; false, and each field comes to OnHeader.
    virtual bool OnHeadersAsLast(int32_t /*id*/) { return false; }
    // Request DATA, as it comes; the Listener consumes it (Consume) as it takes it.
    virtual void OnData(int32_t id, const char* data, size_t length) = 0;
    // Where the next DATA bytes of stream `id` (`want` of them at most) may be read straight to,
    // when its receiver keeps them there (a large message's own buffer); empty if not. Those
    // bytes then come as OnDataInPlace, not OnData.
    virtual std::span<char> DataRoom(int32_t /*id*/, size_t /*want*/) { return {}; }
    virtual void OnDataInPlace(int32_t /*id*/, size_t /*length*/) {}
    // The client has ended its side (END_STREAM).
    virtual void OnRemoteEnd(int32_t id) = 0;
    // The stream is gone: both sides ended (kNoError), or reset by either (its code), with the
    // pointer kept with it (SetStreamData; StreamData no longer finds it). Nothing more is said
    // of it, and anything submitted for it is dropped.
    virtual void OnStreamClose(int32_t id, H2Error error, void* data) = 0;
    // Response DATA for WriteData: how many bytes the stream has ready now (up to `max` count),
    // and whether they are its last (then its trailers, if submitted, follow).
    virtual size_t DataReady(int32_t id, size_t max, bool* last) = 0;
    // Moves `length` of those bytes to `out`, right after their frame's header.
    virtual void TakeData(int32_t id, size_t length, SendQueue& out) = 0;
  };

  // Queues this side's SETTINGS and the connection window's raise into `out`.
  H2Session(Listener& listener, const Settings& settings, SendQueue& out);
  ~H2Session();
  H2Session(const H2Session&) = delete;
  H2Session& operator=(const H2Session&) = delete;

  // Takes bytes from the client, at `now_ns` (the steady clock, for the reset limit). False
  // after a connection error (its GOAWAY queued) or the client's preface going wrong: read no
  // more, flush and close.
  bool Feed(const char* data, size_t length, int64_t now_ns);
  // Where the next input may be read straight to: the rest of the DATA payload being read, if
  // its stream's Listener takes it in place (Listener::DataRoom). Read up to its size there,
  // then FeedInPlace the count (in place of Feed). Empty: input goes through Feed.
  std::span<char> DataRoom();
  bool FeedInPlace(size_t length, int64_t now_ns);
  // The client's preface and first SETTINGS are in.
  bool greeted() const { return greeted_; }
  // The error that ended the connection, or empty.
  const std::string& error() const { return error_; }
  bool failed() const { return failed_; }
  // Nothing more to read: the connection failed, or this side's GOAWAY went (not a shutdown
  // notice, after which new streams are still taken) and no stream is left. Once its output is
  // sent, the connection can close. (A client's GOAWAY leaves the closing to the client, or to
  // the idle sweep: it may still send PINGs and SETTINGS.)
  bool Done() const { return failed_ || (goaway_sent_ && streams_.empty()); }
  // A pointer the Listener keeps with a stream (its call), or null.
  void* StreamData(int32_t id) const;
  void SetStreamData(int32_t id, void* data);

  // Response headers (with END_STREAM: a trailers-only response, the stream's end), encoded now.
  void SubmitHeaders(int32_t id, std::span<const Field> fields, bool end_stream);
  void SubmitHeaders(int32_t id, std::initializer_list<Field> fields, bool end_stream) {
    SubmitHeaders(id, std::span<const Field>(fields.begin(), fields.size()), end_stream);
  }
  // The stream's trailers, after all of its DATA (end_stream). Encoded when written.
  void SubmitTrailers(int32_t id, std::span<const Field> fields);
  void SubmitTrailers(int32_t id, std::initializer_list<Field> fields) {
    SubmitTrailers(id, std::span<const Field>(fields.begin(), fields.size()));
  }
  // The Listener has DATA for the stream (DataReady will say how much).
  void ResumeData(int32_t id);
  // Writes DATA frames (and the trailers after the last) of the streams with data, as the
  // windows allow, until `out` holds `limit` bytes.
  void WriteData(size_t limit);
  // Resets a stream: RST_STREAM with `error`; OnStreamClose follows at once.
  void Reset(int32_t id, H2Error error);
  // The Listener took `length` bytes of the stream's DATA (or of the connection's only: bytes of
  // a stream it no longer has): the windows grow again (WINDOW_UPDATE once a good share is due).
  void Consume(int32_t id, size_t length);
  void ConsumeConnection(size_t length);
  // GOAWAY: with the highest stream id (2^31 - 1 as a first notice of a shutdown, new streams
  // still taken), or with the last stream taken (streams past it refused from now on).
  void SubmitShutdownNotice();
  void SubmitGoaway(H2Error error, std::string_view debug);

  size_t open_streams() const { return streams_.size(); }
  int32_t last_stream_id() const { return last_peer_id_; }
  // Whether the stream's client side has ended.
  bool RemoteEnded(int32_t id) const;

 private:
  struct Stream;
  // A request's header block, checked as RFC 9113, 8.2 and 8.3 ask of a server: a malformed one
  // resets its stream with PROTOCOL_ERROR.
  struct FieldCheck {
    bool trailers = false;
    bool bad = false;
    bool regular_seen = false;  // Pseudo-header fields come first.
    uint8_t pseudo = 0;         // :method 1, :scheme 2, :path 4, :authority 8
    int64_t content_length = -1;

    void Take(std::string_view name, std::string_view value);
    // After the block: a request has a method, a scheme and a path.
    bool ok() const { return !bad && (trailers || (pseudo & 7) == 7); }
  };
  enum class Parse { kPreface, kHeader, kPayload, kData };

  // The next `n` bytes of the frame being read, advancing `p`: straight from the input when they
  // are all there, else gathered in pending_ (cleared by the caller once used). Null while they
  // are not all in.
  const char* Take(const char*& p, const char* end, size_t n);
  // Frames, whole: a DATA frame's payload comes in pieces (OnDataPiece).
  bool OnFrame(uint8_t type, uint8_t flags, int32_t id, const char* p, size_t n);
  bool OnDataStart(uint8_t flags, int32_t id, size_t length);
  // `n` bytes of the DATA payload being read, at `p` or, `in_place`, already in its stream's
  // DataRoom; the frame's end once its last byte is taken.
  bool TakeData(const char* p, size_t n, bool in_place);
  // A header block's bound: what its list may hold, and the most HPACK shrinks a list by.
  size_t MaxBlockBytes() const;
  bool FailBlockTooLarge();
  void OnDataPiece(const char* p, size_t n, bool in_place);
  bool OnDataEnd();
  bool OnHeaders(uint8_t flags, int32_t id, const char* p, size_t n);
  bool OnContinuation(uint8_t flags, int32_t id, const char* p, size_t n);
  bool OnHeaderBlock();
  bool OnSettings(uint8_t flags, int32_t id, const char* p, size_t n);
  bool OnWindowUpdate(int32_t id, const char* p, size_t n);
  bool OnRstStream(int32_t id, const char* p, size_t n);
  Stream* NewStream(int32_t id);
  // A stream the client has not opened: above the last it opened, or even-numbered (a client's
  // are odd, and this side pushes none).
  bool Idle(int32_t id) const { return (id & 1) == 0 || id > last_peer_id_; }
  // Whether this side reset the stream lately (its late frames are then ignored).
  bool ResetByUs(int32_t id) const;
  // Takes a token for a reset of a stream whose request had begun (the client's, or one it
  // made this side send); false, the connection failed with ENHANCE_YOUR_CALM, when there is
  // none.
  bool ChargeReset();

  // A connection error: GOAWAY, and Feed returns false.
  bool Fail(H2Error error, std::string_view why);
  void WriteFrameHeader(size_t length, uint8_t type, uint8_t flags, int32_t id);
  void WriteHeaderBlock(int32_t id, const std::string& block, bool end_stream);
  // `fields`' header block, valid until the next Encode.
  const std::string& Encode(std::span<const Field> fields);
  void WriteWindowUpdate(int32_t id, uint32_t increment);
  void WriteRst(int32_t id, H2Error error);
  // The stream's trailers (or an empty DATA with END_STREAM): the server's side is done.
  void EndLocal(Stream* s);
  Stream* Find(int32_t id) const;
  void Close(Stream* s, H2Error error);

  Listener& listener_;
  const Settings settings_;
  SendQueue& out_;
  HpackDecoder decoder_;
  HpackEncoder encoder_;
  // The check of the last block decoded, if it saw every field (its stream was taken): a block
  // the decoder finds the same as the last (a client sends the same headers call after call)
  // has the same fields, so the same check.
  FieldCheck last_check_;
  bool last_check_whole_ = false;
  bool last_block_done_ = false;  // The last block decoded reached Listener::OnHeadersDone.

  Parse parse_ = Parse::kPreface;
  std::string pending_;  // A frame's header or payload not all in yet.
  // The frame being read.
  uint8_t type_ = 0;
  uint8_t flags_ = 0;
  int32_t id_ = 0;
  size_t length_ = 0;
  // A DATA frame being read: its stream (null: dropped), what is left of it, padding at its end.
  Stream* data_stream_ = nullptr;
  size_t data_left_ = 0;
  size_t data_pad_ = 0;
  bool data_pad_known_ = true;
  bool data_consume_rest_ = false;  // Its stream went mid-frame: the rest is consumed here.
  // A header block under way (HEADERS without END_HEADERS, then CONTINUATIONs).
  std::string block_;
  int32_t block_id_ = 0;
  uint8_t block_flags_ = 0;
  H2Error block_error_ = H2Error::kNoError;  // Its HEADERS's priority depends on the stream.

  bool greeted_ = false;
  bool failed_ = false;
  bool goaway_sent_ = false;
  bool notice_sent_ = false;
  std::string error_;
  int32_t last_peer_id_ = 0;            // The highest stream the client has opened.
  int32_t goaway_last_id_ = INT32_MAX;  // Streams past it are refused (a GOAWAY went).
  uint32_t peer_max_frame_ = 16384;
  int64_t peer_stream_window_ = 65535;  // The client's SETTINGS_INITIAL_WINDOW_SIZE.
  int64_t send_window_ = 65535;         // The connection's, toward the client.
  int64_t recv_window_;                 // What the client may still send on the connection ...
  size_t recv_consumed_ = 0;            // ... and what was consumed since the last update.
  double reset_tokens_;
  int64_t reset_refill_ns_ = 0;
  int64_t now_ns_ = 0;                   // Feed's clock.
  std::array<int32_t, 64> reset_ids_{};  // Streams this side reset lately, a ring.
  size_t reset_next_ = 0;

  // The last header lists encoded that left the table as it was, with their blocks.
  struct BlockMemo {
    std::vector<std::pair<std::string, std::string>> fields;
    std::string block;
    uint64_t changes = UINT64_MAX;  // The encoder table's changes() they were encoded at.
  };
  std::array<BlockMemo, 2> memos_;
  size_t next_memo_ = 0;
  std::string block_out_;  // Encode's block when no memo has it.

  absl::flat_hash_map<int32_t, Stream*> streams_;
  std::vector<std::unique_ptr<Stream>> free_;  // Streams to use again.
  std::vector<int32_t> ready_;                 // Streams with DATA to write (ResumeData).
  mutable int32_t last_found_id_ = 0;
  mutable Stream* last_found_ = nullptr;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_H2_H2_SESSION_H_
