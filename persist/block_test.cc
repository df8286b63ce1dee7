#include "persist/block.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ringkv::persist {
namespace {

constexpr uint32_t kSeed = 0x5eed;

std::vector<std::string> Payloads() {
  std::vector<std::string> payloads;
  for (int i = 0; i < 12; ++i) {
    payloads.push_back(std::string(static_cast<size_t>(i * 7), static_cast<char>('a' + i)));
  }
  return payloads;
}

// Payloads() as a file of blocks; *ends gets where each block ends.
std::string WriteAll(std::vector<size_t>* ends) {
  std::string file;
  for (const std::string& p : Payloads()) {
    AppendBlock(&file, kSeed, p);
    ends->push_back(file.size());
  }
  return file;
}

struct Read {
  std::vector<std::string> payloads;
  BlockReader::End end;
  size_t offset;
};

Read ReadAll(std::string_view data, uint32_t seed = kSeed) {
  Read r;
  BlockReader reader(data, seed);
  for (std::string_view p; reader.Next(&p);) r.payloads.emplace_back(p);
  r.end = reader.end();
  r.offset = reader.offset();
  return r;
}

TEST(Block, RoundTripsAndEndsClean) {
  std::vector<size_t> ends;
  const std::string file = WriteAll(&ends);
  const Read r = ReadAll(file);
  EXPECT_EQ(r.payloads, Payloads());
  EXPECT_EQ(r.end, BlockReader::End::kClean);
  EXPECT_EQ(r.offset, file.size());
  EXPECT_EQ(ReadAll("").end, BlockReader::End::kClean);
}

// A file cut at any byte keeps exactly the blocks wholly before the cut, and says it is torn.
TEST(Block, ACutAnywhereKeepsTheWholeBlocksBeforeIt) {
  std::vector<size_t> ends;
  const std::string file = WriteAll(&ends);
  for (size_t cut = 0; cut < file.size(); ++cut) {
    const Read r = ReadAll(std::string_view(file).substr(0, cut));
    size_t whole = 0;
    while (whole < ends.size() && ends[whole] <= cut) ++whole;
    ASSERT_EQ(r.payloads.size(), whole) << cut;
    const bool at_a_boundary = cut == 0 || (whole > 0 && ends[whole - 1] == cut);
    ASSERT_EQ(r.end, at_a_boundary ? BlockReader::End::kClean : BlockReader::End::kTorn) << cut;
    ASSERT_EQ(r.offset, whole == 0 ? 0 : ends[whole - 1]) << cut;
  }
}

// One bit flipped anywhere: the block it hits and everything after it are refused, and the
// blocks before it are kept. Every flip is damage, in the last block too: a block that is there
// whole was written whole, so a failed check is a changed byte, not a write cut short.
TEST(Block, AFlippedBitIsNeverTakenAndIsDamageEvenInTheLastBlock) {
  std::vector<size_t> ends;
  const std::string file = WriteAll(&ends);
  for (size_t bit = 0; bit < file.size() * 8; ++bit) {
    std::string bad = file;
    bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
    const Read r = ReadAll(bad);
    size_t hit = 0;
    while (ends[hit] <= bit / 8) ++hit;
    ASSERT_EQ(r.payloads.size(), hit) << bit;
    ASSERT_EQ(r.offset, hit == 0 ? 0 : ends[hit - 1]) << bit;
    ASSERT_EQ(r.end, BlockReader::End::kDamaged) << bit;
  }
}

// A power loss can leave a file sized past pages that never reached the disk: its last block is
// whole but ends in zeros. That is a tear; the same block with a good block after it is not,
// nor is one whose zeros cover no whole sector of the file.
TEST(Block, ALastBlockEndingInUnwrittenZerosIsATear) {
  std::string file;
  AppendBlock(&file, kSeed, "kept");
  const size_t good = file.size();
  AppendBlock(&file, kSeed, std::string(3000, 'v'));
  std::fill(file.begin() + static_cast<long>(file.size() - 1024), file.end(), '\0');
  Read r = ReadAll(file);
  EXPECT_EQ(r.payloads.size(), 1u);
  EXPECT_EQ(r.end, BlockReader::End::kTorn);
  EXPECT_EQ(r.offset, good);
  std::string after = file;
  AppendBlock(&after, kSeed, "after");
  EXPECT_EQ(ReadAll(after).end, BlockReader::End::kDamaged);
  // Zeros from inside the last sector on, and not to the end: damage.
  std::fill(file.begin() + static_cast<long>(file.size() - 1024), file.end(), 'v');
  std::fill(file.end() - 500, file.end() - 1, '\0');
  EXPECT_EQ(ReadAll(file).end, BlockReader::End::kDamaged);
}

TEST(Block, AnotherFilesSeedFailsTheCheck) {
  std::string file;
  AppendBlock(&file, kSeed, "payload");
  AppendBlock(&file, kSeed, "more");
  const Read r = ReadAll(file, kSeed + 1);
  EXPECT_TRUE(r.payloads.empty());
  EXPECT_EQ(r.end, BlockReader::End::kDamaged);
}

TEST(Block, ZerosToTheEndAreATear) {
  std::string file;
  AppendBlock(&file, kSeed, "kept");
  const size_t good = file.size();
  file += std::string(4096, '\0');
  const Read r = ReadAll(file);
  EXPECT_EQ(r.payloads.size(), 1u);
  EXPECT_EQ(r.end, BlockReader::End::kTorn);
  EXPECT_EQ(r.offset, good);
  file[good + 100] = 1;  // Not zeros to the end: damage.
  EXPECT_EQ(ReadAll(file).end, BlockReader::End::kDamaged);
}

// A log with --fsync=always writes ahead into zeros, so a power loss while its last batch was
// being written can leave any of the batch's sectors unwritten (zeros), not just its last
// ones. An unwritten sector in the first block's header (or, with its header whole, in its
// payload) with no good block after it, in a file that still ends in zeros, is a tear; a good
// block after it is damage, since a later batch is only written once the one before is
// synced, and so is any of it in a file with no zeros at its end (closed whole).
TEST(Block, ABatchWhoseSectorsLandedOutOfOrderIsATear) {
  constexpr size_t kSector = 512;
  for (const size_t file_offset : {size_t{0}, size_t{100}}) {
    SCOPED_TRACE(file_offset);
    // Where a sector of the file begins, as an offset into the data.
    auto sector_after = [&](size_t at) { return at + kSector - (file_offset + at) % kSector; };
    auto read = [&](std::string_view data) {
      Read r;
      BlockReader reader(data, kSeed, file_offset);
      for (std::string_view p; reader.Next(&p);) r.payloads.emplace_back(p);
      r.end = reader.end();
      r.offset = reader.offset();
      return r;
    };
    std::string kept;
    AppendBlock(&kept, kSeed, "kept");
    const size_t good = kept.size();
    std::string torn = kept;
    AppendBlock(&torn, kSeed, std::string(3000, 'v'));
    const std::string zeros(4096, '\0');

    // The header's sector never reached the disk; the rest of the block did.
    std::string head_lost = torn;
    std::fill(head_lost.begin() + static_cast<long>(good),
              head_lost.begin() + static_cast<long>(sector_after(good)), '\0');
    Read r = read(head_lost + zeros);
    EXPECT_EQ(r.payloads.size(), 1u);
    EXPECT_EQ(r.end, BlockReader::End::kTorn);
    EXPECT_EQ(r.offset, good);
    std::string later;
    AppendBlock(&later, kSeed, "later");
    EXPECT_EQ(read(head_lost + later + zeros).end, BlockReader::End::kDamaged);
    // A later block that ends in zero bytes of its own is still found.
    std::string later_zeros;
    AppendBlock(&later_zeros, kSeed, std::string("later\0\0", 7));
    EXPECT_EQ(read(head_lost + later_zeros + zeros).end, BlockReader::End::kDamaged);
    // No zeros at the end of the file: not a log that wrote ahead, or one closed whole.
    EXPECT_EQ(read(head_lost).end, BlockReader::End::kDamaged);
    // Less than the header's whole sector zeros: a changed header, damage.
    std::string header_changed = torn;
    std::fill(header_changed.begin() + static_cast<long>(good),
              header_changed.begin() + static_cast<long>(good + kBlockHeaderBytes), '\0');
    EXPECT_EQ(read(header_changed + zeros).end, BlockReader::End::kDamaged);

    // A sector in the middle of the payload never reached the disk; the header did.
    std::string middle_lost = torn;
    const size_t middle = sector_after(good + 1000);
    std::fill(middle_lost.begin() + static_cast<long>(middle),
              middle_lost.begin() + static_cast<long>(middle + kSector), '\0');
    r = read(middle_lost + zeros);
    EXPECT_EQ(r.end, BlockReader::End::kTorn);
    EXPECT_EQ(r.offset, good);
    EXPECT_EQ(read(middle_lost + later + zeros).end, BlockReader::End::kDamaged);
    EXPECT_EQ(read(middle_lost).end, BlockReader::End::kDamaged);
    // Zeros short of a whole sector of the file: a changed payload, damage.
    std::string payload_changed = torn;
    std::fill(payload_changed.begin() + static_cast<long>(middle + 1),
              payload_changed.begin() + static_cast<long>(middle + kSector), '\0');
    EXPECT_EQ(read(payload_changed + zeros).end, BlockReader::End::kDamaged);

    // The block's last sector never reached the disk: the part of it the block ends in is zeros.
    std::string tail_lost = torn;
    const size_t last_sector = sector_after(torn.size() - kSector);
    ASSERT_GE(torn.size() - last_sector, 16u);
    std::fill(tail_lost.begin() + static_cast<long>(last_sector), tail_lost.end(), '\0');
    r = read(tail_lost + zeros);
    EXPECT_EQ(r.end, BlockReader::End::kTorn);
    EXPECT_EQ(r.offset, good);

    // A kill stopped the write at a page boundary of the file: zeros from there on, however
    // few of the block's bytes lie past it.
    std::string big = kept;
    const size_t page = 4096 - (file_offset + good + kBlockHeaderBytes) % 4096;
    AppendBlock(&big, kSeed, std::string(page + 5, 'v'));  // 5 bytes past the boundary.
    std::string cut = big;
    std::fill(cut.end() - 5, cut.end(), '\0');
    EXPECT_EQ(read(cut + zeros).end, BlockReader::End::kTorn);
    std::string short_of_page = big;  // Zeros from 4 bytes past the boundary: damage.
    std::fill(short_of_page.end() - 1, short_of_page.end(), '\0');
    EXPECT_EQ(read(short_of_page + zeros).end, BlockReader::End::kDamaged);
  }
}

TEST(Block, AnImpossibleLengthIsDamage) {
  std::string file(kBlockHeaderBytes, '\xff');  // Length 0xffffffff, over kMaxBlockPayload.
  file += std::string(100, 'x');
  EXPECT_EQ(ReadAll(file).end, BlockReader::End::kDamaged);
}

}  // namespace
}  // namespace ringkv::persist
