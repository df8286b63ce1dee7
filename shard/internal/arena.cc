#include "shard/internal/arena.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace ringkv::internal {

Arena::~Arena() {
  for (char* segment : segments_) std::free(segment);
  for (char* segment : spare_) std::free(segment);
}

char* Arena::NewSegment() {
  char* segment;
  if (!spare_.empty()) {
    segment = spare_.back();
    spare_.pop_back();
  } else {
    segment = static_cast<char*>(std::aligned_alloc(segment_bytes_, segment_bytes_));
    if (segment == nullptr) throw std::bad_alloc();
  }
  Header* h = HeaderOf(segment);
  h->live = 0;
  h->used = kHeaderBytes;
  h->index = static_cast<uint32_t>(segments_.size());
  h->returned = 0;
  segments_.push_back(segment);
  return segment;
}

void Arena::Release(Header* h) {
  // Everything past the header is dead: freed records, and the end the bump never reached.
  dead_ -= segment_bytes_ - kHeaderBytes;
  returned_ -= h->returned;
  char* segment = reinterpret_cast<char*>(h);
  char* last = segments_.back();
  segments_[h->index] = last;
  HeaderOf(last)->index = h->index;
  segments_.pop_back();
  // Kept for the next segment, its pages given back now: freed to jemalloc, a segment stayed
  // resident until jemalloc's decay (10 s), and a compacting arena then held its whole history.
  madvise(segment, segment_bytes_, MADV_DONTNEED);  // Advice: failure only keeps the pages.
  spare_.push_back(segment);
}

void Arena::Seal() {
  Header* h = HeaderOf(head_);
  const size_t end = segment_bytes_ - h->used;
  dead_ += end;
  if (give_back_) {  // Never touched since the segment was new or given back.
    h->returned += static_cast<uint32_t>(end);
    returned_ += end;
  }
  head_ = nullptr;
  if (h->live == 0) Release(h);
}

char* Arena::Allocate(size_t bytes) {
  if (head_ == nullptr || HeaderOf(head_)->used + bytes > segment_bytes_) {
    if (head_ != nullptr) Seal();
    head_ = NewSegment();
  }
  Header* h = HeaderOf(head_);
  char* p = head_ + h->used;
  h->used += static_cast<uint32_t>(bytes);
  h->live += static_cast<uint32_t>(bytes);
  live_ += bytes;
  return p;
}

void Arena::Free(char* p, size_t bytes) {
  Header* h = HeaderOf(p);
  h->live -= static_cast<uint32_t>(bytes);
  live_ -= bytes;
  dead_ += bytes;
  if (give_back_) {
    constexpr uintptr_t kPage = kPageBytes;
    const uintptr_t from = (reinterpret_cast<uintptr_t>(p) + kKeptBytes + kPage - 1) & ~(kPage - 1);
    const uintptr_t to = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kPage - 1);
    // Advice: failure only keeps the pages, and then they are not counted as given back.
    if (to > from && madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED) == 0) {
      h->returned += static_cast<uint32_t>(to - from);
      returned_ += to - from;
    }
  }
  char* segment = reinterpret_cast<char*>(h);
  if (h->live == 0 && segment != head_ && segment != victim_) Release(h);
}

char* Arena::Move(char* p, size_t bytes) {
  char* to = Allocate(bytes);
  std::memcpy(to, p, bytes);
  Free(p, bytes);
  moved_ += bytes;
  return to;
}

char* Arena::NextToMove() {
  if (victim_ != nullptr && cursor_ < HeaderOf(victim_)->used) return victim_ + cursor_;
  if (victim_ != nullptr) {  // Walked: every live record in it has moved.
    Header* h = HeaderOf(victim_);
    victim_ = nullptr;
    if (h->live == 0) Release(h);
  }
  if (!NeedsCompaction()) return nullptr;
  // The sealed segment with the fewest live bytes: the most space for the copying.
  char* best = nullptr;
  for (char* segment : segments_) {
    if (segment != head_ && (best == nullptr || HeaderOf(segment)->live < HeaderOf(best)->live)) {
      best = segment;
    }
  }
  if (best == nullptr) return nullptr;
  victim_ = best;
  cursor_ = kHeaderBytes;
  return cursor_ < HeaderOf(victim_)->used ? victim_ + cursor_ : nullptr;
}

}  // namespace ringkv::internal
