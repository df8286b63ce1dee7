// H2Session: see h2_session.h.
#include "server/h2/h2_session.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"

namespace ringkv {
namespace {

// SETTINGS_MAX_FRAME_SIZE this side advertises: a large request message comes in few DATA
// frames, each of which the connection can read straight into the call's buffer (DataRoom),
// where 16 KiB frames would put a frame header every 16 KiB. Other frames are gathered whole
// before they are read, so they keep HTTP/2's default size; a header block's frames may pass it
// up to the block's own bound (MaxBlockBytes).
constexpr size_t kMaxFrame = 256 << 10;
constexpr size_t kMaxBlockSlack = kDefaultMaxFrame;

// Fields whose values change from call to call stay out of the table.
HpackEncoder::Indexing IndexingOf(std::string_view name) {
  return name == "grpc-message" || name == "grpc-status-details-bin" ? HpackEncoder::kNoIndex
                                                                     : HpackEncoder::kIndex;
}

// RFC 9110's token characters, lower case only (RFC 9113, 8.2.1: a field name with an upper-case
// letter is malformed).
constexpr std::array<bool, 256> MakeNameChars() {
  std::array<bool, 256> ok{};
  for (int c = 'a'; c <= 'z'; ++c) ok[c] = true;
  for (int c = '0'; c <= '9'; ++c) ok[c] = true;
  for (const char c : std::string_view("!#$%&'*+-.^_`|~")) ok[static_cast<uint8_t>(c)] = true;
  return ok;
}
constexpr std::array<bool, 256> kNameChars = MakeNameChars();
// What no field value may hold (RFC 9113, 8.2.1): NUL, CR, LF.
constexpr std::array<bool, 256> kBadValueChars = [] {
  std::array<bool, 256> bad{};
  bad['\0'] = bad['\r'] = bad['\n'] = true;
  return bad;
}();

}  // namespace

void H2Session::FieldCheck::Take(std::string_view name, std::string_view value) {
  if (name.empty()) {
    bad = true;
    return;
  }
  for (const char c : value) bad |= kBadValueChars[static_cast<uint8_t>(c)];
  if (!value.empty() && (value.front() == ' ' || value.front() == '\t' || value.back() == ' ' ||
                         value.back() == '\t')) {
    bad = true;
  }
  if (name[0] == ':') {
    uint8_t bit = 0;
    if (name == ":method") {
      bit = 1;
    } else if (name == ":scheme") {
      bit = 2;
    } else if (name == ":path") {
      bit = 4;
      if (value.empty()) bad = true;
    } else if (name == ":authority") {
      bit = 8;
    }
    if (bit == 0 || trailers || regular_seen || (pseudo & bit) != 0) bad = true;
    pseudo |= bit;
    return;
  }
  regular_seen = true;
  for (const char c : name) bad |= !kNameChars[static_cast<uint8_t>(c)];
  switch (name.size()) {  // Connection-specific fields (8.2.2).
    case 2:
      if (name == "te" && value != "trailers") bad = true;
      break;
    case 7:
      if (name == "upgrade") bad = true;
      break;
    case 10:
      if (name == "connection" || name == "keep-alive") bad = true;
      break;
    case 14:
      if (name == "content-length") {
        int64_t n = 0;
        for (const char c : value) {
          if (c < '0' || c > '9' || n > (int64_t{1} << 50)) {
            bad = true;
            break;
          }
          n = n * 10 + (c - '0');
        }
        if (value.empty() || (content_length >= 0 && content_length != n)) bad = true;
        content_length = n;
      }
      break;
    case 16:
      if (name == "proxy-connection") bad = true;
      break;
    case 17:
      if (name == "transfer-encoding") bad = true;
      break;
  }
}

struct H2Session::Stream {
  int32_t id = 0;
  bool remote_ended = false;  // The client sent END_STREAM.
  bool local_ended = false;   // This side did.
  bool in_ready = false;      // Listed in ready_.
  bool has_trailers = false;
  bool trailers_ok = false;  // They are grpc-status 0 alone; else in `trailers`.
  std::vector<std::pair<std::string, std::string>> trailers;
  int64_t send_window = 0;      // What this side may still send on the stream.
  int64_t recv_window = 0;      // What the client may.
  size_t recv_consumed = 0;     // Consumed since the last WINDOW_UPDATE.
  void* data = nullptr;         // The Listener's.
  int64_t content_length = -1;  // The request's content-length, if it gave one ...
  int64_t received = 0;         // ... and the DATA received, to hold it to it.
};

H2Session::H2Session(Listener& listener, const Settings& settings, SendQueue& out)
    : listener_(listener),
      settings_(settings),
      out_(out),
      decoder_(4096, settings.max_header_list_bytes),
      encoder_(4096),
      recv_window_(settings.connection_window),
      reset_tokens_(settings.reset_burst) {
  char frame[4 * kSettingBytes];
  const std::pair<uint16_t, uint32_t> entries[] = {
      {kSettingMaxConcurrentStreams, settings.max_concurrent_streams},
      {kSettingInitialWindowSize, static_cast<uint32_t>(settings.stream_window)},
      {kSettingMaxHeaderListSize, settings.max_header_list_bytes},
      {kSettingMaxFrameSize, static_cast<uint32_t>(kMaxFrame)},
  };
  for (size_t i = 0; i < std::size(entries); ++i) {
    WriteSetting(frame + kSettingBytes * i, entries[i].first, entries[i].second);
  }
  WriteFrameHeader(sizeof(frame), kFrameSettings, 0, 0);
  out_.Append(std::string_view(frame, sizeof(frame)));
  if (settings.connection_window > 65535) WriteWindowUpdate(0, settings.connection_window - 65535);
}

H2Session::~H2Session() {
  for (auto& [id, s] : streams_) delete s;
}

H2Session::Stream* H2Session::Find(int32_t id) const {
  if (id == last_found_id_ && last_found_ != nullptr) return last_found_;
  auto it = streams_.find(id);
  if (it == streams_.end()) return nullptr;
  last_found_id_ = id;
  last_found_ = it->second;
  return it->second;
}

void* H2Session::StreamData(int32_t id) const {
  const Stream* s = Find(id);
  return s != nullptr ? s->data : nullptr;
}

void H2Session::SetStreamData(int32_t id, void* data) {
  if (Stream* s = Find(id)) s->data = data;
}

bool H2Session::RemoteEnded(int32_t id) const {
  const Stream* s = Find(id);
  return s == nullptr || s->remote_ended;
}

bool H2Session::Feed(const char* data, size_t length, int64_t now_ns) {
  now_ns_ = now_ns;
  const char* p = data;
  const char* const end = data + length;
  while (p < end && !failed_) {
    switch (parse_) {
      case Parse::kPreface: {
        const size_t take = std::min<size_t>(kClientPreface.size() - pending_.size(), end - p);
        if (std::string_view(p, take) != kClientPreface.substr(pending_.size(), take)) {
          return Fail(H2Error::kProtocol, "not an HTTP/2 client preface");
        }
        pending_.append(p, take);
        p += take;
        if (pending_.size() == kClientPreface.size()) {
          pending_.clear();
          parse_ = Parse::kHeader;
        }
        break;
      }
      case Parse::kHeader: {
        const char* h = Take(p, end, kFrameHeaderBytes);
        if (h == nullptr) break;
        const FrameHeader frame = ReadFrameHeader(h);
        length_ = frame.length;
        type_ = frame.type;
        flags_ = frame.flags;
        id_ = frame.id;
        pending_.clear();
        if (length_ > kMaxFrame) {
          return Fail(H2Error::kFrameSize,
                      absl::StrCat("a frame of ", length_, " bytes, over SETTINGS_MAX_FRAME_SIZE (",
                                   kMaxFrame, ")"));
        }
        // Frames other than DATA are gathered whole before they are read: only a header block's
        // may pass HTTP/2's default size, and no further than the block's own bound.
        if (length_ > kDefaultMaxFrame && type_ != kFrameData) {
          if (type_ != kFrameHeaders && type_ != kFrameContinuation) {
            return Fail(
                H2Error::kFrameSize,
                absl::StrCat("a frame of type ", static_cast<int>(type_), " of ", length_,
                             " bytes: only DATA and header blocks may pass ", kDefaultMaxFrame));
          }
          if (length_ > MaxBlockBytes()) return FailBlockTooLarge();
        }
        if (!greeted_ && type_ != kFrameSettings) {
          return Fail(H2Error::kProtocol, "the client's first frame is not SETTINGS");
        }
        if (block_id_ != 0 && type_ != kFrameContinuation) {
          return Fail(H2Error::kProtocol, "a frame inside a header block");
        }
        if (type_ == kFrameData) {
          if (!OnDataStart(flags_, id_, length_)) return false;
          if (length_ == 0) {
            if (!OnDataEnd()) return false;
          } else {
            parse_ = Parse::kData;
          }
        } else if (length_ == 0) {
          if (!OnFrame(type_, flags_, id_, nullptr, 0)) return false;
        } else {
          parse_ = Parse::kPayload;
        }
        break;
      }
      case Parse::kPayload: {
        const char* payload = Take(p, end, length_);
        if (payload == nullptr) break;
        parse_ = Parse::kHeader;
        const bool ok = OnFrame(type_, flags_, id_, payload, length_);
        pending_.clear();
        // A header block's frame past the default size (up to MaxBlockBytes) was gathered here:
        // its memory is not kept for the connection's life.
        if (pending_.capacity() > kDefaultMaxFrame) pending_.shrink_to_fit();
        if (!ok) return false;
        break;
      }
      case Parse::kData: {
        const size_t take = std::min<size_t>(data_left_, end - p);
        if (!TakeData(p, take, /*in_place=*/false)) return false;
        p += take;
        break;
      }
    }
  }
  return !failed_;
}

std::span<char> H2Session::DataRoom() {
  // Padded frames and streams past their content-length take the pieces' path.
  if (parse_ != Parse::kData || data_stream_ == nullptr || !data_pad_known_ || data_pad_ != 0 ||
      failed_) {
    return {};
  }
  const Stream& s = *data_stream_;
  if (s.content_length >= 0 && s.received + static_cast<int64_t>(data_left_) > s.content_length) {
    return {};
  }
  const std::span<char> room = listener_.DataRoom(id_, data_left_);
  return room.first(std::min(room.size(), data_left_));
}

size_t H2Session::MaxBlockBytes() const {
  return 2 * size_t{settings_.max_header_list_bytes} + kMaxBlockSlack;
}

bool H2Session::FailBlockTooLarge() {
  return Fail(H2Error::kEnhanceYourCalm,
              absl::StrCat("a header block over ", 2 * settings_.max_header_list_bytes, " bytes"));
}

bool H2Session::FeedInPlace(size_t length, int64_t now_ns) {
  now_ns_ = now_ns;
  if (parse_ != Parse::kData || length > data_left_) {  // Never: DataRoom said how much.
    return Fail(H2Error::kInternal, "bytes read in place past the DATA payload");
  }
  return TakeData(nullptr, length, /*in_place=*/true) && !failed_;
}

bool H2Session::TakeData(const char* p, size_t n, bool in_place) {
  OnDataPiece(p, n, in_place);
  if (failed_) return false;
  if (data_left_ > 0) return true;
  parse_ = Parse::kHeader;
  return OnDataEnd();
}

const char* H2Session::Take(const char*& p, const char* end, size_t n) {
  if (pending_.empty() && static_cast<size_t>(end - p) >= n) {
    const char* at = p;
    p += n;
    return at;
  }
  const size_t take = std::min<size_t>(n - pending_.size(), end - p);
  pending_.append(p, take);
  p += take;
  return pending_.size() < n ? nullptr : pending_.data();
}

bool H2Session::OnFrame(uint8_t type, uint8_t flags, int32_t id, const char* p, size_t n) {
  switch (type) {
    case kFrameHeaders:
      return OnHeaders(flags, id, p, n);
    case kFrameContinuation:
      return OnContinuation(flags, id, p, n);
    case kFrameSettings:
      return OnSettings(flags, id, p, n);
    case kFrameWindowUpdate:
      return OnWindowUpdate(id, p, n);
    case kFrameRstStream:
      return OnRstStream(id, p, n);
    case kFramePing:
      if (id != 0) return Fail(H2Error::kProtocol, "PING on a stream");
      if (n != 8) return Fail(H2Error::kFrameSize, "PING of other than 8 bytes");
      if ((flags & kFlagAck) == 0) {
        WriteFrameHeader(8, kFramePing, kFlagAck, 0);
        out_.Append(std::string_view(p, 8));
      }
      return true;
    case kFramePriority:
      if (id == 0) return Fail(H2Error::kProtocol, "PRIORITY on stream 0");
      if (n != 5 || static_cast<int32_t>(Read32(p) & 0x7fffffff) == id) {
        const H2Error error = n != 5 ? H2Error::kFrameSize : H2Error::kProtocol;
        // No RST_STREAM on an idle stream (RFC 9113, 6.4): the connection's error instead.
        if (Idle(id)) return Fail(error, "a malformed PRIORITY on an idle stream");
        if (Find(id) != nullptr) {
          Reset(id, error);
        } else {
          WriteRst(id, error);
        }
        return !failed_;
      }
      return true;
    case kFrameGoaway:
      if (id != 0) return Fail(H2Error::kProtocol, "GOAWAY on a stream");
      if (n < 8) return Fail(H2Error::kFrameSize, "GOAWAY of less than 8 bytes");
      return true;
    case kFramePushPromise:
      return Fail(H2Error::kProtocol, "PUSH_PROMISE from a client");
    default:
      return true;  // Unknown frames are ignored (RFC 9113, 5.5).
  }
}

bool H2Session::OnDataStart(uint8_t flags, int32_t id, size_t length) {
  if (id == 0) return Fail(H2Error::kProtocol, "DATA on stream 0");
  if (static_cast<int64_t>(length) > recv_window_) {
    return Fail(H2Error::kFlowControl,
                absl::StrCat("DATA of ", length, " bytes past the connection's window"));
  }
  recv_window_ -= length;
  data_left_ = length;
  data_pad_ = 0;
  data_pad_known_ = (flags & kFlagPadded) == 0;
  data_consume_rest_ = false;
  if (!data_pad_known_ && length == 0) return Fail(H2Error::kProtocol, "padded DATA of 0 bytes");
  // data_stream_ is set only once the frame is taken: a Reset here must not find it.
  Stream* s = Find(id);
  if (s == nullptr) {
    if (Idle(id)) return Fail(H2Error::kProtocol, "DATA on an idle stream");
    // Frames already on their way when this side reset the stream are ignored (RFC 9113,
    // 5.1); others on a closed stream are an error of the stream.
    if (!ResetByUs(id)) WriteRst(id, H2Error::kStreamClosed);
  } else if (s->remote_ended) {
    Reset(id, H2Error::kStreamClosed);
    s = nullptr;
  } else if (static_cast<int64_t>(length) > s->recv_window) {
    Reset(id, H2Error::kFlowControl);
    s = nullptr;
  } else {
    s->recv_window -= length;
  }
  data_stream_ = s;
  if (s == nullptr) ConsumeConnection(length);  // Nobody will.
  return true;
}

void H2Session::OnDataPiece(const char* p, size_t n, bool in_place) {
  const int32_t id = id_;
  if (!data_pad_known_ && n > 0) {
    data_pad_ = static_cast<uint8_t>(*p);
    data_pad_known_ = true;
    if (data_pad_ >= length_) {
      Fail(H2Error::kProtocol, "DATA whose padding is longer than the frame");
      return;
    }
    ++p;
    --n;
    --data_left_;
    if (data_stream_ != nullptr) {
      Consume(id, 1);
    } else if (data_consume_rest_) {
      ConsumeConnection(1);
    }
  }
  // The last data_pad_ bytes of the frame are padding.
  const size_t payload_left = data_left_ > data_pad_ ? data_left_ - data_pad_ : 0;
  const size_t payload = std::min(n, payload_left);
  data_left_ -= n;
  if (data_stream_ == nullptr) {
    if (data_consume_rest_) ConsumeConnection(n);
    return;
  }
  data_stream_->received += payload;
  if (data_stream_->content_length >= 0 && data_stream_->received > data_stream_->content_length) {
    Reset(id, H2Error::kProtocol);  // More DATA than its content-length said.
    data_stream_ = nullptr;
    data_consume_rest_ = true;
    ConsumeConnection(n);
    return;
  }
  if (payload > 0) {
    if (in_place) {
      listener_.OnDataInPlace(id, payload);  // DataRoom ruled out padding and an overrun.
    } else {
      listener_.OnData(id, p, payload);
    }
  }
  data_stream_ = Find(id);  // The Listener may have reset it: the rest is nobody's.
  if (data_stream_ == nullptr) {
    data_consume_rest_ = true;
    ConsumeConnection(n - payload);
  } else if (n > payload) {
    Consume(id, n - payload);
  }
}

bool H2Session::OnDataEnd() {
  Stream* s = data_stream_;
  data_stream_ = nullptr;
  if (s == nullptr || (flags_ & kFlagEndStream) == 0) return true;
  if (s->content_length >= 0 && s->received != s->content_length) {
    Reset(s->id, H2Error::kProtocol);  // Less DATA than its content-length said.
    return true;
  }
  s->remote_ended = true;
  listener_.OnRemoteEnd(s->id);
  if ((s = Find(id_)) != nullptr && s->local_ended) Close(s, H2Error::kNoError);
  return true;
}

bool H2Session::OnHeaders(uint8_t flags, int32_t id, const char* p, size_t n) {
  if (id == 0) return Fail(H2Error::kProtocol, "HEADERS on stream 0");
  size_t pos = 0;
  size_t pad = 0;
  if (flags & kFlagPadded) {
    if (n < 1) return Fail(H2Error::kFrameSize, "padded HEADERS of 0 bytes");
    pad = static_cast<uint8_t>(p[0]);
    pos = 1;
  }
  block_error_ = H2Error::kNoError;
  if (flags & kFlagPriority) {
    if (n - pos < 5) return Fail(H2Error::kFrameSize, "HEADERS too short for its priority");
    if (static_cast<int32_t>(Read32(p + pos) & 0x7fffffff) == id) block_error_ = H2Error::kProtocol;
    pos += 5;
  }
  if (pad > n - pos) return Fail(H2Error::kProtocol, "HEADERS whose padding is longer than it");
  block_id_ = id;
  block_flags_ = flags;
  block_.assign(p + pos, n - pos - pad);
  return (flags & kFlagEndHeaders) ? OnHeaderBlock() : true;
}

bool H2Session::OnContinuation(uint8_t flags, int32_t id, const char* p, size_t n) {
  if (block_id_ == 0) return Fail(H2Error::kProtocol, "CONTINUATION without HEADERS");
  if (id != block_id_) return Fail(H2Error::kProtocol, "CONTINUATION of another stream");
  // A header block is at most what its list may hold, and HPACK only ever shrinks a list by
  // so much: the bound stops a stream of CONTINUATIONs that never ends.
  if (block_.size() + n > MaxBlockBytes()) return FailBlockTooLarge();
  block_.append(p, n);
  return (flags & kFlagEndHeaders) ? OnHeaderBlock() : true;
}

H2Session::Stream* H2Session::NewStream(int32_t id) {
  Stream* s;
  if (free_.empty()) {
    s = new Stream();
  } else {
    s = free_.back().release();
    free_.pop_back();
    *s = Stream();
  }
  s->id = id;
  s->send_window = peer_stream_window_;
  s->recv_window = settings_.stream_window;
  streams_[id] = s;
  return s;
}

bool H2Session::OnHeaderBlock() {
  const int32_t id = block_id_;
  const bool end_stream = (block_flags_ & kFlagEndStream) != 0;
  block_id_ = 0;
  Stream* s = Find(id);
  const bool trailers = s != nullptr;  // A second block on an open stream, which must end it.
  bool late = false;                   // On a stream this side reset: decoded, then dropped.
  if (s == nullptr) {
    if ((id & 1) == 0) return Fail(H2Error::kProtocol, "HEADERS on an even-numbered stream");
    if (id <= last_peer_id_) {
      if (!ResetByUs(id)) return Fail(H2Error::kStreamClosed, "HEADERS on a closed stream");
      late = true;
    } else {
      last_peer_id_ = id;
      if (block_error_ == H2Error::kNoError && id <= goaway_last_id_ &&
          streams_.size() < settings_.max_concurrent_streams) {
        s = NewStream(id);
        listener_.OnBeginStream(id);
      }
    }
  }
  const bool opened = s != nullptr && !trailers;
  // Decoded whatever happens to the stream: the table must stay in step with the client's.
  FieldCheck check;
  check.trailers = trailers;
  const bool checked = last_check_whole_ && !last_check_.bad && last_check_.trailers == trailers &&
                       decoder_.SameAsLast(block_);
  if (checked) check = last_check_;
  absl::Status status;
  if (checked && opened && last_block_done_ && listener_.OnHeadersAsLast(id)) {
    status = decoder_.ListStatus();  // Decoding it would change nothing in the decoder.
  } else {
    status = decoder_.Decode(block_, [&](std::string_view n, std::string_view v) {
      if (s == nullptr || check.bad) return;
      if (!checked) check.Take(n, v);
      if (opened && !check.bad && Find(id) != nullptr) listener_.OnHeader(id, n, v);
    });
  }
  last_check_ = check;
  last_check_whole_ = s != nullptr;
  last_block_done_ = false;
  if (block_.capacity() > 4 * kMaxBlockSlack) {
    std::string().swap(block_);  // A big block's room is not kept.
  } else {
    block_.clear();
  }
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    return Fail(H2Error::kCompression, std::string(status.message()));
  }
  if (late) return true;
  if (s == nullptr) {  // Refused: past the limit of streams, after a GOAWAY, or malformed.
    // Not charged as a reset: no work started for it (the output's backlog, which stops the
    // connection's reading, bounds a flood of them).
    WriteRst(id, block_error_ != H2Error::kNoError ? block_error_ : H2Error::kRefusedStream);
    return true;
  }
  if ((s = Find(id)) == nullptr) return true;  // The Listener ended it meanwhile.
  if (trailers && s->remote_ended) {           // Half-closed (remote): whatever the block says.
    Reset(id, H2Error::kStreamClosed);
    return !failed_;
  }
  if (!check.ok()) {
    Reset(id, H2Error::kProtocol);
    return !failed_;
  }
  if (trailers) {
    if (!end_stream || (s->content_length >= 0 && s->received != s->content_length)) {
      Reset(id, H2Error::kProtocol);
    } else {
      s->remote_ended = true;
      listener_.OnRemoteEnd(id);
      if ((s = Find(id)) != nullptr && s->local_ended) Close(s, H2Error::kNoError);
    }
    return !failed_;
  }
  s->content_length = check.content_length;
  if (end_stream) {
    if (s->content_length > 0) {
      Reset(id, H2Error::kProtocol);
      return !failed_;
    }
    // Before OnHeadersDone: an answer given within it ends the stream with no reset.
    s->remote_ended = true;
  }
  last_block_done_ = true;
  listener_.OnHeadersDone(
      id, status.code() == absl::StatusCode::kResourceExhausted ? decoder_.last_list_bytes() : 0);
  if (end_stream && Find(id) != nullptr) {
    listener_.OnRemoteEnd(id);
    if ((s = Find(id)) != nullptr && s->local_ended) Close(s, H2Error::kNoError);
  }
  return true;
}

