// Calls: one object per gRPC call in progress, each a small state machine driven by its
// ShardLoop's completion-queue events (OnEvent) and by the engine handing back its Requests
// (OnRequestDone). A call lives on the loop thread that accepted it, from the moment it is armed
// to accept the next call of its method until its last operation completes; it then deletes
// itself. Before it runs, a call arms its successor, so every loop always has calls of every
// method waiting.
//
// Unary methods (Get, Put, Delete, MultiGet, MultiPut, Stats) check their input, submit one
// Request per key, and Finish once all are back. Stream keeps up to kMaxStreamInFlight
// operations in flight, reads while under that bound, and coalesces the results that pile up
// while a Write is outstanding into the next message.
//
// grpc.health.v1.Health is served the same way: Check answers SERVING for "" and ringkv.v1.KV
// (NOT_SERVING once the server drains, NOT_FOUND for other names); Watch sends the status, then
// the change, and stays open until the client cancels or the server stops.
//
// Threads: the owning loop's thread only.
#ifndef RINGKV_SERVER_CALLS_H_
#define RINGKV_SERVER_CALLS_H_

#include "server/shard_loop.h"
#include "shard/request.h"

namespace ringkv {

class Call {
 public:
  virtual ~Call() = default;
  // A completion-queue event of this call: which operation, and whether it succeeded.
  virtual void OnEvent(int kind, bool ok) = 0;
  // One of this call's Requests is back from its shard.
  virtual void OnRequestDone(Request* request) = 0;
  // The end of the engine turn in which this call asked for it (ShardLoop::RequestFlush).
  virtual void Flush() {}
  // The server's serving status changed (health Watch streams, ShardLoop::AddWatcher).
  virtual void OnServingChanged() {}

  // Arms `per_method` calls of every method on the loop's completion queue.
  static void AcceptAll(ShardLoop& loop, int per_method);
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_CALLS_H_
