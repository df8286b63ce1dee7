#include "server/tls/server_tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>

#include "absl/strings/str_cat.h"
#include "base/flag_file.h"
#include "net/openssl.h"

namespace ringkv {
namespace {

// Picks h2 if the client offers it; a client that offers ALPN without h2 is refused (HTTP/2
// over TLS is negotiated with ALPN, RFC 9113 section 3.2). One that offers none goes on.
int SelectAlpn(SSL*, const unsigned char** out, unsigned char* out_length, const unsigned char* in,
               unsigned int in_length, void*) {
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, out_length, kAlpnH2, sizeof kAlpnH2, in, in_length) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerTls>> ServerTls::Load(const Files& files) {
  std::unique_ptr<ServerTls> tls(new ServerTls());
  if (absl::Status s = ReadFlagFile("--tls-cert", files.cert, &tls->cert_pem_); !s.ok()) return s;
  if (absl::Status s = ReadFlagFile("--tls-key", files.key, &tls->key_pem_); !s.ok()) return s;
  if (!files.client_ca.empty()) {
    if (absl::Status s = ReadFlagFile("--tls-client-ca", files.client_ca, &tls->client_ca_pem_);
        !s.ok()) {
      return s;
    }
  }
  ERR_clear_error();
  tls->ctx_ = SSL_CTX_new(TLS_server_method());
  if (tls->ctx_ == nullptr) return absl::InternalError("TLS: " + OpenSslErrors());
  SSL_CTX* ctx = tls->ctx_;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // Renegotiation is off: a client could make the loop pay for handshakes at will.
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  // The output buffer may grow (move) between a partial write and its retry.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  if (SSL_CTX_use_certificate_chain_file(ctx, files.cert.c_str()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert: no certificate in ", files.cert, ": ", OpenSslErrors()));
  }
  // OpenSSL checks the key against the certificate as it loads it; a key that parses on its
  // own is then the wrong one.
  if (SSL_CTX_use_PrivateKey_file(ctx, files.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    const std::string why = OpenSslErrors();
    BIO* bio = BIO_new_mem_buf(tls->key_pem_.data(), static_cast<int>(tls->key_pem_.size()));
    EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    ERR_clear_error();
    if (key != nullptr) {
      EVP_PKEY_free(key);
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls-key ", files.key, " does not match the certificate in --tls-cert ", files.cert));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key: no private key in ", files.key, ": ", why));
  }
  if (!files.client_ca.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, files.client_ca.c_str(), nullptr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("--tls-client-ca: no certificate in ",
                                                     files.client_ca, ": ", OpenSslErrors()));
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(files.client_ca.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  SSL_CTX_set_alpn_select_cb(ctx, SelectAlpn, nullptr);
  return tls;
}

ServerTls::~ServerTls() { SSL_CTX_free(ctx_); }

SSL* ServerTls::NewSession(int fd) const {
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return nullptr;
  SSL_set_fd(ssl, fd);
  SSL_set_accept_state(ssl);
  return ssl;
}

}  // namespace ringkv
