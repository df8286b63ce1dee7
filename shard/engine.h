// RingEngine: N workers, each owning one Shard, joined by rings. It builds the rings and the
// workers; the caller runs each worker's loop on a thread of its own (Worker::RunOnce or
// RunToCompletion), so the same engine serves the bench (a generator per worker) and the daemon
// (a network front end per worker).
//
// Request path: a worker's source hands it a request; the worker hashes the key (Router), runs
// it at once if its own shard owns the key, or passes it through a ring to the owner, which runs
// it and passes it back through a ring to the origin, which completes it (Worker's header has the
// loop). Ring topology, from EngineOptions::ring:
//   - single-producer kinds (spsc-rte, spsc-moody): one ring per ordered pair of workers, N*(N-1);
//   - multi-producer kinds (mpsc-rte, mpsc-moody, mutex): one inbound ring per worker.
// Each ring holds `ring_capacity` pointers. Shutdown: stop calling the workers' loops once every
// source is Finished (RunToCompletion does this), then destroy the engine; rings and shards go
// with it.
//
// Threads: construction and destruction on any one thread while no worker runs. worker(i) is
// for the thread that runs worker i; counters may be read from any thread.
//
//   auto engine = RingEngine::Create({.workers = 2, .ring = RingKind::kRteSpsc}).value();
//   std::thread t([&] { engine->worker(1).RunToCompletion(source1, finished, 2); });
//   engine->worker(0).RunToCompletion(source0, finished, 2);
#ifndef RINGKV_SHARD_ENGINE_H_
#define RINGKV_SHARD_ENGINE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ring/ring.h"
#include "shard/clock.h"
#include "shard/router.h"
#include "shard/worker.h"

namespace ringkv {

class RingEngine {
 public:
  static constexpr uint32_t kMaxWorkers = 1024;

  static absl::StatusOr<std::unique_ptr<RingEngine>> Create(const EngineOptions& options);
  RingEngine(const RingEngine&) = delete;
  RingEngine& operator=(const RingEngine&) = delete;

  uint32_t workers() const { return static_cast<uint32_t>(workers_.size()); }
  Worker& worker(uint32_t i) { return *workers_[i]; }
  const Worker& worker(uint32_t i) const { return *workers_[i]; }
  const Router& router() const { return router_; }
  // Any thread.
  const WorkerCounters& counters(uint32_t i) const { return counters_[i]; }
  const EngineOptions& options() const { return options_; }

 private:
  explicit RingEngine(const EngineOptions& options);

  // Constant after construction.
  const EngineOptions options_;
  const Router router_;
  std::vector<std::unique_ptr<Ring>> rings_;
  std::unique_ptr<WorkerCounters[]> counters_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace ringkv

#endif  // RINGKV_SHARD_ENGINE_H_
