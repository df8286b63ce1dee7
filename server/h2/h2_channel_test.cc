// H2Channel (net/h2_channel.h), the client, against H2Session (h2_session.h), the server, over a
// real loopback TCP connection, both driven from the test's thread. The session checks
// everything the client sends (windows, stream limits, header blocks): a client that broke
// HTTP/2 would see its connection end with GOAWAY, and the calls fail.
#include "net/h2_channel.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "net/grpc_wire.h"
#include "ringkv/v1/kv.pb.h"
#include "server/h2/h2_session.h"

namespace ringkv {
namespace {

// The server: every request's DATA is echoed as it comes (its gRPC messages become the
// response's), and its end answered with grpc-status 0; "/fail" is answered trailers-only with
// NOT_FOUND. `consume` = false leaves the request's bytes unconsumed until Drain, so that the
// client runs out of window.
class EchoServer : public H2Session::Listener {
 public:
  explicit EchoServer(const H2Session::Settings& settings) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    listen(listen_fd_, 4);
    socklen_t len = sizeof addr;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    address_ = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
    settings_ = settings;
  }
  ~EchoServer() override {
    if (fd_ >= 0) close(fd_);
    close(listen_fd_);
  }

  const std::string& address() const { return address_; }
  void Accept() {
    fd_ = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    ASSERT_GE(fd_, 0);
    session_ = std::make_unique<H2Session>(*this, settings_, out_);
  }
  H2Session& session() { return *session_; }

  // Reads what the client sent, and writes what the session has.
  void Turn() {
    char buf[65536];
    for (;;) {
      const ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) break;
      if (!session_->Feed(buf, static_cast<size_t>(n), 0)) failed_ = true;
    }
    session_->WriteData(size_t{1} << 20);
    while (!out_.empty()) {
      iovec iov[SendQueue::kMaxIovecs];
      const ssize_t sent = writev(fd_, iov, out_.Gather(iov));
      if (sent <= 0) break;
      out_.Consume(static_cast<size_t>(sent));
    }
  }
  void Drain() {
    for (auto& [id, s] : streams_) {
      session_->Consume(id, s.unconsumed);
      s.unconsumed = 0;
    }
  }
  void Close() {
    close(fd_);
    fd_ = -1;
  }
  void WriteRaw(std::string_view bytes) {
    ASSERT_EQ(write(fd_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }

  bool failed() const { return failed_ || session_->failed(); }
  size_t most_streams() const { return most_streams_; }
  const std::map<int32_t, H2Error>& closed() const { return closed_; }
  bool consume = true;

  void OnBeginStream(int32_t id) override {
    streams_[id] = {};
    most_streams_ = std::max(most_streams_, session_->open_streams());
  }
  void OnHeader(int32_t id, std::string_view name, std::string_view value) override {
    if (name == ":path") streams_[id].path = std::string(value);
  }
  void OnHeadersDone(int32_t id, size_t) override {
    if (streams_[id].path == "/fail") {
      session_->SubmitHeaders(id,
                              {{":status", "200"},
                               {"content-type", "application/grpc"},
                               {"grpc-status", "5"},
                               {"grpc-message", "no%20such%20thing"}},
                              true);
      return;
    }
    session_->SubmitHeaders(id, {{":status", "200"}, {"content-type", "application/grpc"}}, false);
  }
  void OnData(int32_t id, const char* data, size_t length) override {
    Stream& s = streams_[id];
    s.body.append(data, length);
    if (consume) {
      session_->Consume(id, length);
    } else {
      s.unconsumed += length;
    }
    session_->ResumeData(id);
  }
  void OnRemoteEnd(int32_t id) override {
    session_->SubmitTrailers(id, {{"grpc-status", "0"}});
    streams_[id].ended = true;
    session_->ResumeData(id);
  }
  void OnStreamClose(int32_t id, H2Error error, void*) override {
    closed_[id] = error;
    streams_.erase(id);
  }
  size_t DataReady(int32_t id, size_t max, bool* last) override {
    const Stream& s = streams_[id];
    const size_t n = std::min(max, s.body.size());
    *last = s.ended && n == s.body.size();
    return n;
  }
  void TakeData(int32_t id, size_t length, SendQueue& to) override {
    Stream& s = streams_[id];
    to.Append(std::string_view(s.body).substr(0, length));
    s.body.erase(0, length);
  }

 private:
  struct Stream {
    std::string path;
    std::string body;  // Received, not yet echoed.
    size_t unconsumed = 0;
    bool ended = false;
  };
  int listen_fd_ = -1;
  int fd_ = -1;
  std::string address_;
  H2Session::Settings settings_;
  SendQueue out_;
  std::unique_ptr<H2Session> session_;
  std::map<int32_t, Stream> streams_;
  std::map<int32_t, H2Error> closed_;
  size_t most_streams_ = 0;
  bool failed_ = false;
};

namespace pb = ::ringkv::v1;

// What a call heard.
struct Heard : CallObserver {
  void OnMessage(std::string_view bytes) override {
    pb::GetResponse m;
    EXPECT_TRUE(m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())));
    values.push_back(m.value());
    if (on_message) on_message();
  }
  void OnFinish(const absl::Status& s) override {
    finished = true;
    status = s;
    if (on_finish) on_finish();
  }
  std::vector<std::string> values;
  bool finished = false;
  absl::Status status;
  std::function<void()> on_message;
  std::function<void()> on_finish;
};

