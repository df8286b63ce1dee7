// GrpcLoopIo: one loop's completion queue, for GrpcTransport. Start arms the loop's first calls
// (the transport says how: ArmGrpcCalls, server/grpc/grpc_calls.h); Poll takes up to a burst of
// ready events without waiting; Wait blocks in AsyncNext; Wake sets an alarm on the queue, whose
// event ends the wait. Every event tag is a GrpcCallEvent: a call adapter (a GrpcCall) and which
// of its operations completed; a null call is the wake-up alarm.
//
// Threads: the loop's thread, except Wake (any thread; ShardLoop::WakeIfParked allows one
// alarm at a time, and ShardLoop::BlockWakeups stops them before the queue shuts down).
#ifndef RINGKV_SERVER_GRPC_GRPC_LOOP_IO_H_
#define RINGKV_SERVER_GRPC_GRPC_LOOP_IO_H_

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <vector>

#include "server/auth/authenticator.h"
#include "server/grpc/grpc_services.h"
#include "server/handlers/handler.h"
#include "server/loop_io.h"

namespace ringkv {

class ShardLoop;

// One gRPC call on a loop's queue, and the CallSink of its Handler (server/grpc/grpc_calls.cc
// has the adapters). Loop thread only.
class GrpcCall : public CallSink {
 public:
  virtual ~GrpcCall() = default;
  // A completion-queue event of this call: which operation, and whether it succeeded.
  virtual void OnEvent(int kind, bool ok) = 0;
};

struct GrpcCallEvent {
  GrpcCall* call;
  int kind;
};

class GrpcLoopIo : public LoopIo {
 public:
  // Arms `per_method` calls of every method on `io`'s queue.
  using ArmCalls = void (*)(GrpcLoopIo& io, int per_method);
  GrpcLoopIo(GrpcServices& services, ShardLoop& loop, grpc::ServerCompletionQueue* cq, ArmCalls arm)
      : services_(services), loop_(loop), cq_(cq), arm_(arm) {}
  ~GrpcLoopIo() override;

  void Start() override;
  size_t Poll() override;
  void EndTurn() override;
  bool Wait(std::chrono::nanoseconds timeout) override;
  void Wake() override;
  bool Finished() const override { return queue_drained_ && live_calls_ == 0; }

  // For the call adapters, loop thread.
  GrpcServices& services() { return services_; }
  ShardLoop& loop() { return loop_; }
  grpc::ServerCompletionQueue* cq() { return cq_; }
  void CallMade() { ++live_calls_; }
  void CallGone() { --live_calls_; }
  // `call` has nothing outstanding and is deleted at the end of the turn: never from inside a
  // call into its handler.
  void Retire(GrpcCall* call) { retired_.push_back(call); }
  // Once the transport has stopped, the queue may be shut down and no operation may start on
  // it: an adapter hands its operation's event here instead, and it is delivered as failed at
  // the end of the turn.
  void FailLater(GrpcCallEvent* event) { failed_.push_back(event); }
  // The role of the last authorization header a call on this loop sent (grpc++ does not say
  // which connection a call came on; one client's calls mostly share a loop).
  RoleCache& role_cache() { return role_cache_; }

 private:
  void Dispatch(void* tag, bool ok);

  // Constant after construction.
  GrpcServices& services_;
  ShardLoop& loop_;
  grpc::ServerCompletionQueue* const cq_;
  const ArmCalls arm_;

  // Loop thread only (wake_alarm_: set by Wake from any thread, one at a time).
  bool queue_drained_ = false;  // AsyncNext said SHUTDOWN.
  size_t live_calls_ = 0;       // Call adapters alive, armed ones included.
  std::vector<GrpcCall*> retired_;
  std::vector<GrpcCallEvent*> failed_;
  GrpcCallEvent wake_event_{nullptr, 0};
  grpc::Alarm wake_alarm_;
  RoleCache role_cache_;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_GRPC_GRPC_LOOP_IO_H_
