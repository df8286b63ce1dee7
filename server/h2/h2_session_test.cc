// H2Session against nghttp2's client session, in memory (the client a real HTTP/2 stack), and
// against frames written by hand for what a client should never send.
#include "server/h2/h2_session.h"

#include <nghttp2/nghttp2.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "net/hpack.h"

namespace ringkv {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

std::string Drain(SendQueue& q) {
  std::string s;
  while (!q.empty()) {
    iovec iov[SendQueue::kMaxIovecs];
    const int n = q.Gather(iov);
    size_t total = 0;
    for (int i = 0; i < n; ++i) {
      s.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
      total += iov[i].iov_len;
    }
    q.Consume(total);
  }
  return s;
}

// The server side's view: what the session told it, per stream; answers as a test asks.
class Server : public H2Session::Listener {
 public:
  struct Stream {
    Fields headers;
    bool headers_done = false;
    bool list_too_long = false;
    std::string data;
    bool remote_ended = false;
    bool closed = false;
    H2Error close_error = H2Error::kNoError;
    std::string response;  // Not yet taken by the session.
    bool response_last = false;
  };

  explicit Server(H2Session::Settings settings = {}) : session(*this, settings, out) {}

  // Answers every request when it has ended: "echo:" and its body, then grpc-status 0.
  bool echo = true;
  // Consumes request DATA as it comes.
  bool consume = true;
  // Resets a stream when its first DATA comes (without consuming it).
  bool reset_on_data = false;
  // Takes the last stream's headers again where the session offers (OnHeadersAsLast); the
  // streams that did are listed.
  bool as_last = false;
  std::vector<int32_t> as_last_ids;
  int32_t last_done_id = 0;
  // Offers a room of kRoomBytes for DATA to be read straight into (DataRoom), as a call with
  // a large message's buffer does; what comes there is counted.
  bool in_place = false;
  static constexpr size_t kRoomBytes = 777;  // Odd: frames and pieces end inside rooms.
  size_t in_place_bytes = 0;

  void Answer(int32_t id, std::string body) {
    session.SubmitHeaders(id, {{":status", "200"}, {"content-type", "application/grpc"}}, false);
    streams[id].response = std::move(body);
    streams[id].response_last = true;
    session.SubmitTrailers(id, {{"grpc-status", "0"}});
  }

  void OnBeginStream(int32_t id) override {
    streams[id] = Stream();
    session.SetStreamData(id, &streams[id]);
  }
  void OnHeader(int32_t id, std::string_view name, std::string_view value) override {
    streams[id].headers.emplace_back(name, value);
  }
  bool OnHeadersAsLast(int32_t id) override {
    if (!as_last) return false;
    as_last_ids.push_back(id);
    streams[id].headers = streams[last_done_id].headers;
    return true;
  }
  void OnHeadersDone(int32_t id, size_t list_bytes_over) override {
    last_done_id = id;
    streams[id].headers_done = true;
    streams[id].list_too_long = list_bytes_over > 0;
  }
  void OnData(int32_t id, const char* data, size_t length) override {
    streams[id].data.append(data, length);
    if (reset_on_data) {
      session.Reset(id, H2Error::kCancel);
      session.ConsumeConnection(length);  // What it took: the rest of the frame is the session's.
      return;
    }
    if (consume) session.Consume(id, length);
  }
  std::span<char> DataRoom(int32_t id, size_t want) override {
    if (!in_place) return {};
    room_id_ = id;
    room_.assign(std::min(want, kRoomBytes) + 100, '\0');  // More than asked: the session cuts.
    return std::span<char>(room_);
  }
  void OnDataInPlace(int32_t id, size_t length) override {
    EXPECT_EQ(id, room_id_);
    in_place_bytes += length;
    OnData(id, room_.data(), length);
  }
  void OnRemoteEnd(int32_t id) override {
    streams[id].remote_ended = true;
    if (echo) Answer(id, "echo:" + streams[id].data);
  }
  void OnStreamClose(int32_t id, H2Error error, void* data) override {
    EXPECT_EQ(data, &streams[id]) << "the stream's own pointer, stream " << id;
    EXPECT_EQ(session.StreamData(id), nullptr) << "gone already, stream " << id;
    streams[id].closed = true;
    streams[id].close_error = error;
  }
  size_t DataReady(int32_t id, size_t max, bool* last) override {
    Stream& s = streams[id];
    const size_t n = std::min(max, s.response.size());
    *last = s.response_last && n == s.response.size();
    return n;
  }
  void TakeData(int32_t id, size_t length, SendQueue& to) override {
    Stream& s = streams[id];
    to.Append(std::string_view(s.response).substr(0, length));
    s.response.erase(0, length);
  }

  SendQueue out;
  H2Session session;
  std::map<int32_t, Stream> streams;

