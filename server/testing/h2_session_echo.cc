// h2-session-echo: H2Session (server/h2/h2_session.h) alone behind a plaintext socket, for
// conformance suites such as h2spec before the session serves ringkv's calls. Every request that
// ends is answered 200 with its body echoed (or "ok"); nothing else is served.
//
// Usage: build/server/h2-session-echo PORT (loopback; a thread per connection, until killed)
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>

#include "server/h2/h2_session.h"

namespace {

class Echo : public ringkv::H2Session::Listener {
 public:
  Echo() : session(*this, {}, out) {}
  void OnBeginStream(int32_t id) override { bodies[id].clear(); }
  void OnHeader(int32_t, std::string_view, std::string_view) override {}
  void OnHeadersDone(int32_t, size_t) override {}
  void OnData(int32_t id, const char* data, size_t length) override {
    bodies[id].append(data, length);
    session.Consume(id, length);
  }
  void OnRemoteEnd(int32_t id) override {
    if (bodies[id].empty()) bodies[id] = "ok";
    session.SubmitHeaders(id, {{":status", "200"}, {"content-type", "text/plain"}}, false);
    session.ResumeData(id);
  }
  void OnStreamClose(int32_t id, ringkv::H2Error, void*) override { bodies.erase(id); }
  size_t DataReady(int32_t id, size_t max, bool* last) override {
    const std::string& b = bodies[id];
    const size_t n = std::min(max, b.size());
    *last = n == b.size();
    return n;
  }
  void TakeData(int32_t id, size_t length, ringkv::SendQueue& to) override {
    to.Append(std::string_view(bodies[id]).substr(0, length));
    bodies[id].erase(0, length);
  }

  ringkv::SendQueue out;
  ringkv::H2Session session;
  std::map<int32_t, std::string> bodies;
};

bool SendAll(int fd, ringkv::SendQueue& out) {
  while (!out.empty()) {
    iovec iov[ringkv::SendQueue::kMaxIovecs];
    const int n = out.Gather(iov);
    const ssize_t sent = writev(fd, iov, n);
    if (sent <= 0) return false;
    out.Consume(static_cast<size_t>(sent));
  }
  return true;
}

void Serve(int fd) {
  Echo echo;
  bool open = SendAll(fd, echo.out);
  char buf[65536];
  while (open) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    open = echo.session.Feed(buf, static_cast<size_t>(n), now);
    echo.session.WriteData(size_t{1} << 20);
    if (!SendAll(fd, echo.out)) break;
  }
  shutdown(fd, SHUT_WR);
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PORT\n", argv[0]);
    return 2;
  }
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[1])));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, 16) != 0) {
    std::perror("bind");
    return 1;
  }
  for (;;) {
    const int fd = accept(listener, nullptr, nullptr);
    if (fd >= 0) std::thread(Serve, fd).detach();
  }
}
