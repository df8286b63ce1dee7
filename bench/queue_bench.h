// The queue benchmark (seeds 000 and 003): N producer threads each post `tasks` tasks to one
// consumer loop that runs them, through one of ringkv's candidate cross-thread paths. The
// consumer waits for work the way ringkv's daemon workers do: it polls, spins briefly when
// empty, then sleeps on an eventfd that a producer writes only when the consumer is asleep (a
// seq_cst flag on both sides), so the wake-up cost is part of the figure.
//
// Backends:
//   mutex     std::vector + std::mutex, swapped out whole by the consumer (the report's);
//   boost     boost::lockfree::queue of task pointers;
//   moody     moodycamel::ConcurrentQueue of task pointers, a producer token each, bulk dequeue;
//   mpsc-rte  one DPDK rte_ring, multi-producer, burst dequeue;
//   mpsc-rts  the same in RTS mode (producers do not wait for each other; see ring/ring.h);
//   spsc-rte  one single-producer rte_ring per producer, the consumer bursts from each;
//   spsc-rte-batch  the same, but each producer enqueues its tasks 32 at a time (and the rest
//             when it is done), as ringkv's workers flush their outboxes once per loop turn.
// Task forms:
//   callable  a type-erased std::function<void()> (the report's QueueInLoop);
//   visitor   a plain std::variant of two task structs, run by std::visit (eventpp's direct
//             dispatch); posted by value (mutex) or by pointer into the producer's own array.
// Every task adds its value to the consumer's sum: the run fails unless every task ran exactly
// once (count and checksum).
#ifndef RINGKV_BENCH_QUEUE_BENCH_H_
#define RINGKV_BENCH_QUEUE_BENCH_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ringkv::bench {

struct QueueBenchOptions {
  std::string backend = "mpsc-rte";
  std::string form = "callable";
  uint32_t producers = 1;
  uint64_t tasks = 1'000'000;  // Per producer.
};

struct QueueBenchResult {
  double seconds = 0;   // From the producers' start to the consumer running the last task.
  uint64_t tasks = 0;   // Tasks run.
  uint64_t sleeps = 0;  // Times the consumer slept on its eventfd.
};

// An error for bad options, or for a run in which a task was lost or ran twice.
absl::StatusOr<QueueBenchResult> RunQueueBench(const QueueBenchOptions& options);

}  // namespace ringkv::bench

#endif  // RINGKV_BENCH_QUEUE_BENCH_H_
