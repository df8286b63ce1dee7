// DPDK rte_ring behind ringkv::Ring, in both producer modes (the ring's flags are the only
// difference, so one class serves both). The ring lives on memory this class allocates, cache-line
// aligned, and is set up with rte_ring_init: no EAL, no hugepages, no memzone.
#ifndef RINGKV_RING_INTERNAL_RTE_RING_BACKEND_H_
#define RINGKV_RING_INTERNAL_RTE_RING_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "ring/ring.h"

struct rte_ring;

namespace ringkv::internal {

enum class Producers { kSingle, kMulti, kMultiRts };

template <Producers kProducers>
class RteRing final : public Ring {
 public:
  static absl::StatusOr<std::unique_ptr<Ring>> Create(size_t capacity);
  ~RteRing() override;

  size_t EnqueueBurst(void* const* objs, size_t n) override;
  size_t EnqueueBulk(void* const* objs, size_t n) override;
  size_t DequeueBurst(void** objs, size_t n) override;
  size_t DequeueBulk(void** objs, size_t n) override;
  size_t capacity() const override;
  size_t SizeApprox() const override;

 private:
  explicit RteRing(rte_ring* ring) : ring_(ring) {}
  rte_ring* const ring_;  // Owned; freed with std::free.
};

}  // namespace ringkv::internal

#endif  // RINGKV_RING_INTERNAL_RTE_RING_BACKEND_H_
