#include "bench/kv_bench.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/kv_workload.h"
#include "shard/engine.h"
#include "shard/internal/tsc.h"
#include "shard/lock_engine.h"

namespace ringkv::bench {

namespace {

using Clock = std::chrono::steady_clock;
using internal::Rdtscp;

double MeasureTscGhz() {
  const auto t0 = Clock::now();
  const uint64_t c0 = Rdtscp();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const uint64_t c1 = Rdtscp();
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  return static_cast<double>(c1 - c0) / ns;
}

uint64_t PeakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;
}

void PinToCpu(uint32_t i) {
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(i % cpus, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

ThreadCycles Snapshot(const WorkerCounters& c) {
  ThreadCycles t;
  t.hash_cycles = WorkerCounters::Read(c.hash_cycles);
  t.hash_ops = WorkerCounters::Read(c.hash_ops);
  t.map_cycles = WorkerCounters::Read(c.map_cycles);
  t.map_ops = WorkerCounters::Read(c.map_ops);
  t.ring_cycles = WorkerCounters::Read(c.ring_cycles);
  t.ring_ops = WorkerCounters::Read(c.ring_ops);
  return t;
}

ThreadCycles Minus(const ThreadCycles& a, const ThreadCycles& b) {
  ThreadCycles d;
  d.hash_cycles = a.hash_cycles - b.hash_cycles;
  d.hash_ops = a.hash_ops - b.hash_ops;
  d.map_cycles = a.map_cycles - b.map_cycles;
  d.map_ops = a.map_ops - b.map_ops;
  d.ring_cycles = a.ring_cycles - b.ring_cycles;
  d.ring_ops = a.ring_ops - b.ring_ops;
  return d;
}

}  // namespace

const std::vector<std::string>& KvBenchMethods() {
  static const auto* methods = new std::vector<std::string>{
      "lock", "mpsc-rte", "spsc-rte", "mpsc-moody", "spsc-moody", "mutex", "none"};
  return *methods;
}

namespace {

// How one bench thread runs a phase of its source's requests to completion.
using PhaseRunner = std::function<void(uint32_t thread, KvSource& source)>;

// The engines a method runs on: the lock baseline, one ring engine of n workers, or ("none") n
// ring engines of one worker each.
struct Engines {
  std::unique_ptr<LockEngine> lock;
  std::vector<std::unique_ptr<RingEngine>> rings;
};

absl::Status CheckOptions(const KvBenchOptions& options, uint64_t max_ops) {
  const std::vector<std::string>& methods = KvBenchMethods();
  if (std::find(methods.begin(), methods.end(), options.method) == methods.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown --method '", options.method, "': expected one of ", absl::StrJoin(methods, ", ")));
  }
  if (options.threads == 0 || options.threads > RingEngine::kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--threads must be 1 .. ", RingEngine::kMaxWorkers, ", got ", options.threads));
  }
  if (options.ops == 0 || options.ops >= max_ops) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ops must be 1 .. ", max_ops - 1, ", got ", options.ops));
  }
  return absl::OkStatus();
}

absl::Status MakeEngines(const KvBenchOptions& options, Engines* engines) {
  const uint32_t n = options.threads;
  // The report's maps reserve twice the requests a thread makes.
  const size_t reserve = 2 * options.ops;
  // A key (KeyArena's longest for this range) and an 8-byte value.
  const size_t payload =
      options.reserve_records ? KeyArena::MaxKeyBytes(options.ops) + sizeof(uint64_t) : 0;
  EngineOptions engine_options{.workers = n,
                               .ring_capacity = options.ring_size,
                               .burst = options.burst,
                               .reserve_per_shard = reserve,
                               .reserve_payload = payload,
                               .profile = options.rdtsc};
  if (options.method == "lock") {
    engines->lock = std::make_unique<LockEngine>(n, reserve, LockEngine::kDefaultKeyLocks,
                                                 SystemClockMs, MemoryLimit{}, payload);
  } else if (options.method == "none") {
    engine_options.workers = 1;
    for (uint32_t i = 0; i < n; ++i) {
      auto engine = RingEngine::Create(engine_options);
      if (!engine.ok()) return engine.status();
      engines->rings.push_back(std::move(*engine));
    }
  } else {
    auto kind = ParseRingKind(options.method);
    if (!kind.ok()) return kind.status();
    engine_options.ring = *kind;
    auto engine = RingEngine::Create(engine_options);
    if (!engine.ok()) return engine.status();
    engines->rings.push_back(std::move(*engine));
  }
  return absl::OkStatus();
}

// How thread `thread` runs a phase on `engines`; `finished` counts the shared engine's workers
// done with the phase.
PhaseRunner MakeRunner(const KvBenchOptions& options, Engines& engines,
                       std::atomic<uint32_t>& finished) {
  if (engines.lock) {
    return [&options, &engines](uint32_t, KvSource& source) {
      Request* batch[Worker::kMaxBurst];
      while (!source.Finished()) {
        const size_t k = source.Poll(batch, options.burst);
        for (size_t i = 0; i < k; ++i) {
          engines.lock->Execute(*batch[i]);
          source.Complete(batch[i]);
        }
      }
    };
  }
  if (options.method == "none") {
    return [&engines](uint32_t thread, KvSource& source) {
      std::atomic<uint32_t> alone{0};
      engines.rings[thread]->worker(0).RunToCompletion(source, alone, 1);
    };
  }
  const uint32_t n = options.threads;
  return [&engines, &finished, n](uint32_t thread, KvSource& source) {
    engines.rings[0]->worker(thread).RunToCompletion(source, finished, n);
  };
}

// Thread `thread`'s worker counters (null for the lock baseline, which has none).
const WorkerCounters* CountersOf(const KvBenchOptions& options, const Engines& engines,
                                 uint32_t thread) {
  if (engines.lock) return nullptr;
  return options.method == "none" ? &engines.rings[thread]->worker(0).counters()
                                  : &engines.rings[0]->worker(thread).counters();
}

// What the threads of a run tell the main thread, per phase (PUT, then GET): when it started
// and when each thread was done, each thread's cycles, and how many are done.
struct PhaseClocks {
  explicit PhaseClocks(uint32_t n)
      : done_at{std::vector<Clock::time_point>(n), std::vector<Clock::time_point>(n)},
        cycles{std::vector<ThreadCycles>(n), std::vector<ThreadCycles>(n)} {}
  Clock::time_point start[2];
  std::vector<Clock::time_point> done_at[2];
  std::vector<ThreadCycles> cycles[2];
  std::atomic<uint32_t> threads_done[2] = {0, 0};
};

// Waits for every thread to finish phase `p` (sleeping between looks: the main thread must not
// take a core from the workers), with a progress line every 3 s; then fills in its figures.
void WaitForPhase(int p, const KvBenchOptions& options,
                  const std::vector<std::unique_ptr<KvSource>>& sources, PhaseClocks& clocks,
                  KvBenchResult* result) {
  const uint32_t n = options.threads;
  const char* name = p == 0 ? "PUT" : "GET";
  auto last_report = Clock::now();
  while (clocks.threads_done[p].load(std::memory_order_acquire) < n) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto now = Clock::now();
    if (options.progress && now - last_report > std::chrono::seconds(3)) {
      uint64_t completed = 0;
      for (const auto& source : sources) completed += source->completed();
      std::fprintf(stderr, "  [%s] %.0f%% (%llu of %llu)\n", name,
                   100.0 * static_cast<double>(completed) / static_cast<double>(options.ops * n),
                   static_cast<unsigned long long>(completed),
                   static_cast<unsigned long long>(options.ops * n));
      last_report = now;
    }
  }
  PhaseResult& phase = p == 0 ? result->put : result->get;
  const auto end = *std::max_element(clocks.done_at[p].begin(), clocks.done_at[p].end());
  phase.seconds = std::chrono::duration<double>(end - clocks.start[p]).count();
  phase.total_mops = static_cast<double>(options.ops * n) / phase.seconds / 1e6;
  phase.per_thread_mops = phase.total_mops / n;
  if (options.rdtsc) phase.cycles = clocks.cycles[p];
}

}  // namespace

