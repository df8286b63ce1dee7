#include "persist/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace ringkv::persist {
namespace {

std::string Bytes(int n, int first, int step) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(first + i * step));
  return s;
}

// RFC 3720 (iSCSI), appendix B.4, and the check value of the CRC catalogue.
TEST(Crc32c, GivesTheStandardTestVectors) {
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62a8ab43u);
  EXPECT_EQ(Crc32c(Bytes(32, 0, 1)), 0x46dd794eu);
  EXPECT_EQ(Crc32c(Bytes(32, 31, -1)), 0x113fdb5cu);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32c, TableAndSse42AgreeAndExtendConcatenates) {
  std::mt19937_64 rng(7);
  std::string data(1000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  const bool sse42 = internal::CpuHasSse42();
  for (size_t n = 0; n <= data.size(); n += 1 + n / 16) {
    const std::string_view s(data.data(), n);
    const uint32_t table = internal::Crc32cExtendTable(0, s);
    if (sse42) {
      ASSERT_EQ(internal::Crc32cExtendSse42(0, s), table) << n;
    }
    for (size_t cut : {size_t{0}, n / 3, n}) {
      ASSERT_EQ(Crc32cExtend(Crc32c(s.substr(0, cut)), s.substr(cut)), table) << n << " " << cut;
    }
  }
  // One bit flipped anywhere changes the checksum.
  std::string flipped = data;
  const uint32_t whole = Crc32c(data);
  for (size_t bit = 0; bit < flipped.size() * 8; bit += 37) {
    flipped[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    ASSERT_NE(Crc32c(flipped), whole) << bit;
    flipped[bit / 8] ^= static_cast<char>(1 << (bit % 8));
  }
}

}  // namespace
}  // namespace ringkv::persist
