#include "ring/internal/rte_ring_backend.h"

#include <rte_ring.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace ringkv::internal {

namespace {
constexpr size_t kCacheLine = 64;

constexpr unsigned RingFlags(Producers producers) {
  // EXACT_SZ: the ring holds exactly the capacity asked for, not a power of two minus one.
  unsigned flags = RING_F_SC_DEQ | RING_F_EXACT_SZ;
  if (producers == Producers::kSingle) flags |= RING_F_SP_ENQ;
  if (producers == Producers::kMultiRts) flags |= RING_F_MP_RTS_ENQ;
  return flags;
}
}  // namespace

template <Producers kProducers>
absl::StatusOr<std::unique_ptr<Ring>> RteRing<kProducers>::Create(size_t capacity) {
  // With RING_F_EXACT_SZ, rte_ring_init lays out the next power of two above the capacity (one
  // slot stays empty to tell full from empty), so the memory is sized for that many slots.
  const unsigned slots = rte_align32pow2(static_cast<unsigned>(capacity) + 1);
  const ssize_t bytes = rte_ring_get_memsize_elem(sizeof(void*), slots);
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rte_ring_get_memsize: capacity ", capacity, " is not supported"));
  }
  // rte_ring_get_memsize is a multiple of the cache line, as aligned_alloc requires.
  auto* ring = static_cast<rte_ring*>(std::aligned_alloc(kCacheLine, static_cast<size_t>(bytes)));
  if (ring == nullptr) return absl::ResourceExhaustedError("out of memory for an rte_ring");
  const int rc =
      rte_ring_init(ring, "ringkv", static_cast<unsigned>(capacity), RingFlags(kProducers));
  if (rc != 0) {
    std::free(ring);
    return absl::InternalError(absl::StrCat("rte_ring_init failed: ", rc));
  }
  return std::unique_ptr<Ring>(new RteRing(ring));
}

template <Producers kProducers>
RteRing<kProducers>::~RteRing() {
  std::free(ring_);
}

// The sp_/mp_ entry points fix the synchronisation at compile time instead of switching on the
// ring's stored sync type at every call.
template <Producers kProducers>
size_t RteRing<kProducers>::EnqueueBurst(void* const* objs, size_t n) {
  if constexpr (kProducers == Producers::kSingle) {
    return rte_ring_sp_enqueue_burst(ring_, objs, static_cast<unsigned>(n), nullptr);
  } else if constexpr (kProducers == Producers::kMulti) {
    return rte_ring_mp_enqueue_burst(ring_, objs, static_cast<unsigned>(n), nullptr);
  } else {
    return rte_ring_mp_rts_enqueue_burst(ring_, objs, static_cast<unsigned>(n), nullptr);
  }
}

template <Producers kProducers>
size_t RteRing<kProducers>::EnqueueBulk(void* const* objs, size_t n) {
  if constexpr (kProducers == Producers::kSingle) {
    return rte_ring_sp_enqueue_bulk(ring_, objs, static_cast<unsigned>(n), nullptr);
  } else if constexpr (kProducers == Producers::kMulti) {
    return rte_ring_mp_enqueue_bulk(ring_, objs, static_cast<unsigned>(n), nullptr);
  } else {
    return rte_ring_mp_rts_enqueue_bulk(ring_, objs, static_cast<unsigned>(n), nullptr);
  }
}

template <Producers kProducers>
size_t RteRing<kProducers>::DequeueBurst(void** objs, size_t n) {
  return rte_ring_sc_dequeue_burst(ring_, objs, static_cast<unsigned>(n), nullptr);
}

template <Producers kProducers>
size_t RteRing<kProducers>::DequeueBulk(void** objs, size_t n) {
  return rte_ring_sc_dequeue_bulk(ring_, objs, static_cast<unsigned>(n), nullptr);
}

template <Producers kProducers>
size_t RteRing<kProducers>::capacity() const {
  return rte_ring_get_capacity(ring_);
}

template <Producers kProducers>
size_t RteRing<kProducers>::SizeApprox() const {
  return rte_ring_count(ring_);
}

template class RteRing<Producers::kSingle>;
template class RteRing<Producers::kMulti>;
template class RteRing<Producers::kMultiRts>;

}  // namespace ringkv::internal
