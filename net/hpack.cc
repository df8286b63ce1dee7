// HPACK: see hpack.h.
#include "net/hpack.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace ringkv {
namespace {

// The length in bits of each symbol's code (RFC 7541, Appendix B), symbol 256 being EOS. The code
// is canonical (codes are handed out in order of length, then symbol), so the lengths are all
// there is to it: Canonical() below hands the codes out again, and hpack_test checks them against
// nghttp2's coding.
constexpr uint8_t kCodeBits[257] = {
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6,  10, 10, 12, 13, 6,  8,  11, 10, 10, 8,  11, 8,  6,  6,  6,
    5,  5,  5,  6,  6,  6,  6,  6,  6,  6,  7,  8,  15, 6,  12, 10, 13, 6,  7,  7,  7,  7,  7,  7,
    7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  8,  7,  8,  13, 19, 13, 14, 6,
    15, 5,  6,  5,  6,  5,  6,  6,  6,  5,  7,  7,  6,  6,  6,  5,  6,  7,  6,  5,  5,  6,  7,  7,
    7,  7,  7,  15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20, 22, 22, 23, 23, 21,
    23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24,
    21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
};

constexpr int kMaxCodeBits = 30;
// Codes this short are decoded by one look-up: bits that start a code of at most kFastBits.
constexpr int kFastBits = 11;

struct Canonical {
  uint32_t code[257] = {};
  uint16_t by_length[257] = {};                // Symbols by (code length, symbol).
  uint32_t first_code[kMaxCodeBits + 1] = {};  // The first code of each length ...
  uint16_t first[kMaxCodeBits + 1] = {};       // ... its place in by_length ...
  uint16_t count[kMaxCodeBits + 1] = {};       // ... and how many codes have that length.
  // For each kFastBits-bit prefix of a code of at most kFastBits: (symbol << 4) | length.
  uint16_t fast[1 << kFastBits] = {};
};

constexpr Canonical MakeCanonical() {
  Canonical c;
  int n = 0;
  for (int bits = 1; bits <= kMaxCodeBits; ++bits) {
    for (int s = 0; s < 257; ++s) {
      if (kCodeBits[s] == bits) c.by_length[n++] = static_cast<uint16_t>(s);
    }
  }
  uint32_t code = 0;
  int prev_bits = kCodeBits[c.by_length[0]];
  for (int i = 0; i < 257; ++i) {
    const int s = c.by_length[i];
    const int bits = kCodeBits[s];
    if (i > 0) code = (code + 1) << (bits - prev_bits);
    if (c.count[bits]++ == 0) {
      c.first_code[bits] = code;
      c.first[bits] = static_cast<uint16_t>(i);
    }
    c.code[s] = code;
    prev_bits = bits;
    if (bits <= kFastBits) {
      const uint32_t from = code << (kFastBits - bits);
      for (uint32_t k = 0; k < (uint32_t{1} << (kFastBits - bits)); ++k) {
        c.fast[from + k] = static_cast<uint16_t>(s << 4 | bits);
      }
    }
  }
  return c;
}

constexpr Canonical kHuffman = MakeCanonical();
static_assert(kHuffman.code[size_t{'0'}] == 0x0 && kHuffman.code[size_t{'a'}] == 0x3 &&
                  kHuffman.code[256] == 0x3fffffff,
              "RFC 7541, Appendix B");

constexpr size_t kStaticEntries = 61;
struct StaticField {
  std::string_view name;
  std::string_view value;
};
// RFC 7541, Appendix A: index 1 first.
constexpr StaticField kStatic[kStaticEntries] = {
    {":authority", ""},
    {":method", "GET"},
    {":method", "POST"},
    {":path", "/"},
    {":path", "/index.html"},
    {":scheme", "http"},
    {":scheme", "https"},
    {":status", "200"},
    {":status", "204"},
    {":status", "206"},
    {":status", "304"},
    {":status", "400"},
    {":status", "404"},
    {":status", "500"},
    {"accept-charset", ""},
    {"accept-encoding", "gzip, deflate"},
    {"accept-language", ""},
    {"accept-ranges", ""},
    {"accept", ""},
    {"access-control-allow-origin", ""},
    {"age", ""},
    {"allow", ""},
    {"authorization", ""},
    {"cache-control", ""},
    {"content-disposition", ""},
    {"content-encoding", ""},
    {"content-language", ""},
    {"content-length", ""},
    {"content-location", ""},
    {"content-range", ""},
    {"content-type", ""},
    {"cookie", ""},
    {"date", ""},
    {"etag", ""},
    {"expect", ""},
    {"expires", ""},
    {"from", ""},
    {"host", ""},
    {"if-match", ""},
    {"if-modified-since", ""},
    {"if-none-match", ""},
    {"if-range", ""},
    {"if-unmodified-since", ""},
    {"last-modified", ""},
    {"link", ""},
    {"location", ""},
    {"max-forwards", ""},
    {"proxy-authenticate", ""},
    {"proxy-authorization", ""},
    {"range", ""},
    {"referer", ""},
    {"refresh", ""},
    {"retry-after", ""},
    {"server", ""},
    {"set-cookie", ""},
    {"strict-transport-security", ""},
    {"transfer-encoding", ""},
    {"user-agent", ""},
    {"vary", ""},
    {"via", ""},
    {"www-authenticate", ""},
};

// The first static index of each name (entries of one name are neighbours).
const absl::flat_hash_map<std::string_view, uint8_t>& StaticNames() {
  static const auto* names = [] {
    auto* m = new absl::flat_hash_map<std::string_view, uint8_t>();
    for (size_t i = kStaticEntries; i-- > 0;) (*m)[kStatic[i].name] = static_cast<uint8_t>(i + 1);
    return m;
  }();
  return *names;
}

absl::Status Malformed(std::string_view what, size_t at) {
  return absl::InvalidArgumentError(
      absl::StrCat("hpack: ", std::string(what), " at byte ", at, " of the header block"));
}

// Reads an integer of a `prefix`-bit prefix (RFC 7541, 5.1) at in[*pos]; at most 2^32 - 1.
absl::Status ReadInt(std::string_view in, size_t* pos, int prefix, uint32_t* out) {
  const size_t start = *pos;
  const uint32_t mask = (uint32_t{1} << prefix) - 1;
  uint64_t v = static_cast<uint8_t>(in[(*pos)++]) & mask;
  if (v < mask) {
    *out = static_cast<uint32_t>(v);
    return absl::OkStatus();
  }
  for (int shift = 0;; shift += 7) {
    if (*pos >= in.size()) return Malformed("an integer cut short", start);
    const uint8_t b = static_cast<uint8_t>(in[(*pos)++]);
    v += uint64_t{b & 0x7fu} << shift;
    if (v > UINT32_MAX || shift > 28) return Malformed("an integer over 2^32 - 1", start);
    if ((b & 0x80) == 0) break;
  }
  *out = static_cast<uint32_t>(v);
  return absl::OkStatus();
}

void WriteInt(uint8_t first, int prefix, size_t v, std::string* out) {
  const size_t mask = (size_t{1} << prefix) - 1;
  if (v < mask) {
    out->push_back(static_cast<char>(first | v));
    return;
  }
  out->push_back(static_cast<char>(first | mask));
  v -= mask;
  while (v >= 0x80) {
    out->push_back(static_cast<char>(0x80 | (v & 0x7f)));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Reads a string literal (RFC 7541, 5.2) at in[*pos]: its bytes, as they are on the wire, and
// whether they are Huffman-coded.
absl::Status ReadLiteral(std::string_view in, size_t* pos, std::string_view* bytes, bool* huffman) {
  if (*pos >= in.size()) return Malformed("a field cut short", *pos);
  const size_t start = *pos;
  *huffman = (static_cast<uint8_t>(in[*pos]) & 0x80) != 0;
  uint32_t len = 0;
  if (absl::Status s = ReadInt(in, pos, 7, &len); !s.ok()) return s;
  if (len > in.size() - *pos) {
    return Malformed(absl::StrCat("a string of ", len, " bytes past the block's end"), start);
  }
  *bytes = in.substr(*pos, len);
  *pos += len;
  return absl::OkStatus();
}

// Decodes Huffman-coded `bytes` (of the literal at byte `start`) into `buf`.
absl::Status Unhuffman(std::string_view bytes, size_t start, std::string* buf) {
  buf->clear();
  if (absl::Status s = HuffmanDecode(bytes, buf); !s.ok()) {
    return Malformed(
        absl::StrCat("a string whose Huffman code is bad (", std::string(s.message()), ")"), start);
  }
  return absl::OkStatus();
}

// Huffman-coded values memoized at most this long.
constexpr size_t kMemoBytes = 64;

void WriteString(std::string_view s, std::string* out) {
  const size_t huffman = HuffmanEncodedBytes(s);
  if (huffman < s.size()) {
    WriteInt(0x80, 7, huffman, out);
    HuffmanEncode(s, out);
  } else {
    WriteInt(0x00, 7, s.size(), out);
    out->append(s);
  }
}

}  // namespace

size_t HuffmanEncodedBytes(std::string_view in) {
  size_t bits = 0;
  for (const char c : in) bits += kCodeBits[static_cast<uint8_t>(c)];
  return (bits + 7) / 8;
}

void HuffmanEncode(std::string_view in, std::string* out) {
  uint64_t acc = 0;  // Bits not yet written, in the low `n`.
  int n = 0;
  for (const char c : in) {
    const uint8_t s = static_cast<uint8_t>(c);
    acc = acc << kCodeBits[s] | kHuffman.code[s];
    n += kCodeBits[s];
    while (n >= 8) {
      n -= 8;
      out->push_back(static_cast<char>(acc >> n));
    }
  }
  if (n > 0) out->push_back(static_cast<char>(acc << (8 - n) | (0xffu >> n)));  // EOS's ones
}

absl::Status HuffmanDecode(std::string_view in, std::string* out) {
  const auto* p = reinterpret_cast<const uint8_t*>(in.data());
  const uint8_t* const end = p + in.size();
  uint64_t acc = 0;  // Bits not yet decoded, in the low `n`.
  int n = 0;
  for (;;) {
    while (n <= 56 && p < end) {
      acc = acc << 8 | *p++;
      n += 8;
    }
    if (n == 0) return absl::OkStatus();
    // Up to 7 ones at the end are padding, the start of EOS (no shorter code is all ones).
    if (p == end && n <= 7 && (acc & ((uint64_t{1} << n) - 1)) == (uint64_t{1} << n) - 1) {
      return absl::OkStatus();
    }
    // The next kMaxCodeBits bits, ones past the end (as EOS would be).
    const uint32_t next =
        n >= kMaxCodeBits
            ? static_cast<uint32_t>(acc >> (n - kMaxCodeBits)) & ((1u << kMaxCodeBits) - 1)
            : static_cast<uint32_t>(acc << (kMaxCodeBits - n) |
                                    ((uint64_t{1} << (kMaxCodeBits - n)) - 1)) &
                  ((1u << kMaxCodeBits) - 1);
    int symbol = -1;
    int bits = 0;
    const uint16_t fast = kHuffman.fast[next >> (kMaxCodeBits - kFastBits)];
    if (fast != 0) {
      symbol = fast >> 4;
      bits = fast & 0xf;
    } else {
      for (bits = kFastBits + 1; bits <= kMaxCodeBits; ++bits) {
        const uint32_t code = next >> (kMaxCodeBits - bits);
        if (code - kHuffman.first_code[bits] < kHuffman.count[bits]) {
          symbol = kHuffman.by_length[kHuffman.first[bits] + code - kHuffman.first_code[bits]];
          break;
        }
      }
    }
    if (bits > n) {
      return absl::InvalidArgumentError("a code cut short, or padding not 1 to 7 ones");
    }
    if (symbol == 256) return absl::InvalidArgumentError("the EOS symbol");
    out->push_back(static_cast<char>(symbol));
    n -= bits;
  }
}

HpackTable::HpackTable(size_t max_bytes) : max_bytes_(max_bytes) { ring_.resize(8); }

void HpackTable::EvictTo(size_t max_bytes) {
  while (bytes_ > max_bytes) {
    Entry& oldest = ring_[(newest_ - (count_ - 1)) & (ring_.size() - 1)];
    bytes_ -= oldest.bytes.size() + kEntryOverhead;
    --count_;
    ++changes_;
    // A dead entry keeps a small string's room for the next one, not a big one's: entries that
    // evict one another would otherwise leave a big string in every slot of the ring.
    if (oldest.bytes.capacity() > kKeptBytes) std::string().swap(oldest.bytes);
  }
}

void HpackTable::SetMaxBytes(size_t max_bytes) {
  EvictTo(max_bytes);
  max_bytes_ = max_bytes;
  ++changes_;
}

void HpackTable::Add(std::string_view name, std::string_view value) {
  const size_t size = name.size() + value.size() + kEntryOverhead;
  if (size > max_bytes_) {
    EvictTo(0);
    return;
  }
  staged_.assign(name);  // Before the eviction, which may take the entry these lie in.
  staged_.append(value);
  EvictTo(max_bytes_ - size);
  if (count_ == ring_.size()) {  // Grown as entries come: twice the slots, the oldest first.
    std::vector<Entry> ring(2 * ring_.size());
    for (size_t i = 0; i < count_; ++i) {
      ring[count_ - 1 - i] = std::move(ring_[(newest_ - i) & (ring_.size() - 1)]);
    }
    ring_.swap(ring);
    newest_ = count_ - 1;
  }
  newest_ = (newest_ + 1) & (ring_.size() - 1);
  Entry& e = ring_[newest_];
  e.bytes.swap(staged_);  // The dead entry's room is the staging string's next.
  if (staged_.capacity() > kKeptBytes) std::string().swap(staged_);
  e.name_len = name.size();
  ++count_;
  ++changes_;
  bytes_ += size;
}

size_t HpackTable::held_bytes() const {
  size_t held = staged_.capacity();
  for (const Entry& e : ring_) held += e.bytes.capacity();
  return held;
}

HpackDecoder::HpackDecoder(size_t max_table_bytes, size_t max_list_bytes)
    : table_(kInitialTableBytes),
      max_table_bytes_(std::max(max_table_bytes, kInitialTableBytes)),
      max_list_bytes_(max_list_bytes) {}

absl::Status HpackDecoder::Decode(
    std::string_view block, absl::FunctionRef<void(std::string_view, std::string_view)> on_field) {
  if (broken_) return absl::FailedPreconditionError("hpack: a block before this one was malformed");
  const bool same = SameAsLast(block);
  if (same && kept_) {
    const std::string_view bytes = kept_bytes_;
    size_t at = 0;
    for (const auto& [name_size, value_size] : kept_sizes_) {
      on_field(bytes.substr(at, name_size), bytes.substr(at + name_size, value_size));
      at += name_size + value_size;
    }
    return ListStatus();  // last_list_bytes_ is the same list's.
  }
  // The second time in a row: its fields are kept for the next.
  bool keep = same;
  if (keep) {
    kept_bytes_.clear();
    kept_sizes_.clear();
  }
  const uint64_t changes = table_.changes();
  // Any error below leaves the table out of step with the peer's: no block decodes after it.
  broken_ = true;
  size_t pos = 0;
  size_t list_bytes = 0;
  bool fields = false;
  while (pos < block.size()) {
    const size_t start = pos;
    const uint8_t b = static_cast<uint8_t>(block[pos]);
    std::string_view name;
    std::string_view value;
    bool index = false;
    uint32_t i = 0;
    if (b & 0x80) {  // An indexed field.
      if (absl::Status s = ReadInt(block, &pos, 7, &i); !s.ok()) return s;
      if (i == 0) return Malformed("index 0", start);
      if (i <= kStaticEntries) {
        name = kStatic[i - 1].name;
        value = kStatic[i - 1].value;
      } else if (i - kStaticEntries <= table_.size()) {
        name = table_.name(i - kStaticEntries - 1);
        value = table_.value(i - kStaticEntries - 1);
      } else {
        return Malformed(absl::StrCat("index ", i, " past the tables' ",
                                      kStaticEntries + table_.size(), " entries"),
                         start);
      }
    } else if ((b & 0xe0) == 0x20) {  // A dynamic table size update.
      if (fields) return Malformed("a table size update after a field", start);
      if (absl::Status s = ReadInt(block, &pos, 5, &i); !s.ok()) return s;
      if (i > max_table_bytes_) {
        return Malformed(absl::StrCat("a table size of ", i, " bytes, over the ", max_table_bytes_,
                                      " advertised"),
                         start);
      }
      table_.SetMaxBytes(i);
      continue;
    } else {  // A literal: with incremental indexing (01), without (0000) or never (0001).
      index = (b & 0xc0) == 0x40;
      if (absl::Status s = ReadInt(block, &pos, index ? 6 : 4, &i); !s.ok()) return s;
      if (i == 0) {
        const size_t at = pos;
        bool huffman;
        if (absl::Status s = ReadLiteral(block, &pos, &name, &huffman); !s.ok()) return s;
        if (huffman) {
          if (absl::Status s = Unhuffman(name, at, &name_buf_); !s.ok()) return s;
          name = name_buf_;
        }
      } else if (i <= kStaticEntries) {
        name = kStatic[i - 1].name;
      } else if (i - kStaticEntries <= table_.size()) {
        name = table_.name(i - kStaticEntries - 1);
      } else {
        return Malformed(absl::StrCat("name index ", i, " past the tables' ",
                                      kStaticEntries + table_.size(), " entries"),
                         start);
      }
      const size_t at = pos;
      bool huffman;
      if (absl::Status s = ReadLiteral(block, &pos, &value, &huffman); !s.ok()) return s;
      if (huffman) {
        const HuffmanMemo* memo = nullptr;
        for (const HuffmanMemo& m : memos_) {
          if (m.coded == value) memo = &m;
        }
        if (memo == nullptr) {
          if (absl::Status s = Unhuffman(value, at, &value_buf_); !s.ok()) return s;
          if (value.size() <= kMemoBytes) {
            HuffmanMemo& m = memos_[next_memo_++ % std::size(memos_)];
            m.coded = value;
            m.decoded = value_buf_;
          }
          value = value_buf_;
        } else {
          value = memo->decoded;
        }
      }
    }
    fields = true;
    // Counted as SETTINGS_MAX_HEADER_LIST_SIZE counts; past the limit, decoded but not passed.
    list_bytes += name.size() + value.size() + HpackTable::kEntryOverhead;
    if (list_bytes <= max_list_bytes_) {
      on_field(name, value);
      if (keep) {
        if (kept_bytes_.size() + name.size() + value.size() > kMaxRepeatFieldBytes) {
          keep = false;
        } else {
          kept_bytes_.append(name).append(value);
          kept_sizes_.emplace_back(name.size(), value.size());
        }
      }
    }
    if (index) table_.Add(name, value);
  }
  broken_ = false;
  last_list_bytes_ = list_bytes;
  Remember(block, changes, keep);
  return ListStatus();
}

absl::Status HpackDecoder::ListStatus() const {
  if (last_list_bytes_ <= max_list_bytes_) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat("hpack: a header list of ", last_list_bytes_,
                                                   " bytes, over the limit of ", max_list_bytes_,
                                                   " (SETTINGS_MAX_HEADER_LIST_SIZE)"));
}

void HpackDecoder::Remember(std::string_view block, uint64_t changes, bool kept) {
  if (table_.changes() != changes || block.size() > kMaxRepeatBlockBytes) {
    last_changes_ = kNoRepeat;
    kept_ = false;
    return;
  }
  if (!kept) last_block_.assign(block);  // A kept block is the last one already.
  last_changes_ = changes;
  kept_ = kept;
}

HpackEncoder::HpackEncoder(size_t max_table_bytes)
    : table_(std::min(max_table_bytes, kInitialTableBytes)), own_max_bytes_(max_table_bytes) {
  // Both tables start at HTTP/2's initial size; a smaller one must be announced.
  if (table_.max_bytes() != kInitialTableBytes) {
    pending_update_ = smallest_update_ = table_.max_bytes();
  }
}

void HpackEncoder::SetPeerMaxTableBytes(size_t bytes) {
  const size_t size = std::min(own_max_bytes_, bytes);
  if (size == table_.max_bytes()) return;
  table_.SetMaxBytes(size);
  pending_update_ = size;
  smallest_update_ = std::min(smallest_update_, size);
}

void HpackEncoder::BeginBlock(std::string* out) {
  if (pending_update_ != SIZE_MAX) {  // RFC 7541, 4.2: the smallest size since, then the last.
    if (smallest_update_ < pending_update_) WriteInt(0x20, 5, smallest_update_, out);
    WriteInt(0x20, 5, pending_update_, out);
    pending_update_ = smallest_update_ = SIZE_MAX;
  }
}

void HpackEncoder::Encode(std::string_view name, std::string_view value, Indexing indexing,
                          std::string* out) {
  size_t name_index = 0;
  const auto& names = StaticNames();
  if (auto it = names.find(name); it != names.end()) {
    name_index = it->second;
    for (size_t i = name_index; i <= kStaticEntries && kStatic[i - 1].name == name; ++i) {
      if (kStatic[i - 1].value == value) {
        WriteInt(0x80, 7, i, out);
        return;
      }
    }
  }
  for (size_t i = 0; i < table_.size(); ++i) {
    if (table_.name(i) != name) continue;
    // A field never to be indexed is sent as a literal even where the table has it.
    if (indexing != kNever && table_.value(i) == value) {
      WriteInt(0x80, 7, kStaticEntries + 1 + i, out);
      return;
    }
    if (name_index == 0) name_index = kStaticEntries + 1 + i;
  }
  switch (indexing) {
    case kIndex:
      WriteInt(0x40, 6, name_index, out);
      break;
    case kNoIndex:
      WriteInt(0x00, 4, name_index, out);
      break;
    case kNever:
      WriteInt(0x10, 4, name_index, out);
      break;
  }
  if (name_index == 0) WriteString(name, out);
  WriteString(value, out);
  if (indexing == kIndex) table_.Add(name, value);
}

}  // namespace ringkv
