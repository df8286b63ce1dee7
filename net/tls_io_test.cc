#include "net/tls_io.h"

#include <openssl/evp.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "net/openssl.h"

namespace ringkv {
namespace {

// A TLS session pair over a non-blocking socketpair: the server side has a self-signed P-256
// certificate made here, the client side checks nothing (what is tested is the I/O, not trust).
class TlsPair : public ::testing::Test {
 protected:
  void SetUp() override {
    std::signal(SIGPIPE, SIG_IGN);  // As the server does: a write to a closed socket fails.
    EVP_PKEY* key = EVP_EC_gen("P-256");
    ASSERT_NE(key, nullptr);
    X509* cert = X509_new();
    ASSERT_NE(cert, nullptr);
    X509_gmtime_adj(X509_getm_notBefore(cert), 0);
    X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
    X509_set_pubkey(cert, key);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("tls_io_test"), -1, -1, 0);
    X509_set_issuer_name(cert, X509_get_subject_name(cert));
    ASSERT_GT(X509_sign(cert, key, EVP_sha256()), 0);
    server_ctx_ = SSL_CTX_new(TLS_server_method());
    client_ctx_ = SSL_CTX_new(TLS_client_method());
    ASSERT_EQ(SSL_CTX_use_certificate(server_ctx_, cert), 1);
    ASSERT_EQ(SSL_CTX_use_PrivateKey(server_ctx_, key), 1);
    X509_free(cert);
    EVP_PKEY_free(key);
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    client_fd_ = fds[0];
    server_fd_ = fds[1];
    client_ = SSL_new(client_ctx_);
    server_ = SSL_new(server_ctx_);
    SSL_set_fd(client_, client_fd_);
    SSL_set_fd(server_, server_fd_);
    SSL_set_connect_state(client_);
    SSL_set_accept_state(server_);
  }

  void TearDown() override {
    SSL_free(client_);
    SSL_free(server_);
    SSL_CTX_free(client_ctx_);
    SSL_CTX_free(server_ctx_);
    if (client_fd_ >= 0) close(client_fd_);
    if (server_fd_ >= 0) close(server_fd_);
  }

  // Steps both sides until both are done; every step in between must ask for the socket.
  void Handshake() {
    TlsStatus client = TlsStatus::kWantRead;
    TlsStatus server = TlsStatus::kWantRead;
    for (int step = 0; step < 20 && (client != TlsStatus::kOk || server != TlsStatus::kOk);
         ++step) {
      if (client != TlsStatus::kOk) client = TlsHandshake(client_);
      if (server != TlsStatus::kOk) server = TlsHandshake(server_);
      ASSERT_NE(client, TlsStatus::kFailed) << OpenSslErrors();
      ASSERT_NE(server, TlsStatus::kFailed) << OpenSslErrors();
      ASSERT_NE(client, TlsStatus::kLost);
      ASSERT_NE(server, TlsStatus::kLost);
    }
    ASSERT_EQ(client, TlsStatus::kOk);
    ASSERT_EQ(server, TlsStatus::kOk);
  }

  SSL_CTX* server_ctx_ = nullptr;
  SSL_CTX* client_ctx_ = nullptr;
  SSL* client_ = nullptr;
  SSL* server_ = nullptr;
  int client_fd_ = -1;
  int server_fd_ = -1;
};

TEST(TlsIo, ToSocketResultSpeaksAsRecvAndSend) {
  EXPECT_EQ(ToSocketResult({TlsStatus::kOk, 5}), 5);
  EXPECT_EQ(ToSocketResult({TlsStatus::kClosed, 0}), 0);
  for (TlsStatus status : {TlsStatus::kWantRead, TlsStatus::kWantWrite}) {
    errno = 0;
    EXPECT_EQ(ToSocketResult({status, 0}), -1);
    EXPECT_EQ(errno, EAGAIN);
    EXPECT_FALSE((TlsTransfer{status, 0}.broken()));
  }
  for (TlsStatus status : {TlsStatus::kLost, TlsStatus::kFailed}) {
    errno = 0;
    EXPECT_EQ(ToSocketResult({status, 0}), -1);
    EXPECT_EQ(errno, ECONNRESET);
    EXPECT_TRUE((TlsTransfer{status, 0}.broken()));
  }
  EXPECT_FALSE((TlsTransfer{TlsStatus::kClosed, 0}.broken()));
}

TEST_F(TlsPair, HandshakeWaitsForTheSocketThenMovesBytesBothWays) {
  EXPECT_EQ(TlsHandshake(client_), TlsStatus::kWantRead);  // Its hello is out; no answer yet.
  ASSERT_NO_FATAL_FAILURE(Handshake());
  char buffer[64];
  const TlsTransfer nothing = TlsRead(server_, buffer, sizeof buffer);
  EXPECT_EQ(nothing.status, TlsStatus::kWantRead);
  EXPECT_EQ(nothing.bytes, 0u);
  const TlsTransfer sent = TlsWrite(client_, "ping", 4);
  EXPECT_EQ(sent.status, TlsStatus::kOk);
  EXPECT_EQ(sent.bytes, 4u);
  const TlsTransfer read = TlsRead(server_, buffer, sizeof buffer);
  ASSERT_EQ(read.status, TlsStatus::kOk);
  EXPECT_EQ(std::string(buffer, read.bytes), "ping");
  ASSERT_EQ(TlsWrite(server_, "pong", 4).bytes, 4u);
  // The client reads the server's session tickets (TLS 1.3) first, then the bytes.
  const TlsTransfer answer = TlsRead(client_, buffer, sizeof buffer);
  ASSERT_EQ(answer.status, TlsStatus::kOk);
  EXPECT_EQ(std::string(buffer, answer.bytes), "pong");
}

TEST_F(TlsPair, CloseNotifyIsTheEndOfAReadNotAFailure) {
  ASSERT_NO_FATAL_FAILURE(Handshake());
  SSL_shutdown(client_);
  char buffer[64];
  const TlsTransfer read = TlsRead(server_, buffer, sizeof buffer);
  EXPECT_EQ(read.status, TlsStatus::kClosed);
  EXPECT_FALSE(read.broken());
  EXPECT_EQ(ToSocketResult(read), 0);
}

TEST_F(TlsPair, AWriteToAClosedSocketIsLost) {
  ASSERT_NO_FATAL_FAILURE(Handshake());
  close(server_fd_);
  server_fd_ = -1;
  const TlsTransfer written = TlsWrite(client_, "ping", 4);
  EXPECT_EQ(written.status, TlsStatus::kLost);
  EXPECT_TRUE(written.broken());
  errno = 0;
  EXPECT_EQ(ToSocketResult(written), -1);
  EXPECT_EQ(errno, ECONNRESET);
}

TEST_F(TlsPair, PlaintextFailsTheHandshakeWithOpenSslsReason) {
  const char request[] = "GET / HTTP/1.1\r\n\r\n";
  ASSERT_EQ(write(client_fd_, request, std::strlen(request)),
            static_cast<ssize_t>(std::strlen(request)));
  EXPECT_EQ(TlsHandshake(server_), TlsStatus::kFailed);
  EXPECT_NE(OpenSslErrors("none"), "none");
}

}  // namespace
}  // namespace ringkv