 private:
  std::string room_;
  int32_t room_id_ = 0;
};

// Feeds `bytes` to the server `piece` at most at a time, as a connection reads: into the room
// the session offers (DataRoom) when it offers one. False once the session failed.
bool FeedServer(Server& server, std::string_view bytes, size_t piece) {
  bool ok = true;
  for (size_t pos = 0; ok && pos < bytes.size();) {
    const std::span<char> room = server.session.DataRoom();
    const size_t len = std::min({room.empty() ? piece : room.size(), piece, bytes.size() - pos});
    if (room.empty()) {
      ok = server.session.Feed(bytes.data() + pos, len, 0);
    } else {
      std::memcpy(room.data(), bytes.data() + pos, len);
      ok = server.session.FeedInPlace(len, 0);
    }
    pos += len;
  }
  return ok;
}

// nghttp2's client session, with what it received per stream.
class Client {
 public:
  struct Stream {
    Fields headers;  // The response's
    Fields trailers;
    std::string data;
    bool closed = false;
    uint32_t close_error = 0;
    std::string body;  // The request's, not yet sent.
  };

  explicit Client(std::vector<nghttp2_settings_entry> settings = {}) {
    nghttp2_session_callbacks* cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(
        cb, [](nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
               const uint8_t* value, size_t valuelen, uint8_t, void* self) {
          Stream& s = static_cast<Client*>(self)->streams[frame->hd.stream_id];
          (frame->headers.cat == NGHTTP2_HCAT_HEADERS ? s.trailers : s.headers)
              .emplace_back(std::string(reinterpret_cast<const char*>(name), namelen),
                            std::string(reinterpret_cast<const char*>(value), valuelen));
          return 0;
        });
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
        cb, [](nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len, void* self) {
          static_cast<Client*>(self)->streams[id].data.append(reinterpret_cast<const char*>(data),
                                                              len);
          return 0;
        });
    nghttp2_session_callbacks_set_on_stream_close_callback(
        cb, [](nghttp2_session*, int32_t id, uint32_t error, void* self) {
          Stream& s = static_cast<Client*>(self)->streams[id];
          s.closed = true;
          s.close_error = error;
          return 0;
        });
    nghttp2_session_callbacks_set_on_frame_recv_callback(
        cb, [](nghttp2_session*, const nghttp2_frame* frame, void* self) {
          auto* c = static_cast<Client*>(self);
          if (frame->hd.type == NGHTTP2_GOAWAY) c->goaway_error = frame->goaway.error_code;
          if (frame->hd.type == NGHTTP2_PING && (frame->hd.flags & NGHTTP2_FLAG_ACK)) ++c->pongs;
          return 0;
        });
    nghttp2_session_client_new(&session_, cb, this);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.data(), settings.size());
  }
  ~Client() { nghttp2_session_del(session_); }

  // A gRPC-style request with `body`, ended with it unless `end` is false.
  int32_t Call(const std::string& path, std::string body, bool end = true, Fields extra = {}) {
    Fields fields = {{":method", "POST"},
                     {":scheme", "http"},
                     {":path", path},
                     {":authority", "localhost"},
                     {"content-type", "application/grpc"},
                     {"te", "trailers"}};
    fields.insert(fields.end(), extra.begin(), extra.end());
    std::vector<nghttp2_nv> nva;
    for (auto& [n, v] : fields) {
      nva.push_back({reinterpret_cast<uint8_t*>(n.data()), reinterpret_cast<uint8_t*>(v.data()),
                     n.size(), v.size(), NGHTTP2_NV_FLAG_NONE});
    }
    nghttp2_data_provider provider;
    provider.read_callback = [](nghttp2_session* session, int32_t id, uint8_t* buf, size_t length,
                                uint32_t* flags, nghttp2_data_source*, void* self) -> ssize_t {
      auto* c = static_cast<Client*>(self);
      std::string& body = c->streams[id].body;
      const size_t n = std::min(length, body.size());
      std::memcpy(buf, body.data(), n);
      body.erase(0, n);
      if (body.empty()) {
        if (c->ends_[id]) {
          *flags |= NGHTTP2_DATA_FLAG_EOF;
        } else if (n == 0) {
          return NGHTTP2_ERR_DEFERRED;
        }
      }
      (void)session;
      return static_cast<ssize_t>(n);
    };
    const int32_t id =
        nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(), &provider, nullptr);
    streams[id].body = std::move(body);
    ends_[id] = end;
    return id;
  }
  nghttp2_session* session() { return session_; }

  std::map<int32_t, Stream> streams;
  uint32_t goaway_error = UINT32_MAX;
  int pongs = 0;

 private:
  nghttp2_session* session_;
  std::map<int32_t, bool> ends_;
};

