#include "net/openssl.h"

#include <openssl/err.h>

namespace ringkv {

std::string OpenSslErrors(const char* if_none) {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof buffer);
    if (!text.empty()) text += "; ";
    text += buffer;
  }
  return text.empty() ? if_none : text;
}

}  // namespace ringkv
