#include "net/tls_io.h"

#include <openssl/err.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace ringkv {
namespace {

// What SSL_get_error says of `rc`, the failed return of a call on `ssl`; `reading`: whether
// that call was SSL_read, the one call for which the peer's close_notify is the end of data
// rather than a failure.
TlsStatus Classify(SSL* ssl, int rc, bool reading) {
  switch (SSL_get_error(ssl, rc)) {
    case SSL_ERROR_WANT_READ:
      return TlsStatus::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return TlsStatus::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      return reading ? TlsStatus::kClosed : TlsStatus::kFailed;
    case SSL_ERROR_SYSCALL:
      return TlsStatus::kLost;
    default:
      return TlsStatus::kFailed;
  }
}

int ClampToInt(size_t length) { return static_cast<int>(std::min<size_t>(length, INT_MAX)); }

}  // namespace

TlsTransfer TlsRead(SSL* ssl, char* buffer, size_t length) {
  ERR_clear_error();
  const int n = SSL_read(ssl, buffer, ClampToInt(length));
  if (n > 0) return {TlsStatus::kOk, static_cast<size_t>(n)};
  return {Classify(ssl, n, /*reading=*/true), 0};
}

TlsTransfer TlsWrite(SSL* ssl, const char* data, size_t length) {
  ERR_clear_error();
  const int n = SSL_write(ssl, data, ClampToInt(length));
  if (n > 0) return {TlsStatus::kOk, static_cast<size_t>(n)};
  return {Classify(ssl, n, /*reading=*/false), 0};
}

TlsStatus TlsHandshake(SSL* ssl) {
  ERR_clear_error();
  const int rc = SSL_do_handshake(ssl);
  return rc == 1 ? TlsStatus::kOk : Classify(ssl, rc, /*reading=*/false);
}

ssize_t ToSocketResult(const TlsTransfer& transfer) {
  switch (transfer.status) {
    case TlsStatus::kOk:
      return static_cast<ssize_t>(transfer.bytes);
    case TlsStatus::kClosed:
      return 0;
    case TlsStatus::kWantRead:
    case TlsStatus::kWantWrite:
      errno = EAGAIN;
      return -1;
    case TlsStatus::kLost:
    case TlsStatus::kFailed:
      break;
  }
  errno = ECONNRESET;
  return -1;
}

}  // namespace ringkv
