// The parts of gRPC over HTTP/2 that are not HTTP/2 itself, shared by the server's h2
// transport (server/h2/) and the client (net/h2_channel.h), after gRPC's protocol
// description (doc/PROTOCOL-HTTP2.md in gRPC's repository):
//   - every message goes as a 5-byte prefix (a compressed flag, a big-endian length) and then
//     its bytes;
//   - grpc-timeout is 1 to 8 digits and a unit (H, M, S, m, u, n);
//   - grpc-message is percent-encoded: bytes outside printable ASCII, and '%', as %XX.
// Pure functions; any thread.
//
//   char prefix[kMessagePrefixBytes];
//   WriteMessagePrefix(prefix, /*compressed=*/false, size);
//   std::optional<int64_t> ns = ParseGrpcTimeout("250m");  // 250'000'000
#ifndef RINGKV_NET_GRPC_WIRE_H_
#define RINGKV_NET_GRPC_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ringkv {

inline constexpr size_t kMessagePrefixBytes = 5;

struct MessagePrefix {
  bool compressed;
  uint32_t length;
};

inline void WriteMessagePrefix(char* out, bool compressed, uint32_t length) {
  out[0] = compressed ? 1 : 0;
  out[1] = static_cast<char>(length >> 24);
  out[2] = static_cast<char>(length >> 16);
  out[3] = static_cast<char>(length >> 8);
  out[4] = static_cast<char>(length);
}

// `in` holds at least kMessagePrefixBytes bytes.
inline MessagePrefix ReadMessagePrefix(const char* in) {
  const auto* b = reinterpret_cast<const unsigned char*>(in);
  return {b[0] != 0,
          (uint32_t{b[1]} << 24) | (uint32_t{b[2]} << 16) | (uint32_t{b[3]} << 8) | uint32_t{b[4]}};
}

// A grpc-timeout value in nanoseconds (saturating at about 292 years), or nullopt if it is not
// 1 to 8 digits followed by one of H, M, S, m, u, n.
std::optional<int64_t> ParseGrpcTimeout(std::string_view value);

// A timeout as a grpc-timeout value: the finest unit that keeps it within 8 digits.
std::string FormatGrpcTimeout(int64_t nanoseconds);

// grpc-message's encoding, and its reverse (a malformed %XX is kept as it is).
std::string PercentEncode(std::string_view text);
std::string PercentDecode(std::string_view text);

}  // namespace ringkv

#endif  // RINGKV_NET_GRPC_WIRE_H_