bool H2Session::OnSettings(uint8_t flags, int32_t id, const char* p, size_t n) {
  if (id != 0) return Fail(H2Error::kProtocol, "SETTINGS on a stream");
  if (flags & kFlagAck) {
    return n == 0 ? true : Fail(H2Error::kFrameSize, "a SETTINGS acknowledgement with a payload");
  }
  if (n % kSettingBytes != 0) {
    return Fail(H2Error::kFrameSize, "SETTINGS not a whole number of entries");
  }
  for (size_t i = 0; i < n; i += kSettingBytes) {
    const auto [key, value] = ReadSetting(p + i);
    switch (key) {
      case kSettingHeaderTableSize:
        encoder_.SetPeerMaxTableBytes(value);
        break;
      case kSettingEnablePush:
        if (value > 1) return Fail(H2Error::kProtocol, "SETTINGS_ENABLE_PUSH other than 0 or 1");
        break;
      case kSettingInitialWindowSize: {
        if (value > kMaxWindow) {
          return Fail(H2Error::kFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE over 2^31 - 1");
        }
        const int64_t delta = int64_t{value} - peer_stream_window_;
        for (auto& [sid, s] : streams_) {
          s->send_window += delta;
          if (s->send_window > kMaxWindow) {
            return Fail(H2Error::kFlowControl, "a stream's window over 2^31 - 1");
          }
        }
        peer_stream_window_ = value;
        break;
      }
      case kSettingMaxFrameSize:
        if (value < 16384 || value > 16777215) {
          return Fail(H2Error::kProtocol, "SETTINGS_MAX_FRAME_SIZE out of its range");
        }
        peer_max_frame_ = value;
        break;
      default:  // MAX_CONCURRENT_STREAMS and MAX_HEADER_LIST_SIZE bind a server that pushes, or
        break;  // are advice; unknown settings are ignored.
    }
  }
  greeted_ = true;
  WriteFrameHeader(0, kFrameSettings, kFlagAck, 0);
  return true;
}

bool H2Session::OnWindowUpdate(int32_t id, const char* p, size_t n) {
  if (n != 4) return Fail(H2Error::kFrameSize, "WINDOW_UPDATE of other than 4 bytes");
  const uint32_t increment = Read32(p) & 0x7fffffff;
  if (id == 0) {
    if (increment == 0) return Fail(H2Error::kProtocol, "a WINDOW_UPDATE of 0");
    send_window_ += increment;
    if (send_window_ > kMaxWindow) {
      return Fail(H2Error::kFlowControl, "the connection's window over 2^31 - 1");
    }
    return true;
  }
  Stream* s = Find(id);
  if (s == nullptr) {
    return Idle(id) ? Fail(H2Error::kProtocol, "WINDOW_UPDATE on an idle stream") : true;
  }
  if (increment == 0) {
    Reset(id, H2Error::kProtocol);
  } else if ((s->send_window += increment) > kMaxWindow) {
    Reset(id, H2Error::kFlowControl);
  }
  return true;
}

bool H2Session::OnRstStream(int32_t id, const char* p, size_t n) {
  if (n != 4) return Fail(H2Error::kFrameSize, "RST_STREAM of other than 4 bytes");
  if (id == 0) return Fail(H2Error::kProtocol, "RST_STREAM on stream 0");
  Stream* s = Find(id);
  if (s == nullptr) {
    return Idle(id) ? Fail(H2Error::kProtocol, "RST_STREAM on an idle stream") : true;
  }
  if (!ChargeReset()) return false;
  Close(s, static_cast<H2Error>(Read32(p)));
  return true;
}

bool H2Session::Fail(H2Error error, std::string_view why) {
  if (!failed_) {
    failed_ = true;
    error_ = std::string(why);
    goaway_sent_ = false;  // A graceful GOAWAY before it does not say what went wrong.
    SubmitGoaway(error, why);
  }
  return false;
}

void H2Session::WriteFrameHeader(size_t length, uint8_t type, uint8_t flags, int32_t id) {
  char h[kFrameHeaderBytes];
  ::ringkv::WriteFrameHeader(h, length, type, flags, id);
  out_.Append(std::string_view(h, kFrameHeaderBytes));
}

void H2Session::WriteHeaderBlock(int32_t id, const std::string& block, bool end_stream) {
  size_t pos = 0;
  uint8_t type = kFrameHeaders;
  do {
    const size_t n = std::min<size_t>(block.size() - pos, peer_max_frame_);
    const bool last = pos + n == block.size();
    const uint8_t flags = static_cast<uint8_t>(
        (last ? kFlagEndHeaders : 0) | (type == kFrameHeaders && end_stream ? kFlagEndStream : 0));
    WriteFrameHeader(n, type, flags, id);
    out_.Append(std::string_view(block).substr(pos, n));
    pos += n;
    type = kFrameContinuation;
  } while (pos < block.size());
}

void H2Session::WriteWindowUpdate(int32_t id, uint32_t increment) {
  WriteFrameHeader(4, kFrameWindowUpdate, 0, id);
  char p[4];
  Put32(p, increment);
  out_.Append(std::string_view(p, 4));
}

void H2Session::WriteRst(int32_t id, H2Error error) {
  reset_ids_[reset_next_++ % reset_ids_.size()] = id;  // Its late frames are ignored.
  WriteFrameHeader(4, kFrameRstStream, 0, id);
  char p[4];
  Put32(p, static_cast<uint32_t>(error));
  out_.Append(std::string_view(p, 4));
}

const std::string& H2Session::Encode(std::span<const Field> fields) {
  // The same list on an unchanged table encodes to the same block: a gRPC server's response
  // headers and its trailers of a call that succeeded, once the table holds them.
  const uint64_t changes = encoder_.table().changes();
  const bool update = encoder_.update_pending();  // Then the block starts with it: not kept.
  if (!update) {
    for (const BlockMemo& memo : memos_) {
      if (memo.changes == changes && memo.fields.size() == fields.size() &&
          std::equal(fields.begin(), fields.end(), memo.fields.begin(),
                     [](const Field& a, const auto& b) {
                       return a.first == b.first && a.second == b.second;
                     })) {
        return memo.block;
      }
    }
  }
  block_out_.clear();
  encoder_.BeginBlock(&block_out_);
  for (const auto& [name, value] : fields) {
    encoder_.Encode(name, value, IndexingOf(name), &block_out_);
  }
  if (!update && encoder_.table().changes() == changes) {  // Kept if the table stayed.
    BlockMemo& memo = memos_[next_memo_++ % memos_.size()];
    memo.fields.assign(fields.begin(), fields.end());
    memo.block = block_out_;
    memo.changes = changes;
  }
  return block_out_;
}

void H2Session::SubmitHeaders(int32_t id, std::span<const Field> fields, bool end_stream) {
  Stream* s = Find(id);
  if (s == nullptr || s->local_ended || failed_) return;
  WriteHeaderBlock(id, Encode(fields), end_stream);
  if (end_stream) EndLocal(s);
}

void H2Session::SubmitTrailers(int32_t id, std::span<const Field> fields) {
  Stream* s = Find(id);
  if (s == nullptr || s->local_ended) return;
  s->has_trailers = true;
  if (fields.size() == 1 && fields[0].first == "grpc-status" && fields[0].second == "0") {
    s->trailers_ok = true;  // The usual trailers, kept without a copy.
  } else {
    s->trailers.assign(fields.begin(), fields.end());
  }
  ResumeData(id);
}

void H2Session::ResumeData(int32_t id) {
  Stream* s = Find(id);
  if (s == nullptr || s->local_ended || s->in_ready) return;
  s->in_ready = true;
  ready_.push_back(id);
}

void H2Session::WriteData(size_t limit) {
  if (failed_) return;
  // A frame per stream in turn, so that one large response does not hold up the others.
  std::vector<int32_t> work;
  work.swap(ready_);
  size_t i = 0;
  for (; i < work.size() && out_.size() < limit; ++i) {
    const int32_t id = work[i];
    Stream* s = Find(id);
    if (s == nullptr || !s->in_ready) continue;
    const int64_t window = std::min(send_window_, s->send_window);
    const size_t max = static_cast<size_t>(std::clamp<int64_t>(window, 0, peer_max_frame_));
    if (max == 0) {  // A window closed on it: a WINDOW_UPDATE or SETTINGS lets it go on.
      ready_.push_back(id);
      continue;
    }
    bool last = false;
    const size_t n = std::min(listener_.DataReady(id, max, &last), max);
    if ((s = Find(id)) == nullptr) continue;  // The Listener ended it.
    if (n == 0 && !last) {                    // Nothing now: the Listener resumes it (ResumeData).
      s->in_ready = false;
      continue;
    }
    const bool end = last && !s->has_trailers;
    if (n > 0 || end) {
      WriteFrameHeader(n, kFrameData, end ? kFlagEndStream : 0, id);
      if (n > 0) listener_.TakeData(id, n, out_);
      send_window_ -= n;
      if ((s = Find(id)) == nullptr) continue;
      s->send_window -= n;
    }
    if (last) {
      s->in_ready = false;
      EndLocal(s);
    } else {
      work.push_back(id);  // More may be ready: its turn comes again.
    }
  }
  for (; i < work.size(); ++i) {
    if (Find(work[i]) != nullptr) ready_.push_back(work[i]);
  }
}

void H2Session::EndLocal(Stream* s) {
  if (s->trailers_ok) {
    static constexpr Field kOk[] = {{"grpc-status", "0"}};
    WriteHeaderBlock(s->id, Encode(kOk), /*end_stream=*/true);
  } else if (s->has_trailers) {
    absl::InlinedVector<Field, 4> fields(s->trailers.begin(), s->trailers.end());
    WriteHeaderBlock(s->id, Encode(fields), /*end_stream=*/true);
  }
  s->local_ended = true;
  if (!s->remote_ended) {
    // The answer is out before the request is all in (an error, or a call that did not need
    // the rest): RST_STREAM NO_ERROR stops the client sending (RFC 9113, 8.1).
    WriteRst(s->id, H2Error::kNoError);
  }
  Close(s, H2Error::kNoError);
}

void H2Session::Reset(int32_t id, H2Error error) {
  Stream* s = Find(id);
  if (s == nullptr) return;
  WriteRst(id, error);
  Close(s, error);
  // A stream the client made this side reset frees its slot as a client's reset would: the
  // same limit (CVE-2025-8671, "MadeYouReset").
  if (error != H2Error::kNoError) ChargeReset();
}

void H2Session::Close(Stream* s, H2Error error) {
  const int32_t id = s->id;
  if (streams_.erase(id) == 0) return;  // Closed already.
  if (last_found_ == s) last_found_ = nullptr;
  if (data_stream_ == s) {  // A DATA frame of it is half read: the rest is nobody's.
    data_stream_ = nullptr;
    data_consume_rest_ = true;
  }
  void* const data = s->data;
  s->trailers.clear();
  free_.emplace_back(s);
  listener_.OnStreamClose(id, error, data);
}

bool H2Session::ResetByUs(int32_t id) const {
  return std::find(reset_ids_.begin(), reset_ids_.end(), id) != reset_ids_.end();
}

bool H2Session::ChargeReset() {
  const int64_t elapsed = std::max<int64_t>(0, now_ns_ - reset_refill_ns_);
  reset_tokens_ = std::min<double>(settings_.reset_burst,
                                   reset_tokens_ + elapsed * 1e-9 * settings_.resets_per_second);
  reset_refill_ns_ = std::max(reset_refill_ns_, now_ns_);
  if (reset_tokens_ < 1) {
    Fail(H2Error::kEnhanceYourCalm,
         absl::StrCat("streams reset faster than ", settings_.resets_per_second,
                      " a second after a burst of ", settings_.reset_burst));
    return false;
  }
  reset_tokens_ -= 1;
  return true;
}

void H2Session::Consume(int32_t id, size_t length) {
  if (Stream* s = Find(id); s != nullptr && !s->remote_ended) {
    s->recv_consumed += length;
    if (s->recv_consumed >= static_cast<size_t>(settings_.stream_window) / 2) {
      WriteWindowUpdate(id, static_cast<uint32_t>(s->recv_consumed));
      s->recv_window += s->recv_consumed;
      s->recv_consumed = 0;
    }
  }
  ConsumeConnection(length);
}

void H2Session::ConsumeConnection(size_t length) {
  recv_consumed_ += length;
  if (recv_consumed_ >= static_cast<size_t>(settings_.connection_window) / 2) {
    WriteWindowUpdate(0, static_cast<uint32_t>(recv_consumed_));
    recv_window_ += recv_consumed_;
    recv_consumed_ = 0;
  }
}

void H2Session::SubmitShutdownNotice() {
  if (goaway_sent_ || notice_sent_) return;
  notice_sent_ = true;
  WriteFrameHeader(8, kFrameGoaway, 0, 0);
  char p[8];
  Put32(p, 0x7fffffff);
  Put32(p + 4, static_cast<uint32_t>(H2Error::kNoError));
  out_.Append(std::string_view(p, 8));
}

void H2Session::SubmitGoaway(H2Error error, std::string_view debug) {
  if (goaway_sent_) return;
  goaway_sent_ = true;
  // A later GOAWAY (a failure after a graceful one) may not raise the last stream id.
  goaway_last_id_ = std::min(goaway_last_id_, last_peer_id_);
  WriteFrameHeader(8 + debug.size(), kFrameGoaway, 0, 0);
  char p[8];
  Put32(p, static_cast<uint32_t>(goaway_last_id_));
  Put32(p + 4, static_cast<uint32_t>(error));
  out_.Append(std::string_view(p, 8));
  out_.Append(debug);
}

}  // namespace ringkv
