#include "net/hpack.h"

#include <nghttp2/nghttp2.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ringkv {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

std::string Hex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

absl::Status DecodeTo(HpackDecoder& decoder, std::string_view block, Fields* out) {
  out->clear();
  return decoder.Decode(block, [&](std::string_view name, std::string_view value) {
    out->emplace_back(name, value);
  });
}

// nghttp2's deflater and inflater: the independent implementation each side is checked against.
class Nghttp2Deflater {
 public:
  explicit Nghttp2Deflater(size_t max_bytes) { nghttp2_hd_deflate_new(&d_, max_bytes); }
  ~Nghttp2Deflater() { nghttp2_hd_deflate_del(d_); }
  std::string Deflate(const Fields& fields, const std::vector<bool>& no_index) {
    std::vector<nghttp2_nv> nva;
    for (size_t i = 0; i < fields.size(); ++i) {
      const auto& [n, v] = fields[i];
      nva.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(n.data())),
                     reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                     static_cast<uint8_t>(no_index[i] ? NGHTTP2_NV_FLAG_NO_INDEX : 0)});
    }
    std::string out(nghttp2_hd_deflate_bound(d_, nva.data(), nva.size()), '\0');
    const ssize_t n = nghttp2_hd_deflate_hd(d_, reinterpret_cast<uint8_t*>(out.data()), out.size(),
                                            nva.data(), nva.size());
    EXPECT_GE(n, 0);
    out.resize(n < 0 ? 0 : n);
    return out;
  }
  void ChangeTableSize(size_t bytes) {
    ASSERT_EQ(nghttp2_hd_deflate_change_table_size(d_, bytes), 0);
  }
  size_t TableBytes() const { return nghttp2_hd_deflate_get_dynamic_table_size(d_); }

 private:
  nghttp2_hd_deflater* d_;
};

class Nghttp2Inflater {
 public:
  Nghttp2Inflater() { nghttp2_hd_inflate_new(&i_); }
  ~Nghttp2Inflater() { nghttp2_hd_inflate_del(i_); }
  // False if nghttp2 finds the block malformed.
  bool Inflate(std::string_view block, Fields* out) {
    out->clear();
    auto* in = reinterpret_cast<uint8_t*>(const_cast<char*>(block.data()));
    size_t left = block.size();
    for (;;) {
      nghttp2_nv nv;
      int flags = 0;
      const ssize_t n = nghttp2_hd_inflate_hd2(i_, &nv, &flags, in, left, /*in_final=*/1);
      if (n < 0) return false;
      in += n;
      left -= n;
      if (flags & NGHTTP2_HD_INFLATE_EMIT) {
        out->emplace_back(std::string(reinterpret_cast<char*>(nv.name), nv.namelen),
                          std::string(reinterpret_cast<char*>(nv.value), nv.valuelen));
      }
      if (flags & NGHTTP2_HD_INFLATE_FINAL) {
        nghttp2_hd_inflate_end_headers(i_);
        return true;
      }
      if (n == 0 && left == 0 && !(flags & NGHTTP2_HD_INFLATE_EMIT)) return false;
    }
  }
  void ChangeTableSize(size_t bytes) {
    ASSERT_EQ(nghttp2_hd_inflate_change_table_size(i_, bytes), 0);
  }
  size_t TableBytes() const { return nghttp2_hd_inflate_get_dynamic_table_size(i_); }

 private:
  nghttp2_hd_inflater* i_;
};

TEST(Huffman, CodesAreRfc7541s) {
  // RFC 7541, C.4: the Huffman-coded strings of its request examples.
  const std::pair<std::string, std::string> cases[] = {
      {"www.example.com", "f1e3c2e5f23a6ba0ab90f4ff"},
      {"no-cache", "a8eb10649cbf"},
      {"custom-key", "25a849e95ba97d7f"},
      {"custom-value", "25a849e95bb8e8b4bf"},
  };
  for (const auto& [text, hex] : cases) {
    std::string coded;
    HuffmanEncode(text, &coded);
    EXPECT_EQ(coded, Hex(hex)) << text;
    EXPECT_EQ(HuffmanEncodedBytes(text), coded.size());
    std::string decoded;
    ASSERT_TRUE(HuffmanDecode(coded, &decoded).ok()) << text;
    EXPECT_EQ(decoded, text);
  }
}

