// LatencyHistogram: log-linear buckets of nanoseconds (16 per power of two, so a percentile is
// within about 6% of the true value), fixed size, no per-sample storage. One per thread; merge
// them at the end. Not thread-safe.
//
//   LatencyHistogram h;
//   h.Record(12'345);
//   uint64_t p99 = h.Percentile(99.0);
#ifndef RINGKV_BENCH_LATENCY_HISTOGRAM_H_
#define RINGKV_BENCH_LATENCY_HISTOGRAM_H_

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

namespace ringkv::bench {

class LatencyHistogram {
 public:
  void Record(uint64_t ns) {
    ++buckets_[Index(ns)];
    ++count_;
    max_ = std::max(max_, ns);
  }
  void Merge(const LatencyHistogram& other) {
    for (size_t i = 0; i < kBuckets; ++i) buckets_[i] += other.buckets_[i];
    count_ += other.count_;
    max_ = std::max(max_, other.max_);
  }
  uint64_t count() const { return count_; }
  uint64_t max() const { return max_; }
  // The upper edge of the bucket holding the p-th percentile (0 < p <= 100); 0 if empty.
  uint64_t Percentile(double p) const {
    if (count_ == 0) return 0;
    const auto rank = static_cast<uint64_t>(p / 100.0 * static_cast<double>(count_) + 0.5);
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += buckets_[i];
      if (seen >= std::max<uint64_t>(rank, 1)) return std::min(UpperEdge(i), max_);
    }
    return max_;
  }

 private:
  static constexpr int kSubBits = 4;  // 16 buckets per power of two.
  static constexpr size_t kBuckets = (64 - kSubBits + 1) << kSubBits;

  static size_t Index(uint64_t ns) {
    if (ns < (uint64_t{1} << kSubBits)) return static_cast<size_t>(ns);
    const int exponent = 63 - std::countl_zero(ns);  // >= kSubBits.
    const uint64_t sub = (ns >> (exponent - kSubBits)) & ((1u << kSubBits) - 1);
    return (static_cast<size_t>(exponent - kSubBits + 1) << kSubBits) + static_cast<size_t>(sub);
  }
  static uint64_t UpperEdge(size_t index) {
    if (index < (size_t{1} << kSubBits)) return index;
    const int exponent = static_cast<int>(index >> kSubBits) + kSubBits - 1;
    const uint64_t sub = index & ((1u << kSubBits) - 1);
    return ((uint64_t{1} << kSubBits) + sub + 1) << (exponent - kSubBits);
  }

  std::array<uint64_t, kBuckets> buckets_{};
  uint64_t count_ = 0;
  uint64_t max_ = 0;
};

}  // namespace ringkv::bench

#endif  // RINGKV_BENCH_LATENCY_HISTOGRAM_H_
