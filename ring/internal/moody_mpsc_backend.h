// moodycamel::ConcurrentQueue behind ringkv::Ring (many producers, one consumer), using its bulk
// calls. Only the try_ calls are used, so the queue never allocates after construction: its
// preallocated blocks are the capacity, and a full queue is back-pressure like any other ring.
#ifndef RINGKV_RING_INTERNAL_MOODY_MPSC_BACKEND_H_
#define RINGKV_RING_INTERNAL_MOODY_MPSC_BACKEND_H_

#include <concurrentqueue/concurrentqueue.h>

#include "ring/ring.h"

namespace ringkv::internal {

struct MoodyMpscTraits : moodycamel::ConcurrentQueueDefaultTraits {
  // NOLINTNEXTLINE(readability-identifier-naming): moodycamel's traits name it so.
  static constexpr size_t BLOCK_SIZE = 256;
  // A producer's block index must cover the whole capacity, or try_enqueue would need to grow it
  // (an allocation) and fail instead: 2^14 blocks of 256 is 4 Mi pointers per producer.
  // NOLINTNEXTLINE(readability-identifier-naming): moodycamel's traits name it so.
  static constexpr size_t IMPLICIT_INITIAL_INDEX_SIZE = size_t{1} << 14;
};

class MoodyMpscRing final : public Ring {
 public:
  // Each producer may hold a partly filled block, so blocks for 64 producers are added to make
  // `capacity` a promise rather than an estimate.
  static constexpr size_t kProducerSlack = 64 * 2 * MoodyMpscTraits::BLOCK_SIZE;

  explicit MoodyMpscRing(size_t capacity)
      : capacity_(capacity), queue_(capacity + kProducerSlack) {}

  size_t EnqueueBurst(void* const* objs, size_t n) override {
    if (queue_.try_enqueue_bulk(objs, n)) return n;
    size_t i = 0;
    while (i < n && queue_.try_enqueue(objs[i])) ++i;
    return i;
  }
  size_t EnqueueBulk(void* const* objs, size_t n) override {
    return queue_.try_enqueue_bulk(objs, n) ? n : 0;
  }
  size_t DequeueBurst(void** objs, size_t n) override { return queue_.try_dequeue_bulk(objs, n); }
  size_t capacity() const override { return capacity_; }
  size_t SizeApprox() const override { return queue_.size_approx(); }

 private:
  const size_t capacity_;
  moodycamel::ConcurrentQueue<void*, MoodyMpscTraits> queue_;  // Internally synchronised.
};

}  // namespace ringkv::internal

#endif  // RINGKV_RING_INTERNAL_MOODY_MPSC_BACKEND_H_
