// moodycamel::ReaderWriterQueue behind ringkv::Ring (single producer, single consumer).
// The queue has no bulk calls, so bursts are loops of try_enqueue / try_dequeue, and bulk checks
// the room first. The queue promises room for the capacity it was built with at any time, and
// max_capacity() may exceed what is usable while the consumer sits in a block, so the check is
// against the requested capacity. With one producer and one consumer the free space seen by the
// producer can only grow, and the count seen by the consumer can only grow: the check holds.
#ifndef RINGKV_RING_INTERNAL_MOODY_SPSC_BACKEND_H_
#define RINGKV_RING_INTERNAL_MOODY_SPSC_BACKEND_H_

#include <readerwriterqueue/readerwriterqueue.h>

#include "ring/ring.h"

namespace ringkv::internal {

class MoodySpscRing final : public Ring {
 public:
  explicit MoodySpscRing(size_t capacity) : capacity_(capacity), queue_(capacity) {}

  size_t EnqueueBurst(void* const* objs, size_t n) override {
    size_t i = 0;
    while (i < n && queue_.try_enqueue(objs[i])) ++i;
    return i;
  }
  size_t EnqueueBulk(void* const* objs, size_t n) override {
    const size_t size = queue_.size_approx();
    if (size >= capacity_ || capacity_ - size < n) return 0;
    for (size_t i = 0; i < n; ++i) {
      // Seen in ring_test: with the consumer working concurrently, try_enqueue can refuse while
      // the queue holds less than its promised capacity (the producer may not enter the block the
      // consumer is reading). Bulk has promised all n by now, so the rare remainder takes the
      // allocating path, which adds a block to the queue for good.
      if (!queue_.try_enqueue(objs[i])) queue_.enqueue(objs[i]);
    }
    return n;
  }
  size_t DequeueBurst(void** objs, size_t n) override {
    size_t i = 0;
    while (i < n && queue_.try_dequeue(objs[i])) ++i;
    return i;
  }
  size_t capacity() const override { return capacity_; }
  size_t SizeApprox() const override { return queue_.size_approx(); }

 private:
  const size_t capacity_;
  moodycamel::ReaderWriterQueue<void*> queue_;  // Internally synchronised.
};

}  // namespace ringkv::internal

#endif  // RINGKV_RING_INTERNAL_MOODY_SPSC_BACKEND_H_
