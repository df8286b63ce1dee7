#include "persist/block.h"

#include <algorithm>
#include <cstring>

#include "persist/crc32c.h"

namespace ringkv::persist {
namespace {

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}
uint32_t Checksum(uint32_t seed, const char* length, std::string_view payload) {
  return Crc32cExtend(Crc32cExtend(seed, std::string_view(length, 4)), payload);
}
uint32_t LengthCheck(uint32_t seed, const char* length) {
  return Crc32cExtend(~seed, std::string_view(length, 4));
}
// A sector: the least a file system leaves unwritten after a power loss.
constexpr size_t kUnwrittenZeros = 512;

bool AllZero(std::string_view bytes) {
  for (char c : bytes) {
    if (c != 0) return false;
  }
  return true;
}

}  // namespace

void AppendBlock(std::string* out, uint32_t seed, std::string_view payload) {
  char header[kBlockHeaderBytes];
  PutU32(header, static_cast<uint32_t>(payload.size()));
  PutU32(header + 4, LengthCheck(seed, header));
  PutU32(header + 8, Checksum(seed, header, payload));
  out->append(header, sizeof(header));
  out->append(payload);
}

void SealBlock(char* block, size_t payload_bytes, uint32_t seed) {
  PutU32(block, static_cast<uint32_t>(payload_bytes));
  PutU32(block + 4, LengthCheck(seed, block));
  PutU32(block + 8,
         Checksum(seed, block, std::string_view(block + kBlockHeaderBytes, payload_bytes)));
}

bool BlockReader::Next(std::string_view* payload) {
  if (end_ != End::kNone) return false;
  const size_t left = data_.size() - offset_;
  if (left == 0) {
    end_ = End::kClean;
    return false;
  }
  if (left < kBlockHeaderBytes) {  // A header cut short can only be the last thing written.
    end_ = End::kTorn;
    return false;
  }
  const char* header = data_.data() + offset_;
  const std::string_view rest = data_.substr(offset_);
  const uint32_t length = GetU32(header);
  if (LengthCheck(seed_, header) != GetU32(header + 4)) {
    end_ = AllZero(rest) ? End::kTorn : End::kDamaged;
    return false;
  }
  if (length > kMaxBlockPayload) {  // No writer makes such a block: damage, not a tear.
    end_ = End::kDamaged;
    return false;
  }
  if (length > left - kBlockHeaderBytes) {  // Runs past the end: the last write, cut short.
    end_ = End::kTorn;
    return false;
  }
  const std::string_view body(header + kBlockHeaderBytes, length);
  if (Checksum(seed_, header, body) != GetU32(header + 8)) {
    // Whole and last, it was written whole: a failed check is a changed byte, not a write cut
    // short. Unless it ends in a run of zeros, which is how a file system shows pages it had
    // sized but not written when the power went (no writer ends a block in that many zeros
    // and a bad checksum together).
    const std::string_view after = rest.substr(kBlockHeaderBytes + length);
    const size_t zeros = std::min<size_t>(length, kUnwrittenZeros);
    end_ = AllZero(after) && zeros > 0 && AllZero(body.substr(length - zeros)) ? End::kTorn
                                                                               : End::kDamaged;
    return false;
  }
  offset_ += kBlockHeaderBytes + length;
  *payload = body;
  return true;
}

}  // namespace ringkv::persist
