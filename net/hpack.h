// HPACK (RFC 7541), the header compression of HTTP/2: ringkv's own decoder and encoder, the first
// piece of an HTTP/2 codec for the server's call path (issue 25). nghttp2 is 60% of the server's
// user time at GET 1 x 50 (BENCHMARKS.md, "Where nghttp2's time goes"); its header work alone
// (inflate, deflate and the messaging checks) is a fifth of it.
//
// HpackDecoder turns a header block (a HEADERS frame's fragment and its CONTINUATIONs, joined)
// into fields; HpackEncoder appends fields to a block. Each keeps its dynamic table (HpackTable),
// which mirrors the peer's, so every block of a connection goes through the same object in the
// order the frames went on the wire. A decoding error is a COMPRESSION_ERROR: the tables no longer
// agree, and the connection must end (RFC 9113, 4.3). A header list over the decoder's limit is
// decoded to the end all the same, so that the table stays in step, and only that stream need be
// refused.
//
// The fast paths are for the shapes gRPC sends: indexed fields (one byte each once a client has
// indexed its headers), strings without Huffman coding straight from the block, and a Huffman
// decoder that takes 11 bits at a time from a table (the codes of 5 to 11 bits, nearly every
// character of a path or a header value) and only falls back to the code's canonical order for
// the rare longer ones.
//
// Threads: an encoder or decoder belongs to its connection's thread.
//
//   HpackDecoder decoder;
//   absl::Status s = decoder.Decode(block, [&](std::string_view name, std::string_view value) {
//     ...  // The views are valid during the call only.
//   });
//   HpackEncoder encoder;
//   std::string out;
//   encoder.BeginBlock(&out);
//   encoder.Encode(":status", "200", HpackEncoder::kIndex, &out);
#ifndef RINGKV_NET_HPACK_H_
#define RINGKV_NET_HPACK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace ringkv {

// A dynamic table (RFC 7541, 2.3.2 and 4): the newest entry first, each counted as its name and
// value and 32 bytes, the oldest evicted as new ones need room. Entries sit in a ring of strings
// whose capacity is kept, so that adding an entry to a warm table does not allocate.
class HpackTable {
 public:
  // What an entry counts for beside its name and value (RFC 7541, 4.1).
  static constexpr size_t kEntryOverhead = 32;
  // The room a dead entry's string keeps for the next, at most.
  static constexpr size_t kKeptBytes = 128;

  explicit HpackTable(size_t max_bytes);

  size_t max_bytes() const { return max_bytes_; }
  size_t bytes() const { return bytes_; }
  size_t size() const { return count_; }
  // Entry `i`, 0 being the newest (dynamic index 62 + i on the wire); i < size().
  std::string_view name(size_t i) const { return Slot(i).name(); }
  std::string_view value(size_t i) const { return Slot(i).value(); }

  // Evicts the oldest entries until the table fits `max_bytes`, which stays its size.
  void SetMaxBytes(size_t max_bytes);
  // The heap the table holds: its entries' strings with their room (for tests).
  size_t held_bytes() const;
  // How many times entries were added or evicted or the size changed: an encoding made at one
  // count is the same at the same count.
  uint64_t changes() const { return changes_; }
  // Adds an entry, evicting what it needs. One bigger than the whole table empties it and is not
  // added (RFC 7541, 4.4). `name` and `value` may lie in an entry this evicts.
  void Add(std::string_view name, std::string_view value);

 private:
  struct Entry {
    std::string bytes;  // name, then value
    size_t name_len = 0;
    std::string_view name() const { return std::string_view(bytes).substr(0, name_len); }
    std::string_view value() const { return std::string_view(bytes).substr(name_len); }
  };
  const Entry& Slot(size_t i) const { return ring_[(newest_ - i) & (ring_.size() - 1)]; }
  void EvictTo(size_t max_bytes);

  // A power of two of slots (a slot's index is masked, not divided), doubled when full.
  std::vector<Entry> ring_;
  size_t newest_ = 0;  // The newest entry's slot, when count_ > 0.
  size_t count_ = 0;
  size_t bytes_ = 0;
  size_t max_bytes_;
  uint64_t changes_ = 0;
  std::string staged_;  // An added entry's bytes, put together before anything is evicted.
};

// HTTP/2's initial SETTINGS_HEADER_TABLE_SIZE, which both tables start at.
inline constexpr size_t kInitialTableBytes = 4096;

class HpackDecoder {
 public:
  // `max_table_bytes`: the SETTINGS_HEADER_TABLE_SIZE this side advertised, the most a peer's
  // size update may ask for; the table starts at kInitialTableBytes, and a size under it is not
  // supported (a peer may use 4,096 bytes until it has acknowledged the setting). `max_list_bytes`:
  // the most a header list may hold, counted as SETTINGS_MAX_HEADER_LIST_SIZE counts it (names,
  // values and 32 bytes a field).
  explicit HpackDecoder(size_t max_table_bytes = 4096, size_t max_list_bytes = 64 * 1024);

