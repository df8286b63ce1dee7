#include "bench/queue_bench.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/lockfree/queue.hpp"
#include "concurrentqueue/concurrentqueue.h"
#include "ring/ring.h"

namespace ringkv::bench {
namespace {

constexpr size_t kBurst = 32;
constexpr size_t kRingCapacity = 65536;
constexpr int kSpinPolls = 256;  // Empty polls before the consumer sleeps.

// What a task does to the consumer: the checksum that proves each ran exactly once.
struct ConsumerState {
  uint64_t sum = 0;
  uint64_t count = 0;
};

// The visitor form's two task kinds (two, so dispatch is a real choice).
struct AddTask {
  uint64_t value;
};
struct AddTwiceTask {
  uint64_t half;  // Adds 2 * half: the producer posts value/2 for even values.
};
using VisitorTask = std::variant<AddTask, AddTwiceTask>;

struct Visitor {
  ConsumerState* state;
  void operator()(const AddTask& t) const {
    state->sum += t.value;
    ++state->count;
  }
  void operator()(const AddTwiceTask& t) const {
    state->sum += 2 * t.half;
    ++state->count;
  }
};

uint64_t TaskValue(uint32_t producer, uint64_t i) { return (uint64_t{producer} << 40) | i; }

VisitorTask MakeVisitorTask(uint64_t value) {
  if (value % 2 == 0) return AddTwiceTask{value / 2};
  return AddTask{value};
}

// How the consumer sleeps and is woken (the daemon's protocol with an eventfd for the alarm).
class Waker {
 public:
  Waker() : fd_(eventfd(0, EFD_CLOEXEC)) {}
  ~Waker() { close(fd_); }

  // Producer, after posting. The fence pairs with the one in Sleep: either the consumer's last
  // poll sees the post, or this load sees `sleeping_`.
  void AfterPost() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!sleeping_.load(std::memory_order_relaxed)) return;
    if (wake_pending_.exchange(true, std::memory_order_acq_rel)) return;
    const uint64_t one = 1;
    (void)!write(fd_, &one, sizeof one);
  }

  // Consumer: `poll` is its last look before sleeping; sleeps only if that found nothing.
  template <typename Poll>
  bool Sleep(Poll&& poll) {
    sleeping_.store(true, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (poll()) {
      sleeping_.store(false, std::memory_order_relaxed);
      return false;
    }
    uint64_t count;
    (void)!read(fd_, &count, sizeof count);
    sleeping_.store(false, std::memory_order_relaxed);
    wake_pending_.store(false, std::memory_order_release);
    return true;
  }

 private:
  const int fd_;
  alignas(64) std::atomic<bool> sleeping_{false};
  std::atomic<bool> wake_pending_{false};
};

// Task forms: what travels and how the consumer runs it.
struct CallableForm {
  using Item = std::function<void()>*;
  using Value = std::function<void()>;
  static Value MakeValue(ConsumerState* state, uint64_t value) {
    return [state, value] {
      state->sum += value;
      ++state->count;
    };
  }
  static Item MakeItem(ConsumerState* state, uint64_t value, VisitorTask*) {
    return new std::function<void()>(MakeValue(state, value));
  }
  static void Run(Value& v, ConsumerState*) { v(); }
  static void RunItem(Item item, ConsumerState*) {
    (*item)();
    delete item;
  }
};

struct VisitorForm {
  using Item = VisitorTask*;
  using Value = VisitorTask;
  static Value MakeValue(ConsumerState*, uint64_t value) { return MakeVisitorTask(value); }
  // The task lives in the producer's own array (`slot`), so nothing is allocated per post.
  static Item MakeItem(ConsumerState*, uint64_t value, VisitorTask* slot) {
    *slot = MakeVisitorTask(value);
    return slot;
  }
  static void Run(Value& v, ConsumerState* state) { std::visit(Visitor{state}, v); }
  static void RunItem(Item item, ConsumerState* state) { std::visit(Visitor{state}, *item); }
};

// What a Post did: refused (full: the producer retries), kept in the producer's own batch, or
// made visible to the consumer (then the producer checks whether to wake it).
enum class Posted { kFull, kBuffered, kPublished };

// Backends. Post hands over one task; Flush publishes what a batching backend still holds
// (returns false while it cannot); Drain runs what it takes and returns how many.
template <typename Form>
class MutexBackend {
 public:
  explicit MutexBackend(uint32_t) {}
  Posted Post(uint32_t, ConsumerState* state, uint64_t value, VisitorTask*) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(Form::MakeValue(state, value));
    return Posted::kPublished;
  }
  bool Flush(uint32_t) { return true; }
  size_t Drain(ConsumerState* state) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_.empty()) return 0;
      running_.swap(pending_);
    }
    for (auto& v : running_) Form::Run(v, state);
    const size_t n = running_.size();
    running_.clear();
    return n;
  }

 private:
  std::mutex mu_;
  std::vector<typename Form::Value> pending_;  // Guarded by mu_.
  std::vector<typename Form::Value> running_;  // Consumer only.
};

