// ReadFlagFile: the whole of a file that a flag names (a key, a certificate, a token file, a
// --flagfile), with an error that names the flag, for the programs' start-up paths. Any thread.
//
//   std::string pem;
//   if (absl::Status s = ReadFlagFile("--tls-cert", path, &pem); !s.ok()) return s;
#ifndef RINGKV_BASE_FLAG_FILE_H_
#define RINGKV_BASE_FLAG_FILE_H_

#include <string>

#include "absl/status/status.h"

namespace ringkv {

// Reads all of `path` into `text`; INVALID_ARGUMENT "FLAG: cannot read PATH: why" if it cannot.
absl::Status ReadFlagFile(const char* flag, const std::string& path, std::string* text);

}  // namespace ringkv

#endif  // RINGKV_BASE_FLAG_FILE_H_
