// ring/ring.h: the single-consumer pointer rings that carry requests between ringkv's threads.
//
// A Ring moves `void*` (always a pointer to an object that the caller owns) from producer threads
// to one consumer thread. The contract is DPDK's:
//   - EnqueueBurst / DequeueBurst move as many as fit / as are there, and return how many moved;
//   - EnqueueBulk / DequeueBulk move all n or none, and return n or 0.
// A ring never drops: a full ring returns a short count and the producer decides what to do
// (ringkv's workers keep the rest in a local outbox and drain their own inbox meanwhile).
//
// Threads: exactly one consumer thread at a time. Single-producer kinds (RingKind::kRteSpsc,
// kMoodySpsc) take one producer thread; the others take any number. Capacity and kind are constant
// after construction.
//
// Usage:
//   auto ring = ringkv::MakeRing(ringkv::RingKind::kRteSpsc, 1024).value();
//   size_t sent = ring->EnqueueBurst(objs, n);      // producer thread
//   size_t got = ring->DequeueBurst(out, 32);       // consumer thread
#ifndef RINGKV_RING_RING_H_
#define RINGKV_RING_RING_H_

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"

namespace ringkv {

enum class RingKind {
  kRteSpsc,  // DPDK rte_ring, single producer, single consumer.
  kRteMpsc,  // DPDK rte_ring, multi producer, single consumer.
  // DPDK rte_ring, multi producer in RTS (relaxed tail sync) mode, single consumer. A classic
  // MP producer that reserved slots waits for the ones before it to publish theirs; if one of
  // them is preempted, every later producer spins until it runs again. With more threads than
  // cores that stalls for whole scheduler slices; in RTS mode producers do not wait on each
  // other (the last one out moves the tail).
  kRteMpscRts,
  kMoodySpsc,  // moodycamel::ReaderWriterQueue.
  kMoodyMpsc,  // moodycamel::ConcurrentQueue, bulk dequeue.
  kMutex,      // std::mutex around a vector that the consumer swaps out: the baseline.
};

// Every kind, in the order tables list them.
inline constexpr RingKind kAllRingKinds[] = {RingKind::kRteSpsc,    RingKind::kRteMpsc,
                                             RingKind::kRteMpscRts, RingKind::kMoodySpsc,
                                             RingKind::kMoodyMpsc,  RingKind::kMutex};

// "spsc-rte", "mpsc-rte", "mpsc-rts", "spsc-moody", "mpsc-moody", "mutex".
std::string_view RingKindName(RingKind kind);
absl::StatusOr<RingKind> ParseRingKind(std::string_view name);
bool IsMultiProducer(RingKind kind);

class Ring {
 public:
  virtual ~Ring() = default;
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Producer side.
  virtual size_t EnqueueBurst(void* const* objs, size_t n) = 0;
  virtual size_t EnqueueBulk(void* const* objs, size_t n) = 0;

  // Consumer side (one thread).
  virtual size_t DequeueBurst(void** objs, size_t n) = 0;
  // All backends have a single consumer, so the default is exact: nobody else can take what
  // SizeApprox() counted. Backends with a native bulk dequeue override it.
  virtual size_t DequeueBulk(void** objs, size_t n);

  // How many pointers the ring is sure to hold; moodycamel's queues may hold somewhat more.
  virtual size_t capacity() const = 0;
  // Exact when producers and consumer are quiet; a snapshot otherwise. Any thread.
  virtual size_t SizeApprox() const = 0;

 protected:
  Ring() = default;
};

// Makes a ring of `kind` that holds at least `capacity` pointers (1 .. 2^28).
absl::StatusOr<std::unique_ptr<Ring>> MakeRing(RingKind kind, size_t capacity);

// The CPU's spin-wait hint, for loops that poll a ring or a flag.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace ringkv

#endif  // RINGKV_RING_RING_H_