pb::GetResponse Message(std::string value) {
  pb::GetResponse m;
  m.set_value(std::move(value));
  return m;
}

class H2ChannelTest : public ::testing::Test {
 protected:
  void Connect(const H2Session::Settings& settings = {}) {
    server_ = std::make_unique<EchoServer>(settings);
    auto channel = H2Channel::Connect(server_->address());
    ASSERT_TRUE(channel.ok()) << channel.status();
    channel_ = *std::move(channel);
    server_->Accept();
  }
  // Both sides take turns until `done`, or for `ms`.
  template <typename Done>
  bool RunUntil(Done done, int ms = 5000) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!done()) {
      if (std::chrono::steady_clock::now() > until) return false;
      channel_->Flush();
      server_->Turn();
      pollfd p{channel_->fd(), POLLIN, 0};
      if (channel_->fd() >= 0 && poll(&p, 1, 1) > 0) channel_->OnReadable();
    }
    return true;
  }

  std::unique_ptr<EchoServer> server_;
  std::unique_ptr<H2Channel> channel_;
};

TEST_F(H2ChannelTest, CallsPastTheServersStreamLimitWaitForAStream) {
  H2Session::Settings settings;
  settings.max_concurrent_streams = 8;
  Connect(settings);
  // 300 calls at once, and each of the first 100 starts another as it finishes (the loadgen's
  // way): all wait their turn, none is refused.
  constexpr int kCalls = 300;
  constexpr int kFollowing = 100;
  std::vector<Heard> heard(kCalls + kFollowing);
  auto start = [&](int i) {
    H2Channel::Call* call = channel_->StartCall("/ringkv.v1.KV/Get", &heard[i]);
    ASSERT_NE(call, nullptr);
    channel_->Send(call, Message(absl::StrCat("v", i)), /*end=*/true);
  };
  for (int i = 0; i < kCalls; ++i) {
    if (i < kFollowing) heard[i].on_finish = [&, i] { start(kCalls + i); };
    start(i);
  }
  EXPECT_EQ(channel_->open_calls(), static_cast<size_t>(kCalls));
  ASSERT_TRUE(RunUntil([&] { return heard.back().finished && channel_->open_calls() == 0; }));
  for (int i = 0; i < kCalls + kFollowing; ++i) {
    EXPECT_TRUE(heard[i].status.ok()) << i << ": " << heard[i].status;
    EXPECT_EQ(heard[i].values, std::vector<std::string>{absl::StrCat("v", i)}) << i;
  }
  EXPECT_EQ(server_->most_streams(), 8u);
  EXPECT_EQ(server_->closed().size(), static_cast<size_t>(kCalls + kFollowing));
  for (const auto& [id, error] : server_->closed()) {
    EXPECT_EQ(error, H2Error::kNoError) << "stream " << id;  // Not REFUSED_STREAM.
  }
  EXPECT_FALSE(server_->failed()) << server_->session().error();
}

