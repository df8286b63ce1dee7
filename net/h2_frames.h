// HTTP/2's frame layout (RFC 9113, 4 and 6), shared by both of ringkv's HTTP/2 sides: the
// server's session (server/h2/h2_session.h) and the client's channel (net/h2_channel.h). Frame
// types, flags, error codes, and the 9-byte frame header. Pure; any thread.
//
//   char h[kFrameHeaderBytes];
//   WriteFrameHeader(h, payload.size(), kFrameData, kFlagEndStream, stream_id);
//   FrameHeader f = ReadFrameHeader(bytes);   // bytes holds at least kFrameHeaderBytes
#ifndef RINGKV_NET_H2_FRAMES_H_
#define RINGKV_NET_H2_FRAMES_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ringkv {

inline constexpr std::string_view kClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
inline constexpr size_t kFrameHeaderBytes = 9;
// SETTINGS_MAX_FRAME_SIZE's initial value, which ringkv's sides keep for what they receive.
inline constexpr size_t kDefaultMaxFrame = 16384;
inline constexpr int64_t kMaxWindow = 0x7fffffff;

// RFC 9113, 6: frame types.
enum : uint8_t {
  kFrameData = 0x0,
  kFrameHeaders = 0x1,
  kFramePriority = 0x2,
  kFrameRstStream = 0x3,
  kFrameSettings = 0x4,
  kFramePushPromise = 0x5,
  kFramePing = 0x6,
  kFrameGoaway = 0x7,
  kFrameWindowUpdate = 0x8,
  kFrameContinuation = 0x9,
};
// Frame flags.
enum : uint8_t {
  kFlagEndStream = 0x1,
  kFlagAck = 0x1,
  kFlagEndHeaders = 0x4,
  kFlagPadded = 0x8,
  kFlagPriority = 0x20,
};
// SETTINGS identifiers (RFC 9113, 6.5.2).
enum : uint16_t {
  kSettingHeaderTableSize = 0x1,
  kSettingEnablePush = 0x2,
  kSettingMaxConcurrentStreams = 0x3,
  kSettingInitialWindowSize = 0x4,
  kSettingMaxFrameSize = 0x5,
  kSettingMaxHeaderListSize = 0x6,
};

// RFC 9113, 7: error codes.
enum class H2Error : uint32_t {
  kNoError = 0x0,
  kProtocol = 0x1,
  kInternal = 0x2,
  kFlowControl = 0x3,
  kSettingsTimeout = 0x4,
  kStreamClosed = 0x5,
  kFrameSize = 0x6,
  kRefusedStream = 0x7,
  kCancel = 0x8,
  kCompression = 0x9,
  kEnhanceYourCalm = 0xb,
};

inline uint32_t Read32(const char* p) {
  const auto* u = reinterpret_cast<const uint8_t*>(p);
  return uint32_t{u[0]} << 24 | uint32_t{u[1]} << 16 | uint32_t{u[2]} << 8 | u[3];
}

inline void Put32(char* p, uint32_t v) {
  p[0] = static_cast<char>(v >> 24);
  p[1] = static_cast<char>(v >> 16);
  p[2] = static_cast<char>(v >> 8);
  p[3] = static_cast<char>(v);
}

// A SETTINGS entry: 6 bytes, an identifier and a value.
inline constexpr size_t kSettingBytes = 6;
struct Setting {
  uint16_t key;
  uint32_t value;
};

inline Setting ReadSetting(const char* p) {
  return {static_cast<uint16_t>(static_cast<uint8_t>(p[0]) << 8 | static_cast<uint8_t>(p[1])),
          Read32(p + 2)};
}

inline void WriteSetting(char* p, uint16_t key, uint32_t value) {
  p[0] = static_cast<char>(key >> 8);
  p[1] = static_cast<char>(key);
  Put32(p + 2, value);
}

struct FrameHeader {
  size_t length;
  uint8_t type;
  uint8_t flags;
  int32_t id;  // The reserved bit cleared.
};

inline FrameHeader ReadFrameHeader(const char* h) {
  return {Read32(h) >> 8, static_cast<uint8_t>(h[3]), static_cast<uint8_t>(h[4]),
          static_cast<int32_t>(Read32(h + 5) & 0x7fffffff)};
}

// `length` fits in 24 bits.
inline void WriteFrameHeader(char* h, size_t length, uint8_t type, uint8_t flags, int32_t id) {
  Put32(h, static_cast<uint32_t>(length) << 8 | type);
  h[4] = static_cast<char>(flags);
  Put32(h + 5, static_cast<uint32_t>(id));
}

}  // namespace ringkv

#endif  // RINGKV_NET_H2_FRAMES_H_
