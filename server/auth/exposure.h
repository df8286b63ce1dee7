// The protected default (Redis's protected mode is the model): ringkv-server refuses to serve
// a non-loopback address with nothing that keeps strangers out, unless told --insecure.
//
// An address is loopback when every address its host resolves to is (127.0.0.0/8, ::1, or
// IPv4-mapped 127.x); a wildcard ("0.0.0.0", "[::]", "", "*") or a name that also resolves
// elsewhere is not. Control thread.
//
//   absl::Status s = CheckExposure("0.0.0.0:50051", {.tls = false, .tokens = false});
//   // FAILED_PRECONDITION: "refusing to listen on 0.0.0.0:50051 ..."
#ifndef RINGKV_SERVER_AUTH_EXPOSURE_H_
#define RINGKV_SERVER_AUTH_EXPOSURE_H_

#include <string>

#include "absl/status/status.h"

namespace ringkv {

struct Protection {
  bool tls = false;       // --tls-cert.
  bool tokens = false;    // --auth-token-file.
  bool insecure = false;  // --insecure: serve open anyway.
};

// True if `listen` (HOST:PORT, "[v6]:PORT") binds loopback addresses only.
bool IsLoopbackListen(const std::string& listen);
// OK if `listen` is loopback, or `protection` has something; FAILED_PRECONDITION with one line
// saying why and what to do otherwise.
absl::Status CheckExposure(const std::string& listen, const Protection& protection);

}  // namespace ringkv

#endif  // RINGKV_SERVER_AUTH_EXPOSURE_H_