TEST(Huffman, EveryByteRoundTripsAndMatchesNghttp2) {
  // Each byte among short codes, so that nghttp2 chooses Huffman coding for the value: our
  // decoder reads nghttp2's code of every symbol, and nghttp2 reads ours.
  for (int c = 0; c < 256; ++c) {
    const std::string value = std::string(40, 'a') + static_cast<char>(c) + "0e";
    std::string coded;
    HuffmanEncode(value, &coded);
    std::string decoded;
    ASSERT_TRUE(HuffmanDecode(coded, &decoded).ok()) << c;
    ASSERT_EQ(decoded, value) << c;

    Nghttp2Deflater deflater(4096);
    const std::string block = deflater.Deflate({{"x-v", value}}, {true});
    HpackDecoder decoder;
    Fields fields;
    ASSERT_TRUE(DecodeTo(decoder, block, &fields).ok()) << c;
    ASSERT_EQ(fields, (Fields{{"x-v", value}})) << c;
    EXPECT_NE(block.find(coded), std::string::npos) << "nghttp2 coded byte " << c << " otherwise";

    HpackEncoder encoder;
    std::string ours;
    encoder.Encode("x-v", value, HpackEncoder::kNoIndex, &ours);
    Nghttp2Inflater inflater;
    ASSERT_TRUE(inflater.Inflate(ours, &fields)) << c;
    ASSERT_EQ(fields, (Fields{{"x-v", value}})) << c;
  }
}

TEST(Huffman, RejectsBadCodes) {
  std::string out;
  // 'a' is 00011: a byte of it and three ones is whole; three zeros are not EOS's padding.
  EXPECT_TRUE(HuffmanDecode(Hex("1f"), &out).ok());
  EXPECT_EQ(out, "a");
  EXPECT_FALSE(HuffmanDecode(Hex("18"), &out).ok());
  // Padding of 11 bits.
  EXPECT_FALSE(HuffmanDecode(Hex("1fff"), &out).ok());
  // EOS itself (30 ones).
  EXPECT_EQ(HuffmanDecode(Hex("ffffffff"), &out).message(), "the EOS symbol");
  // A long code cut short: '\0' is 13 bits, 1111111111000.
  EXPECT_FALSE(HuffmanDecode(Hex("ff"), &out).ok());
}

