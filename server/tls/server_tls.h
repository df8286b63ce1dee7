// ServerTls: the server's TLS (--tls-cert, --tls-key, --tls-client-ca), read once at start.
// For the h2 transport it is one OpenSSL SSL_CTX that every connection's session comes from:
// TLS 1.2 or later, ALPN `h2` (a client that offers ALPN without h2 is refused in the
// handshake), and with a client CA, a certificate signed by it required of every client (mTLS).
// For the grpc++ transport it hands over the PEM text of the same files.
//
// Errors at load name the flag and the file: a missing file, one that holds no certificate or
// key, a key that does not match the certificate.
//
// Threads: Load on the control thread; NewSession from any loop thread (an SSL_CTX may be
// shared once set up).
//
//   auto tls = ServerTls::Load({.cert = "server.pem", .key = "server.key"}).value();
//   SSL* ssl = tls->NewSession(fd);   // then SSL_do_handshake as the socket allows
#ifndef RINGKV_SERVER_TLS_SERVER_TLS_H_
#define RINGKV_SERVER_TLS_SERVER_TLS_H_

#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ringkv {

class ServerTls {
 public:
  struct Files {
    std::string cert;       // PEM: the server's certificate, then any intermediates.
    std::string key;        // PEM: its private key.
    std::string client_ca;  // PEM: CAs whose client certificates are accepted; empty: no mTLS.
  };

  // INVALID_ARGUMENT naming the flag and file if one cannot be used.
  static absl::StatusOr<std::unique_ptr<ServerTls>> Load(const Files& files);
  ~ServerTls();
  ServerTls(const ServerTls&) = delete;
  ServerTls& operator=(const ServerTls&) = delete;

  // A server session on the accepted socket `fd`; the caller frees it (SSL_free).
  SSL* NewSession(int fd) const;
  bool mutual() const { return !client_ca_pem_.empty(); }

  // The files' text, for grpc++'s SslServerCredentials.
  const std::string& cert_pem() const { return cert_pem_; }
  const std::string& key_pem() const { return key_pem_; }
  const std::string& client_ca_pem() const { return client_ca_pem_; }

 private:
  ServerTls() = default;

  SSL_CTX* ctx_ = nullptr;
  std::string cert_pem_;
  std::string key_pem_;
  std::string client_ca_pem_;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_TLS_SERVER_TLS_H_
