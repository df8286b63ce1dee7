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

// `bytes` without the zeros it ends in.
std::string_view TrimZeros(std::string_view bytes) {
  size_t end = bytes.size();
  while (end > 0 && bytes[end - 1] == 0) --end;
  return bytes.substr(0, end);
}

// The least of a block's payload, in its last sector, that a lost sector must have held for its
// zeros to count as evidence (a payload may end in a few zero bytes of its own).
constexpr size_t kLeastLostTail = 16;
// A page: where the kernel may stop a write when the process is killed.
constexpr size_t kPageBytes = 4096;

// Where the file's next sector begins after `file_offset`, as a distance from it (1 to a sector).
size_t ToNextSector(uint64_t file_offset) {
  return kUnwrittenZeros - static_cast<size_t>(file_offset % kUnwrittenZeros);
}

// Whether `payload` (at `file_offset` in the file, after a header that checks out) shows a sector
// that never reached the disk: split at the file's sector boundaries, a whole sector of it is
// zeros, or its last part (at least kLeastLostTail bytes, in a sector of its own) is. Its first
// part shares the header's sector, which did reach the disk. Or a write cut short by a kill:
// the kernel stops a write between pages, so from a page boundary of the file on, the payload
// is zeros (any number of them).
bool PayloadUnwritten(std::string_view payload, uint64_t file_offset) {
  const size_t to_page = kPageBytes - static_cast<size_t>(file_offset % kPageBytes);
  if (to_page < payload.size()) {
    const size_t last_page = to_page + (payload.size() - 1 - to_page) / kPageBytes * kPageBytes;
    if (AllZero(payload.substr(last_page))) return true;
  }
  size_t at = ToNextSector(file_offset);
  if (at == kUnwrittenZeros) at = 0;  // The payload begins a sector.
  for (; at < payload.size(); at += kUnwrittenZeros) {
    const std::string_view part = payload.substr(at, kUnwrittenZeros);
    if ((part.size() == kUnwrittenZeros || part.size() >= kLeastLostTail) && AllZero(part)) {
      return true;
    }
  }
  return false;
}

// Whether the header that begins `rest` (at `file_offset` in the file) shows a sector that never
// reached the disk: the header's whole 12 bytes and the rest of its sector are zeros, or it
// runs into the next sector and that sector is zeros (as far as `rest` goes).
bool HeaderUnwritten(std::string_view rest, uint64_t file_offset) {
  const size_t next = ToNextSector(file_offset);
  if (next >= kBlockHeaderBytes && AllZero(rest.substr(0, next))) return true;
  return next < kBlockHeaderBytes && AllZero(rest.substr(next, kUnwrittenZeros));
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

// Whether a good block (its length checked, its payload's checksum right) begins at any of the
// first `starts` bytes of `bytes` (its payload may run past them).
bool BlockReader::HoldsABlock(std::string_view bytes, size_t starts) const {
  for (size_t at = 0; at < starts && at + kBlockHeaderBytes <= bytes.size(); ++at) {
    const char* header = bytes.data() + at;
    if (LengthCheck(seed_, header) != GetU32(header + 4)) continue;
    const uint32_t length = GetU32(header);
    if (length > bytes.size() - at - kBlockHeaderBytes) continue;
    if (Checksum(seed_, header, bytes.substr(at + kBlockHeaderBytes, length)) ==
        GetU32(header + 8)) {
      return true;
    }
  }
  return false;
}

// A block at offset_ that fails its check, with bytes after it other than zeros. A power loss
// during the write of a log's last batch into the zeros it wrote ahead (persist/log_writer.h)
// leaves that when the batch's sectors reached the disk out of order: a sector of its first
// block never written, later ones written. It is a tear only if
//   - `unwritten`: a sector of the block's header, or of its payload if the header checks out,
//     is zeros (HeaderUnwritten, PayloadUnwritten);
//   - the file ends in at least a sector of zeros: the zeros written ahead, which a clean close
//     or a segment's retirement cuts off, so the rule never applies to a log closed whole;
//   - no good block begins anywhere after the block's start: a later batch is written only once
//     this one was synced (a batch of several blocks, over 4 MiB, with a later block whole is
//     refused as damage: --load-intact reads up to it);
//   - what follows fits in one block.
// Anything else is damage.
bool BlockReader::TornOutOfOrder(std::string_view rest, bool unwritten) const {
  if (!unwritten) return false;
  const std::string_view written = TrimZeros(rest);
  if (rest.size() - written.size() < kUnwrittenZeros) return false;
  if (written.size() > kBlockHeaderBytes + size_t{kMaxBlockPayload}) return false;
  // A good block after ours starts before the zeros; its own last bytes may be zeros.
  return written.size() <= 1 || !HoldsABlock(rest.substr(1), written.size() - 1);
}

bool BlockReader::Next(std::string_view* payload) {
  if (end_ != End::kNone) return false;
  const size_t left = data_.size() - offset_;
  if (left == 0) {
    end_ = End::kClean;
    return false;
  }
  const std::string_view rest = data_.substr(offset_);
  if (left < kBlockHeaderBytes) {  // A header cut short can only be the last thing written.
    end_ = End::kTorn;
    zeros_to_end_ = AllZero(rest);
    return false;
  }
  const char* header = data_.data() + offset_;
  const uint32_t length = GetU32(header);
  if (LengthCheck(seed_, header) != GetU32(header + 4)) {
    zeros_to_end_ = AllZero(rest);
    end_ = zeros_to_end_ || TornOutOfOrder(rest, HeaderUnwritten(rest, file_offset_ + offset_))
               ? End::kTorn
               : End::kDamaged;
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
    const bool ends_unwritten = AllZero(after) && zeros > 0 && AllZero(body.substr(length - zeros));
    const bool body_unwritten = PayloadUnwritten(body, file_offset_ + offset_ + kBlockHeaderBytes);
    end_ = ends_unwritten || TornOutOfOrder(rest, body_unwritten) ? End::kTorn : End::kDamaged;
    return false;
  }
  offset_ += kBlockHeaderBytes + length;
  *payload = body;
  return true;
}

}  // namespace ringkv::persist
