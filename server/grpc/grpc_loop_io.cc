#include "server/grpc/grpc_loop_io.h"

#include "server/shard_loop.h"

namespace ringkv {
namespace {

// Calls of each method kept armed per loop: enough that a burst of new calls rarely waits for
// the loop to re-arm one.
constexpr int kArmedPerMethod = 8;
// Completion-queue events taken per turn before the engine gets its turn.
constexpr int kQueueBurst = 64;

gpr_timespec Deadline(std::chrono::nanoseconds from_now) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_nanos(from_now.count(), GPR_TIMESPAN));
}

}  // namespace

GrpcLoopIo::~GrpcLoopIo() { EndTurn(); }

void GrpcLoopIo::Start() { arm_(*this, kArmedPerMethod); }

void GrpcLoopIo::Dispatch(void* tag, bool ok) {
  auto* event = static_cast<GrpcCallEvent*>(tag);
  if (event->call == nullptr) {
    loop_.OnWakeEvent();  // The alarm's only job was ending the wait.
    return;
  }
  event->call->OnEvent(event->kind, ok);
}

size_t GrpcLoopIo::Poll() {
  if (queue_drained_) return 0;
  size_t events = 0;
  void* tag;
  bool ok;
  while (events < kQueueBurst) {
    const auto status = cq_->AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC));
    if (status == grpc::CompletionQueue::SHUTDOWN) {
      queue_drained_ = true;
      break;
    }
    if (status == grpc::CompletionQueue::TIMEOUT) break;
    Dispatch(tag, ok);
    ++events;
  }
  return events;
}

void GrpcLoopIo::EndTurn() {
  while (!failed_.empty()) {
    std::vector<GrpcCallEvent*> failed;
    failed.swap(failed_);
    for (GrpcCallEvent* event : failed) event->call->OnEvent(event->kind, false);
  }
  for (GrpcCall* call : retired_) delete call;
  retired_.clear();
}

bool GrpcLoopIo::Wait(std::chrono::nanoseconds timeout) {
  if (queue_drained_) return false;
  void* tag;
  bool ok;
  const auto status = cq_->AsyncNext(&tag, &ok, Deadline(timeout));
  if (status == grpc::CompletionQueue::GOT_EVENT) {
    Dispatch(tag, ok);
    return true;
  }
  if (status == grpc::CompletionQueue::SHUTDOWN) {
    queue_drained_ = true;
    return true;
  }
  return false;
}

void GrpcLoopIo::Wake() { wake_alarm_.Set(cq_, gpr_time_0(GPR_CLOCK_MONOTONIC), &wake_event_); }

}  // namespace ringkv
