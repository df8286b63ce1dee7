#include "server/auth/exposure.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "absl/strings/str_cat.h"

namespace ringkv {
namespace {

bool IsLoopback(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    const uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr);
    return (ip >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    const in6_addr& ip = reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&ip)) return true;
    return IN6_IS_ADDR_V4MAPPED(&ip) && ip.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace

bool IsLoopbackListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? listen : listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "*") return false;  // Every interface.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool loopback = found != nullptr;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    loopback = loopback && IsLoopback(ai->ai_addr);
  }
  freeaddrinfo(found);
  return loopback;
}

absl::Status CheckExposure(const std::string& listen, const Protection& protection) {
  if (protection.tls || protection.tokens || protection.insecure || IsLoopbackListen(listen)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to listen on ", listen,
      ", which is not a loopback address, with neither TLS nor tokens: anyone who can reach "
      "the port could read and overwrite every key. Give --auth-token-file (and "
      "--tls-cert/--tls-key, or --tls-client-ca for client certificates), listen on 127.0.0.1, "
      "or pass --insecure to serve it open anyway"));
}

}  // namespace ringkv
