// The lock-vs-ring benchmark of the report (seed 002): each of N threads makes `ops` PUTs over
// its own generated keys, then GETs the same keys in the same order; both phases are timed from
// the moment every thread is ready to the moment the last thread's requests have all completed.
// Key generation, map allocation and thread start-up are outside the timing.
//
// Methods:
//   lock        every thread runs its requests itself on N maps under striped key locks and a
//               shared_mutex per map (LockEngine);
//   spsc-rte, mpsc-rte, spsc-moody, mpsc-moody, mutex
//               a RingEngine of N workers with that ring kind;
//   none        the upper bound: each thread runs its requests on its own map, no exchange.
#ifndef RINGKV_BENCH_KV_BENCH_H_
#define RINGKV_BENCH_KV_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ringkv::bench {

struct KvBenchOptions {
  std::string method = "spsc-rte";
  uint32_t threads = 1;
  uint64_t ops = 25'000'000;  // Per thread.
  size_t burst = 32;
  size_t ring_size = 65536;
  bool rdtsc = false;
  bool pin = true;       // Pin thread i to CPU i mod cores.
  bool progress = true;  // Progress lines on stderr for phases longer than a few seconds.
  // Each shard's records pre-faulted for the keys it reserves, as the report's maps (and this
  // project's table of 48-byte entries) paid for their memory before the timer; false: records
  // come from malloc as keys arrive, as a server's do.
  bool reserve_records = true;
};

// Cycle breakdown of one thread in one phase (--rdtsc, ring methods and none).
struct ThreadCycles {
  uint64_t hash_cycles = 0, hash_ops = 0;
  uint64_t map_cycles = 0, map_ops = 0;
  uint64_t ring_cycles = 0, ring_ops = 0;
  uint64_t total_cycles = 0, requests = 0;  // Whole phase on this thread, and its own requests.
};

struct PhaseResult {
  double seconds = 0;
  double total_mops = 0;
  double per_thread_mops = 0;
  std::vector<ThreadCycles> cycles;  // Empty unless --rdtsc.
};

struct KvBenchResult {
  PhaseResult put;
  PhaseResult get;
  uint64_t peak_rss_bytes = 0;
  double tsc_ghz = 0;
  uint64_t errors = 0;
  std::string first_error;
};

// Returns an error for bad options; a run whose GETs found wrong values returns a result with
// errors > 0 (the caller fails the run).
absl::StatusOr<KvBenchResult> RunKvBench(const KvBenchOptions& options);

// "lock, spsc-rte, ...": the names --method accepts, in table order.
const std::vector<std::string>& KvBenchMethods();

}  // namespace ringkv::bench

#endif  // RINGKV_BENCH_KV_BENCH_H_