TEST(HpackDecoder, DecodesRfc7541RequestsWithAndWithoutHuffman) {
  // RFC 7541, C.3 (literals) and C.4 (Huffman): three requests on one connection.
  const std::vector<std::string> plain = {
      "828684410f7777772e6578616d706c652e636f6d",
      "828684be58086e6f2d6361636865",
      "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
  };
  const std::vector<std::string> huffman = {
      "828684418cf1e3c2e5f23a6ba0ab90f4ff",
      "828684be5886a8eb10649cbf",
      "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
  };
  const std::vector<Fields> want = {
      {{":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {":authority", "www.example.com"}},
      {{":method", "GET"},
       {":scheme", "http"},
       {":path", "/"},
       {":authority", "www.example.com"},
       {"cache-control", "no-cache"}},
      {{":method", "GET"},
       {":scheme", "https"},
       {":path", "/index.html"},
       {":authority", "www.example.com"},
       {"custom-key", "custom-value"}},
  };
  const size_t table_bytes[] = {57, 110, 164};
  for (const auto* blocks : {&plain, &huffman}) {
    HpackDecoder decoder;
    for (size_t i = 0; i < blocks->size(); ++i) {
      Fields fields;
      ASSERT_TRUE(DecodeTo(decoder, Hex((*blocks)[i]), &fields).ok()) << i;
      EXPECT_EQ(fields, want[i]) << i;
      EXPECT_EQ(decoder.table().bytes(), table_bytes[i]) << i;
    }
    ASSERT_EQ(decoder.table().size(), 3u);
    EXPECT_EQ(decoder.table().name(0), "custom-key");
    EXPECT_EQ(decoder.table().value(2), "www.example.com");
  }
}

TEST(HpackDecoder, EvictsAndKeepsANameItsNewEntryTakes) {
  HpackDecoder decoder;
  Fields fields;
  // A size update to 70 bytes, then "ab: cd" indexed (36 bytes).
  ASSERT_TRUE(DecodeTo(decoder,
                       Hex("3f27") + Hex("4002616202"
                                         "6364"),
                       &fields)
                  .ok());
  ASSERT_EQ(decoder.table().size(), 1u);
  // "ab: xyz" with its name from entry 62, the entry it evicts (36 + 37 > 70): RFC 7541, 4.4.
  ASSERT_TRUE(DecodeTo(decoder,
                       Hex("7e03"
                           "78797a"),
                       &fields)
                  .ok());
  EXPECT_EQ(fields, (Fields{{"ab", "xyz"}}));
  ASSERT_EQ(decoder.table().size(), 1u);
  EXPECT_EQ(decoder.table().name(0), "ab");
  EXPECT_EQ(decoder.table().value(0), "xyz");
  // An entry bigger than the table empties it.
  ASSERT_TRUE(
      DecodeTo(decoder, Hex("4002") + "ab" + Hex("30") + std::string(48, 'v'), &fields).ok());
  EXPECT_EQ(decoder.table().size(), 0u);
  EXPECT_EQ(decoder.table().bytes(), 0u);
}

TEST(HpackDecoder, RejectsMalformedBlocks) {
  const std::pair<std::string, std::string> cases[] = {
      {"80", "index 0"},
      {"be", "index 62 past the tables' 61 entries"},
      {"ff", "an integer cut short"},
      {"ff808080808001", "an integer over 2^32 - 1"},
      {"400561", "a string of 5 bytes past the block's end"},
      {"40", "a field cut short"},
      {"8220", "a table size update after a field"},
      {"3fe21f", "a table size of 4097 bytes, over the 4096 advertised"},
      {"0f2f00", "name index 62 past the tables' 61 entries"},
      {"4184ffffffff", "Huffman code is bad (the EOS symbol)"},
  };
  for (const auto& [hex, what] : cases) {
    HpackDecoder decoder;
    Fields fields;
    const absl::Status s = DecodeTo(decoder, Hex(hex), &fields);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << hex;
    EXPECT_NE(s.message().find(what), std::string_view::npos) << hex << ": " << s.message();
    Nghttp2Inflater inflater;
    EXPECT_FALSE(inflater.Inflate(Hex(hex), &fields)) << "nghttp2 takes " << hex;
  }
}

TEST(HpackDecoder, AListOverTheLimitIsDecodedButNotPassedOn) {
  HpackDecoder decoder(4096, /*max_list_bytes=*/100);
  HpackEncoder encoder;
  std::string block;
  encoder.Encode("a", std::string(30, 'x'), HpackEncoder::kIndex, &block);  // 63 bytes
  encoder.Encode("b", std::string(30, 'y'), HpackEncoder::kIndex, &block);  // 126
  Fields fields;
  const absl::Status s = DecodeTo(decoder, block, &fields);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("a header list of 126 bytes, over the limit of 100"),
            std::string_view::npos)
      << s.message();
  EXPECT_EQ(fields, (Fields{{"a", std::string(30, 'x')}}));
  // The table kept both, as the encoder's did: the next block's references still decode.
  block.clear();
  encoder.Encode("b", std::string(30, 'y'), HpackEncoder::kIndex, &block);
  EXPECT_EQ(block, Hex("be"));
  ASSERT_TRUE(DecodeTo(decoder, block, &fields).ok());
  EXPECT_EQ(fields, (Fields{{"b", std::string(30, 'y')}}));
}

TEST(HpackEncoder, SendsTheStaticTablesFieldsAsOneByteAndItsOwnOnceIndexed) {
  HpackEncoder encoder;
  std::string block;
  encoder.Encode(":status", "200", HpackEncoder::kIndex, &block);
  EXPECT_EQ(block, Hex("88"));
  block.clear();
  encoder.Encode("content-type", "application/grpc", HpackEncoder::kIndex, &block);
  const size_t first = block.size();
  EXPECT_EQ(static_cast<uint8_t>(block[0]), 0x40 | 31);  // content-type's static name
  block.clear();
  encoder.Encode("content-type", "application/grpc", HpackEncoder::kIndex, &block);
  EXPECT_EQ(block, Hex("be"));
  EXPECT_GT(first, 10u);
  block.clear();
  encoder.Encode("authorization", "Bearer secret", HpackEncoder::kNever, &block);
  EXPECT_EQ(static_cast<uint8_t>(block[0]), 0x10 | 0x0f);  // never indexed, name 23 (4+ bits)
  EXPECT_EQ(encoder.table().size(), 1u);
}

// Random header lists through nghttp2's deflater into ours, and through ours into nghttp2's
// inflater, with the tables resized between blocks: each side decodes what the other encoded, and
// the two tables hold the same bytes after every block.
TEST(Hpack, RandomBlocksAgreeWithNghttp2BothWays) {
  std::mt19937 rng(25);
  const std::vector<std::string> names = {":method",       ":path",        ":authority",
                                          ":scheme",       "content-type", "te",
                                          "grpc-timeout",  "user-agent",   "grpc-accept-encoding",
                                          "authorization", "x-custom",     "x-other-custom-name",
                                          "cookie",        "grpc-status"};
  auto random_value = [&] {
    static const std::string kAlphabet =
        "abcdefghijklmnopqrstuvwxyz0123456789/-_.:ABCDEFGHIJKLMNOPQRSTUVWXYZ ~!@#$%^&*()\x01\xff";
    std::string v(rng() % 5 == 0 ? rng() % 300 : rng() % 24, ' ');
    for (char& c : v) c = kAlphabet[rng() % kAlphabet.size()];
    return v;
  };
  std::vector<std::string> values;
  for (int i = 0; i < 40; ++i) values.push_back(random_value());
  values.push_back("POST");
  values.push_back("application/grpc");

  Nghttp2Deflater theirs_out(4096);
  HpackDecoder ours_in(4096);
  HpackEncoder ours_out(4096);
  Nghttp2Inflater theirs_in;
  for (int block = 0; block < 2000; ++block) {
    if (rng() % 50 == 0) {  // A new SETTINGS_HEADER_TABLE_SIZE, both ways.
      const size_t size = rng() % 3 == 0 ? 0 : rng() % 4097;
      theirs_out.ChangeTableSize(size);
      theirs_in.ChangeTableSize(size);
      ours_out.SetPeerMaxTableBytes(size);
    }
    Fields fields;
    std::vector<bool> no_index;
    std::vector<HpackEncoder::Indexing> indexing;
    for (size_t n = rng() % 12; n-- > 0;) {
      fields.emplace_back(names[rng() % names.size()],
                          rng() % 4 == 0 ? random_value() : values[rng() % values.size()]);
      no_index.push_back(rng() % 4 == 0);
      indexing.push_back(static_cast<HpackEncoder::Indexing>(rng() % 3));
    }
    const std::string in = theirs_out.Deflate(fields, no_index);
    Fields got;
    ASSERT_TRUE(DecodeTo(ours_in, in, &got).ok()) << block;
    ASSERT_EQ(got, fields) << block;
    ASSERT_EQ(ours_in.table().bytes(), theirs_out.TableBytes()) << block;

    std::string out;
    ours_out.BeginBlock(&out);
    for (size_t i = 0; i < fields.size(); ++i) {
      ours_out.Encode(fields[i].first, fields[i].second, indexing[i], &out);
    }
    ASSERT_TRUE(theirs_in.Inflate(out, &got)) << block;
    ASSERT_EQ(got, fields) << block;
    ASSERT_EQ(ours_out.table().bytes(), theirs_in.TableBytes()) << block;
  }
}

TEST(HpackTable, GrowsAsEntriesComeAndKeepsTheirOrder) {
  HpackTable table(4096);
  std::vector<std::string> model;  // Newest first.
  size_t bytes = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string value = std::to_string(i) + std::string(i % 40, 'v');
    table.Add("k", value);
    model.insert(model.begin(), value);
    bytes += 1 + value.size() + 32;
    while (bytes > 4096) {
      bytes -= 1 + model.back().size() + 32;
      model.pop_back();
    }
    ASSERT_EQ(table.size(), model.size()) << i;
    ASSERT_EQ(table.bytes(), bytes) << i;
    for (size_t k = 0; k < model.size(); ++k) ASSERT_EQ(table.value(k), model[k]) << i << " " << k;
  }
}

