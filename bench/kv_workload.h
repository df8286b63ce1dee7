// The report's key-value workload (seed 002), as a RequestSource per bench thread.
//
// KeyArena: the `count` keys of one thread, "file.mdtest.<a>.<b>" with a and b uniform in
// [1, range], generated before timing and stored back to back (a length byte, then the key) so
// that 25M keys take ~750 MB instead of 25M heap strings.
//
// KvSource: hands out one PUT or GET per key in arena order from a small pool of reused requests
// (completed requests go back to the pool; the pool bounds the requests in flight). A PUT stores
// 8 bytes that name its writer, (thread << 40 | index). A GET is checked when it comes back:
// it must find a value whose writer wrote this very key; when that writer is this thread, not an
// earlier index than this one (the same key generated twice by one thread must read the later
// write, which per-sender ring order guarantees). Two threads that happen to generate the same key
// race, so either writer is accepted.
//
// Threads: a KvSource belongs to its bench thread; completed() may be read from any thread.
#ifndef RINGKV_BENCH_KV_WORKLOAD_H_
#define RINGKV_BENCH_KV_WORKLOAD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shard/request.h"
#include "shard/worker.h"

namespace ringkv::bench {

class KeyArena {
 public:
  KeyArena(uint64_t count, uint64_t range, uint64_t seed);

  // The longest key of a given range.
  static size_t MaxKeyBytes(uint64_t range);

  std::string_view key(uint64_t i) const {
    const char* p = data_.get() + i * stride_;
    return {p + 1, static_cast<unsigned char>(p[0])};
  }
  uint64_t size() const { return count_; }
  uint64_t bytes() const { return count_ * stride_; }

 private:
  uint64_t count_;
  size_t stride_;
  std::unique_ptr<char[]> data_;
};

class KvSource final : public RequestSource {
 public:
  static constexpr size_t kPoolSize = 8192;

  // `arenas` holds every thread's keys (to check a GET that found another thread's write); it may
  // be filled in after construction, before the first StartPhase.
  KvSource(uint32_t thread, const std::vector<std::unique_ptr<KeyArena>>& arenas);

  // Starts a pass over the arena with `op`; the previous pass must be Finished.
  void StartPhase(Op op);

  size_t Poll(Request** out, size_t max) override;
  void Complete(Request* request) override;
  bool Finished() const override { return completed_local_ == arena().size(); }

  uint64_t completed() const { return completed_.load(std::memory_order_relaxed); }
  uint64_t errors() const { return errors_; }
  const std::string& first_error() const { return first_error_; }

 private:
  struct Slot {
    Request request;
    uint64_t index = 0;
    char value[8];
  };
  void Check(const Slot& slot);
  const KeyArena& arena() const { return *arena_; }

  // Constant after construction.
  const uint32_t thread_;
  const std::vector<std::unique_ptr<KeyArena>>& arenas_;

  // Bench thread only.
  std::vector<Slot> pool_;
  std::vector<Slot*> free_;
  const KeyArena* arena_ = nullptr;  // Set by StartPhase, once the arenas exist.
  Op op_ = Op::kPut;
  uint64_t next_ = 0;
  uint64_t completed_local_ = 0;
  uint64_t errors_ = 0;
  std::string first_error_;
  // Mirrors completed_local_ for the progress line: written by the bench thread alone, read
  // relaxed by the main thread, which only wants a recent figure.
  std::atomic<uint64_t> completed_{0};
};

}  // namespace ringkv::bench

#endif  // RINGKV_BENCH_KV_WORKLOAD_H_
