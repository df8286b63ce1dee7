// TLS reads, writes and handshake steps on a non-blocking socket, and what OpenSSL's answer
// means, decided once for both ends of ringkv's HTTP/2 (server/h2/connection.h and
// net/h2_channel.h). Each call clears the thread's OpenSSL error queue first, so that
// SSL_get_error and, after kFailed, OpenSslErrors() (net/openssl.h) speak of this call only.
//
// The mapping of SSL_get_error:
//   WANT_READ, WANT_WRITE   kWantRead, kWantWrite: nothing moved; call again once the socket is
//                           readable (writable). Either may come from any call: a read may
//                           need to write (a renegotiation, a key update) and a write to read.
//   ZERO_RETURN             kClosed on a read: the peer's close_notify, it sends nothing more.
//                           A write or handshake that meets it failed: kFailed.
//   SYSCALL                 kLost: the socket failed, or the peer closed it without
//                           close_notify; OpenSSL's queue rarely says more.
//   anything else           kFailed: a TLS error (a bad record, a refused certificate, no
//                           ALPN match); OpenSslErrors() says which.
// ToSocketResult turns a read's or write's outcome into what recv(2) and send(2) return, for
// callers that treat TLS and plain sockets alike.
//
// Threads: any thread, one at a time per SSL (OpenSSL's rule for a session); the error queue
// is the calling thread's.
//
//   const TlsTransfer read = TlsRead(ssl, buffer, sizeof buffer);
//   if (read.status == TlsStatus::kWantWrite) WatchWritable();
//   const ssize_t n = ToSocketResult(read);  // As recv: > 0, 0, or -1 with errno.
#ifndef RINGKV_NET_TLS_IO_H_
#define RINGKV_NET_TLS_IO_H_

#include <openssl/ssl.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace ringkv {

enum class TlsStatus : uint8_t {
  kOk,         // Bytes moved (at least one), or the handshake is done.
  kWantRead,   // Not now: again once the socket is readable.
  kWantWrite,  // Not now: again once the socket is writable.
  kClosed,     // Reads only: the peer's close_notify.
  kLost,       // SSL_ERROR_SYSCALL: the socket failed or closed under the session.
  kFailed,     // A TLS error, on OpenSSL's queue for OpenSslErrors().
};

// The outcome of one read or write.
struct TlsTransfer {
  TlsStatus status;
  size_t bytes;  // With kOk: how many were read or written; 0 otherwise.

  // The session cannot go on (kLost or kFailed); the caller closes the connection.
  bool broken() const { return status == TlsStatus::kLost || status == TlsStatus::kFailed; }
};

// SSL_read into `buffer`: up to `length` bytes, and at most INT_MAX.
TlsTransfer TlsRead(SSL* ssl, char* buffer, size_t length);
// SSL_write of `data`: up to `length` bytes, and at most INT_MAX; fewer if the session has
// SSL_MODE_ENABLE_PARTIAL_WRITE (both ends set it) and the socket took fewer.
TlsTransfer TlsWrite(SSL* ssl, const char* data, size_t length);
// One step of SSL_do_handshake: kOk once done; kWantRead or kWantWrite to go on; kLost or
// kFailed if it failed.
TlsStatus TlsHandshake(SSL* ssl);

// As recv(2) and send(2) say it: the bytes for kOk; 0 for kClosed; -1 otherwise, with errno
// EAGAIN (kWantRead, kWantWrite) or ECONNRESET (kLost, kFailed).
ssize_t ToSocketResult(const TlsTransfer& transfer);

}  // namespace ringkv

#endif  // RINGKV_NET_TLS_IO_H_
