// ClientTls: TLS for H2Channel (ringkv-loadgen's client, a replica's): one OpenSSL client
// SSL_CTX from --tls-ca (the CAs to trust; empty: the system's), and --tls-cert/--tls-key (a
// client certificate, for a server with --tls-client-ca). Connect runs the handshake on a
// connected socket: ALPN h2, and the server's certificate must name the host dialled (DNS name
// or IP).
//
// Threads: Load (or FromPems) once; Connect from any thread (the SSL_CTX is shared read-only).
//
//   auto tls = ClientTls::Load({.ca = "ca.pem"}).value();
//   absl::StatusOr<SSL*> ssl = tls->Connect(fd, "127.0.0.1", 5000);
#ifndef RINGKV_NET_CLIENT_TLS_H_
#define RINGKV_NET_CLIENT_TLS_H_

#include <openssl/ssl.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ringkv {

class ClientTls {
 public:
  struct Files {
    std::string ca;    // PEM CAs to trust; empty: the system's.
    std::string cert;  // PEM client certificate chain; empty: none.
    std::string key;   // Its PEM private key.
  };

  // INVALID_ARGUMENT naming the flag and file if one cannot be used.
  static absl::StatusOr<std::unique_ptr<ClientTls>> Load(const Files& files);
  // As Load, from the files' contents (a replica's --primary-tls-*, read at start: `flag` is
  // the flags' prefix, for messages).
  static absl::StatusOr<std::unique_ptr<ClientTls>> FromPems(const Files& pems,
                                                             std::string_view flag);
  ~ClientTls();
  ClientTls(const ClientTls&) = delete;
  ClientTls& operator=(const ClientTls&) = delete;

  // Handshakes on `fd`, a connected non-blocking socket, waiting up to `timeout_ms` in all; the
  // caller frees the session (SSL_free). UNAVAILABLE saying why if it fails; CANCELLED once
  // `cancel_fd` (if not -1) is readable.
  absl::StatusOr<SSL*> Connect(int fd, const std::string& host, int timeout_ms,
                               int cancel_fd = -1) const;

 private:
  ClientTls() = default;
  // A client SSL_CTX, TLS 1.2 or later, ALPN h2, verifying the server; null with OpenSSL's
  // errors left for OpenSslErrors.
  static std::unique_ptr<ClientTls> New();

  SSL_CTX* ctx_ = nullptr;
};

}  // namespace ringkv

#endif  // RINGKV_NET_CLIENT_TLS_H_
