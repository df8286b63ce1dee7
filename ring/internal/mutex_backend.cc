#include "ring/internal/mutex_backend.h"

#include <algorithm>

namespace ringkv::internal {

MutexRing::MutexRing(size_t capacity) : capacity_(capacity) {
  pending_.reserve(std::min<size_t>(capacity, 4096));
}

size_t MutexRing::Enqueue(void* const* objs, size_t n, bool all_or_none) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t room = capacity_ - size_.load(std::memory_order_relaxed);
  if (all_or_none && room < n) return 0;
  const size_t k = std::min(n, room);
  pending_.insert(pending_.end(), objs, objs + k);
  // Release: a consumer that reads this count (SizeApprox) will find the pointers, since it takes
  // them under mu_ anyway; the order only matters for DequeueBulk's check.
  size_.fetch_add(k, std::memory_order_release);
  return k;
}

size_t MutexRing::EnqueueBurst(void* const* objs, size_t n) { return Enqueue(objs, n, false); }

size_t MutexRing::EnqueueBulk(void* const* objs, size_t n) { return Enqueue(objs, n, true); }

size_t MutexRing::DequeueBurst(void** objs, size_t n) {
  if (next_ == drained_.size()) {
    drained_.clear();
    next_ = 0;
    std::lock_guard<std::mutex> lock(mu_);
    // The producers get back the empty vector, with its capacity, so neither side allocates once
    // both have grown to the traffic.
    pending_.swap(drained_);
  }
  const size_t k = std::min(n, drained_.size() - next_);
  std::copy_n(drained_.begin() + static_cast<ptrdiff_t>(next_), k, objs);
  next_ += k;
  size_.fetch_sub(k, std::memory_order_relaxed);
  return k;
}

}  // namespace ringkv::internal