// Moves bytes both ways until neither side has more; `piece`: the most fed to the server at once.
// False once the server's session failed.
bool Pump(Client& client, Server& server, size_t piece = SIZE_MAX) {
  bool ok = true;
  for (int round = 0; round < 10000; ++round) {
    std::string to_server;
    const uint8_t* data;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(client.session(), &data)) > 0) {
      to_server.append(reinterpret_cast<const char*>(data), n);
    }
    if (ok) ok = FeedServer(server, to_server, piece);
    server.session.WriteData(size_t{1} << 20);
    const std::string to_client = Drain(server.out);
    if (!to_client.empty()) {
      EXPECT_EQ(nghttp2_session_mem_recv(client.session(),
                                         reinterpret_cast<const uint8_t*>(to_client.data()),
                                         to_client.size()),
                static_cast<ssize_t>(to_client.size()));
    }
    if (to_server.empty() && to_client.empty()) break;
  }
  return ok;
}

std::string Value(const Fields& fields, std::string_view name) {
  for (const auto& [n, v] : fields) {
    if (n == name) return v;
  }
  return "(none)";
}

void ExpectEchoed(Client& client, Server& server, int32_t id, const std::string& body) {
  const Client::Stream& c = client.streams[id];
  EXPECT_EQ(Value(c.headers, ":status"), "200") << id;
  EXPECT_EQ(c.data, "echo:" + body) << id;
  EXPECT_EQ(Value(c.trailers, "grpc-status"), "0") << id;
  EXPECT_TRUE(c.closed) << id;
  EXPECT_EQ(c.close_error, 0u) << id;
  const Server::Stream& s = server.streams[id];
  EXPECT_EQ(s.data, body) << id;
  EXPECT_TRUE(s.closed) << id;
  EXPECT_EQ(s.close_error, H2Error::kNoError) << id;
}

TEST(H2Session, AnswersCallsFromNghttp2sClient) {
  Server server;
  Client client;
  const int32_t a = client.Call("/ringkv.v1.KV/Get", "first");
  const int32_t b = client.Call("/ringkv.v1.KV/Put", "second", true, {{"grpc-timeout", "5S"}});
  ASSERT_TRUE(Pump(client, server));
  ExpectEchoed(client, server, a, "first");
  ExpectEchoed(client, server, b, "second");
  EXPECT_EQ(Value(server.streams[a].headers, ":path"), "/ringkv.v1.KV/Get");
  EXPECT_EQ(Value(server.streams[b].headers, "grpc-timeout"), "5S");
  EXPECT_EQ(Value(server.streams[b].headers, ":method"), "POST");
  EXPECT_TRUE(server.session.greeted());
  EXPECT_EQ(server.session.open_streams(), 0u);
  // Later calls reuse the tables: the same answers again.
  const int32_t c = client.Call("/ringkv.v1.KV/Get", "third");
  ASSERT_TRUE(Pump(client, server));
  ExpectEchoed(client, server, c, "third");
}

TEST(H2Session, TakesBytesOneAtATime) {
  Server server;
  Client client;
  std::vector<int32_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(client.Call("/p", std::string(100 * i, 'x')));
  ASSERT_TRUE(Pump(client, server, /*piece=*/1));
  for (int i = 0; i < 5; ++i) ExpectEchoed(client, server, ids[i], std::string(100 * i, 'x'));
}

TEST(H2Session, FlowControlBothWaysWithSmallWindows) {
  // The server grants 65,535 bytes a stream and on the connection; the client 1,000 a stream.
  Server server({.stream_window = 65535, .connection_window = 65535});
  Client client({{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1000}});
  std::vector<std::pair<int32_t, std::string>> calls;
  for (int i = 0; i < 6; ++i) {
    std::string body(200000 + i * 977, '\0');
    for (size_t k = 0; k < body.size(); ++k) body[k] = static_cast<char>('a' + (k * 7 + i) % 26);
    calls.emplace_back(client.Call("/big", body), body);
  }
  ASSERT_TRUE(Pump(client, server));
  for (const auto& [id, body] : calls) ExpectEchoed(client, server, id, body);
}

TEST(H2Session, DataReadInPlaceArrivesWhole) {
  // nghttp2's client sends DATA of 16 KiB; the server's reads of 1,000 bytes cut them, and each
  // read inside a payload goes to the listener's room.
  Server server;
  server.in_place = true;
  Client client;
  std::vector<std::pair<int32_t, std::string>> calls;
  size_t total = 0;
  for (int i = 0; i < 4; ++i) {
    std::string body(100000 + i * 977, '\0');
    for (size_t k = 0; k < body.size(); ++k) body[k] = static_cast<char>('a' + (k * 5 + i) % 26);
    total += body.size();
    calls.emplace_back(client.Call("/big", body), body);
  }
  ASSERT_TRUE(Pump(client, server, /*piece=*/1000));
  for (const auto& [id, body] : calls) ExpectEchoed(client, server, id, body);
  EXPECT_GT(server.in_place_bytes, total / 2);
  EXPECT_LT(server.in_place_bytes, total);  // Reads that began with a frame's header did not.
}

