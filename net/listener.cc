#include "net/listener.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ringkv {
namespace {

absl::Status CannotListen(const std::string& address, const std::string& why) {
  return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", why));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Listener>> Listener::Bind(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return CannotListen(address, "expected HOST:PORT");
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.empty() || host == "*" ? nullptr : host.c_str(), port.c_str(),
                             &hints, &found);
  if (rc != 0) return CannotListen(address, gai_strerror(rc));

  std::string why = "no address to bind";
  int fd = -1;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    // SO_REUSEADDR lets a restarted daemon bind while old connections sit in TIME_WAIT. Not
    // SO_REUSEPORT: a second daemon on the same port must fail, not share it.
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) break;
    why = errno == EADDRINUSE ? "the port is in use" : std::strerror(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0) return CannotListen(address, why);

  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port = bound.ss_family == AF_INET6
                             ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                             : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  return std::unique_ptr<Listener>(new Listener(fd, bound_port));
}

std::string PeerHost(int fd) {
  sockaddr_storage peer{};
  socklen_t len = sizeof peer;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = "";
  const void* address = nullptr;
  if (peer.ss_family == AF_INET) {
    address = &reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr;
  } else if (peer.ss_family == AF_INET6) {
    address = &reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr;
  } else {
    return "";
  }
  return inet_ntop(peer.ss_family, address, text, sizeof text) != nullptr ? text : "";
}

Listener::~Listener() { close(fd_); }

void Listener::Shutdown() { shutdown(fd_, SHUT_RDWR); }

}  // namespace ringkv