TEST(HpackTable, EntriesThatEvictEachOtherHoldNoMoreThanTheTable) {
  // A big name indexed, then entries that name it and evict it in turn: each dead entry must not
  // keep its big string, or 4 KB of input would pin a big string in every slot of the ring.
  HpackDecoder decoder;
  const std::string block =
      std::string(1, '\x40') + Hex("7fa11e") + std::string(4000, 'n') + Hex("00");
  Fields fields;
  ASSERT_TRUE(DecodeTo(decoder, block, &fields).ok());
  ASSERT_EQ(decoder.table().size(), 1u);
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(DecodeTo(decoder, Hex("7e00"), &fields).ok()) << i;  // name 62, empty value
    ASSERT_EQ(fields[0].first.size(), 4000u);
  }
  EXPECT_EQ(decoder.table().size(), 1u);
  EXPECT_LT(decoder.table().held_bytes(), 3 * kInitialTableBytes);
}

TEST(HpackDecoder, NoBlockDecodesAfterAMalformedOne) {
  HpackDecoder decoder;
  Fields fields;
  EXPECT_EQ(DecodeTo(decoder, Hex("80"), &fields).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeTo(decoder, Hex("82"), &fields).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(HpackEncoder, NeverIndexedFieldsStayLiteralsEvenWhenTheTableHasThem) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  Fields fields;
  std::string block;
  encoder.Encode("x-secret", "s3cr3t", HpackEncoder::kIndex, &block);
  ASSERT_TRUE(DecodeTo(decoder, block, &fields).ok());
  block.clear();
  encoder.Encode("x-secret", "s3cr3t", HpackEncoder::kNever, &block);
  ASSERT_GT(block.size(), 2u) << "an index alone";
  EXPECT_EQ(static_cast<uint8_t>(block[0]), 0x10 | 0x0f) << "never indexed, name 62";
  ASSERT_TRUE(DecodeTo(decoder, block, &fields).ok());
  EXPECT_EQ(fields, (Fields{{"x-secret", "s3cr3t"}}));
}

TEST(Huffman, PaddingOfUpToSevenOnes) {
  std::string coded;
  HuffmanEncode("aaaaa", &coded);  // 25 bits: 7 ones of padding
  ASSERT_EQ(coded.size(), 4u);
  std::string out;
  ASSERT_TRUE(HuffmanDecode(coded, &out).ok());
  EXPECT_EQ(out, "aaaaa");
  out.clear();
  EXPECT_FALSE(HuffmanDecode(coded + Hex("ff"), &out).ok());  // 15 ones
  out.clear();
  EXPECT_TRUE(HuffmanDecode("", &out).ok());
  EXPECT_EQ(out, "");
}

TEST(Hpack, LengthsAtThePrefixesBoundariesAgreeWithNghttp2) {
  for (const size_t n : {14, 15, 16, 30, 31, 32, 62, 63, 64, 126, 127, 128, 300, 5000}) {
    std::string value(n, '\x80');  // Longer Huffman-coded: sent raw.
    for (size_t i = 0; i < n; ++i) value[i] = static_cast<char>(0x80 + i % 100);
    const std::string name = "x-" + std::string(n % 50, 'n');
    HpackEncoder encoder;
    std::string block;
    encoder.Encode(name, value, HpackEncoder::kNoIndex, &block);
    Nghttp2Inflater inflater;
    Fields fields;
    ASSERT_TRUE(inflater.Inflate(block, &fields)) << n;
    EXPECT_EQ(fields, (Fields{{name, value}})) << n;
    Nghttp2Deflater deflater(4096);
    HpackDecoder decoder;
    ASSERT_TRUE(DecodeTo(decoder, deflater.Deflate({{name, value}}, {true}), &fields).ok()) << n;
    EXPECT_EQ(fields, (Fields{{name, value}})) << n;
  }
}

// A client sends the same block call after call: from its third time the decoder passes on the
// fields it kept. Blocks that repeat, with and without table changes between them, must decode
// as nghttp2's inflater decodes them.
TEST(HpackDecoder, RepeatedBlocksDecodeAsNghttp2Does) {
  std::mt19937 rng(2511);
  const std::vector<std::string> names = {":method", ":path", ":authority",   "content-type",
                                          "te",      "x-a",   "grpc-timeout", "user-agent"};
  Nghttp2Deflater deflater(4096);
  Nghttp2Inflater inflater;
  HpackDecoder decoder(4096, /*max_list_bytes=*/600);
  int repeats = 0;
  int over_limit = 0;
  for (int list = 0; list < 400; ++list) {
    Fields fields;
    std::vector<bool> no_index;
    for (size_t n = rng() % 8; n-- > 0;) {
      std::string value(rng() % 4 == 0 ? rng() % 400 : rng() % 12, 'v');
      for (char& c : value) c = static_cast<char>('a' + rng() % 26);
      fields.emplace_back(names[rng() % names.size()], value);
      no_index.push_back(rng() % 2 == 0);
    }
    // The same list again and again, as a client that indexed it (or sends it unindexed) does.
    for (int again = 1 + rng() % 4; again-- > 0;) {
      const std::string block = deflater.Deflate(fields, no_index);
      Fields want;
      ASSERT_TRUE(inflater.Inflate(block, &want)) << list;
      repeats += decoder.SameAsLast(block);
      Fields got;
      const absl::Status s = DecodeTo(decoder, block, &got);
      if (s.code() == absl::StatusCode::kResourceExhausted) {
        ++over_limit;
        want.resize(got.size());  // Past the limit: decoded, not passed on.
      } else {
        ASSERT_TRUE(s.ok()) << s;
      }
      ASSERT_EQ(got, want) << list;
      ASSERT_EQ(decoder.table().bytes(), inflater.TableBytes()) << list;
    }
  }
  EXPECT_GT(repeats, 100) << "blocks the decoder found the same as the last";
  EXPECT_GT(over_limit, 5) << "lists over the limit, some of them repeated";
}

// The same bytes after a table change are another block: an index names the newest entry.
TEST(HpackDecoder, TheSameIndexAfterATableChangeNamesTheNewEntry) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  Fields fields;
  std::string block;
  encoder.Encode("x-a", "1", HpackEncoder::kIndex, &block);
  ASSERT_TRUE(DecodeTo(decoder, block, &fields).ok());
  for (int i = 0; i < 3; ++i) {  // Kept the second time, passed on from the kept the third.
    ASSERT_TRUE(DecodeTo(decoder, Hex("be"), &fields).ok());
    EXPECT_EQ(fields, (Fields{{"x-a", "1"}}));
  }
  block.clear();
  encoder.Encode("x-b", "2", HpackEncoder::kIndex, &block);
  ASSERT_TRUE(DecodeTo(decoder, block, &fields).ok());
  EXPECT_FALSE(decoder.SameAsLast(Hex("be")));
  ASSERT_TRUE(DecodeTo(decoder, Hex("be"), &fields).ok());
  EXPECT_EQ(fields, (Fields{{"x-b", "2"}}));
  ASSERT_TRUE(DecodeTo(decoder, Hex("bf"), &fields).ok());
  EXPECT_EQ(fields, (Fields{{"x-a", "1"}}));
  // A block that adds to the table each time is never the same as the last.
  block.clear();
  encoder.Encode("x-c", "3", HpackEncoder::kIndex, &block);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(decoder.SameAsLast(block)) << i;
    ASSERT_TRUE(DecodeTo(decoder, block, &fields).ok());
    EXPECT_EQ(fields, (Fields{{"x-c", "3"}}));
  }
  EXPECT_EQ(decoder.table().size(), 5u);
}

}  // namespace
}  // namespace ringkv