TEST_F(H2ChannelTest, LargeMessagesKeepToTheServersWindows) {
  H2Session::Settings settings;
  settings.stream_window = 65535;
  settings.connection_window = 65535;
  Connect(settings);
  server_->consume = false;  // The client must stop at 64 KiB until the server reads on.
  const std::string big(3 << 20, 'x');
  Heard a, b;
  H2Channel::Call* ca = channel_->StartCall("/ringkv.v1.KV/Get", &a);
  H2Channel::Call* cb = channel_->StartCall("/ringkv.v1.KV/Get", &b);
  channel_->Send(ca, Message(big), /*end=*/true);
  channel_->Send(cb, Message("small"), /*end=*/true);
  // Not all of it goes: the windows hold it back.
  EXPECT_FALSE(RunUntil([&] { return a.finished; }, 300));
  EXPECT_FALSE(server_->failed()) << server_->session().error();
  server_->consume = true;
  server_->Drain();
  ASSERT_TRUE(RunUntil([&] { return a.finished && b.finished; }));
  EXPECT_TRUE(a.status.ok()) << a.status;
  ASSERT_EQ(a.values.size(), 1u);
  EXPECT_EQ(a.values[0], big);
  EXPECT_EQ(b.values, std::vector<std::string>{"small"});
  EXPECT_FALSE(server_->failed()) << server_->session().error();
}

TEST_F(H2ChannelTest, AStreamCarriesManyMessagesBothWays) {
  Connect();
  Heard heard;
  H2Channel::Call* call = channel_->StartCall("/ringkv.v1.KV/Stream", &heard);
  int sent = 0;
  heard.on_message = [&] {
    if (++sent < 2000) {
      channel_->Send(call, Message(std::string(sent % 700, 'a' + sent % 26)), false);
    } else if (sent == 2000) {
      channel_->CloseSend(call);
    }
  };
  channel_->Send(call, Message(""), false);
  ASSERT_TRUE(RunUntil([&] { return heard.finished; }));
  EXPECT_TRUE(heard.status.ok()) << heard.status;
  ASSERT_EQ(heard.values.size(), 2000u);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(heard.values[i], std::string(i % 700, 'a' + i % 26)) << i;
  }
}

TEST_F(H2ChannelTest, TrailersOnlyAnswersAndCancelsAreHeard) {
  Connect();
  Heard failed, cancelled, after;
  // The server answers before the request ends: the call ends there, and the client resets
  // the rest of its request (RFC 9113, 8.1).
  H2Channel::Call* c1 = channel_->StartCall("/fail", &failed);
  channel_->Send(c1, Message("q"), /*end=*/false);
  H2Channel::Call* c2 = channel_->StartCall("/ringkv.v1.KV/Stream", &cancelled);
  channel_->Send(c2, Message("q"), /*end=*/false);
  ASSERT_TRUE(RunUntil([&] { return failed.finished && cancelled.values.size() == 1; }));
  EXPECT_EQ(failed.status, absl::NotFoundError("no such thing"));
  channel_->Cancel(c2);
  EXPECT_TRUE(cancelled.finished);
  EXPECT_TRUE(absl::IsCancelled(cancelled.status)) << cancelled.status;
  // The server hears the reset, and the connection goes on.
  H2Channel::Call* c3 = channel_->StartCall("/ringkv.v1.KV/Get", &after);
  channel_->Send(c3, Message("later"), /*end=*/true);
  ASSERT_TRUE(RunUntil([&] { return after.finished && server_->closed().count(3) > 0; }));
  EXPECT_EQ(server_->closed().at(3), H2Error::kCancel);
  EXPECT_EQ(after.values, std::vector<std::string>{"later"});
  EXPECT_FALSE(server_->failed()) << server_->session().error();
}

