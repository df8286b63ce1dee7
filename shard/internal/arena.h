// Arena: a table's records of more than 128 bytes, packed 16-byte aligned into 1 MiB segments,
// so that a record costs its size rounded to 16 bytes. jemalloc's size classes above 128 bytes
// are a quarter of a power of two apart: a record of a 16-byte key and a 1,000-byte value (1,032
// bytes with its header) took 1,280, where Redis's 1,000-byte string takes 1,024.
//
// Log-structured, as RAMCloud's and Seastar's memory: records are allocated at the end of the
// head segment, and a freed record is only counted as dead, its bytes left as they were (so a
// walk over a segment can still read every record's header). A segment whose records are all
// freed gives its pages back to the kernel (MADV_DONTNEED) and waits for reuse. Compaction
// empties the others: when the dead bytes pass 1/8 of the arena (and a segment), the owner
// (Table::CompactStep) walks the segment with the fewest live bytes, a bounded number of bytes
// at a time, moves each live record to the head (Move) and re-points its slot; once the walk
// is done the segment is released. The owner decides which records are live, since only it
// knows which slot points where.
//
// Why 1/8: the lower the threshold, the fuller the segments compaction empties, and the more
// it copies for each byte it frees. At 1/16 it moved 2.3-2.4 bytes per byte written when
// overwrites changed values' sizes (bench/churn_bench.py); at 1/8, 1.1-1.2, for 1.25-1.3x the
// writes per second; at 1/4, 0.5, but a quarter of the arena could then be dead, and a
// record's charge for --max-memory (Table::Charge) would have to be 1/3 over its size, not 1/7.
//
// Segments are aligned to their size, so a record's segment header is its address masked.
// Segment layout: a 64-byte header (live bytes, bump offset, its index in segments_, bytes
// given back), then records. Not thread-safe: the shard's owner only.
//
// A give-back arena (the table's second one, for records of 16 KiB to 512 KiB in 16 MiB
// segments) also hands a freed block's whole pages back to the kernel at once (MADV_DONTNEED),
// all but the block's first kKeptBytes, which its owner uses to mark it dead for the walk. Its
// dead bytes then cost address space rather than memory, so it can have segments large enough
// that the unused end of one (a record that did not fit) is a small part of it, and compact
// later (at a quarter dead, not an eighth).
//
//   Arena arena;
//   char* r = arena.Allocate(Arena::Round(1032));  // 1,040 bytes
//   arena.Free(r, 1040);
#ifndef RINGKV_SHARD_INTERNAL_ARENA_H_
#define RINGKV_SHARD_INTERNAL_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ringkv::internal {

class Arena {
 public:
  static constexpr size_t kSegmentBytes = size_t{1} << 20;
  static constexpr size_t kGrain = 16;
  // Records above this go to the allocator: at most 1/64 of a segment is left unused at its
  // end when the next record does not fit.
  static constexpr size_t kMaxRecord = size_t{16} << 10;

  static size_t Round(size_t bytes) { return (bytes + kGrain - 1) / kGrain * kGrain; }
  // What a give-back arena leaves of a freed block: its owner's mark. It gives back whole pages.
  static constexpr size_t kKeptBytes = 16;
  static constexpr size_t kPageBytes = 4096;

  // `segment_bytes`: a power of two.
  explicit Arena(size_t segment_bytes = kSegmentBytes, bool give_back = false)
      : segment_bytes_(segment_bytes), give_back_(give_back) {}
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  // Exchanges everything with `other`: its segments and the records in them (Table::Swap).
  void Swap(Arena& other) {
    segments_.swap(other.segments_);
    spare_.swap(other.spare_);
    std::swap(head_, other.head_);
    std::swap(victim_, other.victim_);
    std::swap(cursor_, other.cursor_);
    std::swap(live_, other.live_);
    std::swap(dead_, other.dead_);
    std::swap(moved_, other.moved_);
    std::swap(returned_, other.returned_);
    std::swap(segment_bytes_, other.segment_bytes_);
    std::swap(give_back_, other.give_back_);
  }

  // `bytes` (a multiple of kGrain, small beside a segment: the head's end that the next record
  // does not fit in is dead), from the head segment; never from the segment being compacted.
  char* Allocate(size_t bytes);
  // Counts the record at `p` of `bytes` dead; releases its segment if that leaves it empty
  // (unless it is the head, or the one being walked). A give-back arena gives the kernel the
  // record's whole pages past its first kKeptBytes.
  void Free(char* p, size_t bytes);

  // Compaction. NeedsCompaction: the dead bytes are past the threshold. NextToMove: the next
  // record of the segment being compacted (picking one if none is), or null when there is
  // nothing to compact; the caller reads its size from its header and passes it to Skip,
  // after moving the record if it is live. A segment whose walk is done is released once
  // every record in it is freed, which the walk has made sure of.
  bool NeedsCompaction() const {
    return dead_ > segment_bytes_ &&
           dead_ > segments_.size() * segment_bytes_ / (give_back_ ? 4 : 8);
  }
  bool compacting() const { return victim_ != nullptr; }
  char* NextToMove();
  void Skip(size_t bytes) { cursor_ += bytes; }
  // Copies the record at `p` of `bytes` to the head and frees it there; returns the copy.
  char* Move(char* p, size_t bytes);

  // Bytes: in segments (the address space the arena holds), in live records, and dead (freed
  // records, and segments' unused ends) in segments not yet released.
  size_t segment_bytes() const { return segments_.size() * segment_bytes_; }
  size_t live_bytes() const { return live_; }
  size_t dead_bytes() const { return dead_; }
  // Of segment_bytes(), what can hold memory: less the head's end not reached yet, and in a
  // give-back arena, less the pages given back (and sealed segments' unused ends, never
  // touched). Of dead_bytes(), what is in those.
  size_t held_bytes() const {
    const size_t head_end = head_ == nullptr ? 0 : segment_bytes_ - HeaderOf(head_)->used;
    return segment_bytes() - head_end - returned_;
  }
  size_t held_dead_bytes() const { return dead_ - returned_; }
  // Bytes Move has copied, since the arena was made.
  uint64_t moved_bytes() const { return moved_; }

 private:
  struct Header {
    uint32_t live;      // Bytes of records not freed.
    uint32_t used;      // Bump offset: records end here (header included).
    uint32_t index;     // In segments_.
    uint32_t returned;  // Bytes given back (a give-back arena's), of the dead ones.
  };
  static constexpr size_t kHeaderBytes = 64;
  static_assert(sizeof(Header) <= kHeaderBytes);

  Header* HeaderOf(const void* p) const {
    return reinterpret_cast<Header*>(reinterpret_cast<uintptr_t>(p) & ~(segment_bytes_ - 1));
  }
  char* NewSegment();
  void Release(Header* h);
  // The head's unused end becomes dead, and the head a sealed segment.
  void Seal();

  std::vector<char*> segments_;
  std::vector<char*> spare_;  // Released segments, their pages given back, for reuse.
  char* head_ = nullptr;
  // The segment being compacted, and the next record in it.
  char* victim_ = nullptr;
  size_t cursor_ = 0;
  size_t live_ = 0;
  size_t dead_ = 0;
  uint64_t moved_ = 0;
  size_t returned_ = 0;  // Of dead_, given back (a give-back arena's).
  size_t segment_bytes_;
  bool give_back_;
};

}  // namespace ringkv::internal

#endif  // RINGKV_SHARD_INTERNAL_ARENA_H_
