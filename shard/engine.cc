#include "shard/engine.h"

#include "absl/strings/str_cat.h"

namespace ringkv {

RingEngine::RingEngine(const EngineOptions& options)
    : options_(options), router_(options.workers), counters_(new WorkerCounters[options.workers]) {}

absl::StatusOr<std::unique_ptr<RingEngine>> RingEngine::Create(const EngineOptions& options) {
  if (options.workers == 0 || options.workers > kMaxWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers must be 1 .. ", kMaxWorkers, ", got ", options.workers));
  }
  if (options.burst == 0 || options.burst > Worker::kMaxBurst) {
    return absl::InvalidArgumentError(
        absl::StrCat("burst must be 1 .. ", Worker::kMaxBurst, ", got ", options.burst));
  }
  std::unique_ptr<RingEngine> engine(new RingEngine(options));
  const uint32_t n = options.workers;
  const bool per_pair = !IsMultiProducer(options.ring);

  // ring_at(from, to): the ring that carries from's traffic to `to`.
  std::vector<Ring*> ring_at(size_t{n} * n, nullptr);
  if (n > 1) {
    for (uint32_t to = 0; to < n; ++to) {
      if (per_pair) {
        for (uint32_t from = 0; from < n; ++from) {
          if (from == to) continue;
          auto ring = MakeRing(options.ring, options.ring_capacity);
          if (!ring.ok()) return ring.status();
          ring_at[from * n + to] = ring->get();
          engine->rings_.push_back(std::move(*ring));
        }
      } else {
        auto ring = MakeRing(options.ring, options.ring_capacity);
        if (!ring.ok()) return ring.status();
        for (uint32_t from = 0; from < n; ++from) {
          if (from != to) ring_at[from * n + to] = ring->get();
        }
        engine->rings_.push_back(std::move(*ring));
      }
    }
  }

  for (uint32_t id = 0; id < n; ++id) {
    std::vector<Ring*> outbound(n, nullptr);
    std::vector<Ring*> inbound;
    for (uint32_t other = 0; other < n; ++other) {
      if (other == id) continue;
      outbound[other] = ring_at[id * n + other];
      Ring* in = ring_at[other * n + id];
      // With one ring per worker, every sender's ring to us is the same one: poll it once.
      if (per_pair || inbound.empty()) inbound.push_back(in);
    }
    engine->workers_.push_back(
        std::make_unique<Worker>(static_cast<uint16_t>(id), options, engine->router_,
                                 Worker::Links{.outbound = std::move(outbound),
                                               .inbound = std::move(inbound),
                                               .counters = &engine->counters_[id]}));
  }
  return engine;
}

}  // namespace ringkv