TEST_F(H2ChannelTest, AnObserverMayCancelItsCallMidFrame) {
  Connect();
  Heard heard;
  H2Channel::Call* call = channel_->StartCall("/ringkv.v1.KV/Stream", &heard);
  heard.on_message = [&] { channel_->Cancel(call); };
  // Three messages in one DATA frame (they are echoed as they came): the first cancels.
  channel_->Send(call, Message("1"), false);
  channel_->Send(call, Message("2"), false);
  channel_->Send(call, Message("3"), false);
  ASSERT_TRUE(RunUntil([&] { return heard.finished; }));
  EXPECT_EQ(heard.values, std::vector<std::string>{"1"});
  EXPECT_TRUE(absl::IsCancelled(heard.status)) << heard.status;
}

TEST_F(H2ChannelTest, GoawayRefusesTheCallsPastItsLastStreamAndLostConnectionsFailTheRest) {
  H2Session::Settings settings;
  settings.max_concurrent_streams = 2;
  Connect(settings);
  Heard taken, refused, waiting, open;
  H2Channel::Call* c1 = channel_->StartCall("/ringkv.v1.KV/Stream", &taken);
  channel_->Send(c1, Message("1"), false);
  ASSERT_TRUE(RunUntil([&] { return taken.values.size() == 1; }));
  H2Channel::Call* c2 = channel_->StartCall("/ringkv.v1.KV/Stream", &refused);  // stream 3
  H2Channel::Call* c3 = channel_->StartCall("/ringkv.v1.KV/Get", &waiting);     // no stream
  ASSERT_NE(c2, nullptr);
  ASSERT_NE(c3, nullptr);
  EXPECT_EQ(channel_->open_calls(), 3u);
  // The server's GOAWAY names stream 1 as the last it takes, before stream 3 reaches it.
  server_->session().SubmitGoaway(H2Error::kNoError, "going");
  server_->Turn();
  ASSERT_TRUE(RunUntil([&] { return refused.finished && waiting.finished; }));
  for (const Heard* h : {&refused, &waiting}) {
    EXPECT_TRUE(absl::IsUnavailable(h->status)) << h->status;
    EXPECT_NE(h->status.message().find("GOAWAY"), std::string_view::npos) << h->status;
  }
  EXPECT_FALSE(channel_->usable());
  EXPECT_EQ(channel_->StartCall("/ringkv.v1.KV/Get", &open), nullptr);
  EXPECT_FALSE(taken.finished);
  server_->Close();
  ASSERT_TRUE(RunUntil([&] { return taken.finished; }));
  EXPECT_TRUE(absl::IsUnavailable(taken.status)) << taken.status;
}

TEST_F(H2ChannelTest, AServerThatIsNotHttp2FailsTheCalls) {
  Connect();
  server_->WriteRaw("HTTP/1.1 400 Bad Request\r\n\r\n");
  Heard heard;
  H2Channel::Call* call = channel_->StartCall("/ringkv.v1.KV/Get", &heard);
  ASSERT_NE(call, nullptr);
  channel_->Send(call, Message("q"), true);
  ASSERT_TRUE(RunUntil([&] { return heard.finished; }));
  EXPECT_TRUE(absl::IsUnavailable(heard.status)) << heard.status;
  EXPECT_NE(heard.status.message().find("made no sense"), std::string_view::npos) << heard.status;
  EXPECT_FALSE(channel_->usable());
}

}  // namespace
}  // namespace ringkv