template <typename Form>
class BoostBackend {
 public:
  explicit BoostBackend(uint32_t) : queue_(kRingCapacity) {}
  Posted Post(uint32_t, ConsumerState* state, uint64_t value, VisitorTask* slot) {
    // boost::lockfree::queue grows its node pool rather than refuse, so push never fails here.
    return queue_.push(Form::MakeItem(state, value, slot)) ? Posted::kPublished : Posted::kFull;
  }
  bool Flush(uint32_t) { return true; }
  size_t Drain(ConsumerState* state) {
    size_t n = 0;
    typename Form::Item item;
    while (n < kBurst && queue_.pop(item)) {
      Form::RunItem(item, state);
      ++n;
    }
    return n;
  }

 private:
  boost::lockfree::queue<typename Form::Item> queue_;
};

template <typename Form>
class MoodyBackend {
 public:
  explicit MoodyBackend(uint32_t producers) : queue_(kRingCapacity, producers, 0) {
    for (uint32_t i = 0; i < producers; ++i) tokens_.emplace_back(queue_);
  }
  Posted Post(uint32_t producer, ConsumerState* state, uint64_t value, VisitorTask* slot) {
    return queue_.enqueue(tokens_[producer], Form::MakeItem(state, value, slot))
               ? Posted::kPublished
               : Posted::kFull;
  }
  bool Flush(uint32_t) { return true; }
  size_t Drain(ConsumerState* state) {
    typename Form::Item items[kBurst];
    const size_t n = queue_.try_dequeue_bulk(items, kBurst);
    for (size_t i = 0; i < n; ++i) Form::RunItem(items[i], state);
    return n;
  }

 private:
  moodycamel::ConcurrentQueue<typename Form::Item> queue_;
  std::vector<moodycamel::ProducerToken> tokens_;  // tokens_[i]: producer i's only.
};

// The rte_ring backends. Unbatched, a producer enqueues each task as it is posted and keeps one
// that did not fit (full ring) for the retry, so a callable is not allocated twice. Batched
// (`spsc-rte-batch`), a producer collects up to kBurst tasks and enqueues them with one
// EnqueueBurst, as ringkv's workers flush their outboxes once per loop turn: one ring update
// and one wake-up check per batch instead of per task.
template <typename Form, RingKind kKind, bool kBatch = false>
class RteBackend {
 public:
  static constexpr bool kPerProducer = kKind == RingKind::kRteSpsc;
  explicit RteBackend(uint32_t producers) {
    const uint32_t rings = kPerProducer ? producers : 1;
    for (uint32_t i = 0; i < rings; ++i) rings_.push_back(MakeRing(kKind, kRingCapacity).value());
    held_.resize(producers);
  }
  ~RteBackend() {
    for (Held& held : held_) {  // Only after a failed run; frees the callables.
      for (size_t i = held.head; i < held.count; ++i) {
        Form::RunItem(static_cast<typename Form::Item>(held.items[i]), &discard_);
      }
    }
  }
  Posted Post(uint32_t producer, ConsumerState* state, uint64_t value, VisitorTask* slot) {
    Held& held = held_[producer];
    if constexpr (kBatch) {
      if (held.count == kBurst && !Flush(producer)) return Posted::kFull;
      held.items[held.count++] = Form::MakeItem(state, value, slot);
      if (held.count < kBurst) return Posted::kBuffered;
      return Flush(producer) ? Posted::kPublished : Posted::kBuffered;
    } else {
      if (held.count == 0) {
        held.items[0] = Form::MakeItem(state, value, slot);
        held.count = 1;
      }
      if (!Flush(producer)) return Posted::kFull;
      return Posted::kPublished;
    }
  }
  // Enqueues what the producer holds; true once nothing is left.
  bool Flush(uint32_t producer) {
    Held& held = held_[producer];
    if (held.head == held.count) return true;
    Ring& ring = *rings_[kPerProducer ? producer : 0];
    held.head += ring.EnqueueBurst(held.items + held.head, held.count - held.head);
    if (held.head < held.count) return false;
    held.head = held.count = 0;
    return true;
  }
  size_t Drain(ConsumerState* state) {
    size_t total = 0;
    for (auto& ring : rings_) {
      void* items[kBurst];
      const size_t n = ring->DequeueBurst(items, kBurst);
      for (size_t i = 0; i < n; ++i) {
        Form::RunItem(static_cast<typename Form::Item>(items[i]), state);
      }
      total += n;
    }
    return total;
  }

