#include "ring/ring.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "ring/internal/moody_mpsc_backend.h"
#include "ring/internal/moody_spsc_backend.h"
#include "ring/internal/mutex_backend.h"
#include "ring/internal/rte_ring_backend.h"

namespace ringkv {

namespace {
constexpr size_t kMaxCapacity = size_t{1} << 28;
}  // namespace

std::string_view RingKindName(RingKind kind) {
  switch (kind) {
    case RingKind::kRteSpsc:
      return "spsc-rte";
    case RingKind::kRteMpsc:
      return "mpsc-rte";
    case RingKind::kRteMpscRts:
      return "mpsc-rts";
    case RingKind::kMoodySpsc:
      return "spsc-moody";
    case RingKind::kMoodyMpsc:
      return "mpsc-moody";
    case RingKind::kMutex:
      return "mutex";
  }
  return "unknown";
}

absl::StatusOr<RingKind> ParseRingKind(std::string_view name) {
  for (RingKind kind : kAllRingKinds) {
    if (RingKindName(kind) == name) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ring kind '", absl::string_view(name.data(), name.size()),
                   "': expected spsc-rte, mpsc-rte, mpsc-rts, spsc-moody, mpsc-moody or mutex"));
}

bool IsMultiProducer(RingKind kind) {
  return kind != RingKind::kRteSpsc && kind != RingKind::kMoodySpsc;
}

size_t Ring::DequeueBulk(void** objs, size_t n) {
  if (SizeApprox() < n) return 0;
  size_t got = 0;
  while (got < n) got += DequeueBurst(objs + got, n - got);
  return got;
}

absl::StatusOr<std::unique_ptr<Ring>> MakeRing(RingKind kind, size_t capacity) {
  if (capacity == 0 || capacity > kMaxCapacity) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring capacity ", capacity, " is out of range: 1 .. ", kMaxCapacity));
  }
  switch (kind) {
    case RingKind::kRteSpsc:
      return internal::RteRing<internal::Producers::kSingle>::Create(capacity);
    case RingKind::kRteMpsc:
      return internal::RteRing<internal::Producers::kMulti>::Create(capacity);
    case RingKind::kRteMpscRts:
      return internal::RteRing<internal::Producers::kMultiRts>::Create(capacity);
    case RingKind::kMoodySpsc:
      return std::unique_ptr<Ring>(new internal::MoodySpscRing(capacity));
    case RingKind::kMoodyMpsc:
      return std::unique_ptr<Ring>(new internal::MoodyMpscRing(capacity));
    case RingKind::kMutex:
      return std::unique_ptr<Ring>(new internal::MutexRing(capacity));
  }
  return absl::InvalidArgumentError("unknown ring kind");
}

}  // namespace ringkv