TEST(H2Session, DataWaitsUntilTheListenerConsumes) {
  Server server({.stream_window = 65535, .connection_window = 1 << 20});
  server.consume = false;
  Client client;
  const std::string body(150000, 'b');
  const int32_t id = client.Call("/slow", body);
  ASSERT_TRUE(Pump(client, server));
  EXPECT_EQ(server.streams[id].data.size(), 65535u) << "the stream's window, no more";
  EXPECT_FALSE(server.streams[id].remote_ended);
  server.consume = true;
  server.session.Consume(id, server.streams[id].data.size());
  ASSERT_TRUE(Pump(client, server));
  ExpectEchoed(client, server, id, body);
}

TEST(H2Session, AnAnswerBeforeTheRequestsEndResetsItWithNoError) {
  Server server;
  server.echo = false;
  Client client;
  const int32_t id = client.Call("/early", "part", /*end=*/false);
  ASSERT_TRUE(Pump(client, server));
  ASSERT_TRUE(server.streams[id].headers_done);
  EXPECT_FALSE(server.session.RemoteEnded(id));
  server.Answer(id, "done");
  ASSERT_TRUE(Pump(client, server));
  EXPECT_EQ(client.streams[id].data, "done");
  EXPECT_EQ(Value(client.streams[id].trailers, "grpc-status"), "0");
  EXPECT_TRUE(client.streams[id].closed);
  EXPECT_EQ(client.streams[id].close_error, 0u);
  EXPECT_TRUE(server.streams[id].closed);
}

