// CallMetrics: one loop's count of the calls it served, by method and gRPC status code, and a
// histogram of their latency by method (from the call's headers to its end). The loop's thread
// writes them with plain relaxed loads and stores (one writer, no read-modify-write, no fence:
// an add costs what a plain counter costs); the /metrics scrape reads them from its own thread
// at any moment, and may see one counter a call ahead of another.
//
// Threads: Record on the owning loop's thread only; the readers from any thread.
//
//   metrics.Record(MethodId::kGet, absl::StatusCode::kOk, /*nanos=*/42'000);
//   uint64_t ok_gets = metrics.calls(MethodId::kGet, absl::StatusCode::kOk);
#ifndef RINGKV_SERVER_METRICS_CALL_METRICS_H_
#define RINGKV_SERVER_METRICS_CALL_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "server/handlers/methods.h"

namespace ringkv {

class CallMetrics {
 public:
  // gRPC's status codes, 0 (OK) to 16 (UNAUTHENTICATED).
  static constexpr int kCodes = 17;
  // Upper bounds of the latency buckets, in nanoseconds (a last, unbounded one follows).
  static constexpr std::array<int64_t, 15> kBucketBoundsNs = {
      50'000,      100'000,     250'000,     500'000,       1'000'000,
      2'500'000,   5'000'000,   10'000'000,  25'000'000,    50'000'000,
      100'000'000, 250'000'000, 500'000'000, 1'000'000'000, 2'500'000'000};
  static constexpr int kBuckets = kBucketBoundsNs.size() + 1;

  void Record(MethodId method, absl::StatusCode code, int64_t nanos) {
    PerMethod& m = methods_[static_cast<size_t>(method)];
    int c = static_cast<int>(code);
    if (c < 0 || c >= kCodes) c = static_cast<int>(absl::StatusCode::kUnknown);
    Add(m.calls[c], 1);
    int bucket = 0;
    while (bucket < kBuckets - 1 && nanos > kBucketBoundsNs[bucket]) ++bucket;
    Add(m.buckets[bucket], 1);
    Add(m.sum_ns, static_cast<uint64_t>(nanos > 0 ? nanos : 0));
  }

  uint64_t calls(MethodId method, int code) const {
    return methods_[static_cast<size_t>(method)].calls[code].load(std::memory_order_relaxed);
  }
  // Calls of `method` that took at most bucket `b`'s bound (not cumulative).
  uint64_t bucket(MethodId method, int b) const {
    return methods_[static_cast<size_t>(method)].buckets[b].load(std::memory_order_relaxed);
  }
  uint64_t sum_ns(MethodId method) const {
    return methods_[static_cast<size_t>(method)].sum_ns.load(std::memory_order_relaxed);
  }

 private:
  // One writer: a relaxed load and store is enough, and is what a plain counter compiles to.
  static void Add(std::atomic<uint64_t>& counter, uint64_t n) {
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }

  struct PerMethod {
    std::array<std::atomic<uint64_t>, kCodes> calls{};
    std::array<std::atomic<uint64_t>, kBuckets> buckets{};
    std::atomic<uint64_t> sum_ns{0};
  };
  std::array<PerMethod, kMethodCount> methods_{};
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_METRICS_CALL_METRICS_H_
