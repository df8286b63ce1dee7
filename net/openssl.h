// The OpenSSL pieces both ends of ringkv's TLS share (server/tls/server_tls.h and
// net/client_tls.h): HTTP/2's ALPN id, and the thread's OpenSSL error queue as one line.
// Any thread (OpenSSL's error queue is per thread).
//
//   if (SSL_CTX_use_certificate_chain_file(ctx, path) != 1) return Error(OpenSslErrors());
#ifndef RINGKV_NET_OPENSSL_H_
#define RINGKV_NET_OPENSSL_H_

#include <string>

namespace ringkv {

// "h2" as ALPN lists it: length-prefixed.
inline constexpr unsigned char kAlpnH2[] = {2, 'h', '2'};

// Every error on this thread's OpenSSL queue, oldest first, joined with "; " (the queue is
// emptied); `if_none` when there is none.
std::string OpenSslErrors(const char* if_none = "unknown error");

}  // namespace ringkv

#endif  // RINGKV_NET_OPENSSL_H_