 private:
  struct alignas(64) Held {  // Producer i's tasks not yet enqueued: items[head..count).
    void* items[kBurst];
    size_t head = 0;
    size_t count = 0;
  };
  std::vector<std::unique_ptr<Ring>> rings_;
  std::vector<Held> held_;
  ConsumerState discard_;
};

template <typename Backend, typename Form>
absl::StatusOr<QueueBenchResult> Run(const QueueBenchOptions& options) {
  const uint32_t producers = options.producers;
  const uint64_t total = uint64_t{producers} * options.tasks;
  Backend backend(producers);
  Waker waker;
  ConsumerState state;
  // The visitor form's tasks: each producer writes its own slice, the consumer reads a task
  // after the queue handed its pointer over.
  std::vector<VisitorTask> slots(std::is_same_v<Form, VisitorForm> ? total : 0);

  std::barrier start(static_cast<std::ptrdiff_t>(producers) + 1);
  std::vector<std::thread> threads;
  for (uint32_t p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      VisitorTask* my_slots = slots.empty() ? nullptr : &slots[p * options.tasks];
      start.arrive_and_wait();
      for (uint64_t i = 0; i < options.tasks; ++i) {
        VisitorTask* slot = my_slots == nullptr ? nullptr : my_slots + i;
        int spins = 0;
        Posted posted;
        while ((posted = backend.Post(p, &state, TaskValue(p, i), slot)) == Posted::kFull) {
          CpuRelax();
          if (++spins % 64 == 0) std::this_thread::yield();  // Full: let the consumer run.
        }
        if (posted == Posted::kPublished) waker.AfterPost();
      }
      for (int spins = 1; !backend.Flush(p); ++spins) {  // A batching backend's last tasks.
        CpuRelax();
        if (spins % 64 == 0) std::this_thread::yield();
      }
      waker.AfterPost();
    });
  }

  QueueBenchResult result;
  start.arrive_and_wait();
  const auto t0 = std::chrono::steady_clock::now();
  int idle = 0;
  while (state.count < total) {
    if (backend.Drain(&state) > 0) {
      idle = 0;
      continue;
    }
    if (++idle < kSpinPolls) {
      CpuRelax();
      continue;
    }
    idle = 0;
    if (waker.Sleep([&] { return backend.Drain(&state) > 0; })) {
      ++result.sleeps;
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& t : threads) t.join();
  result.tasks = state.count;

  uint64_t expected = 0;
  for (uint32_t p = 0; p < producers; ++p) {
    expected += (uint64_t{p} << 40) * options.tasks + options.tasks * (options.tasks - 1) / 2;
  }
  if (state.count != total || state.sum != expected) {
    return absl::InternalError(absl::StrCat(options.backend, "/", options.form, ": ran ",
                                            state.count, " of ", total, " tasks, checksum ",
                                            state.sum, " expected ", expected));
  }
  return result;
}

template <typename Form>
absl::StatusOr<QueueBenchResult> RunForm(const QueueBenchOptions& options) {
  const std::string& b = options.backend;
  if (b == "mutex") return Run<MutexBackend<Form>, Form>(options);
  if (b == "boost") return Run<BoostBackend<Form>, Form>(options);
  if (b == "moody") return Run<MoodyBackend<Form>, Form>(options);
  if (b == "mpsc-rte") return Run<RteBackend<Form, RingKind::kRteMpsc>, Form>(options);
  if (b == "mpsc-rts") return Run<RteBackend<Form, RingKind::kRteMpscRts>, Form>(options);
  if (b == "spsc-rte") return Run<RteBackend<Form, RingKind::kRteSpsc>, Form>(options);
  if (b == "spsc-rte-batch") {
    return Run<RteBackend<Form, RingKind::kRteSpsc, /*kBatch=*/true>, Form>(options);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown queue backend '", b,
                   "'; use mutex, boost, moody, mpsc-rte, mpsc-rts, spsc-rte or spsc-rte-batch"));
}

}  // namespace

absl::StatusOr<QueueBenchResult> RunQueueBench(const QueueBenchOptions& options) {
  if (options.producers == 0 || options.producers > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("producers must be 1 .. 256, got ", options.producers));
  }
  if (options.tasks == 0 || options.tasks > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError("tasks must be 1 .. 2^40 per producer");
  }
  if (options.form == "callable") return RunForm<CallableForm>(options);
  if (options.form == "visitor") return RunForm<VisitorForm>(options);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown task form '", options.form, "'; use callable or visitor"));
}

}  // namespace ringkv::bench