absl::StatusOr<KvBenchResult> RunKvBench(const KvBenchOptions& options) {
  if (absl::Status s = CheckOptions(options, uint64_t{1} << 40); !s.ok()) return s;
  const uint32_t n = options.threads;
  KvBenchResult result;
  result.tsc_ghz = MeasureTscGhz();
  Engines engines;
  if (absl::Status s = MakeEngines(options, &engines); !s.ok()) return s;
  std::atomic<uint32_t> finished{0};  // Workers of the shared engine done with the phase.
  const PhaseRunner run = MakeRunner(options, engines, finished);

  constexpr Op kPhases[] = {Op::kPut, Op::kGet};
  std::vector<std::unique_ptr<KeyArena>> arenas(n);
  std::vector<std::unique_ptr<KvSource>> sources;
  for (uint32_t t = 0; t < n; ++t) sources.push_back(std::make_unique<KvSource>(t, arenas));
  // Per phase, so the main thread reads one phase's figures while the threads run the next.
  PhaseClocks clocks(n);
  // Round 0: every arena is made. Rounds 1 and 2: the PUT and GET phases start. The completion
  // runs while every thread waits in the barrier, so resetting `finished` there is race-free.
  int round = 0;
  std::barrier sync(static_cast<std::ptrdiff_t>(n), [&]() noexcept {
    if (round > 0) {
      finished.store(0, std::memory_order_relaxed);
      clocks.start[round - 1] = Clock::now();
    }
    ++round;
  });

  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      if (options.pin) PinToCpu(t);
      // Each thread makes its own keys, in parallel, before any timing.
      arenas[t] = std::make_unique<KeyArena>(options.ops, options.ops, 0x5eed0000 + t);
      sync.arrive_and_wait();  // Every arena exists before any source looks at another's.
      for (int p = 0; p < 2; ++p) {
        sources[t]->StartPhase(kPhases[p]);
        const WorkerCounters* counters = CountersOf(options, engines, t);
        const ThreadCycles before = counters ? Snapshot(*counters) : ThreadCycles{};
        sync.arrive_and_wait();
        const uint64_t c0 = Rdtscp();
        run(t, *sources[t]);
        ThreadCycles& c = clocks.cycles[p][t];
        c = counters ? Minus(Snapshot(*counters), before) : ThreadCycles{};
        c.total_cycles = Rdtscp() - c0;
        c.requests = options.ops;
        clocks.done_at[p][t] = Clock::now();
        // Release: pairs with the main thread's acquire; done_at and cycles are written first.
        clocks.threads_done[p].fetch_add(1, std::memory_order_release);
      }
    });
  }
  for (int p = 0; p < 2; ++p) WaitForPhase(p, options, sources, clocks, &result);
  for (auto& t : threads) t.join();
  result.peak_rss_bytes = PeakRssBytes();
  for (const auto& s : sources) {
    if (s->errors() > 0 && result.errors == 0) result.first_error = s->first_error();
    result.errors += s->errors();
  }
  return result;
}

}  // namespace ringkv::bench
