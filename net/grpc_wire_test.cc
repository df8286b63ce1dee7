#include "net/grpc_wire.h"

#include <limits>

#include "gtest/gtest.h"

namespace ringkv {
namespace {

TEST(GrpcWire, MessagePrefixRoundTrips) {
  char prefix[kMessagePrefixBytes];
  for (uint32_t length : {0u, 1u, 255u, 256u, 65536u, 0x01020304u, 0xFFFFFFFFu}) {
    for (bool compressed : {false, true}) {
      WriteMessagePrefix(prefix, compressed, length);
      const MessagePrefix read = ReadMessagePrefix(prefix);
      EXPECT_EQ(read.compressed, compressed);
      EXPECT_EQ(read.length, length);
    }
  }
  WriteMessagePrefix(prefix, false, 0x01020304u);
  EXPECT_EQ(std::string(prefix, 5), std::string("\x00\x01\x02\x03\x04", 5));  // Big-endian.
}

TEST(GrpcWire, ParsesEveryTimeoutUnit) {
  EXPECT_EQ(ParseGrpcTimeout("1H"), int64_t{3'600'000'000'000});
  EXPECT_EQ(ParseGrpcTimeout("2M"), int64_t{120'000'000'000});
  EXPECT_EQ(ParseGrpcTimeout("3S"), int64_t{3'000'000'000});
  EXPECT_EQ(ParseGrpcTimeout("250m"), int64_t{250'000'000});
  EXPECT_EQ(ParseGrpcTimeout("7u"), int64_t{7'000});
  EXPECT_EQ(ParseGrpcTimeout("99999999n"), int64_t{99'999'999});
  EXPECT_EQ(ParseGrpcTimeout("0m"), int64_t{0});
  // 8 digits of hours still fit in int64 nanoseconds? No: it saturates.
  EXPECT_EQ(ParseGrpcTimeout("99999999H"), std::numeric_limits<int64_t>::max());
}

TEST(GrpcWire, RefusesMalformedTimeouts) {
  for (const char* bad : {"", "m", "10", "123456789m", "1x", "-1m", "1.5S", " 1S", "1 S"}) {
    EXPECT_EQ(ParseGrpcTimeout(bad), std::nullopt) << bad;
  }
}

TEST(GrpcWire, FormatsTimeoutsWithinEightDigitsRoundingUp) {
  EXPECT_EQ(FormatGrpcTimeout(5), "5n");
  EXPECT_EQ(FormatGrpcTimeout(99'999'999), "99999999n");
  EXPECT_EQ(FormatGrpcTimeout(100'000'000), "100000u");
  EXPECT_EQ(FormatGrpcTimeout(100'000'001), "100001u");  // Never earlier than asked.
  EXPECT_EQ(FormatGrpcTimeout(10'000'000'000), "10000000u");
  EXPECT_EQ(FormatGrpcTimeout(-3), "0n");
  for (int64_t ns : {int64_t{1}, int64_t{123'456'789}, int64_t{3'600'000'000'000},
                     int64_t{86'400'000'000'000}}) {
    const std::optional<int64_t> back = ParseGrpcTimeout(FormatGrpcTimeout(ns));
    ASSERT_TRUE(back.has_value()) << ns;
    EXPECT_GE(*back, ns);
  }
}

TEST(GrpcWire, PercentEncodingRoundTrips) {
  EXPECT_EQ(PercentEncode("key not found"), "key not found");
  EXPECT_EQ(PercentEncode("100% sure\n"), "100%25 sure%0A");
  EXPECT_EQ(PercentEncode("caf\xc3\xa9"), "caf%C3%A9");
  const std::string all = [] {
    std::string s;
    for (int c = 0; c < 256; ++c) s.push_back(static_cast<char>(c));
    return s;
  }();
  EXPECT_EQ(PercentDecode(PercentEncode(all)), all);
  EXPECT_EQ(PercentDecode("a%zzb%4"), "a%zzb%4");  // Malformed escapes stay as they are.
  EXPECT_EQ(PercentDecode("%41%62"), "Ab");
}

}  // namespace
}  // namespace ringkv
