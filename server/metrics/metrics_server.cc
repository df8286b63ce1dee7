#include "server/metrics/metrics_server.h"

#include <poll.h>
#include <prometheus/text_serializer.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "server/auth/role.h"

namespace ringkv {
namespace {

constexpr int kIoTimeoutMs = 2000;
constexpr size_t kMaxRequestBytes = 8192;

// `extra_headers`: whole lines, each ending in CRLF.
std::string Response(const char* status, const char* content_type, const std::string& body,
                     const char* extra_headers = "") {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\n", extra_headers,
                      "Connection: close\r\n\r\n", body);
}

// The value of the first header called `name` (in any case) in a request head, without the
// whitespace around it; empty if there is none.
std::string_view HeaderValue(std::string_view head, std::string_view name) {
  size_t end = head.find("\r\n");  // The headers start after the request line.
  while (end != std::string_view::npos) {
    const size_t start = end + 2;
    end = head.find("\r\n", start);
    const absl::string_view line(head.data() + start,
                                 (end == std::string_view::npos ? head.size() : end) - start);
    const size_t colon = line.find(':');
    if (colon != absl::string_view::npos &&
        absl::EqualsIgnoreCase(line.substr(0, colon),
                               absl::string_view(name.data(), name.size()))) {
      const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
      return std::string_view(value.data(), value.size());
    }
  }
  return {};
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Waits until `fd` is ready for `events` or the deadline passes; false on timeout or error.
bool WaitFor(int fd, short events, int64_t deadline_ms) {
  const int64_t left = deadline_ms - NowMs();
  if (left <= 0) return false;
  pollfd p{fd, events, 0};
  return poll(&p, 1, static_cast<int>(left)) == 1 && (p.revents & (events | POLLHUP)) != 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Bind(const std::string& address,
                                                                   const MetricsSource& server,
                                                                   const Authenticator* tokens) {
  // The same binding rules as the gRPC port (no SO_REUSEPORT: a second server must fail).
  absl::StatusOr<std::unique_ptr<Listener>> listener = Listener::Bind(address);
  if (!listener.ok()) {
    return absl::UnavailableError(absl::StrCat("--metrics-listen: ", listener.status().message()));
  }
  return std::unique_ptr<MetricsServer>(new MetricsServer(server, tokens, *std::move(listener)));
}

void MetricsServer::Start() {
  thread_ = std::thread([this] { Run(); });
}

MetricsServer::MetricsServer(const MetricsSource& server, const Authenticator* tokens,
                             std::unique_ptr<Listener> listener)
    : metrics_(server),
      server_(server),
      tokens_(tokens),
      listener_(std::move(listener)),
      stop_fd_(eventfd(0, EFD_CLOEXEC)) {}

MetricsServer::~MetricsServer() {
  Stop();
  close(stop_fd_);
}

void MetricsServer::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof one);
  thread_.join();
}

void MetricsServer::Run() {
  for (;;) {
    pollfd fds[2] = {{listener_->fd(), POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) continue;
    if (fds[1].revents != 0) return;
    const int fd = accept4(listener_->fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) poll(nullptr, 0, 100);  // Let descriptors free up.
      continue;
    }
    Serve(fd);
    close(fd);
  }
}

void MetricsServer::Serve(int fd) {
  const int64_t deadline = NowMs() + kIoTimeoutMs;
  std::string request;
  size_t head_end = std::string::npos;
  char buffer[2048];
  // The whole head is read (the Authorization header is in it), under the same size cap and
  // deadline as the request line alone was.
  while ((head_end = request.find("\r\n\r\n")) == std::string::npos) {
    if (request.size() > kMaxRequestBytes || !WaitFor(fd, POLLIN, deadline)) return;
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  // A GET has no body to read: one request per connection.
  const std::string response = Answer(std::string_view(request).substr(0, head_end));
  size_t sent = 0;
  while (sent < response.size() && WaitFor(fd, POLLOUT, deadline + kIoTimeoutMs)) {
    const ssize_t n = send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
}

std::string MetricsServer::Answer(std::string_view head) {
  // "GET /metrics HTTP/1.1"; a query string is ignored.
  const std::string_view request_line = head.substr(0, head.find("\r\n"));
  const size_t space = request_line.find(' ');
  const std::string_view method = request_line.substr(0, space);
  std::string_view path = space == std::string_view::npos ? "" : request_line.substr(space + 1);
  path = path.substr(0, path.find(' '));
  path = path.substr(0, path.find('?'));
  if (path != "/metrics" && path != "/healthz") {
    return Response("404 Not Found", "text/plain", "not found: /metrics and /healthz are here\n");
  }
  if (method != "GET") {
    return Response("405 Method Not Allowed", "text/plain", "GET only\n");
  }
  if (path == "/healthz") {
    return server_.context().shutting_down()
               ? Response("503 Service Unavailable", "text/plain", "shutting down\n")
               : Response("200 OK", "text/plain", "ok\n");
  }
  if (tokens_ != nullptr) {
    const std::string_view authorization = HeaderValue(head, "authorization");
    if (tokens_->RoleOf(authorization) == Role::kNone) {
      // Any role may read the metrics; RFC 6750's error attribute tells a wrong token apart.
      Log(LogLevel::kDebug, "metrics: refused a scrape of /metrics: %s",
          authorization.empty() ? "no token" : "unknown token");
      return authorization.empty()
                 ? Response("401 Unauthorized", "text/plain",
                            "a token is required: send 'Authorization: Bearer TOKEN'\n",
                            "WWW-Authenticate: Bearer realm=\"ringkv-metrics\"\r\n")
                 : Response("401 Unauthorized", "text/plain", "unknown or malformed bearer token\n",
                            "WWW-Authenticate: Bearer realm=\"ringkv-metrics\", "
                            "error=\"invalid_token\"\r\n");
    }
  }
  std::ostringstream body;
  prometheus::TextSerializer().Serialize(body, metrics_.Collect());
  return Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body.str());
}

}  // namespace ringkv
