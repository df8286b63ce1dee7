// Crc32c: the CRC-32C (Castagnoli) checksum that frames the blocks of ringkv's data files, as
// iSCSI, ext4 and RocksDB use it (Dragonfly's AOF proposal too). Debian 12's Abseil has no
// absl/crc, so it is here: SSE4.2's crc32 instruction where the CPU has it, 8 bytes at a time,
// and a table otherwise; the two agree, and both give RFC 3720's test vectors.
//
//   uint32_t c = Crc32c("123456789");   // 0xe3069283
//   c = Crc32cExtend(c, "more bytes");   // the CRC of the concatenation
#ifndef RINGKV_PERSIST_CRC32C_H_
#define RINGKV_PERSIST_CRC32C_H_

#include <cstdint>
#include <string_view>

namespace ringkv::persist {

// The CRC of `crc`'s bytes followed by `data` (Crc32cExtend(0, data) is Crc32c(data)).
uint32_t Crc32cExtend(uint32_t crc, std::string_view data);
inline uint32_t Crc32c(std::string_view data) { return Crc32cExtend(0, data); }

namespace internal {
// The two implementations, for the test that checks they agree.
uint32_t Crc32cExtendTable(uint32_t crc, std::string_view data);
uint32_t Crc32cExtendSse42(uint32_t crc, std::string_view data);  // Only if the CPU has SSE4.2.
bool CpuHasSse42();
}  // namespace internal

}  // namespace ringkv::persist

#endif  // RINGKV_PERSIST_CRC32C_H_