TEST(H2Session, AClientsResetClosesTheStream) {
  Server server;
  server.echo = false;
  Client client;
  const int32_t id = client.Call("/cancelled", "x", /*end=*/false);
  ASSERT_TRUE(Pump(client, server));
  nghttp2_submit_rst_stream(client.session(), NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
  ASSERT_TRUE(Pump(client, server));
  EXPECT_TRUE(server.streams[id].closed);
  EXPECT_EQ(server.streams[id].close_error, H2Error::kCancel);
  server.Answer(id, "too late");  // Dropped.
  ASSERT_TRUE(Pump(client, server));
  EXPECT_EQ(client.streams[id].data, "");
  EXPECT_EQ(server.session.open_streams(), 0u);
}

TEST(H2Session, PingsAreAnswered) {
  Server server;
  Client client;
  nghttp2_submit_ping(client.session(), NGHTTP2_FLAG_NONE, nullptr);
  ASSERT_TRUE(Pump(client, server));
  EXPECT_EQ(client.pongs, 1);
}

TEST(H2Session, AClientWithoutAHeaderTableGetsAnswers) {
  Server server;
  Client client({{NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 0}});
  ASSERT_TRUE(Pump(client, server));
  for (const std::string body : {"v0", "v1", "v2"}) {
    const int32_t id = client.Call("/t", body);
    ASSERT_TRUE(Pump(client, server));
    ExpectEchoed(client, server, id, body);
  }
  EXPECT_EQ(client.goaway_error, UINT32_MAX);
}

TEST(H2Session, TheClientsTableSizeChangingBetweenCallsKeepsAnswersReadable) {
  // The session keeps the blocks of its usual answers while the table stays; each new size
  // must show in the next block, not a kept one.
  Server server;
  Client client;
  int calls = 0;
  for (const uint32_t size : {4096u, 0u, 64u, 4096u, 100u}) {
    const nghttp2_settings_entry entry = {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, size};
    nghttp2_submit_settings(client.session(), NGHTTP2_FLAG_NONE, &entry, 1);
    for (int i = 0; i < 3; ++i) {
      const std::string body = "call " + std::to_string(calls++);
      const int32_t id = client.Call("/t", body);
      ASSERT_TRUE(Pump(client, server));
      ExpectEchoed(client, server, id, body);
    }
  }
  EXPECT_EQ(client.goaway_error, UINT32_MAX);
}

TEST(H2Session, AHeaderListOverTheLimitIsFlagged) {
  Server server({.max_header_list_bytes = 300});
  server.echo = false;
  Client client;
  const int32_t id = client.Call("/h", "", true, {{"x-big", std::string(400, 'z')}});
  ASSERT_TRUE(Pump(client, server));
  EXPECT_TRUE(server.streams[id].headers_done);
  EXPECT_TRUE(server.streams[id].list_too_long);
  EXPECT_EQ(Value(server.streams[id].headers, "x-big"), "(none)");
}

// Frames by hand, after a good preface and SETTINGS.
std::string Frame(uint8_t type, uint8_t flags, uint32_t id, std::string_view payload) {
  std::string f;
  const uint32_t n = static_cast<uint32_t>(payload.size());
  f += static_cast<char>(n >> 16);
  f += static_cast<char>(n >> 8);
  f += static_cast<char>(n);
  f += static_cast<char>(type);
  f += static_cast<char>(flags);
  f += static_cast<char>(id >> 24);
  f += static_cast<char>(id >> 16);
  f += static_cast<char>(id >> 8);
  f += static_cast<char>(id);
  return f + std::string(payload);
}

std::string Greeting() {
  return std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + Frame(0x4, 0, 0, "");
}

std::string RequestBlock() {
  HpackEncoder encoder;
  std::string block;
  for (const auto& [n, v] :
       Fields{{":method", "POST"}, {":scheme", "http"}, {":path", "/p"}, {":authority", "a"}}) {
    encoder.Encode(n, v, HpackEncoder::kNoIndex, &block);
  }
  return block;
}

// The GOAWAY the server queued: its error code and debug text, or UINT32_MAX.
std::pair<uint32_t, std::string> GoawayOf(const std::string& out) {
  for (size_t pos = 0; pos + 9 <= out.size();) {
    const size_t n = static_cast<uint8_t>(out[pos]) << 16 |
                     static_cast<uint8_t>(out[pos + 1]) << 8 | static_cast<uint8_t>(out[pos + 2]);
    if (out[pos + 3] == 0x7 && pos + 9 + n <= out.size()) {
      const char* p = out.data() + pos + 9;
      const uint32_t code = static_cast<uint8_t>(p[4]) << 24 | static_cast<uint8_t>(p[5]) << 16 |
                            static_cast<uint8_t>(p[6]) << 8 | static_cast<uint8_t>(p[7]);
      return {code, std::string(p + 8, n - 8)};
    }
    pos += 9 + n;
  }
  return {UINT32_MAX, ""};
}

TEST(H2Session, PaddedOrOverlongDataIsNeverReadInPlace) {
  Server server;
  server.in_place = true;
  server.echo = false;
  const std::string payload(3000, 'p');
  const std::string padded = std::string(1, '\x0a') + payload + std::string(10, '\0');
  HpackEncoder encoder;
  std::string block;
  for (const auto& [n, v] : Fields{{":method", "POST"},
                                   {":scheme", "http"},
                                   {":path", "/p"},
                                   {":authority", "a"},
                                   {"content-length", "10"}}) {
    encoder.Encode(n, v, HpackEncoder::kIndex, &block);
  }
  const std::string bytes =
      std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + Frame(0x4, 0, 0, "") +
      Frame(0x1, 0x4, 1, RequestBlock()) + Frame(0x0, 0x1 | 0x8, 1, padded) +  // PADDED.
      Frame(0x1, 0x4, 3, block) + Frame(0x0, 0x1, 3, payload);  // Past its content-length.
  ASSERT_TRUE(FeedServer(server, bytes, 100));
  EXPECT_EQ(server.streams[1].data, payload);
  EXPECT_TRUE(server.streams[1].remote_ended);
  EXPECT_TRUE(server.streams[3].closed);
  EXPECT_EQ(server.streams[3].close_error, H2Error::kProtocol);
  EXPECT_EQ(server.in_place_bytes, 0u);
}

TEST(H2Session, FramesPastTheDefaultSizeAreReadInPlaceAndResetsStopThat) {
  // One DATA frame of 200,000 bytes (the session advertises 256 KiB), read in pieces of 1,000:
  // all but the first piece go in place. Then a stream the listener resets at its first DATA:
  // the rest of that frame is nobody's, offered to nobody, and the connection goes on.
  Server server;
  server.in_place = true;
  server.echo = false;
  std::string body(200000, '\0');
  for (size_t k = 0; k < body.size(); ++k) body[k] = static_cast<char>('a' + k % 23);
  ASSERT_TRUE(FeedServer(
      server, Greeting() + Frame(0x1, 0x4, 1, RequestBlock()) + Frame(0x0, 0x1, 1, body), 1000));
  EXPECT_EQ(server.streams[1].data, body);
  EXPECT_TRUE(server.streams[1].remote_ended);
  EXPECT_GE(server.in_place_bytes, body.size() - 1000);
  const size_t before = server.in_place_bytes;
  server.reset_on_data = true;
  ASSERT_TRUE(FeedServer(
      server, Frame(0x1, 0x4, 3, RequestBlock()) + Frame(0x0, 0x1, 3, std::string(30000, 'r')),
      1000));
  EXPECT_TRUE(server.streams[3].closed);
  EXPECT_EQ(server.streams[3].close_error, H2Error::kCancel);
  EXPECT_EQ(server.streams[3].data.size(), 1000 - 18u - RequestBlock().size())
      << "the first piece only: " << server.in_place_bytes - before << " bytes in place";
  EXPECT_FALSE(server.session.failed());
}

TEST(H2Session, ConnectionErrorsEndWithAGoawayThatSaysWhy) {
  const std::string huge_header = std::string("\x04\x00\x01\x00\x00\x00\x00\x00\x01", 9);
  struct Case {
    const char* name;
    std::string bytes;  // After the greeting, unless `raw`.
    H2Error error;
    const char* why;
    bool raw = false;
  };
  const Case cases[] = {
      {"bad preface", "GET / HTTP/1.1\r\n\r\n", H2Error::kProtocol, "not an HTTP/2 client preface",
       true},
      {"first frame not SETTINGS",
       std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + Frame(0x6, 0, 0, "12345678"),
       H2Error::kProtocol, "first frame is not SETTINGS", true},
      {"frame over 256 KiB", huge_header, H2Error::kFrameSize, "a frame of 262145 bytes"},
      {"PING over 16 KiB", Frame(0x6, 0, 0, std::string(16385, 'p')), H2Error::kFrameSize,
       "only DATA and header blocks may pass 16384"},
      {"HEADERS over the block's bound", Frame(0x1, 0x4, 1, std::string(200000, 'h')),
       H2Error::kEnhanceYourCalm, "a header block over"},
      {"DATA on stream 0", Frame(0x0, 0, 0, "x"), H2Error::kProtocol, "DATA on stream 0"},
      {"DATA on an idle stream", Frame(0x0, 0, 5, "x"), H2Error::kProtocol, "idle"},
      {"HEADERS on an even stream", Frame(0x1, 0x4, 2, RequestBlock()), H2Error::kProtocol,
       "even-numbered"},
      {"WINDOW_UPDATE of 0", Frame(0x8, 0, 0, std::string(4, '\0')), H2Error::kProtocol,
       "a WINDOW_UPDATE of 0"},
      {"CONTINUATION alone", Frame(0x9, 0x4, 1, RequestBlock()), H2Error::kProtocol,
       "CONTINUATION without HEADERS"},
      {"a frame inside a header block",
       Frame(0x1, 0, 1, RequestBlock()) + Frame(0x6, 0, 0, "12345678"), H2Error::kProtocol,
       "inside a header block"},
      {"bad HPACK", Frame(0x1, 0x5, 1, "\x80"), H2Error::kCompression, "index 0"},
      {"PUSH_PROMISE", Frame(0x5, 0x4, 1, std::string(4, '\0')), H2Error::kProtocol,
       "PUSH_PROMISE"},
      {"SETTINGS of 5 bytes", Frame(0x4, 0, 0, "12345"), H2Error::kFrameSize, "whole number"},
      {"PING of 7 bytes", Frame(0x6, 0, 0, "1234567"), H2Error::kFrameSize, "PING"},
      {"HEADERS on a closed stream",
       Frame(0x1, 0x5, 3, RequestBlock()) + Frame(0x3, 0, 3, std::string(4, '\0')) +
           Frame(0x1, 0x5, 3, RequestBlock()),
       H2Error::kStreamClosed, "closed stream"},
      {"DATA whose padding is longer than it",
       Frame(0x1, 0x4, 1, RequestBlock()) + Frame(0x0, 0x8, 1, std::string("\x05xy", 3)),
       H2Error::kProtocol, "padding"},
  };
  for (const Case& c : cases) {
    Server server;
    server.echo = false;
    const std::string bytes = c.raw ? c.bytes : Greeting() + c.bytes;
    EXPECT_FALSE(server.session.Feed(bytes.data(), bytes.size(), 0)) << c.name;
    const auto [code, debug] = GoawayOf(Drain(server.out));
    EXPECT_EQ(code, static_cast<uint32_t>(c.error)) << c.name;
    EXPECT_NE(debug.find(c.why), std::string::npos) << c.name << ": " << debug;
    EXPECT_FALSE(server.session.Feed(bytes.data(), 1, 0)) << c.name << ": nothing after";
  }
}

TEST(H2Session, StreamsPastTheLimitAreRefused) {
  Server server({.max_concurrent_streams = 2});
  server.echo = false;
  std::string bytes = Greeting();
  for (uint32_t id : {1, 3, 5}) bytes += Frame(0x1, 0x4, id, RequestBlock());  // not ended
  ASSERT_TRUE(server.session.Feed(bytes.data(), bytes.size(), 0));
  EXPECT_EQ(server.session.open_streams(), 2u);
  EXPECT_FALSE(server.streams.count(5));
  const std::string out = Drain(server.out);
  EXPECT_NE(out.find(Frame(0x3, 0, 5, std::string("\0\0\0\x07", 4))), std::string::npos)
      << "RST_STREAM REFUSED_STREAM on stream 5";
}

TEST(H2Session, AFloodOfResetsEndsTheConnection) {
  Server server({.reset_burst = 10, .resets_per_second = 1});
  server.echo = false;
  std::string bytes = Greeting();
  ASSERT_TRUE(server.session.Feed(bytes.data(), bytes.size(), 0));
  bool ok = true;
  uint32_t id = 1;
  for (; ok && id < 100; id += 2) {
    bytes = Frame(0x1, 0x4, id, RequestBlock()) + Frame(0x3, 0, id, std::string("\0\0\0\x08", 4));
    ok = server.session.Feed(bytes.data(), bytes.size(), 1000);
  }
  EXPECT_FALSE(ok);
  EXPECT_EQ(id, 2 * 11 + 1u) << "the 11th reset";
  EXPECT_EQ(GoawayOf(Drain(server.out)).first, static_cast<uint32_t>(H2Error::kEnhanceYourCalm));
}

TEST(H2Session, ClientTrailersMustEndTheStream) {
  Server server;
  server.echo = false;
  const std::string bytes = Greeting() + Frame(0x1, 0x4, 1, RequestBlock()) +
                            Frame(0x1, 0x4, 1, RequestBlock());  // a second block, not ended
  ASSERT_TRUE(server.session.Feed(bytes.data(), bytes.size(), 0));
  EXPECT_TRUE(server.streams[1].closed);
  EXPECT_EQ(server.streams[1].close_error, H2Error::kProtocol);
}

TEST(H2Session, StreamsResetMidBodyGiveTheConnectionWindowBack) {
  Server server({.stream_window = 65535, .connection_window = 65535});
  server.reset_on_data = true;
  Client client;
  for (int i = 0; i < 12; ++i) client.Call("/reset", std::string(20000, 'r'));
  ASSERT_TRUE(Pump(client, server));
  server.reset_on_data = false;
  const int32_t id = client.Call("/after", std::string(60000, 'a'));
  ASSERT_TRUE(Pump(client, server));
  ExpectEchoed(client, server, id, std::string(60000, 'a'));
}

TEST(H2Session, MalformedRequestsAreResetWithProtocolError) {
  const Fields good = {
      {":method", "POST"}, {":scheme", "http"}, {":path", "/p"}, {":authority", "a"}};
  auto with = [&](Fields extra, size_t drop = SIZE_MAX) {
    Fields f = good;
    if (drop < f.size()) f.erase(f.begin() + static_cast<ptrdiff_t>(drop));
    f.insert(f.end(), extra.begin(), extra.end());
    return f;
  };
  struct Case {
    const char* name;
    Fields fields;
    std::string data;  // Sent as one DATA frame that ends the stream (none if empty).
  };
  const Case cases[] = {
      {"upper-case name", with({{"X-Up", "v"}}), ""},
      {"unknown pseudo-header", with({{":protocol", "v"}}), ""},
      {"pseudo-header after a regular one",
       Fields{{":method", "POST"}, {":scheme", "http"}, {"x", "y"}, {":path", "/p"}}, ""},
      {"response pseudo-header", with({{":status", "200"}}), ""},
      {"duplicate :path", with({{":path", "/q"}}), ""},
      {"no :method", with({}, 0), ""},
      {"no :scheme", with({}, 1), ""},
      {"no :path", with({}, 2), ""},
      {"empty :path", Fields{{":method", "POST"}, {":scheme", "http"}, {":path", ""}}, ""},
      {"connection", with({{"connection", "close"}}), ""},
      {"te other than trailers", with({{"te", "gzip"}}), ""},
      {"a value with a line feed", with({{"x", "a\nb"}}), ""},
      {"content-length over its DATA", with({{"content-length", "10"}}), "12345"},
      {"content-length under its DATA", with({{"content-length", "2"}}), "12345"},
      {"content-length not a number", with({{"content-length", "1x"}}), "1x"},
  };
  for (const Case& c : cases) {
    Server server;
    server.echo = false;
    HpackEncoder encoder;
    std::string block;
    for (const auto& [n, v] : c.fields) encoder.Encode(n, v, HpackEncoder::kNoIndex, &block);
    std::string bytes = Greeting() + Frame(0x1, c.data.empty() ? 0x5 : 0x4, 1, block);
    if (!c.data.empty()) bytes += Frame(0x0, 0x1, 1, c.data);
    ASSERT_TRUE(server.session.Feed(bytes.data(), bytes.size(), 0)) << c.name;
    EXPECT_NE(Drain(server.out).find(Frame(0x3, 0, 1, std::string("\0\0\0\x01", 4))),
              std::string::npos)
        << c.name << ": RST_STREAM PROTOCOL_ERROR";
    EXPECT_FALSE(server.streams[1].remote_ended) << c.name;
    EXPECT_EQ(server.session.open_streams(), 0u) << c.name;
  }
  // The good request, and one with a matching content-length, are taken.
  Server server;
  server.echo = false;
  HpackEncoder encoder;
  std::string block;
  for (const auto& [n, v] : with({{"content-length", "5"}, {"te", "trailers"}})) {
    encoder.Encode(n, v, HpackEncoder::kNoIndex, &block);
  }
  const std::string bytes = Greeting() + Frame(0x1, 0x4, 1, block) + Frame(0x0, 0x1, 1, "12345");
  ASSERT_TRUE(server.session.Feed(bytes.data(), bytes.size(), 0));
  EXPECT_TRUE(server.streams[1].remote_ended);
  EXPECT_EQ(server.streams[1].data, "12345");
}

// A client sends the same block call after call, and the session checks it once (the decoder
// says it is the same as the last): each stream must still be held to what it sent.
TEST(H2Session, TheSameBlockCallAfterCallIsHeldToEachStream) {
  Server server;
  server.echo = false;
  HpackEncoder encoder;
  std::string block;
  const Fields fields = {{":method", "POST"}, {":scheme", "http"},     {":path", "/p"},
                         {":authority", "a"}, {"content-length", "5"}, {"te", "trailers"}};
  for (const auto& [n, v] : fields) encoder.Encode(n, v, HpackEncoder::kNoIndex, &block);
  std::string bytes = Greeting();
  for (uint32_t id = 1; id <= 7; id += 2) {
    bytes += Frame(0x1, 0x4, id, block) + Frame(0x0, 0x1, id, "12345");
  }
  bytes += Frame(0x1, 0x4, 9, block) + Frame(0x0, 0x1, 9, "123");  // Under its content-length.
  // A stream whose trailers are that block: pseudo-header fields in trailers.
  bytes += Frame(0x1, 0x4, 11, block) + Frame(0x0, 0x0, 11, "12345") + Frame(0x1, 0x5, 11, block);
  ASSERT_TRUE(server.session.Feed(bytes.data(), bytes.size(), 0));
  for (int32_t id = 1; id <= 7; id += 2) {
    EXPECT_EQ(server.streams[id].headers, fields) << id;
    EXPECT_TRUE(server.streams[id].remote_ended) << id;
    EXPECT_EQ(server.streams[id].data, "12345") << id;
  }
  const std::string out = Drain(server.out);
  for (const uint32_t id : {9u, 11u}) {
    EXPECT_NE(out.find(Frame(0x3, 0, id, std::string("\0\0\0\x01", 4))), std::string::npos)
        << "RST_STREAM PROTOCOL_ERROR on stream " << id;
    EXPECT_FALSE(server.streams[id].remote_ended) << id;
  }
  EXPECT_EQ(out.find(Frame(0x3, 0, 7, std::string("\0\0\0\x01", 4))), std::string::npos);
}

// The session offers the last stream's headers in place of the fields only when the block is
// the same and that stream's reached OnHeadersDone.
TEST(H2Session, TheLastStreamsHeadersAreOfferedOnlyWhenTheyWereTakenWhole) {
  Server server;
  server.echo = false;
  server.as_last = true;
  HpackEncoder encoder;
  std::string block;
  const Fields fields = {{":method", "POST"},
                         {":scheme", "http"},
                         {":path", "/p"},
                         {":authority", "a"},
                         {"content-length", "5"}};
  for (const auto& [n, v] : fields) encoder.Encode(n, v, HpackEncoder::kNoIndex, &block);
  std::string bytes = Greeting();
  bytes += Frame(0x1, 0x4, 1, block) + Frame(0x0, 0x1, 1, "12345");
  bytes += Frame(0x1, 0x4, 3, block) + Frame(0x0, 0x1, 3, "12345");
  bytes += Frame(0x1, 0x5, 5, block);  // Ended with no DATA: reset before OnHeadersDone.
  bytes += Frame(0x1, 0x4, 7, block) + Frame(0x0, 0x1, 7, "12345");
  bytes += Frame(0x1, 0x4, 9, block) + Frame(0x0, 0x1, 9, "12345");
  ASSERT_TRUE(server.session.Feed(bytes.data(), bytes.size(), 0));
  EXPECT_EQ(server.as_last_ids, (std::vector<int32_t>{3, 5, 9}));
  for (const int32_t id : {1, 3, 7, 9}) {
    EXPECT_EQ(server.streams[id].headers, fields) << id;
    EXPECT_TRUE(server.streams[id].headers_done) << id;
    EXPECT_EQ(server.streams[id].data, "12345") << id;
  }
  EXPECT_FALSE(server.streams[5].headers_done);
}

}  // namespace
}  // namespace ringkv
