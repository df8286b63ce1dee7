#include "net/client_tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "net/openssl.h"

namespace ringkv {
namespace {

bool IsIpAddress(const std::string& host) {
  in6_addr address;
  return inet_pton(AF_INET, host.c_str(), &address) == 1 ||
         inet_pton(AF_INET6, host.c_str(), &address) == 1;
}

// A PEM password callback that has none: an encrypted key is refused, not prompted for on a
// terminal (OpenSSL's default).
int NoPassword(char*, int, int, void*) { return 0; }

}  // namespace

std::unique_ptr<ClientTls> ClientTls::New() {
  std::unique_ptr<ClientTls> tls(new ClientTls());
  ERR_clear_error();
  tls->ctx_ = SSL_CTX_new(TLS_client_method());
  if (tls->ctx_ == nullptr) return nullptr;
  SSL_CTX* ctx = tls->ctx_;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_alpn_protos(ctx, kAlpnH2, sizeof kAlpnH2);
  return tls;
}

absl::StatusOr<std::unique_ptr<ClientTls>> ClientTls::Load(const Files& files) {
  std::unique_ptr<ClientTls> tls = New();
  if (tls == nullptr) return absl::InternalError("TLS: " + OpenSslErrors());
  SSL_CTX* ctx = tls->ctx_;
  const int trusted = files.ca.empty()
                          ? SSL_CTX_set_default_verify_paths(ctx)
                          : SSL_CTX_load_verify_locations(ctx, files.ca.c_str(), nullptr);
  if (trusted != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-ca: no certificate in ", files.ca, ": ", OpenSslErrors()));
  }
  if (!files.cert.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, files.cert.c_str()) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-cert: no certificate in ", files.cert, ": ", OpenSslErrors()));
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, files.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("--tls-key: no private key of --tls-cert in ",
                                                     files.key, ": ", OpenSslErrors()));
    }
  }
  return tls;
}

absl::StatusOr<std::unique_ptr<ClientTls>> ClientTls::FromPems(const Files& pems,
                                                               std::string_view flag) {
  std::unique_ptr<ClientTls> tls = New();
  if (tls == nullptr) return absl::InternalError("TLS: " + OpenSslErrors());
  SSL_CTX* ctx = tls->ctx_;
  const std::string prefix(flag);
  auto invalid = [&](const char* which, const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "-", which, ": ", what, ": ", OpenSslErrors()));
  };
  if (pems.ca.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx) != 1) return invalid("ca", "no system CAs");
  } else {
    BIO* bio = BIO_new_mem_buf(pems.ca.data(), static_cast<int>(pems.ca.size()));
    STACK_OF(X509_INFO)* infos = PEM_X509_INFO_read_bio(bio, nullptr, NoPassword, nullptr);
    BIO_free(bio);
    int added = 0;
    X509_STORE* store = SSL_CTX_get_cert_store(ctx);
    for (int i = 0; infos != nullptr && i < sk_X509_INFO_num(infos); ++i) {
      X509_INFO* info = sk_X509_INFO_value(infos, i);
      if (info->x509 != nullptr && X509_STORE_add_cert(store, info->x509) == 1) ++added;
    }
    sk_X509_INFO_pop_free(infos, X509_INFO_free);
    if (added == 0) return invalid("ca", "no certificate in it");
  }
  if (!pems.cert.empty()) {
    BIO* bio = BIO_new_mem_buf(pems.cert.data(), static_cast<int>(pems.cert.size()));
    X509* leaf = PEM_read_bio_X509_AUX(bio, nullptr, NoPassword, nullptr);
    bool ok = leaf != nullptr && SSL_CTX_use_certificate(ctx, leaf) == 1;
    X509_free(leaf);
    // The rest of the chain, if any.
    while (ok) {
      X509* next = PEM_read_bio_X509(bio, nullptr, NoPassword, nullptr);
      if (next == nullptr) {
        // The end of the chain reads as "no start line"; anything else is a broken one.
        const unsigned long last = ERR_peek_last_error();
        ok = ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE;
        if (ok) ERR_clear_error();
        break;
      }
      if (SSL_CTX_add0_chain_cert(ctx, next) != 1) {
        X509_free(next);
        ok = false;
      }
    }
    BIO_free(bio);
    if (!ok) return invalid("cert", "no certificate in it");
    bio = BIO_new_mem_buf(pems.key.data(), static_cast<int>(pems.key.size()));
    EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, NoPassword, nullptr);
    BIO_free(bio);
    ok = key != nullptr && SSL_CTX_use_PrivateKey(ctx, key) == 1 &&
         SSL_CTX_check_private_key(ctx) == 1;
    EVP_PKEY_free(key);
    if (!ok) return invalid("key", absl::StrCat("no private key of ", prefix, "-cert in it"));
  }
  return tls;
}

ClientTls::~ClientTls() { SSL_CTX_free(ctx_); }

absl::StatusOr<SSL*> ClientTls::Connect(int fd, const std::string& host, int timeout_ms,
                                        int cancel_fd) const {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return absl::UnavailableError("TLS: " + OpenSslErrors());
  SSL_set_fd(ssl, fd);
  if (IsIpAddress(host)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl, host.c_str());
    SSL_set1_host(ssl, host.c_str());
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    ERR_clear_error();
    const int rc = SSL_connect(ssl);
    if (rc == 1) break;
    const int error = SSL_get_error(ssl, rc);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if ((error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) || left.count() <= 0) {
      std::string why = left.count() <= 0 ? "timed out" : OpenSslErrors("the connection closed");
      if (SSL_get_verify_result(ssl) != X509_V_OK) {
        why = X509_verify_cert_error_string(SSL_get_verify_result(ssl));
      }
      SSL_free(ssl);
      return absl::UnavailableError("TLS handshake failed: " + why);
    }
    pollfd p[2] = {{fd, static_cast<short>(error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0},
                   {cancel_fd, POLLIN, 0}};
    if (poll(p, 2, static_cast<int>(left.count())) > 0 && (p[1].revents & POLLIN)) {
      SSL_free(ssl);
      return absl::CancelledError("TLS handshake given up");
    }
  }
  const unsigned char* protocol = nullptr;
  unsigned int length = 0;
  SSL_get0_alpn_selected(ssl, &protocol, &length);
  if (length != 2 || protocol[0] != 'h' || protocol[1] != '2') {
    SSL_free(ssl);
    return absl::UnavailableError("TLS handshake failed: the server did not choose h2 (ALPN)");
  }
  return ssl;
}

}  // namespace ringkv
