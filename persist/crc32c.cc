#include "persist/crc32c.h"

#include <nmmintrin.h>

#include <array>
#include <cstring>

namespace ringkv::persist {
namespace internal {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78;  // Castagnoli's, bit-reversed.

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1) ? kPolynomial : 0);
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

}  // namespace

uint32_t Crc32cExtendTable(uint32_t crc, std::string_view data) {
  uint32_t c = ~crc;
  for (const char byte : data) c = kTable[(c ^ static_cast<uint8_t>(byte)) & 0xff] ^ (c >> 8);
  return ~c;
}

__attribute__((target("sse4.2"))) uint32_t Crc32cExtendSse42(uint32_t crc, std::string_view data) {
  const char* p = data.data();
  size_t n = data.size();
  uint64_t c = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof(word));
    c = _mm_crc32_u64(c, word);
  }
  auto c32 = static_cast<uint32_t>(c);
  for (; n > 0; ++p, --n) c32 = _mm_crc32_u8(c32, static_cast<uint8_t>(*p));
  return ~c32;
}

bool CpuHasSse42() { return __builtin_cpu_supports("sse4.2"); }

}  // namespace internal

uint32_t Crc32cExtend(uint32_t crc, std::string_view data) {
  static const bool kHardware = internal::CpuHasSse42();
  return kHardware ? internal::Crc32cExtendSse42(crc, data)
                   : internal::Crc32cExtendTable(crc, data);
}

}  // namespace ringkv::persist