  // Decodes one whole header block, calling `on_field` for each field in order, with views valid
  // during that call only. InvalidArgument: the block is malformed (a COMPRESSION_ERROR: the
  // message says where and why; every later Decode fails with FailedPrecondition, since the
  // tables no longer agree). ResourceExhausted: the
  // list went over max_list_bytes; the fields after the limit were decoded but not passed on, and
  // the decoder is still good.
  absl::Status Decode(std::string_view block,
                      absl::FunctionRef<void(std::string_view, std::string_view)> on_field);

  // Whether Decode(block) would pass on the fields the last Decode passed on: the same bytes,
  // against a table that decoding them left as it was.
  bool SameAsLast(std::string_view block) const {
    return !broken_ && last_changes_ == table_.changes() && block == last_block_;
  }

  const HpackTable& table() const { return table_; }
  // The size of the list the last Decode went through, counted as the limit counts.
  size_t last_list_bytes() const { return last_list_bytes_; }
  // What the last Decode returned: OK, or ResourceExhausted if its list was over the limit.
  absl::Status ListStatus() const;

  // The longest block, and the most bytes of names and values, a repeat is kept for.
  static constexpr size_t kMaxRepeatBlockBytes = 512;
  static constexpr size_t kMaxRepeatFieldBytes = 2048;

 private:
  // After a Decode of `block` from a table at `changes`, whose fields `kept` holds.
  void Remember(std::string_view block, uint64_t changes, bool kept);

  HpackTable table_;
  const size_t max_table_bytes_;
  const size_t max_list_bytes_;
  std::string name_buf_;   // A Huffman-coded name, decoded.
  std::string value_buf_;  // A Huffman-coded value, decoded.
  // The last Huffman-coded values decoded, by their code: a client that does not index a field
  // (nghttp2's never indexes :path) sends the same code call after call.
  struct HuffmanMemo {
    std::string coded;
    std::string decoded;
  };
  HuffmanMemo memos_[2];
  size_t next_memo_ = 0;
  bool broken_ = false;  // A block was malformed.
  size_t last_list_bytes_ = 0;
  // A client that has indexed its headers sends the same block call after call, and decoding
  // it changes nothing in the table (indexed fields, and literals not indexed). The same bytes
  // against the same table decode to the same fields: the second time a block comes, its fields
  // are kept, and from the third on they are passed on from here without decoding.
  static constexpr uint64_t kNoRepeat = ~uint64_t{0};
  std::string last_block_;
  uint64_t last_changes_ = kNoRepeat;  // The table's changes() before and after it, or kNoRepeat.
  bool kept_ = false;                  // kept_bytes_ and kept_sizes_ hold its fields:
  std::string kept_bytes_;             // their names and values, one after another,
  std::vector<std::pair<uint32_t, uint32_t>> kept_sizes_;  // and their sizes.
};

class HpackEncoder {
 public:
  enum Indexing : uint8_t {
    kIndex,    // Added to the table: a field sent again becomes one byte.
    kNoIndex,  // A literal the table does not keep (a value that changes from call to call).
    kNever,    // A literal no intermediary may index either (a secret: authorization).
  };

  // `max_table_bytes`: the most this encoder's table holds (at most the peer's setting).
  explicit HpackEncoder(size_t max_table_bytes = 4096);

  // The peer's SETTINGS_HEADER_TABLE_SIZE: the table takes that size (at most this encoder's
  // own), and the next block starts by saying so (BeginBlock). Between blocks only.
  void SetPeerMaxTableBytes(size_t bytes);
  // Starts a block in `out`: a size update, if one is due. Each block starts so.
  void BeginBlock(std::string* out);
  bool update_pending() const { return pending_update_ != SIZE_MAX; }
  // Appends `name: value` to the block under way in `out`. `name` must be lower case (HTTP/2).
  // Uses an entry of the static or dynamic table where one matches (kNever: the static table's
  // only), Huffman coding where it is shorter.
  void Encode(std::string_view name, std::string_view value, Indexing indexing, std::string* out);

  const HpackTable& table() const { return table_; }

 private:
  HpackTable table_;
  const size_t own_max_bytes_;
  size_t pending_update_ = SIZE_MAX;   // A size to announce at the next field; SIZE_MAX: none.
  size_t smallest_update_ = SIZE_MAX;  // The smallest size since the last announcement.
};

// Huffman coding (RFC 7541, 5.2 and Appendix B), for the encoder and decoder and their tests.
// The bytes `in` takes Huffman-coded.
size_t HuffmanEncodedBytes(std::string_view in);
// Appends `in`, Huffman-coded and padded with ones, to `out`.
void HuffmanEncode(std::string_view in, std::string* out);
// Appends the decoding of `in` to `out`. InvalidArgument: a truncated code, padding longer than 7
// bits or not all ones, or the EOS symbol.
absl::Status HuffmanDecode(std::string_view in, std::string* out);

}  // namespace ringkv

#endif  // RINGKV_NET_HPACK_H_
