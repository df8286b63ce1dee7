// The baseline ring: producers append to a vector under a std::mutex; the consumer swaps the whole
// vector out under the lock and hands its contents out without it (the report's QueueInLoop).
#ifndef RINGKV_RING_INTERNAL_MUTEX_BACKEND_H_
#define RINGKV_RING_INTERNAL_MUTEX_BACKEND_H_

#include <atomic>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "ring/ring.h"

namespace ringkv::internal {

class MutexRing final : public Ring {
 public:
  explicit MutexRing(size_t capacity);

  size_t EnqueueBurst(void* const* objs, size_t n) override;
  size_t EnqueueBulk(void* const* objs, size_t n) override;
  size_t DequeueBurst(void** objs, size_t n) override;
  size_t capacity() const override { return capacity_; }
  size_t SizeApprox() const override { return size_.load(std::memory_order_acquire); }

 private:
  size_t Enqueue(void* const* objs, size_t n, bool all_or_none);

  const size_t capacity_;
  std::mutex mu_;
  std::vector<void*> pending_ ABSL_GUARDED_BY(mu_);
  // Everything in the ring: pending_ plus what the consumer took but has not handed out. Raised
  // by producers under mu_ (so their check-then-add cannot race each other), lowered by the
  // consumer alone; a producer can therefore only see less room than there is, never more.
  std::atomic<size_t> size_{0};
  // Consumer thread only.
  std::vector<void*> drained_;
  size_t next_ = 0;
};

}  // namespace ringkv::internal

#endif  // RINGKV_RING_INTERNAL_MUTEX_BACKEND_H_
