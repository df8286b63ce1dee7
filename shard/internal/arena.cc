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
    segment = static_cast<char*>(std::aligned_alloc(kSegmentBytes, kSegmentBytes));
    if (segment == nullptr) throw std::bad_alloc();
  }
  Header* h = HeaderOf(segment);
  h->live = 0;
  h->used = kHeaderBytes;
  h->index = static_cast<uint32_t>(segments_.size());
  segments_.push_back(segment);
  return segment;
}

void Arena::Release(Header* h) {
  // Everything past the header is dead: freed records, and the end the bump never reached.
  dead_ -= kSegmentBytes - kHeaderBytes;
  char* segment = reinterpret_cast<char*>(h);
  char* last = segments_.back();
  segments_[h->index] = last;
  HeaderOf(last)->index = h->index;
  segments_.pop_back();
  // Kept for the next segment, its pages given back now: freed to jemalloc, a segment stayed
  // resident until jemalloc's decay (10 s), and a compacting arena then held its whole history.
  madvise(segment, kSegmentBytes, MADV_DONTNEED);  // Advice: failure only keeps the pages.
  spare_.push_back(segment);
}

void Arena::Seal() {
  Header* h = HeaderOf(head_);
  dead_ += kSegmentBytes - h->used;
  head_ = nullptr;
  if (h->live == 0) Release(h);
}

char* Arena::Allocate(size_t bytes) {
  if (head_ == nullptr || HeaderOf(head_)->used + bytes > kSegmentBytes) {
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
