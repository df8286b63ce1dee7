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

// How one bench thread runs a phase of its source's requests to completion.
using PhaseRunner = std::function<void(uint32_t thread, KvSource& source)>;

}  // namespace

const std::vector<std::string>& KvBenchMethods() {
  static const auto* methods = new std::vector<std::string>{
      "lock", "mpsc-rte", "spsc-rte", "mpsc-moody", "spsc-moody", "mutex", "none"};
  return *methods;
}

absl::StatusOr<KvBenchResult> RunKvBench(const KvBenchOptions& options) {
  const auto& methods = KvBenchMethods();
  if (std::find(methods.begin(), methods.end(), options.method) == methods.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown --method '", options.method,
                                                   "': expected one of ", absl::StrJoin(methods, ", ")));
  }
  if (options.threads == 0 || options.threads > RingEngine::kMaxWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be 1 .. ", RingEngine::kMaxWorkers, ", got ", options.threads));
  }
  constexpr uint64_t kMaxOps = uint64_t{1} << 40;
  if (options.ops == 0 || options.ops >= kMaxOps) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ops must be 1 .. ", kMaxOps - 1, ", got ", options.ops));
  }
  const uint32_t n = options.threads;
  // The report's maps reserve twice the requests a thread makes.
  const size_t reserve = 2 * options.ops;

  KvBenchResult result;
  result.tsc_ghz = MeasureTscGhz();

  std::unique_ptr<LockEngine> lock_engine;
  std::vector<std::unique_ptr<RingEngine>> ring_engines;
  EngineOptions engine_options{.workers = n,
                               .ring_capacity = options.ring_size,
                               .burst = options.burst,
                               .reserve_per_shard = reserve,
                               .profile = options.rdtsc};
  if (options.method == "lock") {
    lock_engine = std::make_unique<LockEngine>(n, reserve);
  } else if (options.method == "none") {
    engine_options.workers = 1;
    for (uint32_t i = 0; i < n; ++i) {
      auto engine = RingEngine::Create(engine_options);
      if (!engine.ok()) return engine.status();
      ring_engines.push_back(std::move(*engine));
    }
  } else {
    auto kind = ParseRingKind(options.method);
    if (!kind.ok()) return kind.status();
    engine_options.ring = *kind;
    auto engine = RingEngine::Create(engine_options);
    if (!engine.ok()) return engine.status();
    ring_engines.push_back(std::move(*engine));
  }

  std::atomic<uint32_t> finished{0};  // Workers of the shared engine done with the phase.
  PhaseRunner run;
  if (lock_engine) {
    run = [&](uint32_t, KvSource& source) {
      Request* batch[Worker::kMaxBurst];
      while (!source.Finished()) {
        const size_t k = source.Poll(batch, options.burst);
        for (size_t i = 0; i < k; ++i) {
          lock_engine->Execute(*batch[i]);
          source.Complete(batch[i]);
        }
      }
    };
  } else if (options.method == "none") {
    run = [&](uint32_t thread, KvSource& source) {
      std::atomic<uint32_t> alone{0};
      ring_engines[thread]->worker(0).RunToCompletion(source, alone, 1);
    };
  } else {
    run = [&](uint32_t thread, KvSource& source) {
      ring_engines[0]->worker(thread).RunToCompletion(source, finished, n);
    };
  }
  auto counters_of = [&](uint32_t thread) -> const WorkerCounters* {
    if (lock_engine) return nullptr;
    return options.method == "none" ? &ring_engines[thread]->worker(0).counters()
                                    : &ring_engines[0]->worker(thread).counters();
  };

  constexpr Op kPhases[] = {Op::kPut, Op::kGet};
  std::vector<std::unique_ptr<KeyArena>> arenas(n);
  std::vector<std::unique_ptr<KvSource>> sources;
  for (uint32_t t = 0; t < n; ++t) sources.push_back(std::make_unique<KvSource>(t, arenas));
  // Per phase, so the main thread reads one phase's figures while the threads run the next.
  Clock::time_point phase_start[2];
  std::vector<Clock::time_point> done_at[2] = {std::vector<Clock::time_point>(n),
                                               std::vector<Clock::time_point>(n)};
  std::vector<ThreadCycles> cycles[2] = {std::vector<ThreadCycles>(n),
                                         std::vector<ThreadCycles>(n)};
  std::atomic<uint32_t> threads_done[2] = {0, 0};
  // Round 0: every arena is made. Rounds 1 and 2: the PUT and GET phases start. The completion
  // runs while every thread waits in the barrier, so resetting `finished` there is race-free.
  int round = 0;
  std::barrier sync(static_cast<std::ptrdiff_t>(n), [&]() noexcept {
    if (round > 0) {
      finished.store(0, std::memory_order_relaxed);
      phase_start[round - 1] = Clock::now();
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
        const WorkerCounters* counters = counters_of(t);
        const ThreadCycles before = counters ? Snapshot(*counters) : ThreadCycles{};
        sync.arrive_and_wait();
        const uint64_t c0 = Rdtscp();
        run(t, *sources[t]);
        ThreadCycles& c = cycles[p][t];
        c = counters ? Minus(Snapshot(*counters), before) : ThreadCycles{};
        c.total_cycles = Rdtscp() - c0;
        c.requests = options.ops;
        done_at[p][t] = Clock::now();
        // Release: pairs with the main thread's acquire; done_at and cycles are written first.
        threads_done[p].fetch_add(1, std::memory_order_release);
      }
    });
  }

  // The main thread sleeps between looks: it must not take a core from the workers.
  for (int p = 0; p < 2; ++p) {
    const char* name = p == 0 ? "PUT" : "GET";
    auto last_report = Clock::now();
    while (threads_done[p].load(std::memory_order_acquire) < n) {
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
    PhaseResult& phase = p == 0 ? result.put : result.get;
    const auto end = *std::max_element(done_at[p].begin(), done_at[p].end());
    phase.seconds = std::chrono::duration<double>(end - phase_start[p]).count();
    phase.total_mops = static_cast<double>(options.ops * n) / phase.seconds / 1e6;
    phase.per_thread_mops = phase.total_mops / n;
    if (options.rdtsc) phase.cycles = cycles[p];
  }
  for (auto& t : threads) t.join();
  result.peak_rss_bytes = PeakRssBytes();
  for (const auto& s : sources) {
    if (s->errors() > 0 && result.errors == 0) result.first_error = s->first_error();
    result.errors += s->errors();
  }
  return result;
}

}  // namespace ringkv::bench
